//! Little-endian field encoding of message payloads: a writer, and a total reader that names
//! the offset of whatever does not fit.

use super::ProtocolError;

/// Appends fields to a payload.
#[derive(Debug, Default)]
pub struct Put(pub Vec<u8>);

impl Put {
    /// A `u8`.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    /// A `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// An `i32`.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `u128`.
    pub fn u128(&mut self, v: u128) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A length-prefixed (`u32`) byte string.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
}

/// Reads fields from a payload; every read is bounds-checked.
#[derive(Debug)]
pub struct Get<'a> {
    buf: &'a [u8],
    at: usize,
    kind: &'static str,
}

impl<'a> Get<'a> {
    /// Reads `buf`, the payload of a `kind` message.
    pub fn new(buf: &'a [u8], kind: &'static str) -> Self {
        Get { buf, at: 0, kind }
    }

    /// An error at the current offset.
    pub fn error(&self, reason: impl Into<String>) -> ProtocolError {
        ProtocolError::Message { kind: self.kind, offset: self.at, reason: reason.into() }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if n > self.remaining() {
            return Err(self.error(format!("{n} bytes needed, {} left", self.remaining())));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// A `u8`.
    pub fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.array::<1>()?[0])
    }
    /// A `u16`.
    pub fn u16(&mut self) -> Result<u16, ProtocolError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    /// A `u32`.
    pub fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    /// An `i32`.
    pub fn i32(&mut self) -> Result<i32, ProtocolError> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    /// A `u64`.
    pub fn u64(&mut self) -> Result<u64, ProtocolError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// A `u128`.
    pub fn u128(&mut self) -> Result<u128, ProtocolError> {
        Ok(u128::from_le_bytes(self.array()?))
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], ProtocolError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self) -> Result<String, ProtocolError> {
        let b = self.bytes()?;
        std::str::from_utf8(b).map(str::to_string).map_err(|_| self.error("a string is not UTF-8"))
    }
    /// A count of elements of at least `min_size` bytes each: refused when the payload cannot
    /// hold that many (so a count never drives a large allocation).
    pub fn count(&mut self, min_size: usize) -> Result<usize, ProtocolError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size.max(1)) > self.remaining() {
            return Err(self.error(format!("{n} elements announced, the payload holds {} bytes", self.remaining())));
        }
        Ok(n)
    }
    /// The payload must be consumed completely.
    pub fn end(&self) -> Result<(), ProtocolError> {
        if self.remaining() != 0 {
            return Err(self.error(format!("{} bytes after the message", self.remaining())));
        }
        Ok(())
    }
}
