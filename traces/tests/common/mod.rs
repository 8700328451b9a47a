//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use gpuless_traces::{ReaderOptions, TraceReader, TraceWriter, WriterOptions};

/// A `Write` sink the test can read back after the writer is done.
#[derive(Clone, Default)]
pub struct SharedBuf(pub Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedBuf {
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Small chunks so that tests cross many chunk boundaries.
pub fn small_chunks() -> WriterOptions {
    WriterOptions { call_chunk_bytes: 4096, blob_chunk_bytes: 2048, compression_threads: 2, ..WriterOptions::default() }
}

/// Write a trace into memory with `f`.
pub fn write_mem(opts: WriterOptions, f: impl FnOnce(&TraceWriter)) -> Vec<u8> {
    let buf = SharedBuf::default();
    let w = TraceWriter::new(buf.clone(), &gpuless_traces::synthetic::synthetic_meta("test"), opts).expect("writer");
    f(&w);
    w.finish().expect("finish");
    buf.bytes()
}

pub fn reader(bytes: &[u8]) -> TraceReader<std::io::Cursor<&[u8]>> {
    TraceReader::new(std::io::Cursor::new(bytes), ReaderOptions { blob_data: true, check_blob_refs: true })
        .expect("header")
}
