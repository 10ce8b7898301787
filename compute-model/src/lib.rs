//! What a GPU model can do, and how long a kernel takes on it.
//!
//! [`GpuSpec`] holds the per-board numbers a program can observe or that set a kernel's
//! time: multiprocessors, clocks, memory bus and bandwidth, caches, host link, and the dense
//! peak FLOP/s per precision of its tensor cores and of its vector units, each from the
//! board's public datasheet (cited per entry in [`spec`]). The fake CUDA core reports the
//! CUDA properties from it; compute on the simulated GPUs is priced by [`price`].
//!
//! The model is a roofline: a kernel of `flops` arithmetic on `unit` and `bytes` of device
//! memory traffic takes `floor + max(flops / (peak(unit) * e_flops), bytes / (bandwidth *
//! e_bytes))`, where `floor` is the smallest time a kernel occupies a stream (launch and
//! drain) and the efficiencies are the fractions of peak that large kernels reach. The
//! defaults ([`Efficiency::DEFAULT`]) are typical of cuBLAS GEMMs (about three quarters of the
//! dense tensor peak) and of streaming kernels (about four fifths of the memory bandwidth).

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

/// Fractions of peak that kernels reach, and the per-kernel floor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Efficiency {
    /// Fraction of the arithmetic peak.
    pub flops: f64,
    /// Fraction of the memory bandwidth.
    pub bytes: f64,
    /// Smallest time a kernel occupies its stream, ns.
    pub floor_ns: f64,
}

impl Efficiency {
    /// Three quarters of the arithmetic peak, four fifths of the bandwidth, 3 µs per kernel.
    pub const DEFAULT: Efficiency = Efficiency {
        flops: 0.75,
        bytes: 0.8,
        floor_ns: 3000.0,
    };
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
}

/// The modelled time of `cost` on `gpu`, ns.
pub fn price(gpu: &GpuSpec, cost: &KernelCost, eff: &Efficiency) -> u64 {
    let compute = cost.flops.max(0.0) / (gpu.peak_flops(cost.unit) * eff.flops);
    let memory = cost.bytes.max(0.0) / (gpu.memory_gbps * 1e9 * eff.bytes);
    let ns = eff.floor_ns + compute.max(memory) * 1e9;
    if ns.is_finite() {
        ns.round() as u64
    } else {
        u64::MAX
    }
}

const fn peaks(f64: f64, f32: f64, tf32: f64, f16: f64, bf16: f64, f8: f64) -> Peaks {
    Peaks {
        f64,
        f32,
        tf32,
        f16,
        bf16,
        f8,
    }
}

#[allow(clippy::too_many_arguments)]
const fn board(
    sms: u32,
    clock_mhz: u32,
    memory_clock_mhz: u32,
    bus_width_bits: u32,
    l2_mib: u32,
    smem_per_sm_kib: u32,
    memory_gbps: f64,
    host_link_gbps: f64,
    peaks: Peaks,
    tdp_watts: u32,
) -> GpuSpec {
    GpuSpec {
        sms,
        clock_mhz,
        memory_clock_mhz,
        bus_width_bits,
        l2_mib,
        smem_per_sm_kib,
        memory_gbps,
        host_link_gbps,
        peaks,
        tdp_watts,
    }
}

/// The numbers of a `topo` GPU model key (`GpuModel::keys[0]`); an unknown key gets the A100
/// SXM4 80 GB's (a model added to the profiles without numbers here). Sources, per board, the
/// vendor's datasheet or whitepaper: dense peaks are the datasheets' figures, with the
/// "with sparsity" figures halved.
pub fn spec(model_key: &str) -> GpuSpec {
    match model_key {
        // Tesla V100 SXM2 datasheet: FP64 7.8, FP32 15.7, tensor (FP16) 125 TFLOPS; no TF32,
        // BF16 or FP8 tensor cores (those types run at the FP32 rate); 900 GB/s; 300 W.
        "V100-SXM2" => board(
            80,
            1530,
            877,
            4096,
            6,
            96,
            900.0,
            12.0,
            peaks(7.8, 15.7, 15.7, 125.0, 15.7, 125.0),
            300,
        ),
        // A100 datasheet (SXM4 80 GB): FP64 tensor 19.5, FP32 19.5, TF32 156, BF16/FP16 312;
        // no FP8 (FP16 rate); 2,039 GB/s; 400 W.
        "A100-SXM4" => board(108, 1410, 1593, 5120, 40, 164, 2039.0, 24.0, A100, 400),
        // The 40 GB board: 1,555 GB/s, the same peaks; 400 W.
        "A100-SXM4-40GB" => board(108, 1410, 1215, 5120, 40, 164, 1555.0, 24.0, A100, 400),
        // A100 80 GB PCIe: the same peaks, 1,935 GB/s, 300 W.
        "A100-PCIE" => board(108, 1410, 1512, 5120, 40, 164, 1935.0, 24.0, A100, 300),
        // H100 datasheet (SXM5): FP64 tensor 67, FP32 67, TF32 494.5, BF16/FP16 989.5,
        // FP8 1,979 TFLOPS; 3.35 TB/s; 700 W.
        "H100-SXM5" => board(132, 1980, 2619, 5120, 50, 228, 3350.0, 50.0, H100_SXM, 700),
        // H100 PCIe: FP64 tensor 51, FP32 51, TF32 378, BF16/FP16 756, FP8 1,513; 2 TB/s; 350 W.
        "H100-PCIE" => board(
            114,
            1755,
            1593,
            5120,
            50,
            228,
            2000.0,
            50.0,
            peaks(51.0, 51.0, 378.0, 756.0, 756.0, 1513.0),
            350,
        ),
        // H200 datasheet (SXM): the H100 SXM's peaks, 4.8 TB/s; 700 W.
        "H200" => board(132, 1980, 3201, 6144, 50, 228, 4800.0, 50.0, H100_SXM, 700),
        // HGX B200 datasheet, per GPU (eight-GPU figures / 8): FP64 37, FP32 75, TF32 1,125,
        // BF16/FP16 2,250, FP8 4,500 TFLOPS; 8 TB/s; 1,000 W.
        "B200" => board(
            148,
            1965,
            4000,
            8192,
            126,
            228,
            8000.0,
            50.0,
            peaks(37.0, 75.0, 1125.0, 2250.0, 2250.0, 4500.0),
            1000,
        ),
        // GB200 NVL72 datasheet, per GPU (rack figures / 72): FP64 45, TF32 1,250, BF16/FP16
        // 2,500, FP8 5,000 TFLOPS (FP32 is not given: the HGX B200's 75); 8 TB/s; 1,200 W.
        "GB200" => board(
            148,
            1965,
            4000,
            8192,
            126,
            228,
            8000.0,
            450.0,
            peaks(45.0, 75.0, 1250.0, 2500.0, 2500.0, 5000.0),
            1200,
        ),
        // GB300 NVL72 datasheet, per GPU (rack figures / 72, sparse halved): TF32 1,250,
        // BF16/FP16 2,500, FP8 5,000 TFLOPS; FP64 1.25 and FP32 75 TFLOPS (HGX B300 figures);
        // 8 TB/s; 1,400 W. SM count and clocks are not in those sources: the GB200's.
        "GB300" => board(
            148,
            1965,
            4000,
            8192,
            126,
            228,
            8000.0,
            450.0,
            peaks(1.25, 75.0, 1250.0, 2500.0, 2500.0, 5000.0),
            1400,
        ),
        // A10 datasheet (A10G is AWS's A10): FP32 31.2, TF32 62.5, BF16/FP16 125 TFLOPS,
        // FP64 1/32 of FP32; 600 GB/s; 150 W (A10G: 300 W).
        "A10G" => board(
            80,
            1710,
            6251,
            384,
            6,
            100,
            600.0,
            24.0,
            peaks(0.98, 31.2, 62.5, 125.0, 125.0, 125.0),
            300,
        ),
        // GA102 whitepaper (RTX 3090): FP32 35.6, FP16/BF16 tensor with FP32 accumulate 71,
        // TF32 35.6 TFLOPS, FP64 1/64 of FP32; 936 GB/s; 350 W.
        "RTX3090" => board(
            82,
            1695,
            9751,
            384,
            6,
            100,
            936.0,
            24.0,
            peaks(0.56, 35.6, 35.6, 71.0, 71.0, 71.0),
            350,
        ),
        // AD102 whitepaper (RTX 4090): FP32 82.6, FP16/BF16 tensor with FP32 accumulate 165.2,
        // TF32 82.6, FP8 330.3 TFLOPS, FP64 1/64 of FP32; 1,008 GB/s; 450 W.
        "RTX4090" => board(
            128,
            2520,
            10501,
            384,
            72,
            100,
            1008.0,
            24.0,
            peaks(1.3, 82.6, 82.6, 165.2, 165.2, 330.3),
            450,
        ),
        _ => board(108, 1410, 1593, 5120, 40, 164, 2039.0, 24.0, A100, 400),
    }
}

const A100: Peaks = peaks(19.5, 19.5, 156.0, 312.0, 312.0, 312.0);
const H100_SXM: Peaks = peaks(67.0, 67.0, 494.5, 989.5, 989.5, 1979.0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_bf16_gemm_is_compute_bound_at_three_quarters_of_peak() {
        let a100 = spec("A100-SXM4");
        let n = 8192.0_f64;
        let cost = KernelCost {
            flops: 2.0 * n * n * n,
            bytes: 3.0 * n * n * 2.0,
            unit: Unit::Tensor(Precision::Bf16),
        };
        let ns = price(&a100, &cost, &Efficiency::DEFAULT);
        // 1.1e12 flops at 0.75 x 312 TFLOP/s = 4.70 ms, plus the 3 us floor.
        let want = 2.0 * n * n * n / (0.75 * 312e12) * 1e9 + 3000.0;
        assert!((ns as f64 - want).abs() < 1.0, "{ns} vs {want}");
        // An H100 SXM does it 989.5 / 312 times faster (less the floor).
        let h100 = price(&spec("H100-SXM5"), &cost, &Efficiency::DEFAULT) as f64 - 3000.0;
        assert!(((ns as f64 - 3000.0) / h100 - 989.5 / 312.0).abs() < 1e-3);
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
        };
        let ns = price(&a100, &cost, &Efficiency::DEFAULT) as f64;
        let want = 8.0 * n / (1555e9 * 0.8) * 1e9 + 3000.0;
        assert!((ns - want).abs() < 1.0, "{ns} vs {want}");
    }

    #[test]
    fn a_tiny_kernel_takes_the_floor_and_precisions_map_to_their_peaks() {
        let a = spec("A100-SXM4");
        let tiny = KernelCost {
            flops: 10.0,
            bytes: 40.0,
            unit: Unit::Vector(Precision::F32),
        };
        assert_eq!(price(&a, &tiny, &Efficiency::DEFAULT), 3000);
        assert_eq!(a.peak_flops(Unit::Tensor(Precision::Tf32)), 156e12);
        assert_eq!(a.peak_flops(Unit::Vector(Precision::Bf16)), 19.5e12);
        assert_eq!(
            spec("V100-SXM2").peak_flops(Unit::Tensor(Precision::Bf16)),
            15.7e12
        );
        assert_eq!(Precision::from_code(4), Some(Precision::Bf16));
        assert_eq!(Precision::from_code(9), None);
    }
}
