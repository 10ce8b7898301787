//! NCCL's channel search, ring and tree construction, split communicators and plan formats.
//!
//! Filled by the planner issue. The crate exists now so that the dependency direction
//! (`topo` <- `planner` <- `cost-model` <- `cli`, `nccl-shim`) is fixed from the start.

pub use topo;
