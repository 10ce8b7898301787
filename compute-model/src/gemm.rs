//! How long a matrix product takes, by its shape.
//!
//! GEMM libraries (cuBLAS, cuBLASLt, CUTLASS) cut the result into tiles, give each tile to
//! one multiprocessor (CTA) and run the tiles in waves of one per multiprocessor; for shapes
//! with few tiles they also split the inner dimension `k` over several CTAs and add the
//! partial results afterwards (split-K). A product therefore takes
//! `waves x (the time of one tile)`, where a tile of `tm x tn` with inner length `k` costs
//! `2 tm tn (k + K_OVERHEAD)` operations at the multiprocessor's share of the peak, times the
//! architecture's fitted efficiency (`calibration`) and the tile's own efficiency (smaller
//! tiles reuse less data from shared memory: [`tiles`]). The library's heuristics pick the
//! configuration that finishes first; so does the model, over the tiles of the architecture
//! and splits of 1 to 16. `K_OVERHEAD` is the prologue and epilogue of a tile (filling the
//! pipeline, writing the result) in units of inner-dimension steps.
//!
//! On Hopper and Blackwell tensor cores the libraries also run persistent stream-K kernels
//! (CUTLASS 3.x `StreamKScheduler`; cuBLAS 12 picks them by heuristic): the iteration space,
//! tiles times inner-dimension steps, is shared evenly over the multiprocessors, so a partial
//! last wave costs a few tile prologues rather than a whole wave. The model takes the faster of
//! the two schedules, as the heuristics do.
//!
//! What this reproduces: wave quantisation (a product of 109 tiles on 108 SMs takes two
//! waves), the low efficiency of small products (one partial wave, short `k`), and the rise of
//! throughput with size that published GEMM sweeps show. What it does not: the kernel a
//! library picks for a particular shape (a few shapes run a slower kernel than their
//! neighbours, e.g. cuBLAS on RTX 4090 at N = 2040 vs 2056), power-limited clocks with random
//! data on long runs.

use crate::calibration::Class;
use crate::{Arch, Gemm, GpuSpec, Unit};

/// The prologue and epilogue of a tile, in inner-dimension steps.
pub const K_OVERHEAD: f64 = 64.0;

/// Shortest inner-dimension slice a split-K configuration gives each CTA.
const MIN_SPLIT_K: u64 = 256;

/// The tiles (`tm`, `tn`, efficiency relative to the largest) the libraries use on `gpu`'s
/// architecture for `unit`, largest first: Hopper and Blackwell tensor-core kernels (warp-group MMA) run
/// 128x256 tiles; earlier tensor cores 256x128; SIMT (FP32/FP64 without tensor cores)
/// 128x128.
pub fn tiles(gpu: &GpuSpec, unit: Unit) -> &'static [(u64, u64, f64)] {
    let tensor = matches!(Class::of(gpu, unit), Class::Half | Class::F8 | Class::Tf32);
    match (tensor, gpu.arch) {
        (true, Arch::Hopper | Arch::Blackwell) => &[
            (128, 256, 1.0),
            (128, 128, 0.9),
            (64, 128, 0.75),
            (64, 64, 0.55),
        ],
        (true, _) => &[
            (256, 128, 1.0),
            (128, 128, 0.92),
            (128, 64, 0.8),
            (64, 64, 0.6),
        ],
        (false, _) => &[
            (128, 128, 1.0),
            (128, 64, 0.9),
            (64, 64, 0.75),
            (32, 32, 0.5),
        ],
    }
}

/// Seconds `g` takes on `gpu` in `unit` at the fitted efficiency `e` of large products
/// (arithmetic only; the caller adds the memory roofline and the per-kernel floor).
pub fn seconds(gpu: &GpuSpec, g: &Gemm, unit: Unit, e: f64) -> f64 {
    let sms = gpu.sms.max(1) as u64;
    let per_sm = gpu.peak_flops(unit) / sms as f64;
    let stream_k_too = persistent(gpu, unit);
    let mut best = f64::INFINITY;
    for &(tm, tn, tile_e) in tiles(gpu, unit) {
        let out_tiles = g.batch * g.m.div_ceil(tm) * g.n.div_ceil(tn);
        for split in [1u64, 2, 4, 8, 16] {
            if split > 1 && (g.k / split < MIN_SPLIT_K || out_tiles >= sms) {
                break;
            }
            let ctas = out_tiles * split;
            let waves = ctas.div_ceil(sms) as f64;
            let k = g.k.div_ceil(split) as f64 + K_OVERHEAD;
            let mut t = waves * 2.0 * (tm * tn) as f64 * k / (per_sm * e * tile_e);
            if split > 1 {
                // The partial results (FP32) are written, read back and reduced.
                let partial = 2.0 * 4.0 * (g.batch * g.m * g.n * split) as f64;
                t += partial / (gpu.memory_gbps * 1e9 * crate::calibration::BYTES_EFFICIENCY);
            }
            best = best.min(t);
        }
        if stream_k_too {
            best = best.min(stream_k(gpu, g, tm, tn, per_sm * e * tile_e));
        }
    }
    best
}

/// Inner-dimension steps of one main-loop iteration of a tensor-core tile.
const K_STEP: u64 = 64;

/// Whether the libraries schedule `unit` on `gpu` with persistent stream-K kernels: the
/// warp-specialised kernels of Hopper and Blackwell (CUTLASS 3.x `StreamKScheduler`, which
/// cuBLAS 12 selects by heuristic) walk the whole iteration space, tiles times inner-dimension
/// steps, split evenly over the multiprocessors, so a partial last wave does not idle them.
fn persistent(gpu: &GpuSpec, unit: Unit) -> bool {
    matches!(gpu.arch, Arch::Hopper | Arch::Blackwell)
        && matches!(Class::of(gpu, unit), Class::Half | Class::F8 | Class::Tf32)
}

/// Seconds of a stream-K schedule of `tm x tn` tiles at `rate` FLOP/s per multiprocessor:
/// each multiprocessor runs an equal share of the main-loop iterations and pays the prologue
/// and epilogue of the (at most two) tiles its share touches, plus one more epilogue's worth
/// for the fix-up of a tile it shares with a neighbour (adding the neighbour's FP32 partial
/// tile, which stays in L2).
fn stream_k(gpu: &GpuSpec, g: &Gemm, tm: u64, tn: u64, rate: f64) -> f64 {
    let sms = gpu.sms.max(1) as u64;
    let out_tiles = g.batch * g.m.div_ceil(tm) * g.n.div_ceil(tn);
    let iterations = out_tiles * g.k.div_ceil(K_STEP);
    let share = iterations.div_ceil(sms);
    let steps = (share * K_STEP) as f64 + 3.0 * K_OVERHEAD;
    2.0 * (tm * tn) as f64 * steps / rate
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{spec, Precision};

    fn tflops(key: &str, m: u64, n: u64, k: u64) -> f64 {
        let g = Gemm { batch: 1, m, n, k };
        g.flops() / seconds(&spec(key), &g, Unit::Tensor(Precision::Bf16), 1.0) / 1e12
    }

    #[test]
    fn large_products_approach_peak_and_small_ones_do_not() {
        let big = tflops("A100-SXM4", 8192, 8192, 8192);
        // 2,048 tiles of 256x128 over 108 SMs: 19 waves of which the last is 96% full.
        assert!(big > 0.9 * 312.0 && big < 312.0, "{big}");
        let small = tflops("A100-SXM4", 512, 512, 512);
        assert!(small < 0.5 * big, "{small} vs {big}");
    }

    #[test]
    fn one_tile_more_than_a_wave_costs_a_wave() {
        // 108 tiles of 256x128 fill one A100 wave; growing m by one tile row adds a wave's worth
        // of a smaller tile configuration at most.
        let full = Gemm {
            batch: 1,
            m: 256 * 12,
            n: 128 * 9,
            k: 4096,
        };
        let over = Gemm {
            m: 256 * 12 + 1,
            ..full
        };
        let a = spec("A100-SXM4");
        let unit = Unit::Tensor(Precision::Bf16);
        let t_full = seconds(&a, &full, unit, 1.0);
        let t_over = seconds(&a, &over, unit, 1.0);
        assert!(t_over > 1.2 * t_full, "{t_over} vs {t_full}");
    }
}
