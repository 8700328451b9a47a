//! Initial-exec TLS words (x86-64 Linux): per-thread pointers found with two loads. The library
//! is preloaded, so its TLS lies in the static block at a fixed offset from `fs`; a Rust
//! `thread_local!` in a shared library goes through the dynamic loader's `__tls_get_addr`
//! instead, which reads four cache lines (the index, the thread control block, the loader's TLS
//! generation and the thread's module vector) — each a miss after the program's own work between
//! two driver calls. The words hold pointers to what `thread_local!`s own (`lane.rs`,
//! `state.rs`); their owners clear them before freeing what they point to. Elsewhere the words
//! read as null and callers take their `thread_local!`.

/// This thread's lane (`lane.rs`).
pub(crate) const LANE: usize = 0;
/// This thread's batch (`state.rs`).
pub(crate) const BATCH: usize = 1;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 4",
    ".globl gpuless_tls_words",
    ".hidden gpuless_tls_words",
    ".type gpuless_tls_words,@object",
    ".size gpuless_tls_words,16",
    "gpuless_tls_words:",
    ".zero 16",
    ".popsection",
);

/// Word `W` ([`LANE`], [`BATCH`]) of this thread, null until set.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
pub(crate) fn get<const W: usize>() -> *const () {
    let p: *const ();
    // SAFETY: reads this thread's TLS word W (the GOT holds the block's offset from `fs`).
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr [rip + gpuless_tls_words@GOTTPOFF]",
            "mov {p}, qword ptr fs:[{p} + {off}]",
            p = out(reg) p,
            off = const W * 8,
            options(nostack, readonly, preserves_flags),
        );
    }
    p
}

/// Sets word `W` of this thread.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) fn set<const W: usize>(p: *const ()) {
    // SAFETY: writes this thread's TLS word W.
    unsafe {
        core::arch::asm!(
            "mov {t}, qword ptr [rip + gpuless_tls_words@GOTTPOFF]",
            "mov qword ptr fs:[{t} + {off}], {p}",
            t = out(reg) _,
            p = in(reg) p,
            off = const W * 8,
            options(nostack, preserves_flags),
        );
    }
}

/// Word `W`: always null here.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline(always)]
pub(crate) fn get<const W: usize>() -> *const () {
    std::ptr::null()
}

/// Nothing to set here.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) fn set<const W: usize>(_: *const ()) {}

#[cfg(test)]
mod tests {
    /// Each thread has its own words, null until set.
    #[test]
    fn words_are_per_thread() {
        let x = 5u8;
        super::set::<{ super::BATCH }>(&x as *const u8 as *const ());
        assert_eq!(super::get::<{ super::BATCH }>(), &x as *const u8 as *const ());
        assert!(super::get::<{ super::LANE }>().is_null());
        std::thread::spawn(|| assert!(super::get::<{ super::BATCH }>().is_null())).join().unwrap();
        super::set::<{ super::BATCH }>(std::ptr::null());
    }
}
