//! State's lookups of live handles by recorded ones: streams (waiting first for a synchronous
//! copy still in flight), functions and kernels, and kernel names for reports.

use cudarc::driver::sys;

use super::{ReplayError, State};

impl State {
    /// The live stream of a recorded one. A handle the session never created is the driver's
    /// `CUDA_ERROR_INVALID_HANDLE` for the call (never the legacy stream in its place).
    /// Work given to a stream other than the legacy one first waits for a synchronous copy
    /// still in flight ([`State::unsettled`]).
    pub(crate) fn stream(&self, recorded: u64) -> Result<sys::CUstream, ReplayError> {
        if let Some(s) = self.stream_override {
            self.settle()?;
            return Ok(s);
        }
        // 0, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) mean the same at replay.
        match recorded {
            0..=2 => Ok(recorded as sys::CUstream),
            s => {
                let live = self.streams.get(&s).copied().ok_or_else(|| {
                    let (seq, what) = self.last_call.unwrap_or((0, "a stream's call"));
                    ReplayError::Driver { seq, what: what.to_string(), code: sys::CUresult::CUDA_ERROR_INVALID_HANDLE }
                })?;
                self.settle()?;
                Ok(live)
            }
        }
    }

    /// Waits for the legacy stream if a synchronous copy from pageable bytes may be in flight.
    fn settle(&self) -> Result<(), ReplayError> {
        if self.unsettled.replace(false) {
            // SAFETY: a synchronization of the legacy stream of the current context.
            self.own(unsafe { sys::cuStreamSynchronize(1 as sys::CUstream) }, "wait for a copy in flight")?;
        }
        Ok(())
    }

    pub(crate) fn kernel_name(&self, recorded: u64) -> String {
        self.names.get(&recorded).cloned().unwrap_or_else(|| format!("{recorded:#x}"))
    }

    pub(crate) fn function(&self, recorded: u64) -> Option<sys::CUfunction> {
        self.functions.get(&recorded).copied().or_else(|| self.kernels.get(&recorded).map(|&k| k as sys::CUfunction))
    }
}
