//! The compute model against published measurements: the fit of `calibration`'s efficiencies
//! and the report of its errors (ACCURACY.md's compute section).
//!
//! Each GEMM row gives an implied efficiency: the `e` at which the model's time for the row's
//! shape equals the measured time (for rows that are the best of a sweep of sizes, the model's
//! best over the same sweep). The fitted efficiency of an (architecture, class) is the median
//! implied efficiency of its rows; rows are scored fitted to every row but those of their own
//! publication (leave-one-source-out).

pub mod measurements;
pub mod report;
pub mod training;
use std::collections::BTreeMap;

use crate::calibration::{Class, DEFAULT_EFFICIENCY};
use crate::{price_at, Arch, Gemm, KernelCost, Precision, Unit};
use measurements::GemmCase;

/// Rows scored but not fitted to (data line, why).
pub const OUTSIDE_FIT: &[(usize, &str)] = &[
    (
        34,
        "A100 FP16 at 10% of peak, against 83-96% in the four other A100 sources",
    ),
    (
        35,
        "A100 BF16 at 11% of peak, against 83-96% in the four other A100 sources",
    ),
];

/// Fitted efficiencies: per (architecture, class), and per class over all architectures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fit {
    pub by_arch: BTreeMap<(Arch, Class), f64>,
    pub by_class: BTreeMap<Class, f64>,
}

impl Fit {
    /// The efficiency the fit gives `class` on `arch`.
    pub fn get(&self, arch: Arch, class: Class) -> f64 {
        self.by_arch
            .get(&(arch, class))
            .or_else(|| self.by_class.get(&class))
            .copied()
            .unwrap_or(DEFAULT_EFFICIENCY)
    }
}

/// The class a case's arithmetic falls in.
pub fn class(c: &GemmCase) -> Class {
    Class::of(&c.gpu, c.unit)
}

/// The model's FLOP/s for a case at efficiency `e` (the best shape for sweep rows).
pub fn modelled(c: &GemmCase, e: f64) -> f64 {
    c.shapes
        .iter()
        .map(|g| {
            let cost = KernelCost {
                flops: g.flops(),
                bytes: gemm_bytes(g, c.unit),
                unit: c.unit,
                gemm: Some(*g),
                attention: None,
            };
            g.flops() / (price_at(&c.gpu, &cost, e) * 1e-9)
        })
        .fold(0.0, f64::max)
}

/// The device memory a GEMM moves, as the runtime prices a cuBLAS call (`fake-cuda-blas`
/// `submit::duration_ns`): both operands read and the result written once, at the element
/// sizes of the precision (8-bit operands give a 16-bit result, as `torch._scaled_mm` does).
pub fn gemm_bytes(g: &Gemm, unit: Unit) -> f64 {
    let (Unit::Tensor(p) | Unit::Vector(p)) = unit;
    let (operand, result) = match p {
        Precision::F8 => (1.0, 2.0),
        Precision::F16 | Precision::Bf16 => (2.0, 2.0),
        Precision::F32 | Precision::Tf32 => (4.0, 4.0),
        Precision::F64 => (8.0, 8.0),
    };
    let (m, n, k) = (g.m as f64, g.n as f64, g.k as f64);
    g.batch as f64 * ((m * k + k * n) * operand + m * n * result)
}

/// The efficiency at which the model matches the case (bisection over 0.01 ..= 4).
pub fn implied(c: &GemmCase) -> f64 {
    let (mut lo, mut hi) = (0.01_f64, 4.0_f64);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if modelled(c, mid) < c.measured {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Median of `v` (NaN when empty).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Fits the efficiencies to `cases` whose implied efficiencies are `implied` (same order),
/// leaving out the cases `skip` says.
pub fn fit(cases: &[GemmCase], implied: &[f64], skip: impl Fn(&GemmCase) -> bool) -> Fit {
    let mut by_arch: BTreeMap<(Arch, Class), Vec<f64>> = BTreeMap::new();
    let mut by_class: BTreeMap<Class, Vec<f64>> = BTreeMap::new();
    for (c, &e) in cases.iter().zip(implied) {
        if skip(c) || OUTSIDE_FIT.iter().any(|(line, _)| *line == c.line) {
            continue;
        }
        by_arch.entry((c.gpu.arch, class(c))).or_default().push(e);
        by_class.entry(class(c)).or_default().push(e);
    }
    Fit {
        by_arch: by_arch
            .into_iter()
            .map(|(k, mut v)| (k, median(&mut v)))
            .collect(),
        by_class: by_class
            .into_iter()
            .map(|(k, mut v)| (k, median(&mut v)))
            .collect(),
    }
}

/// One GEMM row scored.
#[derive(Debug, Clone)]
pub struct GemmScore {
    pub case: GemmCase,
    /// Implied efficiency of the row itself.
    pub implied: f64,
    /// Modelled FLOP/s fitted to all rows, and fitted without the row's source.
    pub all: f64,
    pub held_out: f64,
}

impl GemmScore {
    /// Signed error of the held-out prediction, percent of the measurement.
    pub fn held_out_error(&self) -> f64 {
        100.0 * (self.held_out / self.case.measured - 1.0)
    }

    /// Signed error of the prediction fitted to all rows.
    pub fn all_error(&self) -> f64 {
        100.0 * (self.all / self.case.measured - 1.0)
    }
}

/// Every GEMM case scored, and the fit to all of them.
pub fn score_gemms(cases: &[GemmCase]) -> (Vec<GemmScore>, Fit) {
    let imp: Vec<f64> = cases.iter().map(implied).collect();
    let all = fit(cases, &imp, |_| false);
    let scores = cases
        .iter()
        .zip(&imp)
        .map(|(c, &e)| {
            let held = fit(cases, &imp, |o| o.source == c.source);
            GemmScore {
                case: c.clone(),
                implied: e,
                all: modelled(c, all.get(c.gpu.arch, class(c))),
                held_out: modelled(c, held.get(c.gpu.arch, class(c))),
            }
        })
        .collect();
    (scores, all)
}
