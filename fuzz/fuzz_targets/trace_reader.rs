//! Fuzz the trace reader and the analysis: arbitrary bytes, and the same bytes with every
//! checksum fixed up (so mutations reach zstd and the flatbuffer verifier).
#![no_main]

use gpuless_traces::{analysis, format, ReaderOptions, TraceReader};
use libfuzzer_sys::fuzz_target;

fn run(data: &[u8]) {
    let opts = ReaderOptions { blob_data: true, check_blob_refs: true };
    if let Ok(r) = TraceReader::new(std::io::Cursor::new(data), opts) {
        let _ = analysis::analyze(r, &mut |_, _| {});
    }
}

fuzz_target!(|data: &[u8]| {
    run(data);
    let mut fixed = data.to_vec();
    format::fix_checksums(&mut fixed);
    run(&fixed);
});
