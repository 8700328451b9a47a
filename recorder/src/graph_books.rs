//! The books of graph memory in client mode (`remote/graph_mem.rs` keeps them): which arena
//! addresses are graph allocations, whose frees keep the memory for the graph's launches. Kept
//! below the arena, which asks them when the program frees memory (`arena.rs`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

/// What client mode knows of graph memory (see `remote/graph_mem.rs` for how it is used).
#[derive(Default)]
pub(crate) struct Books {
    /// Every graph allocation: address → size.
    pub(crate) allocs: BTreeMap<u64, u64>,
    /// Free nodes: node → the address it frees.
    pub(crate) free_nodes: HashMap<u64, u64>,
    /// Allocation nodes: node → its parameters as the driver answers them (`dptr` set).
    pub(crate) alloc_nodes: HashMap<u64, Vec<u8>>,
    /// Free nodes whose address an allocation node after them took again.
    pub(crate) reused: HashSet<u64>,
    /// The graph allocations of each graph.
    pub(crate) graphs: HashMap<u64, Vec<u64>>,
    /// The graph allocations of each executable graph, and whether it was launched.
    pub(crate) execs: HashMap<u64, (Vec<u64>, bool)>,
    /// Allocations captured since the last capture ended.
    pub(crate) captured: Vec<u64>,
    /// Memory reserved since the last trim, and the high-water marks.
    pub(crate) reserved: u64,
    /// The most memory in use since the last trim.
    pub(crate) used_high: u64,
    /// The most memory reserved since the last trim.
    pub(crate) reserved_high: u64,
}

static BOOKS: Mutex<Option<Books>> = Mutex::new(None);

/// Runs `f` on the books (made empty on first use).
pub(crate) fn books<R>(f: impl FnOnce(&mut Books) -> R) -> R {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Books::default))
}

impl Books {
    /// Bytes of the graph allocations of launched, live executable graphs (each once).
    pub(crate) fn used(&self) -> u64 {
        let live: HashSet<u64> = self.execs.values().filter(|(_, l)| *l).flat_map(|(a, _)| a.iter().copied()).collect();
        live.iter().map(|a| self.allocs.get(a).copied().unwrap_or(0)).sum()
    }

    /// Updates the figures of memory reserved and the high-water marks after a change.
    pub(crate) fn account(&mut self) {
        let used = self.used();
        self.reserved = self.reserved.max(used);
        self.used_high = self.used_high.max(used);
        self.reserved_high = self.reserved_high.max(self.reserved);
    }
}

/// Whether `addr` is the start of a graph allocation (its frees keep the memory).
pub(crate) fn is_graph_memory(addr: u64) -> bool {
    BOOKS.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|b| b.allocs.contains_key(&addr))
}

/// A stream-ordered allocation captured into a graph (`arena.rs`): graph memory of the graph
/// the capture makes.
pub(crate) fn captured(addr: u64, size: u64) {
    books(|b| {
        b.allocs.insert(addr, size);
        b.captured.push(addr);
    });
}
