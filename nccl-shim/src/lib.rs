//! `libnccl.so.2`: the NCCL C API, bootstrap and collective execution.
//!
//! Filled by the runtime issues. It asks `planner` and `cost-model` for plans and times.

pub use cost_model;
