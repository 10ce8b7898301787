//! The boards: each GPU model's public numbers, by the `topo` profile key that names it.

use crate::{Arch, GpuSpec, Peaks};

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
    arch: Arch,
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
        arch,
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
            Arch::Volta,
        ),
        // A100 datasheet (SXM4 80 GB): FP64 tensor 19.5, FP32 19.5, TF32 156, BF16/FP16 312;
        // no FP8 (FP16 rate); 2,039 GB/s; 400 W.
        "A100-SXM4" => board(
            108,
            1410,
            1593,
            5120,
            40,
            164,
            2039.0,
            24.0,
            A100,
            400,
            Arch::Ampere,
        ),
        // The 40 GB board: 1,555 GB/s, the same peaks; 400 W.
        "A100-SXM4-40GB" => board(
            108,
            1410,
            1215,
            5120,
            40,
            164,
            1555.0,
            24.0,
            A100,
            400,
            Arch::Ampere,
        ),
        // A100 80 GB PCIe: the same peaks, 1,935 GB/s, 300 W.
        "A100-PCIE" => board(
            108,
            1410,
            1512,
            5120,
            40,
            164,
            1935.0,
            24.0,
            A100,
            300,
            Arch::Ampere,
        ),
        // H100 datasheet (SXM5): FP64 tensor 67, FP32 67, TF32 494.5, BF16/FP16 989.5,
        // FP8 1,979 TFLOPS; 3.35 TB/s; 700 W.
        "H100-SXM5" => board(
            132,
            1980,
            2619,
            5120,
            50,
            228,
            3350.0,
            50.0,
            H100_SXM,
            700,
            Arch::Hopper,
        ),
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
            Arch::Hopper,
        ),
        // H200 datasheet (SXM): the H100 SXM's peaks, 4.8 TB/s; 700 W.
        "H200" => board(
            132,
            1980,
            3201,
            6144,
            50,
            228,
            4800.0,
            50.0,
            H100_SXM,
            700,
            Arch::Hopper,
        ),
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
            Arch::Blackwell,
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
            Arch::Blackwell,
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
            Arch::Blackwell,
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
            Arch::AmpereGa10x,
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
            Arch::AmpereGa10x,
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
            Arch::Ada,
        ),
        _ => spec("A100-SXM4"),
    }
}

const A100: Peaks = peaks(19.5, 19.5, 156.0, 312.0, 312.0, 312.0);
const H100_SXM: Peaks = peaks(67.0, 67.0, 494.5, 989.5, 989.5, 1979.0);
