use proptest::prelude::*;

use super::*;

const BASE: u64 = DEFAULT_BASES[0];

#[test]
fn small_allocations_share_a_chunk_and_are_aligned() {
    let mut l = Layout::new(BASE, DEFAULT_SIZE);
    let a = l.alloc(100).unwrap();
    assert_eq!(a, Placed { addr: BASE, map: Some((BASE, CHUNK)) });
    let b = l.alloc(1000).unwrap();
    assert_eq!(b, Placed { addr: BASE + ALIGN, map: None });
    let c = l.alloc(SMALL_MAX).unwrap();
    assert_eq!(c.addr % ALIGN, 0);
    assert_eq!(c.map, None);
    assert_eq!(l.find(BASE + ALIGN + 999), Some((BASE + ALIGN, 1000)));
    assert_eq!(l.find(BASE + ALIGN + 1000), None, "the padding after an allocation is not part of it");
}

#[test]
fn large_allocations_own_chunk_aligned_ranges() {
    let mut l = Layout::new(BASE, DEFAULT_SIZE);
    let small = l.alloc(8).unwrap();
    let big = l.alloc(5 << 20).unwrap();
    assert_eq!(big.addr, small.addr + CHUNK);
    assert_eq!(big.map, Some((big.addr, 6 << 20)));
    assert_eq!(backing(big.addr, 5 << 20), Backing::Own { addr: big.addr, len: 6 << 20 });
    let r = l.free(big.addr).unwrap();
    assert_eq!(r, Released { size: 5 << 20, unmap: vec![(big.addr, 6 << 20)] });
    // The range is reused first-fit.
    assert_eq!(l.alloc(3 << 20).unwrap().addr, big.addr);
}

#[test]
fn empty_chunks_are_kept_then_returned() {
    let mut l = Layout::new(BASE, DEFAULT_SIZE);
    // Fill KEEP + 2 chunks with one allocation each (sizes that do not fit twice in a chunk).
    let addrs: Vec<u64> = (0..KEEP_EMPTY_CHUNKS + 2).map(|_| l.alloc(SMALL_MAX).unwrap().addr).collect();
    // Two SMALL_MAX allocations fit in one chunk.
    assert_eq!(addrs[1], addrs[0] + SMALL_MAX);
    let mut unmapped = Vec::new();
    for a in &addrs {
        unmapped.extend(l.free(*a).unwrap().unmap);
    }
    let chunks = addrs.len().div_ceil(2);
    assert_eq!(unmapped.len(), chunks.saturating_sub(KEEP_EMPTY_CHUNKS));
    // A kept chunk is reused without mapping.
    assert!(l.fits_mapped(10));
    assert_eq!(l.alloc(10).unwrap().map, None);
    let trimmed = l.trim();
    assert_eq!(trimmed.len() + unmapped.len() + 1, chunks);
}

#[test]
fn frees_of_unknown_addresses_are_refused() {
    let mut l = Layout::new(BASE, DEFAULT_SIZE);
    let a = l.alloc(4096).unwrap().addr;
    assert!(l.free(a + 8).is_none());
    assert!(l.free(a).is_some());
    assert!(l.free(a).is_none(), "double free");
}

#[test]
fn program_reservations_are_aligned_honour_free_hints_and_keep_allocations_out() {
    let base = 0x6400_0000_0000;
    let mut l = Layout::new(base, 64 * CHUNK);
    let a = l.alloc(3 * CHUNK).unwrap().addr;
    // Aligned to 4 chunks: the first such address after the allocation.
    let r = l.reserve(4 * CHUNK, 4 * CHUNK, 0).unwrap();
    assert_eq!(r % (4 * CHUNK), 0);
    assert!(r >= a + 3 * CHUNK);
    assert_eq!(l.reservation(r + CHUNK + 5), Some((r, 4 * CHUNK)));
    assert_eq!(l.find(r), None, "a reservation is not an allocation");
    // A free hint is taken; a taken one is not.
    let h = base + 40 * CHUNK;
    assert_eq!(l.reserve(2 * CHUNK, 0, h), Some(h));
    let other = l.reserve(2 * CHUNK, 0, h).unwrap();
    assert_ne!(other, h);
    // Allocations never land in a reservation.
    for _ in 0..8 {
        let p = l.alloc(CHUNK + 1).unwrap().addr;
        for (s, n) in [(r, 4 * CHUNK), (h, 2 * CHUNK), (other, 2 * CHUNK)] {
            assert!(p + 2 * CHUNK <= s || s + n <= p, "{p:#x} in {s:#x}+{n:#x}");
        }
    }
    // Sizes must be whole chunks; frees must name the reservation exactly.
    assert_eq!(l.reserve(CHUNK + 1, 0, 0), None);
    assert_eq!(l.reserve(CHUNK, 3 * CHUNK, 0), None);
    assert!(!l.unreserve(r, CHUNK));
    assert!(l.unreserve(r, 4 * CHUNK));
    assert_eq!(l.reservation(r), None);
    assert_eq!(l.reserve(4 * CHUNK, 0, r), Some(r), "freed ranges are free again");
}

#[test]
fn exhaustion_is_reported() {
    let mut l = Layout::new(BASE, 4 * CHUNK);
    assert!(l.alloc(3 * CHUNK).is_some());
    assert!(l.alloc(2 * CHUNK).is_none());
    assert!(l.alloc(100).is_some());
    assert!(l.alloc(SMALL_MAX + 1).is_none());
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(u64),
    Free(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let size = prop_oneof![1u64..4096, 4096u64..=SMALL_MAX, SMALL_MAX + 1..(40u64 << 20)];
    prop::collection::vec(prop_oneof![3 => size.prop_map(Op::Alloc), 2 => any::<usize>().prop_map(Op::Free)], 1..200)
}

proptest! {
    /// Live allocations never overlap, are aligned, lie in the arena and in mapped memory; the
    /// same sequence gives the same addresses (what makes two recordings agree).
    #[test]
    fn layout_invariants(ops in ops()) {
        let run = |ops: &[Op]| {
            let mut l = Layout::new(BASE, 1 << 36);
            let mut live: Vec<(u64, u64)> = Vec::new();
            let mut mapped: std::collections::BTreeMap<u64, u64> = Default::default();
            let mut addrs = Vec::new();
            for op in ops {
                match *op {
                    Op::Alloc(s) => {
                        let p = l.alloc(s).unwrap();
                        if let Some((a, len)) = p.map {
                            assert!(mapped.range(a..a + len).next().is_none(), "mapped twice");
                            mapped.insert(a, len);
                        }
                        assert_eq!(p.addr % ALIGN, 0);
                        assert!(l.contains(p.addr) && l.contains(p.addr + s - 1));
                        let m = mapped.range(..=p.addr).next_back().map(|(&a, &len)| (a, len));
                        let (ma, ml) = m.expect("allocation in unmapped memory");
                        assert!(p.addr + s <= ma + ml, "allocation beyond its mapping");
                        // The backing rule the replayer uses agrees with what was mapped.
                        match backing(p.addr, s) {
                            Backing::Own { addr, len } => assert_eq!((addr, len), (ma, ml)),
                            Backing::Shared { chunk } => assert_eq!((chunk, CHUNK), (ma, ml)),
                        }
                        for &(a, sz) in &live {
                            assert!(p.addr + s <= a || a + sz <= p.addr, "overlap");
                        }
                        live.push((p.addr, s));
                        addrs.push(p.addr);
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let (a, s) = live.swap_remove(i % live.len());
                        let r = l.free(a).unwrap();
                        assert_eq!(r.size, s);
                        for (ua, ul) in r.unmap {
                            assert_eq!(mapped.remove(&ua), Some(ul));
                            for &(la, ls) in &live {
                                assert!(la + ls <= ua || ua + ul <= la, "unmapped live memory");
                            }
                        }
                    }
                    Op::Free(_) => {}
                }
                assert_eq!(l.live_count(), live.len());
            }
            addrs
        };
        prop_assert_eq!(run(&ops), run(&ops));
    }
}
