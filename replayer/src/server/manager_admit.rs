//! Admission: which GPU and partition a session gets (placement), the queue it waits in while
//! none fits, and the executor it is handed.
//!
//! Placement (docs/SERVING.md): a session that names a GPU (`Hello::gpu`) goes there; else,
//! among the GPUs where its partition fits now, to the one that holds an executor kept warm
//! with its function or program, then the one with the fewest sessions, then the one with the
//! most free memory (NVML), then the lowest number. A session of several GPUs
//! (`Hello::devices`) takes whole GPUs: the ones it names, else the first ones in that order;
//! its executor is started for it (never pooled, never kept).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use gpuless_traces::protocol::message::code;
use gpuless_traces::protocol::{PartitionRequest, Priority};

use super::{rank, Channel, Config, Exec, ExecState, Manager, Refusal, SessionEntry};
use crate::server::metrics::{kind, FunctionStart};

/// What a session asks for, as admission reads it.
pub struct Request<'a> {
    /// The partition.
    pub partition: &'a PartitionRequest,
    /// The GPU, if it names one.
    pub gpu: Option<u32>,
    /// How many GPUs it asks for (0 or 1: one).
    pub devices: u32,
    /// The GPUs it names for its devices 1.. (with `gpu` for device 0).
    pub more_gpus: &'a [u32],
    /// Its priority class.
    pub priority: Priority,
    /// The function it announced (the tenant's, [`crate::server::warm::key`]).
    pub function: Option<&'a str>,
    /// The program it may find kept with its uploads ([`Manager::warm_key`]).
    pub program: Option<&'a str>,
    /// Its tenant, on a server with tenants (its uploads are marked as theirs).
    pub tenant: Option<&'a str>,
}

impl Manager {
    /// The executor spec and the SMs a request needs on GPU `gpu` (a position; 0 SMs: the
    /// whole GPU, time-shared).
    pub fn resolve(&self, req: &PartitionRequest, gpu: usize) -> Result<(String, u32), Refusal> {
        let profiles = &self.gpus[gpu].profiles;
        match req {
            PartitionRequest::Whole => Ok(("whole".into(), 0)),
            PartitionRequest::Sms(0) => Err((code::NO_PARTITION, "a soft partition of 0 SMs".into())),
            PartitionRequest::Sms(n) => Ok((format!("sms:{n}"), *n)),
            PartitionRequest::Profile(p) => match profiles.get(p) {
                Some(sms) => Ok((p.clone(), *sms)),
                None => {
                    let mut known: Vec<&String> = profiles.keys().filter(|k| k.contains('.')).collect();
                    known.sort();
                    Err((
                        code::NO_PARTITION,
                        if known.is_empty() {
                            format!("profile `{p}`: this server knows no MIG profiles of its GPU (NVML unavailable); ask for `whole` or `sms:N`")
                        } else {
                            format!(
                                "profile `{p}` is not a profile of this GPU; it offers {}",
                                known.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                            )
                        },
                    ))
                }
            },
        }
    }

    /// The GPUs `req` may go to, each with the spec and SMs it needs there.
    fn candidates(&self, req: &Request<'_>) -> Result<Vec<(usize, String, u32)>, Refusal> {
        let wanted = req.devices.max(1) as usize;
        let have = || self.gpus.iter().map(|g| g.index.to_string()).collect::<Vec<_>>().join(", ");
        if wanted > 1 {
            if *req.partition != PartitionRequest::Whole {
                return Err((
                    code::NO_PARTITION,
                    format!("a session of {wanted} GPUs takes them whole, not `{}`", req.partition),
                ));
            }
            if wanted > self.gpus.len() {
                return Err((
                    code::NO_PARTITION,
                    format!("{wanted} GPUs asked for; this server owns {} (GPU {})", self.gpus.len(), have()),
                ));
            }
        }
        let named: Vec<u32> = req.gpu.into_iter().chain(req.more_gpus.iter().copied()).collect();
        let positions: Vec<usize> = if named.is_empty() {
            (0..self.gpus.len()).collect()
        } else {
            if wanted > 1 && named.len() != wanted {
                return Err((code::NO_PARTITION, format!("{wanted} GPUs asked for, {} named", named.len())));
            }
            let mut out = Vec::new();
            for i in named {
                match self.gpus.iter().position(|g| g.index == i) {
                    Some(p) if out.contains(&p) => {
                        return Err((code::NO_PARTITION, format!("GPU {i} is named twice")));
                    }
                    Some(p) => out.push(p),
                    None => {
                        return Err((
                            code::NO_PARTITION,
                            format!("GPU {i} is not one of this server's (it serves GPU {})", have()),
                        ));
                    }
                }
            }
            out
        };
        let mut out = Vec::new();
        let mut first_refusal = None;
        for p in positions {
            match self.resolve(req.partition, p) {
                Ok((spec, sms)) => out.push((p, spec, sms)),
                Err(r) => {
                    first_refusal.get_or_insert(r);
                }
            }
        }
        match (out.is_empty(), first_refusal) {
            (true, Some(r)) => Err(r),
            _ => Ok(out),
        }
    }

    /// Admits a session asking for `req`: waits in the queue while its partition fits on none
    /// of its GPUs, then places it (the module's rule) and hands it an executor of its spec on
    /// that GPU: one kept warm with its function or program if one is, else a ready one
    /// (starting one if none is warm).
    pub async fn admit(self: &Arc<Self>, req: &Request<'_>) -> Result<super::Grant, Refusal> {
        let candidates = self.candidates(req)?;
        let wanted = req.devices.max(1) as usize;
        let named = req.gpu.is_some();
        let priority = req.priority;
        let deadline = Instant::now() + Config::secs(self.cfg.queue_timeout_s);
        let mut queued = false;
        let (session, gpu, more, spec) = loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // NVML is asked before the lock is taken.
            let free = if candidates.len() > 1 {
                super::super::gpus::free_memory(candidates.iter().filter_map(|(p, _, _)| self.gpus[*p].nvml))
            } else {
                HashMap::new()
            };
            {
                let mut g = self.lock();
                let leave = |g: &mut super::Inner, queued: bool| {
                    if queued {
                        g.waiting[rank(priority)] -= 1;
                    }
                };
                if g.draining {
                    leave(&mut g, queued);
                    return Err((code::DRAINING, "the server is shutting down; try another server".into()));
                }
                let too_big = candidates.iter().all(|(p, _, sms)| g.load[*p].total_sms.is_some_and(|t| *sms > t));
                if too_big {
                    leave(&mut g, queued);
                    let (p, _, sms) = &candidates[0];
                    let total = g.load[*p].total_sms.unwrap_or(0);
                    return Err((code::NO_PARTITION, format!("{sms} SMs asked for; this GPU has {total}")));
                }
                let ahead = rank(priority) == 1 && g.waiting[0] > 0;
                let room = g.sessions.len() < self.cfg.max_sessions && !ahead;
                let now = Instant::now();
                let mut ranked: Vec<&(usize, String, u32)> = candidates
                    .iter()
                    .filter(|(p, _, sms)| {
                        let l = &g.load[*p];
                        *sms == 0 || l.total_sms.is_some_and(|t| l.sms_in_use + sms <= t)
                    })
                    .collect();
                // GPUs named for several devices keep their order: device k is the k-th named.
                if !(named && wanted > 1) {
                    ranked.sort_by_key(|(p, spec, _)| {
                        let kept = Self::kept_spec(*p, spec);
                        let warm = req.function.is_some_and(|f| g.warm.holds(&kept, f, now))
                            || req.program.is_some_and(|f| g.warm_programs.holds(&kept, f, now));
                        let sessions = g.sessions.values().filter(|s| s.on(*p)).count();
                        let free = self.gpus[*p].nvml.and_then(|n| free.get(&n)).copied().unwrap_or(0);
                        (!warm, sessions, std::cmp::Reverse(free), self.gpus[*p].index)
                    });
                }
                // Several GPUs not named: the placement picks which, their numbers the order (the
                // program's device 0 is the lowest, as on the machine itself).
                if !named && wanted > 1 && ranked.len() >= wanted {
                    ranked[..wanted].sort_by_key(|(p, _, _)| self.gpus[*p].index);
                }
                let best = (ranked.len() >= wanted).then(|| ranked[0]);
                let more: Vec<usize> = ranked.iter().skip(1).take(wanted - 1).map(|c| c.0).collect();
                if let (true, Some((p, spec, sms))) = (room, best) {
                    leave(&mut g, queued);
                    let id = g.next_id;
                    g.next_id += 1;
                    g.load[*p].sms_in_use += sms;
                    g.sessions.insert(
                        id,
                        SessionEntry {
                            spec: spec.clone(),
                            gpu: *p,
                            gpu_index: self.gpus[*p].index,
                            more: more.clone(),
                            sms: *sms,
                            priority,
                            exec: 0,
                            started: Instant::now(),
                            tenant: req.tenant.map(str::to_string),
                        },
                    );
                    break (id, *p, more, spec.clone());
                }
                if !queued {
                    if g.waiting.iter().sum::<usize>() >= self.cfg.queue {
                        return Err((
                            code::BUSY,
                            format!(
                                "no partition free and {} sessions already waiting; try again later",
                                self.cfg.queue
                            ),
                        ));
                    }
                    g.waiting[rank(priority)] += 1;
                    queued = true;
                }
            }
            if tokio::time::timeout_at(deadline.into(), notified).await.is_err() {
                let mut g = self.lock();
                g.waiting[rank(priority)] -= 1;
                let spec = &candidates[0].1;
                return Err((
                    code::BUSY,
                    format!("no `{spec}` partition became free within {} s; try again later", self.cfg.queue_timeout_s),
                ));
            }
        };
        match self.take_executor(&spec, (gpu, &more), session, req.function, req.program).await {
            Ok((exec, channel)) => {
                if let Some(e) = self.lock().execs.get_mut(&exec) {
                    // An executor of several GPUs is never kept.
                    e.kept_as = req.program.or(req.function).filter(|_| more.is_empty()).map(str::to_string);
                }
                let more = more.iter().map(|&p| self.gpus[p].index).collect();
                Ok(super::Grant { session, exec, channel, gpu: self.gpus[gpu].index, more })
            }
            Err(r) => {
                let mut g = self.lock();
                Self::end_session(&mut g, &self.metrics, session);
                drop(g);
                self.changed.notify_waiters();
                Err(r)
            }
        }
    }

    async fn take_executor(
        self: &Arc<Self>,
        spec: &str,
        (gpu, more): (usize, &[usize]),
        session: u64,
        function: Option<&str>,
        program: Option<&str>,
    ) -> Result<(u64, Arc<Channel>), Refusal> {
        // A session of several GPUs gets an executor started for it.
        let (function, program) = if more.is_empty() { (function, program) } else { (None, None) };
        if let Some(p) = program {
            let warm = self.take_warm(spec, gpu, session, p, true);
            let start = if warm.is_some() { "warm" } else { "cold" };
            self.metrics.program_sessions.get_or_create(&kind(start)).inc();
            if let Some(w) = warm {
                return Ok(w);
            }
        }
        if let Some(f) = function {
            let warm = self.take_warm(spec, gpu, session, f, false);
            let start = if warm.is_some() { "warm" } else { "cold" };
            self.metrics
                .function_sessions
                .get_or_create(&FunctionStart { function: crate::server::warm::shown(f), start: start.into() })
                .inc();
            if let Some(w) = warm {
                return Ok(w);
            }
        }
        let deadline = Instant::now() + Config::secs(self.cfg.executor_start_timeout_s);
        let mut mine: Option<u64> = None;
        let mut spawned = 0;
        let mut evicted = false;
        let on = Self::kept_spec(gpu, "");
        let mine_here = |e: &Exec| e.spec == spec && e.gpu == gpu && e.more == more;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut g = self.lock();
                let failed = match mine.and_then(|m| g.execs.get(&m)) {
                    Some(Exec { state: ExecState::Failed(why), .. }) => Some(why.clone()),
                    _ => None,
                };
                if let Some(why) = failed {
                    // Executors kept warm on this GPU hold device memory: with one, the least
                    // recently used is let go and a new executor tried once more.
                    let kept_here = g.warm.oldest(&on).is_some() || g.warm_programs.oldest(&on).is_some();
                    if !evicted && kept_here {
                        evicted = true;
                        let mut lru: Vec<u64> = g.warm.evict_lru(&on).into_iter().collect();
                        lru.extend(g.warm_programs.evict_lru(&on));
                        tracing::warn!(spec, why, ?lru, "an executor could not start: letting a warm function go");
                        Self::let_go(&g, &lru);
                        // A new executor starts below; the one let go exits (its memory with
                        // it) while the new one is still starting its driver.
                        mine = None;
                    } else {
                        return Err((code::EXECUTOR, format!("the executor for `{spec}` could not start: {why}")));
                    }
                }
                // The executor this session started may have died while starting (then it
                // tries again, up to three times) or been taken by another waiting session
                // (then it starts another).
                if let Some(m) = mine {
                    if let Some(why) = g.died_starting.remove(&m) {
                        mine = None;
                        if spawned >= 3 {
                            return Err((
                                code::EXECUTOR,
                                format!("{spawned} executors for `{spec}` exited while starting: {why}"),
                            ));
                        }
                    } else if !matches!(g.execs.get(&m).map(|e| &e.state), Some(ExecState::Starting | ExecState::Ready))
                    {
                        mine = None;
                    }
                }
                let ready = g
                    .execs
                    .iter()
                    .filter(|(_, e)| mine_here(e) && matches!(e.state, ExecState::Ready))
                    .map(|(id, _)| *id)
                    .min_by_key(|id| (Some(*id) != mine, *id));
                if let Some(id) = ready {
                    let e = g.execs.get_mut(&id).ok_or((code::EXECUTOR, "executor vanished".to_string()))?;
                    e.state = ExecState::Busy(session);
                    let ch = e.channel.clone();
                    if let Some(s) = g.sessions.get_mut(&session) {
                        s.exec = id;
                    }
                    drop(g);
                    // Keep the pool warm behind this session.
                    let me = self.clone();
                    tokio::task::spawn_blocking(move || me.fill_pool());
                    return Ok((id, ch));
                }
                let starting = g.execs.values().any(|e| mine_here(e) && matches!(e.state, ExecState::Starting));
                drop(g);
                if mine.is_none() && !starting {
                    match self.spawn(spec, gpu, more) {
                        Ok(id) => {
                            mine = Some(id);
                            spawned += 1;
                        }
                        Err(e) => return Err((code::EXECUTOR, format!("could not start an executor: {e}"))),
                    }
                }
            }
            if tokio::time::timeout_at(deadline.into(), notified).await.is_err() {
                return Err((
                    code::EXECUTOR,
                    format!("no `{spec}` executor was ready within {} s", self.cfg.executor_start_timeout_s),
                ));
            }
        }
    }
}
