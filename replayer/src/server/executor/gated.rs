//! How a session's records are executed: one at a time ([`Session::exec_one`]; a driver error
//! is kept for the next answer, anything else ends the session), a best-effort session's
//! kernels behind the priority gate ([`Session::exec_gated`]), and cached pieces run as graphs
//! ([`Session::exec_pieces`]).

use super::*;

impl Session<'_> {
    /// [`Self::exec_one`], a best-effort session's kernels after latency-critical work.
    pub(super) fn exec_gated(&mut self, stream: &mut Stream, rec: &CallRecord) -> Result<(), (u16, String)> {
        if self.arrived_ns.is_some() && super::super::gate::submits_kernels(rec) {
            self.stamp(stream, rec);
        }
        if !(self.best_effort && self.preempt && super::super::gate::submits_kernels(rec)) {
            return self.exec_one(stream, rec);
        }
        // At most the window's kernels on the GPU, then none while latency-critical work runs.
        let waited = self.inflight.make_room(|| Stream::kernel_shape(rec));
        if waited >= Duration::from_micros(50) {
            self.sample(3, waited.as_micros() as u64);
        }
        self.yield_to_latency_critical();
        self.exec_one(stream, rec)?;
        if let Some(s) = stream.live_stream_of(rec) {
            self.inflight.submitted(s);
        }
        Ok(())
    }

    pub(super) fn exec_one(&mut self, stream: &mut Stream, rec: &CallRecord) -> Result<(), (u16, String)> {
        self.last_seq = rec.seq;
        let r0 = self.timeline.on().then(Instant::now);
        let r = stream.call(rec);
        if let Some(r0) = r0 {
            let name = rec.function.api().map_or("?", |f| f.name);
            self.timeline.record(rec.seq, name, r0.elapsed().as_micros() as u64);
        }
        self.executed_or_kept(r, 1)
    }

    /// What a call (or a piece of `n` records) returned: counted, kept for the next answer
    /// (driver errors reach the client at its next synchronization, as the driver reports
    /// asynchronous errors), or the end of the session.
    fn executed_or_kept(&mut self, r: Result<(), ReplayError>, n: u64) -> Result<(), (u16, String)> {
        match r {
            Ok(()) => self.executed += n,
            Err(ReplayError::Driver { seq, what, code }) => {
                self.errors.push(CallError { seq, function: what, code: code as i32, message: format!("{code:?}") })
            }
            Err(e @ (ReplayError::Inconsistent { .. } | ReplayError::Unsupported { .. })) => {
                return Err((code::BAD_RECORD, e.to_string()))
            }
            Err(e) => return Err((code::EXECUTOR, e.to_string())),
        }
        Ok(())
    }

    /// Cached-trace execution of a segment's records: cut into pieces, each complete piece
    /// run as a graph or record by record, every other record at once, in order. `end`: the
    /// segment waits for an answer (or the session closes): the open piece runs too.
    pub(super) fn exec_pieces(
        &mut self,
        p: &mut Pieces,
        stream: &mut Stream,
        records: &[CallRecord],
        end: bool,
    ) -> Result<(), (u16, String)> {
        let mut cuts = Vec::new();
        // Every cut of the segment is made before anything of it runs, so holding a piece that
        // ends within the segment delays nothing: a segment that waits for an answer closes
        // its last piece; otherwise a piece that starts at least a piece's length before the
        // segment's end ends in it.
        for (i, rec) in records.iter().enumerate() {
            let in_hand = end || records.len() - i >= gpuless_traces::protocol::piece::MAX_RECORDS;
            p.push(stream, rec.clone(), in_hand, &mut cuts);
        }
        if end {
            p.finish(&mut cuts);
        }
        for cut in cuts {
            match cut {
                Cut::Single(rec) => self.exec_gated(stream, &rec)?,
                Cut::Piece(recs) => {
                    if self.best_effort && self.preempt {
                        self.yield_to_latency_critical();
                    }
                    if self.arrived_ns.is_some() {
                        if let Some(rec) = recs.iter().find(|r| super::super::gate::submits_kernels(r)) {
                            self.stamp(stream, rec);
                        }
                    }
                    let t = self.timeline.on().then(Instant::now);
                    match p.run(stream, recs) {
                        Ran::Eager(recs) => recs.iter().try_for_each(|rec| self.exec_gated(stream, rec))?,
                        Ran::Graph { records, last_seq, result } => {
                            self.last_seq = last_seq;
                            if let Some(t) = t {
                                let us = t.elapsed().as_micros() as u64;
                                self.timeline.record(last_seq, "(graph of a cached piece)", us);
                            }
                            self.executed_or_kept(result, records)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The first kernel of a latency-critical segment (`rec`) is next: a preemption stamp ahead
    /// of it on its stream (`stamps.rs`).
    fn stamp(&mut self, stream: &Stream, rec: &CallRecord) {
        let (Some(arrived), Some(s)) = (self.arrived_ns.take(), stream.live_stream_of(rec)) else { return };
        if let Some(st) = self.stamps.as_mut() {
            st.before_kernel(s, arrived);
        }
    }

    /// After an answer: a calibration round, then the preemption latencies of the stamps the
    /// GPU wrote so far to the server (sample kinds 4 and 5: the latency and the clock's
    /// uncertainty, nanoseconds).
    pub(super) fn take_stamps(&mut self) {
        let Some(st) = self.stamps.as_mut() else { return };
        st.recalibrate(self.gate.as_ref());
        let (latencies, uncertainty) = st.take(self.gate.as_ref());
        if latencies.is_empty() {
            return;
        }
        for ns in latencies {
            self.sample(4, ns);
        }
        self.sample(5, uncertainty);
    }

    /// Before work runs: a latency-critical session enters the priority gate, a best-effort
    /// session's work waits there while latency-critical work runs.
    pub(super) fn at_gate(&mut self) {
        if let Some(g) = self.gate.as_mut() {
            if self.best_effort {
                let held = g.hold(GRACE, MAX_HOLD);
                if held >= Duration::from_micros(50) {
                    self.sample(2, held.as_micros() as u64);
                }
            } else {
                g.enter();
            }
        }
    }

    /// Before a best-effort session submits a kernel: while latency-critical work is in
    /// flight it waits (at most the gate's bound per kernel), so latency-critical work arriving
    /// mid-segment finds at most what was already submitted ahead of it.
    fn yield_to_latency_critical(&mut self) {
        let Some(g) = self.gate.as_ref() else { return };
        if !g.in_flight() {
            return;
        }
        let held = g.hold(Duration::ZERO, MAX_HOLD);
        if held >= Duration::from_micros(50) {
            self.sample(2, held.as_micros() as u64);
        }
    }
}
