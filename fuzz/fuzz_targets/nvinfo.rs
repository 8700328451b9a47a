//! Fuzzes the cubin analyzer: `.nv.info` records alone, and whole cubins (ELF + nv.info).
#![no_main]

use gpuless_analyzer::cubin::{analyze_cubin, nvinfo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for r in nvinfo::records(data) {
        if r.is_err() {
            break;
        }
    }
    let _ = analyze_cubin(data, None);
});
