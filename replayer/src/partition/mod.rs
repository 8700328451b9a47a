//! GPU partitions: devices, MIG profiles, placements, and where a `--mig` replay runs (issue 6).
//!
//! - [`profiles`]: built-in GPU-instance profile tables (H200, A100-40GB/80GB, H100-80GB).
//! - [`placement`]: pure placement logic (legal placements, the choice that leaves the most room).
//! - [`resolve_profile`]: a user's `--mig` argument (name or id) to a profile of this GPU.
//! - [`nvml`]: read-only NVML discovery of GPUs, their profiles, placements and MIG instances.
//! - [`mig`]: choosing an existing MIG device, planning `--create`, the [`mig::MigOps`] trait
//!   and [`mig::run_on_created`] (create, run, destroy — also on failure or panic).
//! - [`mig_nvml`]: `MigOps` over the real NVML, the only code that creates or destroys
//!   instances (used by `--create` alone; never by tests).
//! - [`sm_split`]: the SM arithmetic of `--emulate` (green contexts), as pure code.
//!
//! Nothing here changes MIG mode.

pub mod mig;
pub mod mig_nvml;
pub mod nvml;
pub mod placement;
pub mod profiles;
mod resolve;
pub mod sm_split;

pub use placement::{choose_placement, legal_placements, remaining_capacity, Choice, Instance, PlacementError};
pub use profiles::{GpuModel, Placement, Profile};
pub use resolve::{resolve_profile, ResolveError};
