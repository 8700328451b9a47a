//! The session's message loop ([`Session::serve`]): the `Welcome`, then each message the client
//! sends — segments and pieces executed and answered, blobs received, functions deployed and
//! invoked, host functions' replies — until `Close`, an error or the idle timeout.

use super::*;

/// Bytes of a BlobData payload before the part's bytes: hash, total, offset.
const BLOB_HEAD: usize = 32;

/// The first record naming a host buffer larger than the device's memory (`max` bytes): no real
/// copy has one, and the executor would allocate it. Refused before anything runs.
fn oversized(records: &[CallRecord], max: u64) -> Option<String> {
    records.iter().find_map(|r| {
        let n = gpuless_traces::analysis::host_buffer_bytes(r);
        (n > max).then(|| {
            format!(
                "call #{} {}: a host buffer of {n} bytes, more than the device's {max} bytes of memory",
                r.seq,
                r.function.name()
            )
        })
    })
}

/// How a session ends: normally (`Ok`), or with an error for the client and the server.
type End = Result<(), String>;

impl Session<'_> {
    pub(super) fn serve(&mut self, conn: Conn, stream: &mut Stream, welcome: Welcome, idle: Duration) -> End {
        let max_download = if welcome.device.total_mem > 0 { welcome.device.total_mem } else { 1 << 40 };
        conn.set_read_timeout(Some(idle)).map_err(|e| e.to_string())?;
        let read_half = conn.try_clone().map_err(|e| e.to_string())?;
        // After each message the executor polls for the next one a while before it blocks:
        // a client's next segment usually follows within microseconds.
        let spin = Duration::from_micros(
            std::env::var("GPULESS_EXECUTOR_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(300),
        );
        let reader: pump::Reader =
            Arc::new(Mutex::new(BufReader::with_capacity(1 << 16, Polled::new(read_half, spin))));
        // Frames read by a pump while the session's host functions were running.
        let kept: pump::Kept = Default::default();
        let w: Writer = Arc::new(Mutex::new(BufWriter::with_capacity(1 << 16, conn)));
        let send = |w: &Writer, m: &Message| -> Result<(), String> { write_message(w, m).map_err(|e| e.to_string()) };
        // The session's host functions report to the client on the same connection.
        let calls = {
            let w = w.clone();
            Arc::new(HostCalls::new(Box::new(move |c| write_message(&w, &Message::HostCall(c)))))
        };
        let _ended = Ended(calls.clone());
        stream.set_host_calls(Some(calls.clone()));
        stream.set_broker(self.control.try_clone().ok().map(|c| Arc::new(notes::ControlBroker(c)) as _));
        // What the session's kernels print goes to the client with each answer.
        let mut printed = match printed::Printed::capture() {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("gpuless executor: device printf output stays in the server's log ({e})");
                None
            }
        };
        send(&w, &Message::Welcome(Box::new(welcome)))?;
        let mut payload = Vec::new();
        let fail = |w: &Writer, code: u16, message: String| -> End {
            let _ = send(w, &Message::Error { code, message: message.clone() });
            Err(message)
        };
        loop {
            // A frame a pump read (whole), else the next from the connection.
            let pumped = pump::lock(&kept).pop_front();
            let from_pump = pumped.is_some();
            let next = match pumped {
                Some((h, p)) => {
                    payload = p;
                    Ok(h)
                }
                None => {
                    let mut reader = pump::lock(&reader);
                    read_header(&mut *reader).and_then(|h| {
                        // Blob bytes go straight into their blob's buffer, not through `payload`.
                        if h.kind != kind::BLOB_DATA {
                            read_payload(&mut *reader, h.len as usize, &mut payload)?;
                        }
                        Ok(h)
                    })
                }
            };
            let h = match next {
                Ok(h) => h,
                Err(ProtocolError::Io(e)) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return fail(
                        &w,
                        code::IDLE,
                        format!("no message for {:.0} s: the session ended", idle.as_secs_f64()),
                    );
                }
                // The client went away: nothing to tell it.
                Err(ProtocolError::Io(e)) => return Err(format!("client disconnected ({e})")),
                Err(e) => return fail(&w, code::BAD_MESSAGE, e.to_string()),
            };
            // Descriptors come only with BlobShm frames, one each.
            if pump::lock(&reader).get_ref().fds.len() > 8 {
                let e = "descriptors sent without BlobShm frames (one descriptor per BlobShm)".to_string();
                return fail(&w, code::BAD_MESSAGE, e);
            }
            if h.kind != kind::INVOKE && h.kind != kind::CLOSE {
                self.only_invoked = false;
            }
            let t0 = Instant::now();
            let arrived = self.stamps.is_some().then(stamps::realtime_ns);
            // While it executes, the client's replies to host calls are read by a pump.
            let _pump = (calls.used() && matches!(h.kind, kind::SEGMENT | kind::PIECE | kind::CLOSE | kind::INVOKE))
                .then(|| pump::Pump::start(&reader, &kept, &calls));
            match h.kind {
                kind::HOST_RETURNED => match Message::decode(h.kind, h.flags, &payload) {
                    Ok(Message::HostReturned { ids, data }) => calls.returned(&ids, data),
                    _ => return fail(&w, code::BAD_MESSAGE, "bad HostReturned".into()),
                },
                kind::SEGMENT => {
                    let records = match self.decoded.get(&payload) {
                        Some(r) => r,
                        None => match segment::unwire(h.flags, &payload)
                            .and_then(|b| segment::decode(&b, self.stats.segments).map_err(|e| e.to_string()))
                        {
                            Ok(r) => {
                                // Checked once per distinct segment, before anything runs.
                                if let Some(e) = oversized(&r, max_download) {
                                    return fail(&w, code::BAD_RECORD, e);
                                }
                                self.decoded.insert(&payload, r)
                            }
                            Err(e) => {
                                return fail(&w, code::BAD_MESSAGE, format!("segment {}: {e}", self.stats.segments))
                            }
                        },
                    };
                    // A segment that registers the session's first host function may also wait
                    // for it: the pump reads the client's reply.
                    let _first = (_pump.is_none() && records.iter().any(host_calls::record_registers))
                        .then(|| pump::Pump::start(&reader, &kept, &calls));
                    self.stats.segments += 1;
                    self.stats.records += records.len() as u64;
                    self.arrived_ns = arrived;
                    self.at_gate();
                    // Execution time, without the decoding above or a hold at the gate.
                    let run0 = Instant::now();
                    let r = match self.pieces.take() {
                        None => records.iter().try_for_each(|rec| self.exec_gated(stream, rec)),
                        Some(mut p) => {
                            let r = self.exec_pieces(&mut p, stream, &records, h.flags & WANT_ANSWER != 0);
                            self.pieces = Some(p);
                            r
                        }
                    };
                    if let Err((c, e)) = r {
                        return fail(&w, c, e);
                    }
                    let ran = Instant::now();
                    let us = ran.duration_since(run0).as_micros() as u64;
                    self.exec_us += us;
                    self.sample(0, us);
                    let mut answered = None;
                    if h.flags & WANT_ANSWER != 0 {
                        if let Err(e) = self.verified() {
                            return fail(&w, code::BAD_MESSAGE, e);
                        }
                        let outputs = stream.take_outputs();
                        self.stats.answers += 1;
                        let a = Answer {
                            through_seq: self.last_seq,
                            executed: std::mem::take(&mut self.executed),
                            outputs,
                            errors: std::mem::take(&mut self.errors),
                            exec_us: std::mem::take(&mut self.exec_us),
                            queries: stream.take_queries(),
                            pieces: self.pieces.as_mut().map(Pieces::take_announced).unwrap_or_default(),
                            printed: printed.as_mut().map(printed::Printed::take).unwrap_or_default(),
                        };
                        self.stats.executed += a.executed;
                        answer::send(&mut *pump::lock(&w), a).map_err(|e| e.to_string())?;
                        // Everything the session sent so far is done: best-effort work may go.
                        if let (Some(g), false) = (self.gate.as_mut(), self.best_effort) {
                            g.leave();
                        }
                        self.sample(1, t0.elapsed().as_micros() as u64);
                        answered = Some(Instant::now());
                        self.take_stamps();
                    }
                    self.timeline.segment(t0, records.len(), run0, ran, answered);
                }
                kind::BLOB_QUERY => {
                    let hashes = match Message::decode(h.kind, h.flags, &payload) {
                        Ok(Message::BlobQuery(hs)) => hs,
                        Ok(_) | Err(_) => return fail(&w, code::BAD_MESSAGE, "bad BlobQuery".into()),
                    };
                    let have = self.find(stream, &hashes);
                    send(&w, &Message::BlobHave(have))?;
                    self.flush_notes(false);
                }
                kind::BLOB_DATA => {
                    let mut head = [0u8; BLOB_HEAD];
                    if (h.len as usize) < BLOB_HEAD {
                        return fail(&w, code::BAD_MESSAGE, format!("a BlobData of {} bytes", h.len));
                    }
                    // The part's bytes: kept whole by a pump, else still on the connection.
                    let mut guard = (!from_pump).then(|| pump::lock(&reader));
                    let mut whole = std::io::Cursor::new(std::mem::take(&mut payload));
                    let src: &mut dyn Read = match guard.as_mut() {
                        Some(r) => &mut **r,
                        None => &mut whole,
                    };
                    if let Err(e) = src.read_exact(&mut head) {
                        return Err(format!("client disconnected ({e})"));
                    }
                    let n = h.len as usize - BLOB_HEAD;
                    let r = blob_part(&head).map_err(|e| e.to_string()).and_then(|(hash, total, offset, _)| {
                        self.blob_part(stream, hash, total, offset, n, |buf| {
                            let got = src.take(n as u64).read_to_end(buf).map_err(|e| e.to_string())?;
                            if got == n {
                                Ok(())
                            } else {
                                Err(format!("client disconnected inside a blob part ({got} of {n} bytes)"))
                            }
                        })
                    });
                    if let Err(e) = r {
                        return fail(&w, code::BAD_MESSAGE, e);
                    }
                }
                kind::RING_OFFER => match Message::decode(h.kind, h.flags, &payload) {
                    Ok(Message::RingOffer { capacity }) => {
                        if let Err(e) = take_rings(&reader, &w, capacity, idle) {
                            return fail(&w, code::BAD_MESSAGE, e);
                        }
                    }
                    _ => return fail(&w, code::BAD_MESSAGE, "bad RingOffer".into()),
                },
                kind::BLOB_SHM => {
                    let entries = match Message::decode(h.kind, h.flags, &payload) {
                        Ok(Message::BlobShm(e)) => e,
                        Ok(_) | Err(_) => return fail(&w, code::BAD_MESSAGE, "bad BlobShm".into()),
                    };
                    let Some(fd) = pump::lock(&reader).get_mut().take_fd() else {
                        return fail(
                            &w,
                            code::BAD_MESSAGE,
                            "a BlobShm frame came without a descriptor: send it over the Unix socket with the memfd \
                             attached (SCM_RIGHTS; docs/PROTOCOL.md)"
                                .into(),
                        );
                    };
                    if let Err(e) = self.shared_blobs(stream, fd, &entries) {
                        return fail(&w, code::BAD_MESSAGE, e);
                    }
                    send(&w, &Message::BlobHave(vec![true; entries.len()]))?;
                }
                kind::DEPLOY => {
                    let (name, hash, len) = match Message::decode(h.kind, h.flags, &payload) {
                        Ok(Message::Deploy { name, hash, len }) => (name, hash, len),
                        Ok(_) | Err(_) => return fail(&w, code::BAD_MESSAGE, "bad Deploy".into()),
                    };
                    // The function file's bytes reach the cache first (written on a thread).
                    if let Err(e) = self.verified() {
                        return fail(&w, code::BAD_MESSAGE, e);
                    }
                    self.flush_notes(true);
                    if let Err(e) = self.ask(&Control::Barrier) {
                        return fail(&w, code::EXECUTOR, format!("deploying `{name}`: {e}"));
                    }
                    let held = stream.has_blob(&hash);
                    // A blob the tenant never sent is, for its deploy, one the server lacks.
                    let readable = held || self.owner.as_deref().is_none_or(|t| self.cache.owns(t, &hash));
                    let control = self.control;
                    let register =
                        |name: &str, hash, len| ask(control, &Control::Register { name: name.to_string(), hash, len });
                    match self.functions.deploy(self.cache, &name, hash, len, held, readable, register) {
                        Ok(m) => send(&w, &m)?,
                        Err((c, e)) => return fail(&w, c, e),
                    }
                }
                kind::INVOKE => {
                    let (name, verify, inputs) = match invoke_request(&payload) {
                        Ok(r) => r,
                        Err(e) => return fail(&w, code::BAD_MESSAGE, e.to_string()),
                    };
                    self.at_gate();
                    let r = self.functions.invoke(self.cache, &name, verify, inputs);
                    if let (Some(g), false) = (self.gate.as_mut(), self.best_effort) {
                        g.leave();
                    }
                    match r {
                        Ok(m) => send(&w, &m)?,
                        Err((c, e)) => {
                            self.only_invoked = false;
                            return fail(&w, c, e);
                        }
                    }
                    self.flush_notes(false);
                }
                kind::PIECE => {
                    let r = match Message::decode(h.kind, h.flags, &payload) {
                        Ok(Message::Piece(r)) => r,
                        Ok(_) | Err(_) => return fail(&w, code::BAD_MESSAGE, "bad Piece".into()),
                    };
                    let Some(mut p) = self.pieces.take() else {
                        let e = "a piece sent by reference, but this server does not run cached execution".into();
                        return fail(&w, code::BAD_MESSAGE, e);
                    };
                    let run = p.resolve(&r).map_err(|e| (code::BAD_MESSAGE, e)).and_then(|recs| {
                        let _first = (_pump.is_none() && recs.iter().any(host_calls::record_registers))
                            .then(|| pump::Pump::start(&reader, &kept, &calls));
                        self.stats.records += recs.len() as u64;
                        self.arrived_ns = arrived;
                        self.at_gate();
                        // One whole piece, as the client cut it: held (it is all here) and
                        // closed at its end, as the executor's own cut would close it.
                        self.exec_pieces(&mut p, stream, &recs, true)
                    });
                    self.pieces = Some(p);
                    if let Err((c, e)) = run {
                        return fail(&w, c, e);
                    }
                    self.exec_us += t0.elapsed().as_micros() as u64;
                }
                kind::CLOSE => {
                    if let Err(e) = self.verified() {
                        return fail(&w, code::BAD_MESSAGE, e);
                    }
                    // What the session uploaded is in the cache before the client hears
                    // `Closed`: its next session may start at once.
                    self.flush_notes(true);
                    let _ = self.ask(&Control::Barrier);
                    if let Some(mut p) = self.pieces.take() {
                        // A piece still open (records the client sent without an answer).
                        let r = self.exec_pieces(&mut p, stream, &[], true);
                        p.count_into(&mut self.stats);
                        // Kept before the client hears `Closed`: its next session may start at once.
                        keep_templates(self.control, &mut p);
                        let _ = self.ask(&Control::Barrier);
                        self.pieces = Some(p);
                        if let Err((c, e)) = r {
                            return fail(&w, c, e);
                        }
                    }
                    if let Err(e) = stream.synchronize() {
                        return fail(&w, code::EXECUTOR, e.to_string());
                    }
                    if self.stamps.is_some() {
                        self.take_stamps();
                        let _ = self.control.send(&Control::Samples(std::mem::take(&mut self.samples)), None);
                    }
                    self.stats.executed += std::mem::take(&mut self.executed);
                    self.stats.launches = stream.report().launches;
                    self.stats.peak_memory = stream.report().peak_memory;
                    send(&w, &Message::Closed(self.stats.clone()))?;
                    return Ok(());
                }
                k => {
                    let name = gpuless_traces::protocol::message::kind_name(k);
                    return fail(
                        &w,
                        code::BAD_MESSAGE,
                        format!("a {name} message (kind {k}) is not allowed in a session"),
                    );
                }
            }
        }
    }
}
