//! The process-wide fake CUDA core: devices, memory arenas, streams, events and virtual clocks.
//!
//! Filled by the fake-CUDA issue; the ABI front-ends (`libcudart`, `libcuda`, `libnvidia-ml`) are thin
//! layers over this crate.
