//! A decoded value as `gpuless dump` shows it: one text form, one JSON form.

use std::fmt;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

/// Most list items shown; the rest are counted.
pub(crate) const LIST_MAX: usize = 16;
/// Most inline bytes shown in hex.
pub(crate) const BYTES_MAX: usize = 32;

/// One argument or result, decoded by its API table kind.
///
/// Text: numbers in decimal, addresses and flags in hex, handles as `KIND#N`, strings quoted,
/// blobs as `<blob HASH8, N B>`. JSON: numbers, strings (addresses, handles), objects for the rest
/// (see each variant).
#[derive(Debug, Clone, PartialEq)]
pub enum Shown {
    /// Null pointer, absent or not captured. JSON `null`.
    Null,
    /// An unsigned integer (counts, enumerators, sizes). JSON number.
    Uint(u64),
    /// A signed integer. JSON number.
    Int(i64),
    /// A floating-point value. JSON number.
    Float(f64),
    /// A bare word: a handle (`stream#2`), an address or flags in hex (`0x7e0000000000`).
    /// JSON string.
    Token(String),
    /// A string argument (a kernel or symbol name, a path). Quoted in text; JSON string.
    Str(String),
    /// Bytes stored as a blob in the trace. JSON `{"blob": HASH, "bytes": N}`.
    Blob {
        /// Content hash (32 hex digits).
        hash: String,
        /// Length.
        bytes: u64,
    },
    /// Bytes known only by their hash. JSON `{"digest": HASH, "bytes": N}`.
    Digest {
        /// Content hash (32 hex digits).
        hash: String,
        /// Length.
        bytes: u64,
    },
    /// Small inline bytes (struct contents). JSON `{"hex": FIRST_32_BYTES, "bytes": N}`.
    Bytes {
        /// The first bytes in hex.
        hex: String,
        /// Length.
        bytes: u64,
    },
    /// Kernel parameters. JSON `{"params": N, "bytes": N}`.
    Params {
        /// Number of parameters.
        params: usize,
        /// Size of the packed buffer.
        bytes: usize,
    },
    /// Launch geometry. Text `XxYxZ`; JSON `[x, y, z]`.
    Dim([u32; 3]),
    /// A launch configuration. JSON `{"grid", "block", "shared_mem", "stream", "attrs"}`.
    Launch {
        /// Grid dimension.
        grid: [u32; 3],
        /// Block dimension.
        block: [u32; 3],
        /// Dynamic shared memory bytes.
        shared_mem: u32,
        /// The stream, as a handle token.
        stream: String,
        /// Number of launch attributes.
        attrs: usize,
    },
    /// A list; at most [`LIST_MAX`] items are kept, `more` counts the rest. JSON array (the
    /// items kept).
    List {
        /// The items kept.
        items: Vec<Shown>,
        /// Items left out.
        more: usize,
    },
}

fn short(hash: &str) -> &str {
    hash.get(..8).unwrap_or(hash)
}

fn dim(f: &mut fmt::Formatter<'_>, d: &[u32; 3]) -> fmt::Result {
    write!(f, "{}x{}x{}", d[0], d[1], d[2])
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shown::Null => f.write_str("null"),
            Shown::Uint(v) => write!(f, "{v}"),
            Shown::Int(v) => write!(f, "{v}"),
            Shown::Float(v) => write!(f, "{v}"),
            Shown::Token(t) => f.write_str(t),
            Shown::Str(s) => write!(f, "{s:?}"),
            Shown::Blob { hash, bytes } => write!(f, "<blob {}, {bytes} B>", short(hash)),
            Shown::Digest { hash, bytes } => write!(f, "<digest {}, {bytes} B>", short(hash)),
            Shown::Bytes { hex, bytes } => {
                let cut = if *bytes as usize > BYTES_MAX { "..." } else { "" };
                write!(f, "<{bytes} B {hex}{cut}>")
            }
            Shown::Params { params, bytes } => write!(f, "<{params} params, {bytes} B>"),
            Shown::Dim(d) => dim(f, d),
            Shown::Launch { grid, block, shared_mem, stream, attrs } => {
                f.write_str("{grid ")?;
                dim(f, grid)?;
                f.write_str(", block ")?;
                dim(f, block)?;
                write!(f, ", shared {shared_mem}, {stream}, {attrs} attrs}}")
            }
            Shown::List { items, more } => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                if *more > 0 {
                    write!(f, ", ... {more} more")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl Serialize for Shown {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Shown::Null => s.serialize_unit(),
            Shown::Uint(v) => s.serialize_u64(*v),
            Shown::Int(v) => s.serialize_i64(*v),
            // JSON has no NaN or infinities.
            Shown::Float(v) if v.is_finite() => s.serialize_f64(*v),
            Shown::Float(v) => s.serialize_str(&v.to_string()),
            Shown::Token(t) | Shown::Str(t) => s.serialize_str(t),
            Shown::Blob { hash, bytes } | Shown::Digest { hash, bytes } | Shown::Bytes { hex: hash, bytes } => {
                let key = match self {
                    Shown::Blob { .. } => "blob",
                    Shown::Digest { .. } => "digest",
                    _ => "hex",
                };
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry(key, hash)?;
                m.serialize_entry("bytes", bytes)?;
                m.end()
            }
            Shown::Params { params, bytes } => {
                let mut m = s.serialize_struct("Params", 2)?;
                m.serialize_field("params", params)?;
                m.serialize_field("bytes", bytes)?;
                m.end()
            }
            Shown::Dim(d) => d.serialize(s),
            Shown::Launch { grid, block, shared_mem, stream, attrs } => {
                let mut m = s.serialize_struct("Launch", 5)?;
                m.serialize_field("grid", grid)?;
                m.serialize_field("block", block)?;
                m.serialize_field("shared_mem", shared_mem)?;
                m.serialize_field("stream", stream)?;
                m.serialize_field("attrs", attrs)?;
                m.end()
            }
            Shown::List { items, .. } => items.serialize(s),
        }
    }
}

/// Named values in order (arguments or results); JSON: an object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields(pub Vec<(String, Shown)>);

impl Fields {
    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<&Shown> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

impl Serialize for Fields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl fmt::Display for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}
