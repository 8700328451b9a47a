//! `.nv.info` attribute records (REFERENCE.md §2): `u8 format, u8 attribute`, then a payload
//! whose size the format gives: 1 none (2 padding bytes), 2 one byte (padded), 3 inline u16,
//! 4 `u16 size` + bytes. Parsing is total: a record that runs past its section is an
//! error naming the offset.

use crate::cubin::CubinError;

/// EIATTR codes the analyzer reads (names follow cuobjdump's `EIATTR_*`).
pub mod attr {
    /// Maximum threads per block from `__launch_bounds__` (3 × u32).
    pub const MAX_THREADS: u8 = 0x05;
    /// Constant bank and range of the parameters (`u32 sym, u16 base, u16 size`).
    pub const PARAM_CBANK: u8 = 0x0a;
    /// Required threads per block (`reqntid`, 3 × u32).
    pub const REQNTID: u8 = 0x10;
    /// Per-thread local frame size (`u32 sym, u32 bytes`), in `.nv.info`.
    pub const FRAME_SIZE: u8 = 0x11;
    /// Minimum stack size (`u32 sym, u32 bytes`), in `.nv.info`.
    pub const MIN_STACK_SIZE: u8 = 0x12;
    /// One parameter: `u32 index, u16 ordinal, u16 offset, u32 bits` (size in bits 18..31).
    pub const KPARAM_INFO: u8 = 0x17;
    /// Total parameter bytes (inline u16).
    pub const CBANK_PARAM_SIZE: u8 = 0x19;
    /// `maxrregcount` (inline u16).
    pub const MAXREG_COUNT: u8 = 0x1b;
    /// Registers per thread (`u32 sym, u32 count`), in `.nv.info`.
    pub const REGCOUNT: u8 = 0x2f;
    /// CUDA API version the cubin was built for (u32).
    pub const CUDA_API_VERSION: u8 = 0x37;
    /// Compile-time cluster dimensions (3 × u32).
    pub const CTA_PER_CLUSTER: u8 = 0x3d;
    /// The kernel must be launched with a cluster.
    pub const EXPLICIT_CLUSTER: u8 = 0x3e;
    /// Maximum cluster rank (u32).
    pub const MAX_CLUSTER_RANK: u8 = 0x3f;
    /// Second parameter-info format, used by nvcc 13 when a parameter list exceeds the
    /// classic limits: `u32 index, u16 ordinal, u16 offset, u32 size` (size in plain bytes).
    pub const KPARAM_INFO_V2: u8 = 0x45;
}

/// The payload of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Format 1: no payload (the record is padded to 4 bytes).
    None,
    /// Format 2: one byte (padded to 4).
    U8(u8),
    /// Format 3: an inline u16.
    U16(u16),
    /// Format 4: `u16 size` then that many bytes.
    Bytes(&'a [u8]),
}

impl<'a> Value<'a> {
    /// The little-endian u32 at byte `i * 4` of a sized payload.
    pub fn word(&self, i: usize) -> Option<u32> {
        match self {
            Value::Bytes(b) => b.get(i * 4..i * 4 + 4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
            _ => None,
        }
    }

    /// The inline or first-word value as a number.
    pub fn number(&self) -> Option<u32> {
        match *self {
            Value::U8(v) => Some(v as u32),
            Value::U16(v) => Some(v as u32),
            Value::Bytes(_) => self.word(0),
            Value::None => None,
        }
    }
}

/// One `.nv.info` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Offset of the record within its section.
    pub offset: usize,
    /// The EIATTR code.
    pub attr: u8,
    /// Its payload.
    pub value: Value<'a>,
}

/// Iterates the records of an `.nv.info` section; a malformed record ends it with an error.
pub fn records(section: &[u8]) -> Records<'_> {
    Records { bytes: section, pos: 0, failed: false }
}

/// Iterator returned by [`records`].
pub struct Records<'a> {
    bytes: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, CubinError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.bytes.len() {
            return None;
        }
        let off = self.pos;
        let r = self.parse(off);
        match &r {
            Ok(_) => {}
            Err(_) => self.failed = true,
        }
        Some(r)
    }
}

impl<'a> Records<'a> {
    fn parse(&mut self, off: usize) -> Result<Record<'a>, CubinError> {
        let b = self.bytes;
        let bad = |what: String| CubinError::NvInfo { offset: off, what };
        let head = b.get(off..off + 2).ok_or_else(|| bad("record header truncated".into()))?;
        let (format, attr) = (head[0], head[1]);
        let (value, len) = match format {
            // Format 1 carries no value but still occupies 4 bytes (seen in nvcc 13 cubins).
            1 => {
                b.get(off + 2..off + 4).ok_or_else(|| bad("record padding truncated".into()))?;
                (Value::None, 4)
            }
            2 | 3 => {
                let p = b.get(off + 2..off + 4).ok_or_else(|| bad("inline value truncated".into()))?;
                if format == 2 {
                    (Value::U8(p[0]), 4)
                } else {
                    (Value::U16(u16::from_le_bytes([p[0], p[1]])), 4)
                }
            }
            4 => {
                let p = b.get(off + 2..off + 4).ok_or_else(|| bad("size field truncated".into()))?;
                let size = u16::from_le_bytes([p[0], p[1]]) as usize;
                let data = b
                    .get(off + 4..off + 4 + size)
                    .ok_or_else(|| bad(format!("attribute {attr:#04x} declares {size} bytes past the section end")))?;
                (Value::Bytes(data), 4 + size)
            }
            f => return Err(bad(format!("unknown record format {f}"))),
        };
        self.pos = off + len;
        Ok(Record { offset: off, attr, value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_truncation() {
        let mut s = vec![0x01, 0x3e, 0, 0]; // EXPLICIT_CLUSTER, no payload
        s.extend_from_slice(&[0x03, 0x19, 41, 0]); // CBANK_PARAM_SIZE 41
        s.extend_from_slice(&[0x04, 0x17, 12, 0]);
        s.extend_from_slice(&[0, 0, 0, 0, 2, 0, 16, 0, 0, 0xf0, 0x41, 0]);
        let r: Vec<_> = records(&s).collect::<Result<_, _>>().unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[1].value.number(), Some(41));
        assert_eq!(r[2].value.word(2), Some(0x0041_f000));
        for cut in 1..s.len() {
            let res: Result<Vec<_>, _> = records(&s[..cut]).collect();
            if ![4, 8].contains(&cut) {
                assert!(res.is_err(), "cut {cut}");
            }
        }
        assert!(records(&[9, 1, 0, 0]).next().unwrap().is_err());
    }
}
