//! The declarative CUDA API table.
//!
//! The API surface is data: `driver.api` lists every modeled function with its exported symbol
//! variants, API level, group, synchronization class and typed, directed arguments. The build
//! script turns it into the static [`FUNCTIONS`] table; the recorder's hooks, the trace schema's
//! argument order, replay dispatch and the synchronization analysis are all driven by it.
//!
//! Look-ups: [`lookup_symbol`] (an exported symbol such as `cuMemcpyHtoD_v2_ptds`, binary search),
//! [`lookup`] (base name and [`Variant`]), [`by_name`] (base name, any variant) and [`get`].

mod ctype;
pub mod errors;
pub mod jit;
pub mod node_answer;
pub mod parse;
pub mod structs;
mod types;

use std::collections::HashMap;
use std::sync::OnceLock;

pub use ctype::CScalar;
pub use types::*;

mod table {
    #![allow(clippy::all)]
    use super::types::*;
    include!(concat!(env!("OUT_DIR"), "/api_table.rs"));
}

pub use table::{FUNCTIONS, SYMBOLS};

/// The source of the driver table, for tools that generate code from it.
pub const DRIVER_API_SOURCE: &str = include_str!("driver.api");

/// All entries, in table order.
pub fn functions() -> &'static [ApiFunction] {
    &FUNCTIONS
}

/// The entry with this id.
pub fn get(id: ApiId) -> Option<&'static ApiFunction> {
    FUNCTIONS.get(usize::from(id.0))
}

/// Resolve an exported symbol name (`cuMemAlloc_v2`) to its entry and variant.
pub fn lookup_symbol(symbol: &str) -> Option<(&'static ApiFunction, Variant)> {
    let i = SYMBOLS.binary_search_by(|(s, _)| (*s).cmp(symbol)).ok()?;
    let (_, fid) = SYMBOLS.get(i)?;
    let f = FUNCTIONS.get(usize::from(*fid))?;
    let suffix = symbol.get(f.name.len()..)?;
    let (version, per_thread) = parse::suffix_variant(suffix)?;
    Some((f, Variant { version, per_thread }))
}

fn variant_map() -> &'static HashMap<(&'static str, Variant), ApiId> {
    static MAP: OnceLock<HashMap<(&'static str, Variant), ApiId>> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut m = HashMap::new();
        for f in FUNCTIONS.iter() {
            for s in f.symbols {
                m.insert((f.name, s.variant), f.id);
            }
        }
        m
    })
}

fn name_map() -> &'static HashMap<&'static str, ApiId> {
    static MAP: OnceLock<HashMap<&'static str, ApiId>> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut m = HashMap::new();
        for f in FUNCTIONS.iter() {
            m.entry(f.name).or_insert(f.id);
        }
        m
    })
}

/// The entry for a base name and variant, exactly.
pub fn lookup(name: &str, variant: Variant) -> Option<&'static ApiFunction> {
    variant_map().get(&(name, variant)).and_then(|id| get(*id))
}

/// The first entry with this base name (any variant).
pub fn by_name(name: &str) -> Option<&'static ApiFunction> {
    name_map().get(name).and_then(|id| get(*id))
}

/// The entry for a base name and variant, falling back to the newest entry with that base name
/// when the variant is newer than any the table has (a trace from a newer table still gets its
/// function's classes). An older variant the table does not model (the legacy 32-bit symbols
/// such as the bare `cuMemAlloc`) has another signature: no entry.
pub fn resolve(name: &str, variant: Variant) -> Option<&'static ApiFunction> {
    if let Some(f) = lookup(name, variant) {
        return Some(f);
    }
    let (version, f) = newest(name)?;
    (variant.version > version).then_some(f)
}

/// The highest `_vN` version the table models for a base name, and its entry.
pub fn newest(name: &str) -> Option<(u8, &'static ApiFunction)> {
    FUNCTIONS
        .iter()
        .filter(|f| f.name == name)
        .flat_map(|f| f.symbols.iter().map(move |s| (s.variant.version, f)))
        .max_by_key(|(v, _)| *v)
}

#[cfg(test)]
mod tests;
