//! The manager's executors kept after their session: warm functions (a function set up,
//! `crate::server::warm`) and warm constants (a program's uploads resident,
//! `crate::replay::resident`) — which sessions keep their executor, the sets they join, and
//! taking one for the next session.

use std::sync::Arc;
use std::time::Instant;

use gpuless_traces::protocol::message::Hello;

use super::{Channel, Exec, ExecState, Inner, Manager};

impl Manager {
    /// Lets go of the kept executors (functions and programs) unused for longer than the keep-alive.
    pub(super) fn expire_warm(g: &mut Inner) {
        let mut old = g.warm.expire(Instant::now());
        old.extend(g.warm_programs.expire(Instant::now()));
        Self::let_go(g, &old);
    }

    /// The keep-alive a session's executor is started with, milliseconds: 0 (it exits after
    /// the session) unless the session announced a function and keeping functions is on, or
    /// it is a live client's session of a program and warm constants are on.
    pub fn keep_alive_ms(&self, h: &Hello) -> u64 {
        if h.devices > 1 {
            return 0; // an executor of several GPUs serves one session
        }
        let keep = match crate::server::warm::announced(&h.program) {
            Some(_) => self.cfg.function_keep_alive(),
            None => self.warm_program(h).and(self.cfg.program_keep_alive()),
        };
        keep.map_or(0, |d| d.as_millis().min(u128::from(u64::MAX)) as u64)
    }

    /// The program a session's executor may be kept for with its uploads resident (warm
    /// constants on, a live client's session: records with an arena of the client's, no
    /// function announced).
    pub fn warm_program<'h>(&self, h: &'h Hello) -> Option<&'h str> {
        let live = h.arena_base != 0 && h.arena_size != 0;
        (self.cfg.program_keep_alive().is_some() && live && crate::server::warm::announced(&h.program).is_none())
            .then_some(h.program.as_str())
    }

    /// What an executor kept with a program's uploads is kept as, and found by: the program
    /// of `tenant` (the tenant's name, a separator no name holds, the program), so that only
    /// the same tenant's next session of the program is handed what it left on the GPU.
    pub fn warm_key(&self, h: &Hello, tenant: &str) -> Option<String> {
        self.warm_program(h).map(|p| crate::server::warm::key(tenant, p))
    }

    /// Executor `id` reported [`Control::Warm`]: after its session it keeps `function` set up.
    /// It joins the warm set ([`Self::keep_after_session`]) as what its session was admitted
    /// as (the tenant's function, [`crate::server::warm::key`]; the tenant `""`'s without one).
    pub(super) fn warm(&self, id: u64, function: &str) {
        let key = self.lock().execs.get(&id).and_then(|e| e.kept_as.clone());
        let key = key.unwrap_or_else(|| crate::server::warm::key("", function));
        self.keep_after_session(id, ExecState::Function(key));
    }

    /// Executor `id` reported [`Control::KeptProgram`]: after its session it keeps `program`'s
    /// uploads resident. It joins the set of warm programs ([`Self::keep_after_session`]) as
    /// what its session was admitted as ([`Self::warm_key`]: the tenant's program); an executor
    /// whose session had no key (warm constants turned on since) is kept as the program of
    /// the tenant `""`.
    pub(super) fn keep_program(&self, id: u64, program: &str, resident: u64) {
        let key = self.lock().execs.get(&id).and_then(|e| e.kept_as.clone());
        let key = key.unwrap_or_else(|| crate::server::warm::key("", program));
        self.keep_after_session(id, ExecState::Program(key, resident));
    }

    /// Executor `id` keeps what `kept` says after its session: it joins its set (the least
    /// recently used beyond the cap, or beyond the memory bound, let go:
    /// [`Self::bound_kept_memory`]), or is let go at once (that keep-alive off, draining, not
    /// after a session).
    fn keep_after_session(&self, id: u64, kept: ExecState) {
        // NVML is asked before the lock is taken.
        let used = crate::server::gpus::memory_by_pid();
        let mut g = self.lock();
        // Kept sets know executors by GPU and spec ([`Manager::kept_spec`]).
        let spec = match g.execs.get(&id) {
            Some(Exec { state: ExecState::Finished, spec, gpu, .. }) => Some(Self::kept_spec(*gpu, spec)),
            _ => None,
        };
        let (name, on) = match &kept {
            ExecState::Function(f) => (f.clone(), self.cfg.function_keep_alive().is_some()),
            ExecState::Program(p, _) => (p.clone(), self.cfg.program_keep_alive().is_some()),
            _ => (String::new(), false),
        };
        match spec {
            Some(spec) if !g.draining && on => {
                let program = matches!(kept, ExecState::Program(..));
                tracing::info!(exec = id, kept = ?kept, spec, "executor kept after its session");
                if let Some(e) = g.execs.get_mut(&id) {
                    e.state = kept;
                }
                Self::expire_warm(&mut g);
                let over = if program {
                    g.warm_programs.insert(id, &spec, &name, Instant::now())
                } else {
                    g.warm_names.insert(name.clone());
                    g.warm.insert(id, &spec, &name, Instant::now())
                };
                Self::let_go(&g, &over);
                self.bound_kept_memory(&mut g, &used);
            }
            _ => Self::let_go(&g, &[id]),
        }
        drop(g);
        self.changed.notify_waiters();
    }

    /// What the kept sets know an executor of `spec` on GPU `gpu` (a position) by.
    pub(super) fn kept_spec(gpu: usize, spec: &str) -> String {
        format!("{gpu}/{spec}")
    }

    /// The executor kept warm with `function` on `spec` on GPU `gpu` (with `program`'s uploads
    /// resident, when `program`), if one is, handed to `session`.
    pub(super) fn take_warm(
        &self,
        spec: &str,
        gpu: usize,
        session: u64,
        function: &str,
        program: bool,
    ) -> Option<(u64, Arc<Channel>)> {
        let mut g = self.lock();
        Self::expire_warm(&mut g);
        let set = if program { &mut g.warm_programs } else { &mut g.warm };
        let id = set.take(&Self::kept_spec(gpu, spec), function, Instant::now())?;
        let e = g.execs.get_mut(&id)?;
        let kept = match &e.state {
            ExecState::Function(f) => !program && f == function,
            ExecState::Program(p, _) => program && p == function,
            _ => false,
        };
        if !kept {
            return None;
        }
        e.state = ExecState::Busy(session);
        let ch = e.channel.clone();
        if let Some(s) = g.sessions.get_mut(&session) {
            s.exec = id;
        }
        tracing::info!(session, exec = id, function, "session served by an executor kept warm with its function");
        Some((id, ch))
    }

    /// Memory pressure: while the executors kept after their session on one GPU hold more
    /// than `warm_memory_fraction` of that GPU's memory, the least recently used of them there
    /// (functions and programs alike) is let go. What one holds is NVML's count for its process
    /// (`used`, by pid: context, code and data) where NVML answers, else the uploads a program's
    /// executor said it keeps (0 for a function's).
    pub(super) fn bound_kept_memory(&self, g: &mut Inner, used: &std::collections::HashMap<u32, u64>) {
        if self.cfg.warm_memory_fraction >= 1.0 {
            return;
        }
        for gpu in 0..self.gpus.len() {
            let total = g.execs.values().filter(|e| e.gpu == gpu).map(|e| e.device.total_mem).max().unwrap_or(0);
            if total == 0 {
                continue;
            }
            let budget = (total as f64 * self.cfg.warm_memory_fraction) as u64;
            let on = Self::kept_spec(gpu, "");
            loop {
                // Only executors still in a set: one let go holds its memory until it has exited.
                let held: u64 = g
                    .warm
                    .execs()
                    .chain(g.warm_programs.execs())
                    .filter_map(|id| g.execs.get(&id))
                    .filter(|e| e.gpu == gpu)
                    .map(|e| match &e.state {
                        ExecState::Program(_, r) => used.get(&e.pid).copied().unwrap_or(*r),
                        _ => used.get(&e.pid).copied().unwrap_or(0),
                    })
                    .sum();
                if held <= budget {
                    break;
                }
                let victim = match (g.warm.oldest(&on), g.warm_programs.oldest(&on)) {
                    (Some(f), Some(p)) if f <= p => g.warm.evict_lru(&on),
                    (Some(_), None) => g.warm.evict_lru(&on),
                    (_, Some(_)) => g.warm_programs.evict_lru(&on),
                    (None, None) => None,
                };
                let Some(v) = victim else { break };
                Self::let_go(g, &[v]);
                tracing::info!(
                    exec = v,
                    gpu = self.gpus[gpu].index,
                    held,
                    budget,
                    "kept executor let go: those kept after their session held more than warm_memory_fraction of the GPU"
                );
            }
        }
    }
}
