//! What the analyzer knows about one kernel, and how `.nv.info` records fill it in.

use serde::Serialize;

use super::nvinfo::{attr, Record, Value};

/// One kernel parameter as the driver lays it out in the parameter constant bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Param {
    /// Position in the kernel's signature.
    pub ordinal: u32,
    /// Byte offset within the parameter buffer.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// A kernel (`.entry`) of a cubin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kernel {
    /// Mangled name, as the driver looks it up.
    pub name: String,
    /// Demangled name (equal to `name` for `extern "C"` kernels).
    pub demangled: String,
    /// Architecture of the cubin, e.g. `sm_90a`.
    pub arch: String,
    /// Total parameter bytes (CBANK_PARAM_SIZE, else the end of the last parameter).
    pub param_bytes: u32,
    /// Parameters in ordinal order.
    pub params: Vec<Param>,
    /// Registers per thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registers: Option<u32>,
    /// Static shared memory per block in bytes, as the driver reports it
    /// (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES).
    pub shared_bytes: u64,
    /// Size of the kernel's `.nv.shared.<name>` section, which on sm_90+ also covers the
    /// 1 KB window the hardware reserves per block.
    #[serde(skip)]
    pub shared_section_bytes: u64,
    /// Local memory (stack frame) per thread in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_bytes: Option<u32>,
    /// `__launch_bounds__` maximum threads per block (x, y, z).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_threads: Option<[u32; 3]>,
    /// Required block size (`reqntid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_threads: Option<[u32; 3]>,
    /// `maxrregcount` given at compile time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_registers: Option<u32>,
    /// Compile-time cluster dimensions (`__cluster_dims__`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_dims: Option<[u32; 3]>,
    /// Whether the kernel must be launched with a cluster.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub explicit_cluster: bool,
    /// Maximum cluster rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cluster_rank: Option<u32>,
    /// The kernel lives in a relocatable (`-rdc`) cubin.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub relocatable: bool,
    /// Whether the layout came from the second parameter-info format (KPARAM_INFO_V2).
    #[serde(skip)]
    pub param_info_v2: bool,
}

impl Kernel {
    /// A kernel with nothing known but its name and arch.
    pub fn new(name: &str, arch: &str) -> Kernel {
        Kernel {
            name: name.to_string(),
            demangled: demangle(name),
            arch: arch.to_string(),
            param_bytes: 0,
            params: Vec::new(),
            registers: None,
            shared_bytes: 0,
            shared_section_bytes: 0,
            local_bytes: None,
            max_threads: None,
            required_threads: None,
            max_registers: None,
            cluster_dims: None,
            explicit_cluster: false,
            max_cluster_rank: None,
            param_info_v2: false,
            relocatable: false,
        }
    }

    /// Applies one record of the kernel's own `.nv.info.<name>` section.
    /// Returns a description of the problem when a known record is malformed.
    pub(crate) fn apply(&mut self, r: &Record<'_>, param_size: &mut Option<u32>) -> Result<(), String> {
        let dims = |v: &Value<'_>| -> Result<[u32; 3], String> {
            match (v.word(0), v.word(1), v.word(2)) {
                (Some(x), Some(y), Some(z)) => Ok([x, y, z]),
                _ => Err(format!("attribute {:#04x} needs 12 bytes", r.attr)),
            }
        };
        match r.attr {
            attr::KPARAM_INFO | attr::KPARAM_INFO_V2 => {
                let (Some(ord_off), Some(bits)) = (r.value.word(1), r.value.word(2)) else {
                    return Err("KPARAM_INFO needs 12 bytes".into());
                };
                let size = if r.attr == attr::KPARAM_INFO { bits >> 18 } else { bits & 0xffff };
                self.params.push(Param { ordinal: ord_off & 0xffff, offset: ord_off >> 16, size });
                self.param_info_v2 |= r.attr == attr::KPARAM_INFO_V2;
            }
            attr::CBANK_PARAM_SIZE => *param_size = r.value.number(),
            attr::MAX_THREADS => self.max_threads = Some(dims(&r.value)?),
            attr::REQNTID => self.required_threads = Some(dims(&r.value)?),
            attr::CTA_PER_CLUSTER => self.cluster_dims = Some(dims(&r.value)?),
            attr::MAXREG_COUNT => self.max_registers = r.value.number(),
            attr::EXPLICIT_CLUSTER => self.explicit_cluster = true,
            attr::MAX_CLUSTER_RANK => self.max_cluster_rank = r.value.number(),
            _ => {}
        }
        Ok(())
    }

    /// Orders the parameters and settles the total size once all records are applied.
    pub(crate) fn finish(&mut self, param_size: Option<u32>) -> Result<(), String> {
        self.params.sort_unstable_by_key(|p| p.ordinal);
        for (i, w) in self.params.windows(2).enumerate() {
            if w[0].ordinal == w[1].ordinal {
                return Err(format!("parameter ordinal {} appears twice", w[0].ordinal));
            }
            if w[0].offset.saturating_add(w[0].size) > w[1].offset {
                return Err(format!("parameters {} and {} overlap", i, i + 1));
            }
        }
        let end = self.params.last().map_or(0, |p| p.offset.saturating_add(p.size));
        self.param_bytes = param_size.unwrap_or(end);
        if end > self.param_bytes {
            return Err(format!("parameters end at byte {end}, past CBANK_PARAM_SIZE {}", self.param_bytes));
        }
        Ok(())
    }
}

/// Demangles an Itanium C++ name; returns the input for C names and on any failure.
pub fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") {
        return name.to_string();
    }
    cpp_demangle::Symbol::new(name).ok().and_then(|s| s.demangle().ok()).unwrap_or_else(|| name.to_string())
}
