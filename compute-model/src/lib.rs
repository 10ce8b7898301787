//! What a GPU model can do, and how long a kernel takes on it.
//!
//! [`GpuSpec`] holds the per-board numbers a program can observe or that set a kernel's
//! time: multiprocessors, clocks, memory bus and bandwidth, caches, host link, and the dense
//! peak FLOP/s per precision of its tensor cores and of its vector units, each from the
//! board's public datasheet (cited per entry in [`spec`]). The fake CUDA core reports the
//! CUDA properties from it; compute on the simulated GPUs is priced by [`price`].
//!
//! The model is a roofline with measured efficiencies. A kernel of `flops` arithmetic on
//! `unit` and `bytes` of device memory traffic takes `floor + max(arithmetic, bytes /
//! (bandwidth * e_bytes))`, where `floor` is the smallest time a kernel occupies a stream
//! (launch and drain). A matrix product whose shape is known ([`Gemm`]) is priced as the
//! GEMM libraries run it (`gemm`): output tiles spread over the multiprocessors in waves,
//! the tile size and split of the inner dimension that finish first, each tile at the
//! fraction of the per-multiprocessor peak that large GEMMs of the board's architecture and
//! precision reach (fitted to published GEMM measurements: `calibration`). A fused attention
//! kernel runs at its library's published fraction of peak on the work it does (`attention`).
//! Other arithmetic runs at a fixed fraction of the unit's peak. A kernel in a program takes
//! the time it takes timed alone: there is no factor between the two; what makes a program
//! slower than its kernels is modelled where it happens (the host's time per launch,
//! [`calibration::HOST_OP_NS`], under the virtual clock). `ACCURACY.md` reports the errors
//! against published GEMM and training measurements, each fitted without its own source.

#![forbid(unsafe_code)]

/// Arithmetic precision of a kernel's inner loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// 64-bit floating point.
    F64,
    /// 32-bit floating point.
    F32,
    /// TF32 tensor-core math on 32-bit inputs.
    Tf32,
    /// 16-bit floating point.
    F16,
    /// bfloat16.
    Bf16,
    /// 8-bit floating point.
    F8,
}

impl Precision {
    /// From the code the C boundary uses: 0 f64, 1 f32, 2 tf32, 3 f16, 4 bf16, 5 f8.
    pub fn from_code(code: i32) -> Option<Precision> {
        Some(match code {
            0 => Precision::F64,
            1 => Precision::F32,
            2 => Precision::Tf32,
            3 => Precision::F16,
            4 => Precision::Bf16,
            5 => Precision::F8,
            _ => return None,
        })
    }

    /// Its short name in traces: f64, f32, tf32, f16, bf16, f8.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F64 => "f64",
            Precision::F32 => "f32",
            Precision::Tf32 => "tf32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
            Precision::F8 => "f8",
        }
    }
}

/// Which units a kernel's arithmetic runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Tensor cores (matrix products, convolutions, attention).
    Tensor(Precision),
    /// The vector (CUDA-core) pipelines: elementwise, reductions, normalisations.
    Vector(Precision),
}

/// Dense peak TFLOP/s per precision (sparsity not counted). A precision the board has no
/// tensor-core support for takes the vector rate of the nearest wider type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peaks {
    /// FP64 (tensor-core FP64 where the board has it).
    pub f64: f64,
    /// FP32 on the vector units.
    pub f32: f64,
    /// TF32 tensor.
    pub tf32: f64,
    /// FP16 tensor with FP32 accumulation.
    pub f16: f64,
    /// BF16 tensor with FP32 accumulation.
    pub bf16: f64,
    /// FP8 tensor.
    pub f8: f64,
}

/// One board's numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuSpec {
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Boost clock, MHz.
    pub clock_mhz: u32,
    /// Memory clock, MHz.
    pub memory_clock_mhz: u32,
    /// Memory bus width, bits.
    pub bus_width_bits: u32,
    /// L2 cache, MiB.
    pub l2_mib: u32,
    /// Shared memory per multiprocessor, KiB.
    pub smem_per_sm_kib: u32,
    /// Device memory bandwidth, GB/s.
    pub memory_gbps: f64,
    /// Host link bandwidth (PCIe x16, or C2C on Grace parts), GB/s.
    pub host_link_gbps: f64,
    /// Dense peak TFLOP/s.
    pub peaks: Peaks,
    /// Board power limit (TDP), W.
    pub tdp_watts: u32,
    /// The GPU architecture, which sets the GEMM tiles and fitted efficiencies.
    pub arch: Arch,
}

/// GPU architectures, as far as they price kernels differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// sm70 (V100).
    Volta,
    /// sm80 (A100).
    Ampere,
    /// sm86 (GA10x: A10, A10G, RTX 30 series).
    AmpereGa10x,
    /// sm89 (RTX 40 series, L40S).
    Ada,
    /// sm90 (H100, H200).
    Hopper,
    /// sm100 (B200, GB200).
    Blackwell,
}

impl Arch {
    /// Every architecture, oldest first.
    pub const ALL: [Arch; 6] = [
        Arch::Volta,
        Arch::Ampere,
        Arch::AmpereGa10x,
        Arch::Ada,
        Arch::Hopper,
        Arch::Blackwell,
    ];

    /// Short name (`ampere`, `hopper`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Volta => "volta",
            Arch::Ampere => "ampere",
            Arch::AmpereGa10x => "ampere-ga10x",
            Arch::Ada => "ada",
            Arch::Hopper => "hopper",
            Arch::Blackwell => "blackwell",
        }
    }
}

impl GpuSpec {
    /// Peak FLOP/s of `unit`.
    pub fn peak_flops(&self, unit: Unit) -> f64 {
        let p = &self.peaks;
        let tflops = match unit {
            Unit::Tensor(Precision::F64) | Unit::Vector(Precision::F64) => p.f64,
            Unit::Tensor(Precision::F32) | Unit::Vector(_) => p.f32,
            Unit::Tensor(Precision::Tf32) => p.tf32,
            Unit::Tensor(Precision::F16) => p.f16,
            Unit::Tensor(Precision::Bf16) => p.bf16,
            Unit::Tensor(Precision::F8) => p.f8,
        };
        tflops * 1e12
    }
}

/// What a kernel does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelCost {
    /// Floating-point operations (a multiply-add is two).
    pub flops: f64,
    /// Bytes read and written in device memory.
    pub bytes: f64,
    /// Where the arithmetic runs.
    pub unit: Unit,
    /// The matrix product's shape, when the kernel is one (its `flops` are then `2 b m n k`).
    pub gemm: Option<Gemm>,
    /// The fused attention kernel, when the kernel is one (its `flops` are then those torch's
    /// formula counts, whatever the mask).
    pub attention: Option<Attention>,
}

/// A (batched) matrix product `C[b] (m x n) = A[b] (m x k) B[b] (k x n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemm {
    /// Batch count (1 for a single product).
    pub batch: u64,
    /// Rows of the result.
    pub m: u64,
    /// Columns of the result.
    pub n: u64,
    /// The inner (reduction) dimension.
    pub k: u64,
}

impl Gemm {
    /// Its floating-point operations, `2 b m n k`.
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// The modelled time of `cost` on `gpu`, whole ns: [`price_at`] with the fitted efficiency,
/// rounded; a time past `u64` saturates (a cost of infinite work takes the longest time there
/// is, not a marker value).
pub fn price(gpu: &GpuSpec, cost: &KernelCost) -> u64 {
    let ns = price_at(gpu, cost, calibration::efficiency(gpu, cost.unit));
    // `as` saturates: +inf and anything past u64::MAX give u64::MAX, NaN (no cost) 0.
    ns.round() as u64
}

/// What sets a kernel's modelled time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Its arithmetic (matrix products, attention, vector math).
    Arithmetic,
    /// Its device memory traffic.
    Memory,
    /// Neither: the kernel is shorter than the time any kernel occupies a stream.
    Floor,
}

impl Limit {
    /// Its name in reports: `arithmetic`, `memory`, `floor`.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Arithmetic => "arithmetic",
            Limit::Memory => "memory",
            Limit::Floor => "floor",
        }
    }
}

/// What sets the modelled time of `cost` on `gpu` ([`price`]): the floor when the longer of
/// its arithmetic and its memory traffic takes less than it, else the longer of the two.
pub fn limit(gpu: &GpuSpec, cost: &KernelCost) -> Limit {
    let (arithmetic, memory) = seconds(gpu, cost, calibration::efficiency(gpu, cost.unit));
    if arithmetic.max(memory) * 1e9 < calibration::FLOOR_NS {
        Limit::Floor
    } else if memory >= arithmetic {
        Limit::Memory
    } else {
        Limit::Arithmetic
    }
}

/// The modelled time of `cost` on `gpu` with arithmetic efficiency `e` for matrix products and
/// other tensor-core work (a fused attention kernel runs at its library's own fraction), ns
/// (unrounded).
pub fn price_at(gpu: &GpuSpec, cost: &KernelCost, e: f64) -> f64 {
    let (arithmetic, memory) = seconds(gpu, cost, e);
    calibration::FLOOR_NS + arithmetic.max(memory) * 1e9
}

/// The seconds of `cost`'s arithmetic (at efficiency `e`, or its attention library's) and of
/// its memory traffic on `gpu`.
fn seconds(gpu: &GpuSpec, cost: &KernelCost, e: f64) -> (f64, f64) {
    let arithmetic = match (cost.gemm, cost.attention) {
        (_, Some(a)) => {
            a.work(cost.flops.max(0.0)) / (gpu.peak_flops(cost.unit) * a.efficiency(gpu.arch))
        }
        (Some(g), None) if g.batch > 0 && g.m > 0 && g.n > 0 && g.k > 0 => {
            gemm::seconds(gpu, &g, cost.unit, e)
        }
        _ => cost.flops.max(0.0) / (gpu.peak_flops(cost.unit) * e),
    };
    let memory = cost.bytes.max(0.0) / (gpu.memory_gbps * 1e9 * calibration::BYTES_EFFICIENCY);
    (arithmetic, memory)
}

#[cfg(feature = "accuracy")]
pub mod accuracy;
pub mod attention;
mod boards;
pub mod calibration;
pub mod gemm;

pub use attention::Attention;
pub use boards::spec;

#[cfg(test)]
mod tests {
    use super::*;

    fn bf16_gemm(n: u64) -> KernelCost {
        let g = Gemm {
            batch: 1,
            m: n,
            n,
            k: n,
        };
        KernelCost {
            flops: g.flops(),
            bytes: 3.0 * (n * n * 2) as f64,
            unit: Unit::Tensor(Precision::Bf16),
            gemm: Some(g),
            attention: None,
        }
    }

    #[test]
    fn a_large_bf16_gemm_runs_near_the_fitted_fraction_of_peak() {
        // Published: 258-295 TFLOPS for an 8192^3 half-precision GEMM on an A100 (ACCURACY.md).
        let a100 = spec("A100-SXM4");
        let c = bf16_gemm(8192);
        let alone = |gpu: &GpuSpec| price_at(gpu, &c, calibration::efficiency(gpu, c.unit));
        let tflops = c.flops / (alone(&a100) * 1e-9) / 1e12;
        assert!((240.0..300.0).contains(&tflops), "{tflops}");
        // The H100 SXM's kernel is about three times faster (989.5 vs 312 TFLOP/s peak).
        let ratio = alone(&a100) / alone(&spec("H100-SXM5"));
        assert!((2.5..3.5).contains(&ratio), "{ratio}");
        // In a program, the same time: no factor between a kernel alone and in a loop.
        assert!((price(&a100, &c) as f64 - alone(&a100)).abs() < 1.0);
    }

    #[test]
    fn an_elementwise_op_is_bandwidth_bound() {
        let a100 = spec("A100-SXM4-40GB");
        // 256 MiB read and written, one flop per element.
        let n = 64.0 * 1024.0 * 1024.0;
        let cost = KernelCost {
            flops: n,
            bytes: 8.0 * n,
            unit: Unit::Vector(Precision::F32),
            gemm: None,
            attention: None,
        };
        let ns = price(&a100, &cost) as f64;
        let want = 8.0 * n / (1555e9 * calibration::BYTES_EFFICIENCY) * 1e9 + calibration::FLOOR_NS;
        assert!((ns - want).abs() < 1.0, "{ns} vs {want}");
    }

    #[test]
    fn a_tiny_kernel_takes_the_floor_and_precisions_map_to_their_peaks() {
        let a = spec("A100-SXM4");
        let tiny = KernelCost {
            flops: 10.0,
            bytes: 40.0,
            unit: Unit::Vector(Precision::F32),
            gemm: None,
            attention: None,
        };
        assert_eq!(price(&a, &tiny), calibration::FLOOR_NS as u64);
        assert_eq!(a.peak_flops(Unit::Tensor(Precision::Tf32)), 156e12);
        assert_eq!(a.peak_flops(Unit::Vector(Precision::Bf16)), 19.5e12);
        assert_eq!(
            spec("V100-SXM2").peak_flops(Unit::Tensor(Precision::Bf16)),
            15.7e12
        );
        assert_eq!(Precision::from_code(4), Some(Precision::Bf16));
        assert_eq!(Precision::from_code(9), None);
    }

    #[test]
    fn attention_runs_at_its_library_speed_on_the_work_it_does() {
        let h100 = spec("H100-SXM5");
        let cost = |causal| KernelCost {
            flops: 1e13,
            bytes: 1e6,
            unit: Unit::Tensor(Precision::Bf16),
            gemm: None,
            attention: Some(Attention {
                library: attention::Library::Flash,
                backward: false,
                causal,
            }),
        };
        // FlashAttention-2 at 35% of the H100's 989.5 TFLOP/s; a causal mask halves the work.
        let want = 1e13 / (0.35 * 989.5e12) * 1e9 + calibration::FLOOR_NS;
        assert!((price(&h100, &cost(false)) as f64 - want).abs() < 1.0);
        let causal = price(&h100, &cost(true)) as f64 - calibration::FLOOR_NS;
        assert!((causal - (want - calibration::FLOOR_NS) / 2.0).abs() < 1.0);
    }

    #[test]
    fn a_kernel_is_limited_by_its_arithmetic_its_bytes_or_the_floor() {
        let h100 = spec("H100-SXM5");
        assert_eq!(limit(&h100, &bf16_gemm(8192)), Limit::Arithmetic);
        let stream = |bytes: f64| KernelCost {
            flops: bytes / 8.0,
            bytes,
            unit: Unit::Vector(Precision::F32),
            gemm: None,
            attention: None,
        };
        assert_eq!(limit(&h100, &stream(1e9)), Limit::Memory);
        assert_eq!(limit(&h100, &stream(1e3)), Limit::Floor);
    }

    #[test]
    fn small_gemms_are_less_efficient_than_large_ones() {
        let h100 = spec("H100-SXM5");
        let rate = |n| {
            let c = bf16_gemm(n);
            c.flops / price(&h100, &c) as f64
        };
        assert!(rate(512) < 0.3 * rate(8192));
        assert!(rate(2048) < rate(8192));
    }
}
