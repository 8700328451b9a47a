//! The JIT options (`CUjit_option`, cuda.h 13.0) as data: what each option's value is, so that
//! a link (or a JIT compilation) can run on a driver in another process — the client keeps the
//! program's option values, the server's executor passes its own buffers where the driver
//! writes, and what the driver wrote travels back (`gpuless_traces::protocol::link`).
//!
//! An option's value is one pointer-sized slot of the program's `optionValues` array. The driver
//! reads plain values from the slot and may write answers back into it (the log sizes it
//! filled, the threads per block it targeted); for a buffer option the slot holds a pointer to
//! memory the driver writes (the logs, the wall time).

/// What the value of a JIT option is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitValue {
    /// A plain value in the slot (an integer, an enum, a flag, or nothing); the driver may
    /// write an answer back into the slot (`CU_JIT_THREADS_PER_BLOCK`, the log sizes).
    Plain,
    /// A pointer to a text buffer the driver writes its log into; the buffer's size in bytes is
    /// the value of option `size` (an `unsigned int`), which the driver overwrites with the
    /// bytes it filled.
    Log {
        /// The option that gives the buffer's size.
        size: u32,
    },
    /// A pointer to a `float` the driver writes (`CU_JIT_WALL_TIME`: milliseconds spent in the
    /// compiler and linker).
    Float,
    /// A pointer to the program's array of C strings the driver reads (symbol names, names
    /// of kernels and variables to keep); the array's length is the value of option `count`.
    /// A driver in another process gets a copy of the strings.
    Names {
        /// The option that gives the array's length (an `unsigned int`).
        count: u32,
    },
    /// A pointer to the program's array of addresses the driver reads (the addresses to
    /// relocate the symbols of option 17 to); its length is the value of option `count`. With
    /// device addresses preserved across processes, a copy of the array means the same there.
    Addresses {
        /// The option that gives the array's length.
        count: u32,
    },
}

/// `CU_JIT_WALL_TIME`.
pub const WALL_TIME: u32 = 2;
/// `CU_JIT_INFO_LOG_BUFFER`.
pub const INFO_LOG_BUFFER: u32 = 3;
/// `CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES`.
pub const INFO_LOG_BUFFER_SIZE_BYTES: u32 = 4;
/// `CU_JIT_ERROR_LOG_BUFFER`.
pub const ERROR_LOG_BUFFER: u32 = 5;
/// `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`.
pub const ERROR_LOG_BUFFER_SIZE_BYTES: u32 = 6;
/// `CU_JIT_NUM_OPTIONS`: options at or past it are unknown to cuda.h 13.0.
pub const NUM_OPTIONS: u32 = 35;
/// `CU_JIT_NUM_INPUT_TYPES`: `CUjitInputType` values are below it (cubin, PTX, fatbin, object,
/// library, NVVM).
pub const NUM_INPUT_TYPES: u32 = 6;
/// `CU_JIT_INPUT_PTX`: text the driver wants NUL-terminated.
pub const INPUT_PTX: u32 = 1;

/// The kind of option `id`'s value; `None` for an option cuda.h 13.0 does not know.
pub fn value_of(id: u32) -> Option<JitValue> {
    Some(match id {
        WALL_TIME => JitValue::Float,
        INFO_LOG_BUFFER => JitValue::Log { size: INFO_LOG_BUFFER_SIZE_BYTES },
        ERROR_LOG_BUFFER => JitValue::Log { size: ERROR_LOG_BUFFER_SIZE_BYTES },
        // CU_JIT_GLOBAL_SYMBOL_NAMES and _ADDRESSES (counted by _COUNT, 19);
        // CU_JIT_REFERENCED_KERNEL_NAMES (_COUNT 26) and _VARIABLE_NAMES (_COUNT 28).
        17 => JitValue::Names { count: 19 },
        18 => JitValue::Addresses { count: 19 },
        25 => JitValue::Names { count: 26 },
        27 => JitValue::Names { count: 28 },
        _ if id < NUM_OPTIONS => JitValue::Plain,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_of_cuda_h_has_a_kind() {
        for id in 0..NUM_OPTIONS {
            assert!(value_of(id).is_some(), "{id}");
        }
        assert_eq!(value_of(NUM_OPTIONS), None);
        assert_eq!(value_of(u32::MAX), None);
        // Each log buffer's size option is a plain value.
        for id in [INFO_LOG_BUFFER, ERROR_LOG_BUFFER] {
            let Some(JitValue::Log { size }) = value_of(id) else { panic!("{id}") };
            assert_eq!(value_of(size), Some(JitValue::Plain));
        }
        assert_eq!(value_of(0), Some(JitValue::Plain)); // CU_JIT_MAX_REGISTERS
                                                        // Each list's count option is a plain value.
        for id in [17, 18, 25, 27] {
            let count = match value_of(id) {
                Some(JitValue::Names { count } | JitValue::Addresses { count }) => count,
                v => panic!("{id}: {v:?}"),
            };
            assert_eq!(value_of(count), Some(JitValue::Plain), "{id}");
        }
        assert_eq!(value_of(18), Some(JitValue::Addresses { count: 19 }));
    }
}
