//! The fitted fractions of peak, per architecture and kind of arithmetic.
//!
//! GEMM efficiencies are fitted to the published GEMM measurements of `data/measurements.csv`:
//! for each (architecture, class) the median over its rows of measured throughput over the
//! throughput the tile model (`gemm`) gives at efficiency 1. A class without rows on an
//! architecture takes the median of the class over all architectures, and a class without
//! rows anywhere [`DEFAULT_EFFICIENCY`]. The `accuracy` report (`--features accuracy`) refits
//! them from the data; its test keeps the constants here equal to the fit.
//! Not fitted: the memory-bandwidth fraction and the floor (typical of streaming kernels and
//! of the launch-to-completion time of an empty kernel), vector arithmetic, and the host's time
//! per launch. Nothing is fitted to training runs: they are the check (`accuracy::training`).

use crate::{Arch, GpuSpec, Precision, Unit};

/// Smallest time a kernel occupies its stream (launch and drain), ns.
pub const FLOOR_NS: f64 = 3000.0;

/// Fraction of the memory bandwidth streaming kernels reach.
pub const BYTES_EFFICIENCY: f64 = 0.8;

/// Fraction of the vector units' peak elementwise arithmetic reaches, and the efficiency of a
/// GEMM class without any measurement.
pub const DEFAULT_EFFICIENCY: f64 = 0.75;

/// Kinds of arithmetic with efficiencies of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// FP16 and BF16 on tensor cores.
    Half,
    /// FP8 on tensor cores.
    F8,
    /// TF32 on tensor cores.
    Tf32,
    /// FP32 matrix products on the vector units (SIMT SGEMM).
    F32,
    /// FP64 matrix products.
    F64,
    /// Elementwise and other vector arithmetic.
    Vector,
}

impl Class {
    /// The class of `unit` on `gpu`: 16-bit and FP8 types the board has no tensor cores for
    /// (their peak is the FP32 rate, e.g. BF16 on V100) run as FP32 arithmetic.
    pub fn of(gpu: &GpuSpec, unit: Unit) -> Class {
        let emulated = |peak: f64| peak <= gpu.peaks.f32;
        match unit {
            Unit::Tensor(Precision::F16) if emulated(gpu.peaks.f16) => Class::F32,
            Unit::Tensor(Precision::Bf16) if emulated(gpu.peaks.bf16) => Class::F32,
            Unit::Tensor(Precision::F8) if emulated(gpu.peaks.f8) => Class::F32,
            Unit::Tensor(Precision::F16 | Precision::Bf16) => Class::Half,
            Unit::Tensor(Precision::F8) => Class::F8,
            Unit::Tensor(Precision::Tf32) => Class::Tf32,
            Unit::Tensor(Precision::F32) => Class::F32,
            Unit::Tensor(Precision::F64) => Class::F64,
            Unit::Vector(_) => Class::Vector,
        }
    }

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Class::Half => "fp16/bf16",
            Class::F8 => "fp8",
            Class::Tf32 => "tf32",
            Class::F32 => "fp32",
            Class::F64 => "fp64",
            Class::Vector => "vector",
        }
    }
}

/// Fitted large-GEMM efficiencies (architecture, class, fraction of the tile model's peak).
#[rustfmt::skip]
pub const GEMM_EFFICIENCY: &[(Arch, Class, f64)] = &[
    (Arch::Volta, Class::Half, 0.681),
    (Arch::Volta, Class::F32, 0.722),
    (Arch::Ampere, Class::Half, 0.843),
    (Arch::Ampere, Class::Tf32, 0.851),
    (Arch::Ampere, Class::F32, 1.012),
    (Arch::AmpereGa10x, Class::Half, 0.454),
    (Arch::AmpereGa10x, Class::F32, 0.454),
    (Arch::Ada, Class::Half, 0.945),
    (Arch::Ada, Class::F32, 0.679),
    (Arch::Hopper, Class::Half, 0.805),
    (Arch::Hopper, Class::F8, 0.748),
    (Arch::Blackwell, Class::Half, 0.750),
    (Arch::Blackwell, Class::F8, 0.788),
];

/// Fitted efficiency of each class over all architectures (for architectures without rows).
#[rustfmt::skip]
pub const CLASS_EFFICIENCY: &[(Class, f64)] = &[
    (Class::Half, 0.796),
    (Class::F8, 0.771),
    (Class::Tf32, 0.851),
    (Class::F32, 0.993),
];

/// The host's time to issue one eager framework op, ns: Python, the binding, torch's
/// dispatcher and autograd, the library's launch (`cudaLaunchKernel`). Published breakdowns of
/// eager PyTorch put the CPU path of one op at 5-25 us on current hosts; 10 us is taken (not
/// fitted). Under the virtual clock the calling thread's clock moves by it at each priced op,
/// so a stretch of kernels shorter than their launches is as long as its launches, as on the
/// real machine; captured and replayed graphs launch without it.
pub const HOST_OP_NS: u64 = 10_000;

/// The efficiency of `unit` on `gpu`.
pub fn efficiency(gpu: &GpuSpec, unit: Unit) -> f64 {
    let class = Class::of(gpu, unit);
    let arch = gpu.arch;
    if class == Class::Vector {
        return DEFAULT_EFFICIENCY;
    }
    GEMM_EFFICIENCY
        .iter()
        .find(|(a, c, _)| *a == arch && *c == class)
        .map(|e| e.2)
        .or_else(|| {
            CLASS_EFFICIENCY
                .iter()
                .find(|(c, _)| *c == class)
                .map(|e| e.1)
        })
        .unwrap_or(DEFAULT_EFFICIENCY)
}
