//! Execution of gpuless traces on a GPU (issue 5) and the choice of GPU partitions (issue 6).
//!
//! `partition` owns device and MIG-profile discovery over NVML and the pure placement logic;
//! `replay` (in progress) re-executes a trace with its recorded device addresses.

pub mod function;
pub mod partition;
pub mod replay;
pub mod server;
