//! The GEMM engine shared by the fake `libcublas` (`fake-cuda/cublas`) and `libcublasLt`
//! (`fake-cuda/cublaslt`): cuBLAS's enumerations and status codes ([`types`]), column-major
//! GEMMs computed on the CPU ([`gemm`]), and their submission as stream work of the fake CUDA
//! core after the operands are checked to be memory the core knows ([`submit`]).
//!
//! It exports no C symbol: each library writes its own exports over these pieces.

pub mod gemm;
pub mod submit;
pub mod types;

pub use types::{BlasError, Result};
