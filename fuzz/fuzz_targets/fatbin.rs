//! Fuzzes everything that reads untrusted GPU binaries: fatbin containers and entries with
//! decompression, image classification, host ELF section lookup and whole-file analysis.
#![no_main]

use gpuless_fatbin::{all_entries, fatbin_sections, Image, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_uncompressed: 16 << 20 };
    if let Ok(entries) = all_entries(data, 0) {
        for e in &entries {
            let _ = e.payload(&limits);
        }
        let _ = gpuless_fatbin::select(&entries, 90);
    }
    let _ = Image::classify(data);
    let _ = gpuless_fatbin::cubin_len(data);
    if let Ok(secs) = fatbin_sections(data) {
        for s in secs {
            let _ = all_entries(s.bytes, s.file_offset);
        }
    }
    let opts = gpuless_analyzer::Options { arch: None, limits, release: None };
    let _ = gpuless_analyzer::analyze(data, &opts, &gpuless_analyzer::NoProgress);
});
