//! `libnccl.so.2`: NCCL's C API on the fake CUDA core, with every collective computed on the
//! host. Programs built against NCCL (C programs, nccl-tests, PyTorch's ProcessGroupNCCL) load
//! it instead of NVIDIA's library and run on a machine without GPUs.
//!
//! - [`api`]: the exports (`nccl*` and `pnccl*`), thin: check, convert, call in.
//! - [`bootstrap`]: unique ids, the root and the hub over TCP.
//! - [`comm`]: communicators (members as host, simulated node and GPU), init, split.
//! - [`group`]: handles and group semantics; [`task`]: operations as stream work.
//! - [`clock`]: simulated time of operations (start = the last participant's ready time,
//!   then the predicted duration).
//! - [`host`]: a rank's host group (its host's ranks and segment, links to other hosts, the
//!   numbering of operations), which `comm` owns and `exec` borrows.
//! - [`fold`]: communicators with virtual members (a folded job) and their data.
//! - [`exec`]: the shared segment, barrier and data movement; [`reduce`]: the arithmetic.
//! - [`net`]: TCP between ranks on different hosts.
//! - [`sim`]: each communicator's NCCL plan and cost model.
//! - [`trace`]: Perfetto traces (`NCCLSIM_TRACE`); [`report`]: the end-of-run report's NCCL
//!   section (`NCCLSIM_REPORT`).
//! - [`shm`]: shared mappings, futex waits, peers' arenas; [`cuda`]: the fake CUDA core.

pub(crate) mod api;
pub(crate) mod bootstrap;
pub(crate) mod clock;
pub(crate) mod comm;
pub(crate) mod cuda;
pub(crate) mod error;
pub(crate) mod exec;
pub(crate) mod fold;
pub(crate) mod group;
pub(crate) mod host;
pub(crate) mod net;
pub(crate) mod ops;
pub(crate) mod reduce;
pub(crate) mod report;
pub(crate) mod shm;
pub(crate) mod sim;
pub(crate) mod task;
pub(crate) mod trace;
pub(crate) mod types;

/// What the package's integration tests and benchmarks call directly: the exports as Rust
/// functions, the calls into the fake CUDA core, the arithmetic, the simulation and the C
/// types. Not an API: programs use the C exports.
#[doc(hidden)]
pub mod testing {
    /// The exports.
    pub mod api {
        pub use crate::api::*;
    }
    /// The calls into the fake CUDA core.
    pub mod cuda {
        pub use crate::cuda::*;
    }
    /// The arithmetic.
    pub mod reduce {
        pub use crate::reduce::*;
    }
    /// Each communicator's plan and cost model.
    pub mod sim {
        pub use crate::sim::*;
    }
    /// NCCL's C types.
    pub mod types {
        pub use crate::types::*;
    }
}
