//! `libnccl.so.2`: NCCL's C API on the fake CUDA core, with every collective computed on the
//! host. Programs built against NCCL (C programs, nccl-tests, PyTorch's ProcessGroupNCCL) load
//! it instead of NVIDIA's library and run on a machine without GPUs.
//!
//! - [`api`]: the exports (`nccl*` and `pnccl*`), thin: check, convert, call in.
//! - [`bootstrap`]: unique ids, the root and the hub over TCP.
//! - [`comm`]: communicators (members as host, simulated node and GPU), init, split.
//! - [`group`]: handles and group semantics; [`task`]: operations as stream work.
//! - [`exec`]: the shared segment, barrier and data movement; [`reduce`]: the arithmetic.
//! - [`net`]: TCP between ranks on different hosts.
//! - [`sim`]: each communicator's NCCL plan and cost model.
//! - [`trace`]: Perfetto traces (`NCCLSIM_TRACE`); [`report`]: the end-of-run report's NCCL
//!   section (`NCCLSIM_REPORT`).
//! - [`shm`]: shared mappings, futex waits, peers' arenas; [`cuda`]: the fake CUDA core.

pub mod api;
pub mod bootstrap;
pub mod comm;
pub mod cuda;
pub mod error;
pub mod exec;
pub mod group;
pub mod net;
pub mod ops;
pub mod reduce;
pub mod report;
pub mod shm;
pub mod sim;
pub mod task;
pub mod trace;
pub mod types;
