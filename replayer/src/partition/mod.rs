//! GPU partitions: devices, MIG profiles, placements (issue 6).
//!
//! - [`profiles`]: built-in GPU-instance profile tables (H200, A100-40GB/80GB, H100-80GB).
//! - [`placement`]: pure placement logic (legal placements, the choice that leaves the most room).
//! - [`resolve_profile`]: a user's `--mig` argument (name or id) to a profile of this GPU.
//! - [`nvml`]: read-only NVML discovery of GPUs, their profiles, placements and MIG instances.
//!
//! Nothing here changes MIG mode or creates or destroys instances.

pub mod nvml;
pub mod placement;
pub mod profiles;
mod resolve;

pub use placement::{choose_placement, legal_placements, remaining_capacity, Choice, Instance, PlacementError};
pub use profiles::{GpuModel, Placement, Profile};
pub use resolve::{resolve_profile, ResolveError};
