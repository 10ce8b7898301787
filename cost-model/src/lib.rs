//! NCCL's tuning model (per algorithm/protocol latency and bandwidth), selection and a calibrated model.
//!
//! Filled by the cost-model issue; it sits above `planner` and below `cli` and `nccl-shim`.

pub use planner;
