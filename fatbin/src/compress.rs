//! Decompression of fatbin entry payloads: raw LZ4 blocks and zstd frames, with size limits.

use crate::error::{Error, Result};

/// Bounds that keep a hostile input from making the parser allocate without limit.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest uncompressed entry accepted, in bytes.
    pub max_uncompressed: u64,
}

impl Default for Limits {
    fn default() -> Self {
        // The largest cubin in PyTorch 2.11's libtorch_cuda.so is a few MB; 1 GiB is generous.
        Limits { max_uncompressed: 1 << 30 }
    }
}

/// The worst LZ4 block expansion ratio (every 255-byte literal run encoded in one byte).
const LZ4_MAX_RATIO: u64 = 255;

/// Decodes a raw LZ4 block that must expand to exactly `size` bytes.
pub fn lz4_block(input: &[u8], size: u64, offset: u64, limits: &Limits) -> Result<Vec<u8>> {
    check_limit(size, offset, limits)?;
    if size > (input.len() as u64).saturating_mul(LZ4_MAX_RATIO) + 16 {
        return Err(Error::Decompress {
            offset,
            codec: "lz4",
            what: format!("declared size {size} is impossible for {} input bytes", input.len()),
        });
    }
    let mut out = vec![0u8; size as usize];
    let n = lz4_flex::block::decompress_into(input, &mut out).map_err(|e| Error::Decompress {
        offset,
        codec: "lz4",
        what: e.to_string(),
    })?;
    if n as u64 != size {
        return Err(size_lie(offset, "lz4", size, n as u64));
    }
    Ok(out)
}

/// Decodes a zstd frame that must expand to exactly `size` bytes.
pub fn zstd_frame(input: &[u8], size: u64, offset: u64, limits: &Limits) -> Result<Vec<u8>> {
    check_limit(size, offset, limits)?;
    // The frame header usually states its content size: a lie is caught before allocating.
    if let Ok(Some(declared)) = zstd::zstd_safe::get_frame_content_size(input) {
        if declared != size {
            return Err(size_lie(offset, "zstd", size, declared));
        }
    }
    let mut out = Vec::with_capacity(size as usize);
    let mut dec = zstd::bulk::Decompressor::new().map_err(|e| zstd_err(offset, e))?;
    // Capacity `size + 1` would let us detect overlong output; the bulk API fails instead
    // when the output does not fit, which is the same signal.
    dec.decompress_to_buffer(input, &mut out).map_err(|e| zstd_err(offset, e))?;
    if out.len() as u64 != size {
        return Err(size_lie(offset, "zstd", size, out.len() as u64));
    }
    Ok(out)
}

fn check_limit(size: u64, offset: u64, limits: &Limits) -> Result<()> {
    if size > limits.max_uncompressed {
        return Err(Error::TooLarge { offset, size, limit: limits.max_uncompressed });
    }
    Ok(())
}

fn size_lie(offset: u64, codec: &'static str, declared: u64, actual: u64) -> Error {
    Error::Decompress {
        offset,
        codec,
        what: format!("header declares {declared} uncompressed bytes, data holds {actual}"),
    }
}

fn zstd_err(offset: u64, e: std::io::Error) -> Error {
    Error::Decompress { offset, codec: "zstd", what: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lz4_round_trip_and_lies() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 17) as u8).collect();
        let c = lz4_flex::block::compress(&data);
        let l = Limits::default();
        assert_eq!(lz4_block(&c, data.len() as u64, 0, &l).unwrap(), data);
        assert!(lz4_block(&c, data.len() as u64 + 1, 0, &l).is_err());
        assert!(lz4_block(&c, data.len() as u64 - 1, 0, &l).is_err());
        assert!(lz4_block(&c, u64::MAX, 0, &l).is_err());
        assert!(lz4_block(&c[..c.len() / 2], data.len() as u64, 0, &l).is_err());
    }

    #[test]
    fn zstd_round_trip_and_lies() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 13) as u8).collect();
        let c = zstd::bulk::compress(&data, 3).unwrap();
        let l = Limits::default();
        assert_eq!(zstd_frame(&c, data.len() as u64, 0, &l).unwrap(), data);
        assert!(zstd_frame(&c, data.len() as u64 + 1, 0, &l).is_err());
        assert!(zstd_frame(&c, 5, 0, &l).is_err());
        assert!(zstd_frame(&c, 1 << 40, 0, &l).is_err());
        assert!(zstd_frame(&c[..c.len() - 3], data.len() as u64, 0, &l).is_err());
        assert!(zstd_frame(b"garbage!", 100, 0, &l).is_err());
    }
}
