//! The objects the dynamic loader has mapped into this process and the dynamic symbols they
//! define, read from their mapped dynamic sections (`dl_iterate_phdr`, ELF hash tables).
//!
//! Nothing here calls into the loader beyond `dl_iterate_phdr`: a `dlopen`, even with
//! `RTLD_NOLOAD`, made from a static constructor can run the constructors of objects the
//! loader has not initialized yet, and these look-ups happen inside constructors
//! (`cudart.rs`). The memory read is the loader's own (mapped program headers, dynamic
//! sections, symbol and string tables of objects it loaded), not input.

use std::ffi::{c_int, c_void, CStr};

/// One loaded object.
#[derive(Debug, Clone)]
pub struct Object {
    /// Path as the loader knows it (empty for the main program).
    pub name: String,
    /// Load bias (`dlpi_addr`).
    bias: usize,
    /// Mapped `PT_LOAD` ranges, absolute.
    ranges: Vec<(usize, usize)>,
    /// What its dynamic section says; `None` without one.
    dynamic: Option<Dynamic>,
}

/// The parts of a dynamic section the look-ups need (absolute addresses).
#[derive(Debug, Clone)]
struct Dynamic {
    strtab: usize,
    strsz: usize,
    symtab: usize,
    gnu_hash: usize,
    hash: usize,
    versym: usize,
    soname: Option<String>,
    needed: Vec<String>,
}

/// The loader's counts of objects added and removed so far: what was learnt about the loaded
/// objects holds while these stay the same.
pub fn generation() -> (u64, u64) {
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, size: usize, data: *mut c_void) -> c_int {
        if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8 {
            // SAFETY: the loader passes a valid record of `size` bytes; `data` is ours.
            unsafe { *data.cast::<(u64, u64)>() = ((*info).dlpi_adds, (*info).dlpi_subs) };
        }
        1
    }
    let mut g = (0u64, 0u64);
    // SAFETY: the callback only reads the record and writes `g`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut g as *mut (u64, u64)).cast()) };
    g
}

/// Every loaded object, in the loader's order (the main program first).
pub fn objects() -> Vec<Object> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid record; `data` is the Vec below.
        unsafe {
            let out = &mut *data.cast::<Vec<Object>>();
            let info = &*info;
            let name = if info.dlpi_name.is_null() {
                String::new()
            } else {
                CStr::from_ptr(info.dlpi_name).to_string_lossy().into_owned()
            };
            let bias = info.dlpi_addr as usize;
            let mut ranges = Vec::new();
            let mut dynamic = None;
            for i in 0..usize::from(info.dlpi_phnum) {
                let ph = &*info.dlpi_phdr.add(i);
                let start = bias.wrapping_add(ph.p_vaddr as usize);
                match ph.p_type {
                    libc::PT_LOAD => ranges.push((start, start.wrapping_add(ph.p_memsz as usize))),
                    libc::PT_DYNAMIC => dynamic = Some(start),
                    _ => {}
                }
            }
            // The vDSO's dynamic section is not the loader's: it is not needed and not read.
            let vdso = name.starts_with("linux-vdso") || name.starts_with("linux-gate");
            let dynamic = dynamic.filter(|_| !vdso).map(|d| read_dynamic(bias, d));
            out.push(Object { name, bias, ranges, dynamic });
        }
        0
    }
    let mut out: Vec<Object> = Vec::new();
    // SAFETY: the callback only reads the records and pushes onto `out`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut out as *mut Vec<Object>).cast()) };
    out
}

const DT_NULL: i64 = 0;
const DT_NEEDED: i64 = 1;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_STRSZ: i64 = 10;
const DT_SONAME: i64 = 14;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
/// Most dynamic entries read (real objects have a few dozen).
const MAX_DYN: usize = 4096;

/// Reads a dynamic section. The loader relocates the address entries in place where the
/// section is writable (glibc on x86-64) and leaves them as link-time addresses elsewhere:
/// an address below the load bias is taken as link-time.
///
/// # Safety
/// `dynamic` is the mapped `PT_DYNAMIC` of a loaded object with load bias `bias`.
unsafe fn read_dynamic(bias: usize, dynamic: usize) -> Dynamic {
    let abs = |p: u64| if (p as usize) < bias { bias.wrapping_add(p as usize) } else { p as usize };
    let mut d =
        Dynamic { strtab: 0, strsz: 0, symtab: 0, gnu_hash: 0, hash: 0, versym: 0, soname: None, needed: Vec::new() };
    let mut needed = Vec::new();
    let mut soname = None;
    for i in 0..MAX_DYN {
        // SAFETY: entries of the section, up to DT_NULL.
        let (tag, val) = unsafe {
            let e = (dynamic as *const u64).add(2 * i);
            (std::ptr::read_unaligned(e) as i64, std::ptr::read_unaligned(e.add(1)))
        };
        match tag {
            DT_NULL => break,
            DT_NEEDED => needed.push(val as usize),
            DT_SONAME => soname = Some(val as usize),
            DT_HASH => d.hash = abs(val),
            DT_STRTAB => d.strtab = abs(val),
            DT_SYMTAB => d.symtab = abs(val),
            DT_STRSZ => d.strsz = val as usize,
            DT_GNU_HASH => d.gnu_hash = abs(val),
            DT_VERSYM => d.versym = abs(val),
            _ => {}
        }
    }
    // SAFETY: offsets into the object's string table.
    unsafe {
        d.needed = needed.into_iter().filter_map(|o| d.string(o)).collect();
        d.soname = soname.and_then(|o| d.string(o));
    }
    d
}

impl Dynamic {
    /// The string at `off` in the string table.
    ///
    /// # Safety
    /// The table is the object's mapped one.
    unsafe fn string(&self, off: usize) -> Option<String> {
        if self.strtab == 0 || off >= self.strsz {
            return None;
        }
        let start = self.strtab + off;
        let max = self.strsz - off;
        // SAFETY: within the table, which ends with a NUL.
        let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, max) };
        let len = bytes.iter().position(|&b| b == 0)?;
        bytes.get(..len).map(|b| String::from_utf8_lossy(b).into_owned())
    }

    /// Whether the symbol at `index` is a default-version definition named `name` usable by
    /// address; its address if so.
    ///
    /// # Safety
    /// The tables are the object's mapped ones and `index` is a symbol index of them.
    unsafe fn defined(&self, bias: usize, index: usize, name: &[u8]) -> Option<usize> {
        const SYM_SIZE: usize = 24;
        let sym = self.symtab + index * SYM_SIZE;
        // SAFETY: an Elf64_Sym of the table.
        let (st_name, st_info, st_other, st_shndx, st_value) = unsafe {
            (
                std::ptr::read_unaligned(sym as *const u32) as usize,
                std::ptr::read_unaligned((sym + 4) as *const u8),
                std::ptr::read_unaligned((sym + 5) as *const u8),
                std::ptr::read_unaligned((sym + 6) as *const u16),
                std::ptr::read_unaligned((sym + 8) as *const u64),
            )
        };
        // Undefined (SHN_UNDEF), or absolute/common and not code.
        if st_shndx == 0 || st_value == 0 {
            return None;
        }
        let (bind, kind, visibility) = (st_info >> 4, st_info & 0xf, st_other & 3);
        // GLOBAL or WEAK; FUNC only (an IFUNC's value is its resolver); DEFAULT or PROTECTED.
        if !(bind == 1 || bind == 2) || kind != 2 || !(visibility == 0 || visibility == 3) {
            return None;
        }
        if self.versym != 0 {
            // SAFETY: one u16 per symbol.
            let v = unsafe { std::ptr::read_unaligned((self.versym + index * 2) as *const u16) };
            // A hidden (non-default) version is not what an unversioned reference binds to.
            if v & 0x8000 != 0 || v == 0 {
                return None;
            }
        }
        // SAFETY: as in `string`.
        let n = unsafe { self.string(st_name) }?;
        (n.as_bytes() == name).then(|| bias.wrapping_add(st_value as usize))
    }

    /// The address of the default-version function `name` this object defines.
    ///
    /// # Safety
    /// The tables are the object's mapped ones.
    unsafe fn lookup(&self, bias: usize, name: &[u8]) -> Option<usize> {
        if self.symtab == 0 || self.strtab == 0 {
            return None;
        }
        // SAFETY: forwarded.
        unsafe {
            if self.gnu_hash != 0 {
                self.lookup_gnu(bias, name)
            } else if self.hash != 0 {
                self.lookup_sysv(bias, name)
            } else {
                None
            }
        }
    }

    /// # Safety
    /// As [`Dynamic::lookup`].
    unsafe fn lookup_gnu(&self, bias: usize, name: &[u8]) -> Option<usize> {
        let h = name.iter().fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(u32::from(c)));
        let t = self.gnu_hash;
        // SAFETY: the DT_GNU_HASH layout: 4 words, the bloom filter, the buckets, the chains.
        unsafe {
            let word = |i: usize| std::ptr::read_unaligned((t + 4 * i) as *const u32) as usize;
            let (nbuckets, symoffset, bloom_size) = (word(0), word(1), word(2));
            if nbuckets == 0 {
                return None;
            }
            let buckets = t + 16 + 8 * bloom_size;
            let chains = buckets + 4 * nbuckets;
            let first = std::ptr::read_unaligned((buckets + 4 * (h as usize % nbuckets)) as *const u32) as usize;
            if first < symoffset {
                return None;
            }
            // Bounded: a chain ends with its low bit set.
            for i in first..first + (1 << 20) {
                let c = std::ptr::read_unaligned((chains + 4 * (i - symoffset)) as *const u32);
                if c | 1 == h | 1 {
                    if let Some(a) = self.defined(bias, i, name) {
                        return Some(a);
                    }
                }
                if c & 1 != 0 {
                    return None;
                }
            }
        }
        None
    }

    /// # Safety
    /// As [`Dynamic::lookup`].
    unsafe fn lookup_sysv(&self, bias: usize, name: &[u8]) -> Option<usize> {
        let h = name.iter().fold(0u32, |h, &c| {
            let h = (h << 4).wrapping_add(u32::from(c));
            let g = h & 0xf000_0000;
            (h ^ (g >> 24)) & !g
        });
        let t = self.hash;
        // SAFETY: the DT_HASH layout: nbucket, nchain, the buckets, the chains.
        unsafe {
            let word = |i: usize| std::ptr::read_unaligned((t + 4 * i) as *const u32) as usize;
            let (nbucket, nchain) = (word(0), word(1));
            if nbucket == 0 {
                return None;
            }
            let mut i = word(2 + h as usize % nbucket);
            for _ in 0..nchain {
                if i == 0 || i >= nchain {
                    return None;
                }
                if let Some(a) = self.defined(bias, i, name) {
                    return Some(a);
                }
                i = word(2 + nbucket + i);
            }
        }
        None
    }
}

impl Object {
    /// Whether `addr` lies in one of this object's mapped segments.
    pub fn contains(&self, addr: usize) -> bool {
        self.ranges.iter().any(|&(a, b)| a <= addr && addr < b)
    }

    /// The address of the function `name` (default version) if this object defines it.
    pub fn lookup(&self, name: &str) -> Option<usize> {
        let d = self.dynamic.as_ref()?;
        // SAFETY: the tables of a loaded object, as the loader mapped them.
        unsafe { d.lookup(self.bias, name.as_bytes()) }
    }

    /// The names this object's `DT_NEEDED` entries ask for.
    pub fn needed(&self) -> &[String] {
        self.dynamic.as_ref().map_or(&[], |d| d.needed.as_slice())
    }

    /// Whether a `DT_NEEDED` entry naming `wanted` is this object (by soname, path or file name).
    fn answers(&self, wanted: &str) -> bool {
        if self.name.is_empty() {
            return false;
        }
        let file = self.name.rsplit('/').next().unwrap_or(&self.name);
        self.dynamic.as_ref().and_then(|d| d.soname.as_deref()) == Some(wanted) || self.name == wanted || file == wanted
    }
}

/// Index of the object containing `addr`.
pub fn containing(objects: &[Object], addr: usize) -> Option<usize> {
    objects.iter().position(|o| o.contains(addr))
}

/// Objects in the order the loader searches `root`'s own dependencies: `root` first, then its
/// `DT_NEEDED` entries breadth first (what `dlsym(handle of root, ...)` searches).
pub fn dependency_order(objects: &[Object], root: usize) -> Vec<usize> {
    let mut order = vec![root];
    let mut next = 0;
    while let Some(&i) = order.get(next) {
        next += 1;
        let Some(o) = objects.get(i) else { continue };
        for n in o.needed() {
            if let Some(j) = objects.iter().position(|d| d.answers(n)) {
                if !order.contains(&j) {
                    order.push(j);
                }
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libc_index(objs: &[Object]) -> usize {
        objs.iter().position(|o| o.name.contains("libc.so")).expect("libc is loaded")
    }

    #[test]
    fn finds_what_the_loader_finds() {
        let objs = objects();
        assert!(objs.len() >= 2, "{objs:?}");
        let libc_i = libc_index(&objs);
        for name in [c"malloc", c"dl_iterate_phdr", c"getpid"] {
            // SAFETY: dlsym with a constant name.
            let want = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
            let name = name.to_str().expect("ascii");
            assert_eq!(objs[libc_i].lookup(name), Some(want), "{name}");
        }
        assert_eq!(objs[libc_i].lookup("no_such_function_here"), None);
        // An object does not define what it only imports.
        let main = &objs[0];
        assert_eq!(main.lookup("malloc"), None);
    }

    #[test]
    fn addresses_map_to_their_objects_and_dependencies_are_followed() {
        let objs = objects();
        let own =
            containing(&objs, finds_what_the_loader_finds as *const () as usize).expect("this test's code is mapped");
        let libc_i = libc_index(&objs);
        assert_eq!(containing(&objs, libc::getpid as *const () as usize), Some(libc_i));
        assert_eq!(containing(&objs, 8), None);
        let order = dependency_order(&objs, own);
        assert_eq!(order[0], own);
        assert!(order.contains(&libc_i), "{order:?} from {:?}", objs[own].needed());
        let g = generation();
        assert!(g.0 >= objs.len() as u64, "{g:?}");
    }
}
