//! The C types of the table's plain values: how many bytes a value of an argument's type takes
//! and how it becomes the 64-bit word a trace records.
//!
//! The recorder reads every plain value at the width of its C type as the table declares it:
//! an `out enum mode: CUmoduleLoadingMode *` is 4 bytes behind the pointer, an `out size bytes:
//! size_t *` 8. A value is widened to 64 bits by sign extension when its C type is a signed
//! integer (`int`, `short`, `signed char`, `long long`, `CUdevice`), by zero extension otherwise
//! (unsigned integers, enums, pointers, a float's bits): the recorded word holds the value's
//! bit pattern, and the C value is the word read back as the type (`word as i32`,
//! `word as u32`). C enums are int-sized; their bit pattern is zero-extended (a `CUresult` of
//! 999 stays 999), which `as i32` reads back the same for the negative values no CUDA enum has.
//!
//! A by-value argument arrives in a 64-bit register whose bits above the type's width are
//! undefined (x86-64 System V ABI); [`CScalar::widen`] of the register gives the argument.

use serde::Serialize;

use super::types::{ApiArg, ArgKind, HandleKind};

/// A plain C value type, as far as its storage goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum CScalar {
    /// `signed char` (and `char`, signed on x86-64).
    I8,
    /// `unsigned char`.
    U8,
    /// `short`.
    I16,
    /// `unsigned short`.
    U16,
    /// `int`, `CUdevice`.
    I32,
    /// `unsigned int`, `cuuint32_t`, C enums.
    U32,
    /// `long long`, `long`.
    I64,
    /// `unsigned long long`, `size_t`, `cuuint64_t`, `CUdeviceptr`, 64-bit object handles.
    U64,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// A pointer or an opaque handle (a pointer to a driver object).
    Ptr,
}

impl CScalar {
    /// Bytes a value of this type takes (x86-64, LP64).
    pub const fn width(self) -> usize {
        match self {
            Self::I8 | Self::U8 => 1,
            Self::I16 | Self::U16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::I64 | Self::U64 | Self::F64 | Self::Ptr => 8,
        }
    }

    /// Whether this is a signed integer type (widened by sign extension).
    pub const fn is_signed(self) -> bool {
        matches!(self, Self::I8 | Self::I16 | Self::I32 | Self::I64)
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, Self::F32 | Self::F64)
    }

    /// A value of this type held in the low [`width`](Self::width) bytes of `word` (a by-value
    /// argument's register, or the bytes read behind a pointer), as a 64-bit word: the bits
    /// above the width are dropped, then filled with the sign for a signed integer type and
    /// with zeros otherwise.
    pub const fn widen(self, word: u64) -> u64 {
        match self {
            Self::I8 => word as u8 as i8 as i64 as u64,
            Self::U8 => word as u8 as u64,
            Self::I16 => word as u16 as i16 as i64 as u64,
            Self::U16 => word as u16 as u64,
            Self::I32 => word as u32 as i32 as i64 as u64,
            Self::U32 | Self::F32 => word as u32 as u64,
            Self::I64 | Self::U64 | Self::F64 | Self::Ptr => word,
        }
    }

    /// The type a C type name spells (`int`, `const unsigned int`, `size_t`, `CUdeviceptr`,
    /// `void *`), when the name alone says it: any pointer, the C integer and floating types,
    /// and the CUDA typedefs of those. `None` for other names (enums, handles, structs, `void`).
    pub fn of_name(c_type: &str) -> Option<CScalar> {
        let t = strip_qualifiers(c_type);
        if t.ends_with('*') {
            return Some(Self::Ptr);
        }
        Some(match t {
            "char" | "signed char" => Self::I8,
            "unsigned char" | "uint8_t" => Self::U8,
            "short" | "short int" | "signed short" | "int16_t" => Self::I16,
            "unsigned short" | "unsigned short int" | "uint16_t" => Self::U16,
            "int" | "signed" | "signed int" | "int32_t" | "CUdevice" | "EGLint" => Self::I32,
            "unsigned int" | "unsigned" | "uint32_t" | "cuuint32_t" => Self::U32,
            // The graphics APIs' object names (OpenGL, VDPAU): 32-bit integers.
            "GLuint" | "GLenum" | "VdpDevice" | "VdpVideoSurface" | "VdpOutputSurface" => Self::U32,
            "long" | "long int" | "long long" | "long long int" | "int64_t" | "ssize_t" => Self::I64,
            "unsigned long"
            | "unsigned long int"
            | "unsigned long long"
            | "unsigned long long int"
            | "uint64_t"
            | "size_t"
            | "cuuint64_t"
            | "CUdeviceptr"
            | "CUtexObject"
            | "CUsurfObject"
            | "CUmemGenericAllocationHandle" => Self::U64,
            "float" => Self::F32,
            "double" => Self::F64,
            _ => return None,
        })
    }

    /// The type of a value of C type `c_type` that an argument of kind `kind` holds: the name's
    /// own type ([`of_name`](Self::of_name)), else what the kind says of a typedef name: an
    /// enum (`enum`, or a `scalar` or `flags` of a `CU...` type) is an int-sized [`U32`](Self::U32),
    /// a device handle an `int`, texture and surface objects and allocation handles 64-bit
    /// integers, other handles and function pointers pointers. `None` when neither says (a
    /// struct, `void`, an unknown typedef of a count or size).
    pub fn of(c_type: &str, kind: ArgKind) -> Option<CScalar> {
        if let Some(t) = Self::of_name(c_type) {
            return Some(t);
        }
        let t = strip_qualifiers(c_type);
        let typedef = !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && t != "void";
        if !typedef {
            return None;
        }
        Some(match kind {
            ArgKind::Enum => Self::U32,
            ArgKind::Scalar | ArgKind::Flags if t.starts_with("CU") => Self::U32,
            ArgKind::Handle(HandleKind::Device) => Self::I32,
            ArgKind::Handle(HandleKind::TexObject | HandleKind::SurfObject | HandleKind::MemHandle) => Self::U64,
            ArgKind::Handle(_) | ArgKind::FnPtr | ArgKind::UserData => Self::Ptr,
            _ => return None,
        })
    }
}

/// `const T`, `T const`, `volatile T` → `T`.
fn strip_qualifiers(c_type: &str) -> &str {
    let mut t = c_type.trim();
    loop {
        let before = t;
        for q in ["const ", "volatile "] {
            t = t.strip_prefix(q).unwrap_or(t).trim_start();
        }
        for q in [" const", " volatile"] {
            t = t.strip_suffix(q).unwrap_or(t).trim_end();
        }
        if t == before {
            return t;
        }
    }
}

impl ApiArg {
    /// Whether the argument is a pointer (or an array, which C passes as one).
    pub fn is_pointer(&self) -> bool {
        self.c_type.contains('*') || self.c_type.contains('[')
    }

    /// The type of the argument's own word, as passed: [`CScalar::Ptr`] for a pointer, the
    /// value's type for a by-value argument; `None` for a struct passed by value or a type the
    /// table does not say the width of.
    pub fn value_type(&self) -> Option<CScalar> {
        if self.is_pointer() {
            return Some(CScalar::Ptr);
        }
        if matches!(self.kind, ArgKind::Struct(_) | ArgKind::Structs { .. }) {
            return None;
        }
        CScalar::of(self.c_type, self.kind)
    }

    /// The type of the one value a pointer argument points at, which the callee writes (`out`),
    /// or reads and writes (`inout`): `T` of `T *` ([`CScalar::of`] with the argument's kind),
    /// [`CScalar::Ptr`] for a pointer to a pointer (`void **`, `const char **`). `None` for a
    /// by-value argument, for kinds whose pointer leads to more than one value (host buffers,
    /// structs, strings, code images, kernel parameters) and for `void *`.
    pub fn pointee_type(&self) -> Option<CScalar> {
        let t = self.c_type.trim();
        let pointee = t.strip_suffix('*')?.trim_end();
        if pointee.ends_with('*') {
            return Some(CScalar::Ptr);
        }
        match self.kind {
            ArgKind::HostBuf(_)
            | ArgKind::AnyBuf(_)
            | ArgKind::Struct(_)
            | ArgKind::Structs { .. }
            | ArgKind::CStr
            | ArgKind::Image
            | ArgKind::ImageFile
            | ArgKind::KernelParams
            | ArgKind::Extra => None,
            k => CScalar::of(pointee, k),
        }
    }
}
