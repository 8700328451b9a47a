//! Walking a cubin's ELF structure with `object`'s low-level ELF reader (no copies).

use std::collections::HashMap;

use object::elf::{FileHeader64, SHT_NOBITS, SHT_SYMTAB, STT_FUNC, STT_OBJECT};
use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::LittleEndian;
use serde::Serialize;

use super::kernel::Kernel;
use super::nvinfo::{attr, records};
use super::CubinError;

/// `st_other` bit of kernel entry symbols (`STO_CUDA_ENTRY`).
const STO_CUDA_ENTRY: u8 = 0x10;
/// Per-block shared memory the hardware reserves on sm_80+ (CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK).
const RESERVED_SMEM_WINDOW: u64 = 1024;
/// Section type of `.nv.info` sections.
const SHT_CUDA_INFO: u32 = 0x7000_0000;

/// A module-scope variable (`__device__`, `__constant__`) the driver will give an address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Global {
    /// Symbol name, as `cuModuleGetGlobal` looks it up.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Section that holds it (`.nv.global`, `.nv.constant3`, ...).
    pub section: String,
}

/// Everything the analyzer extracts from one cubin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Cubin {
    /// SM number from the ELF flags (the `a`/`f` variant lives only in fatbin flags).
    pub sm: u32,
    /// Kernels, in symbol-table order.
    pub kernels: Vec<Kernel>,
    /// Module-scope variables.
    pub globals: Vec<Global>,
    /// A relocatable object (`ET_REL`, from `-rdc`): must be linked before the driver can
    /// load it.
    pub relocatable: bool,
    /// The ELF header's `e_flags`, as written.
    pub flags: u32,
    /// The virtual architecture the code was compiled from (`compute_XY` as XY), where the
    /// ELF flags say it (toolkits before CUDA 13: bits 16..23).
    pub virtual_sm: Option<u32>,
    /// Bytes of the user constant bank (`.nv.constant3`: `__constant__` variables).
    pub user_constant_bytes: u64,
}

/// SM number from a cubin's `e_flags`: CUDA 13 keeps it in bits 8..15, older toolkits in the
/// low byte (and bits 16..23).
pub fn sm_from_flags(e_flags: u32) -> u32 {
    let new = (e_flags >> 8) & 0xff;
    if new >= 20 {
        new
    } else {
        e_flags & 0xff
    }
}

/// The virtual architecture in a cubin's `e_flags`, where it is there (before CUDA 13's ELF
/// layout, bits 16..23).
pub fn virtual_sm_from_flags(e_flags: u32) -> Option<u32> {
    let new = (e_flags >> 8) & 0xff;
    let virt = (e_flags >> 16) & 0xff;
    (new < 20 && virt >= 20).then_some(virt)
}

/// Analyzes a cubin. `arch` names its architecture in the results (e.g. `sm_90a` from the
/// fatbin entry); `None` derives `sm_XY` from the ELF flags.
pub fn analyze_cubin(data: &[u8], arch: Option<&str>) -> Result<Cubin, CubinError> {
    let elf_err = |e: object::Error| CubinError::Elf(e.to_string());
    let header = FileHeader64::<LittleEndian>::parse(data).map_err(elf_err)?;
    let endian = header.endian().map_err(elf_err)?;
    let machine = header.e_machine(endian).0;
    if machine != object::elf::EM_CUDA.0 {
        return Err(CubinError::NotCuda(machine));
    }
    let flags = header.e_flags(endian).0;
    let sm = sm_from_flags(flags);
    let mut user_constant_bytes = 0;
    let relocatable = header.e_type(endian) == object::elf::ET_REL;
    let arch_name = arch.map_or_else(|| format!("sm_{sm}"), str::to_string);
    let sections = header.sections(endian, data).map_err(elf_err)?;
    let symbols = sections.symbols(endian, data, SHT_SYMTAB).map_err(elf_err)?;

    // Kernels from entry symbols; module variables from object symbols in data sections.
    let mut kernels = Vec::new();
    let mut by_symbol: HashMap<usize, usize> = HashMap::new();
    let mut by_name: HashMap<&[u8], usize> = HashMap::new();
    let mut by_text: HashMap<usize, usize> = HashMap::new();
    let mut globals = Vec::new();
    for (index, sym) in symbols.enumerate() {
        let name = symbols.symbol_name(endian, sym).map_err(elf_err)?;
        if sym.st_type() == STT_FUNC && sym.st_other().0 & STO_CUDA_ENTRY != 0 {
            let name_str = String::from_utf8_lossy(name);
            by_symbol.insert(index.0, kernels.len());
            by_name.insert(name, kernels.len());
            by_text.insert(sym.st_shndx(endian).0 as usize, kernels.len());
            kernels.push(Kernel::new(&name_str, &arch_name));
        } else if sym.st_type() == STT_OBJECT && !name.is_empty() && !name.starts_with(b".") {
            let shndx = sym.st_shndx(endian).0 as usize;
            if let Ok(sec) = sections.section(object::SectionIndex(shndx)) {
                let sec_name = sections.section_name(endian, sec).unwrap_or_default();
                if sec_name.starts_with(b".nv.global") || sec_name.starts_with(b".nv.constant") {
                    globals.push(Global {
                        name: String::from_utf8_lossy(name).into_owned(),
                        size: sym.st_size(endian),
                        section: String::from_utf8_lossy(sec_name).into_owned(),
                    });
                }
            }
        }
    }

    let mut has_reserved_smem = false;
    for (_, sec) in sections.enumerate() {
        let name = sections.section_name(endian, sec).map_err(elf_err)?;
        let sec_type = sec.sh_type(endian).0;
        let section_err = |offset: usize, what: String| CubinError::Section {
            section: String::from_utf8_lossy(name).into_owned(),
            offset: sec.sh_offset(endian) + offset as u64,
            what,
        };
        if name == b".nv.constant3" {
            user_constant_bytes = sec.sh_size(endian);
            continue;
        }
        if name.starts_with(b".nv.shared.reserved.") {
            has_reserved_smem = true;
            continue;
        }
        if let Some(kname) = name.strip_prefix(b".nv.shared.") {
            if let Some(&k) = by_name.get(kname) {
                kernels[k].shared_section_bytes = sec.sh_size(endian);
            }
            continue;
        }
        if sec_type != SHT_CUDA_INFO || sec_type == SHT_NOBITS.0 {
            continue;
        }
        let bytes = sec.data(endian, data).map_err(elf_err)?;
        if name == b".nv.info" {
            // Per-kernel values keyed by symbol index.
            for rec in records(bytes) {
                let rec = rec.map_err(|e| relocate(e, &section_err))?;
                let (Some(sym), Some(value)) = (rec.value.word(0), rec.value.word(1)) else { continue };
                let Some(&k) = by_symbol.get(&(sym as usize)) else { continue };
                match rec.attr {
                    attr::REGCOUNT => kernels[k].registers = Some(value),
                    attr::FRAME_SIZE => kernels[k].local_bytes = Some(value),
                    _ => {}
                }
            }
        } else if let Some(kname) = name.strip_prefix(b".nv.info.") {
            // The kernel is the symbol of the section named by sh_info; fall back to the name.
            let k = by_text.get(&(sec.sh_info(endian) as usize)).or_else(|| by_name.get(kname)).copied();
            let Some(k) = k else { continue };
            let mut param_size = None;
            for rec in records(bytes) {
                let rec = rec.map_err(|e| relocate(e, &section_err))?;
                kernels[k].apply(&rec, &mut param_size).map_err(|w| section_err(rec.offset, w))?;
            }
            kernels[k].finish(param_size).map_err(|w| section_err(0, w))?;
        }
    }
    // Cubins that declare `.nv.shared.reserved.*` (sm_90 and newer with nvcc 13) place each
    // kernel's static shared memory after the 1 KB per-block reserved window, and count the
    // window in the kernel's `.nv.shared.<name>` section; the driver does not.
    let reserved = if has_reserved_smem { RESERVED_SMEM_WINDOW } else { 0 };
    for k in &mut kernels {
        k.relocatable = relocatable;
        k.shared_bytes = k.shared_section_bytes.saturating_sub(reserved);
    }
    Ok(Cubin {
        sm,
        kernels,
        globals,
        relocatable,
        flags,
        virtual_sm: virtual_sm_from_flags(flags),
        user_constant_bytes,
    })
}

fn relocate(e: CubinError, section_err: &dyn Fn(usize, String) -> CubinError) -> CubinError {
    match e {
        CubinError::NvInfo { offset, what } => section_err(offset, what),
        other => other,
    }
}
