//! Fitting the calibrated model to the calibration set: the shared latency and each class's
//! efficiencies and fill time.

use super::{
    family, fills, priced_lat_bw, pricing_model, row_model, Calibration, ClassParams, Fit, HwClass,
};
use crate::calibration::{Measured, Row};
use crate::consts::{Algo, Proto};
use crate::query::Mode;
use nalgebra::{DMatrix, DVector};
use statrs::statistics::{Data, Median};
use topo::PathType;

/// A row as the fit sees it: NCCL's latency and bandwidth time for NCCL's choice, and the
/// measured time.
struct Prepared {
    class: HwClass,
    family: usize,
    fills: bool,
    lat: f64,
    x: f64,
    bytes: u64,
    n_nodes: usize,
    t_meas: f64,
    cap_group: Option<usize>,
    busbw_meas: Option<f64>,
}

fn prepare(r: &Row) -> Option<Prepared> {
    let cm = row_model(r, Mode::Nccl);
    let f = r.coll.func()?;
    let pred = cm
        .predict(r.coll, r.bytes, crate::DataType::Float32, crate::RedOp::Sum)
        .ok()?;
    let algo = Algo::ALL.into_iter().find(|a| a.name() == pred.algo)?;
    let proto = Proto::ALL.into_iter().find(|p| p.name() == pred.proto)?;
    let pricing = pricing_model(&cm.nccl, &cm.settings);
    let (lat, bw) = priced_lat_bw(&cm.nccl, pricing.as_ref(), f, algo, proto, r.bytes)?;
    let calib = Calibration {
        params: ClassParams::identity(HwClass::of(cm.shape())),
    };
    let x = calib.bandwidth_term(&cm.nccl, f, algo, bw as f64, r.bytes);
    let factor = r.coll.busbw_factor(cm.shape().n_ranks);
    let (t_meas, busbw) = match r.measured {
        Measured::TimeUs(t) => (t, None),
        Measured::BusBw(b) => (r.bytes as f64 / (1000.0 * b / factor), Some(b)),
    };
    let class = HwClass::of(cm.shape());
    Some(Prepared {
        class,
        family: family(algo),
        fills: fills(proto),
        lat: lat as f64,
        x,
        bytes: r.bytes,
        n_nodes: r.nodes,
        t_meas,
        cap_group: (class == HwClass::Pcie)
            .then_some((cm.shape().ring.type_intra >= PathType::Sys) as usize),
        busbw_meas: busbw,
    })
}

/// Plausible ranges: a fit outside them describes the rows, not the hardware.
const ETA_RANGE: (f64, f64) = (0.3, 1.6);
const LAT_FIXED_RANGE: (f64, f64) = (0.0, 60.0);

/// Rows below this size fit the shared latency (the "< 64 KB" band).
const LATENCY_BYTES: u64 = 64 << 10;
/// Huber threshold of the latency fit (relative error).
const HUBER: f64 = 0.15;
/// Pipeline fill times the fit tries (µs): 0.5 µs to 8 ms in steps of sqrt(2).
const FILL_GRID: (f64, f64, usize) = (-1.0, 0.5, 29);
/// Node-count exponents of the multi-node fill time the fit tries.
const NODE_EXPS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

/// One least-squares solution of a class's efficiencies.
struct Solved {
    eta: [f64; 4],
    err: f64,
    se: [f64; 4],
}

/// Weighted least squares for a class's 1/eta per family present at a fixed fill time, with the
/// shared latency known; returns the efficiencies, their standard errors and the weighted sum of
/// squared relative errors. Rows of 1 GB and more count twice: that is the regime the model is
/// judged on first. `None` when an efficiency leaves its plausible range.
fn solve(rows: &[&Prepared], probe: &ClassParams, lat_fixed: f64) -> Option<Solved> {
    let fams: Vec<usize> = (0..4)
        .filter(|&k| rows.iter().any(|r| r.family == k))
        .collect();
    if rows.len() < fams.len() || fams.is_empty() {
        return None;
    }
    let mut a = DMatrix::<f64>::zeros(rows.len(), fams.len());
    let mut b = DVector::<f64>::zeros(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let w = if r.bytes >= 1 << 30 { 2.0 } else { 1.0 } / r.t_meas;
        let xr = r.x * probe.ramp(r.fills, r.x, r.n_nodes);
        let j = fams.iter().position(|&k| k == r.family)?;
        a[(i, j)] = xr * w;
        b[i] = (r.t_meas - lat_fixed - r.lat) * w;
    }
    let svd = a.clone().svd(true, true);
    let sol = svd.solve(&b, 1e-12).ok()?;
    let mut eta = [1.0; 4];
    for (j, &k) in fams.iter().enumerate() {
        let inv = sol[j];
        if !(inv > 0.0 && (ETA_RANGE.0..=ETA_RANGE.1).contains(&(1.0 / inv))) {
            return None;
        }
        eta[k] = 1.0 / inv;
    }
    let err = (&a * &sol - &b).norm_squared();
    let var = covariance_diag(&svd, err, rows.len());
    let mut se = [0.0; 4];
    for (j, &k) in fams.iter().enumerate() {
        // d(eta)/d(1/eta) = -eta^2.
        se[k] = var[j].sqrt() * eta[k] * eta[k];
    }
    Some(Solved { eta, err, se })
}

/// Diagonal of the least-squares covariance `s^2 (A^T A)^-1 = s^2 V S^-2 V^T` (singular values
/// near zero dropped), `s^2` the residual sum of squares over the degrees of freedom.
fn covariance_diag(
    svd: &nalgebra::linalg::SVD<f64, nalgebra::Dyn, nalgebra::Dyn>,
    rss: f64,
    n: usize,
) -> Vec<f64> {
    let sv = &svd.singular_values;
    let p = sv.len();
    let dof = n.saturating_sub(p);
    let s2 = if dof > 0 { rss / dof as f64 } else { 0.0 };
    let Some(vt) = &svd.v_t else {
        return vec![0.0; p];
    };
    let cut = 1e-12 * sv.max();
    (0..vt.ncols())
        .map(|j| {
            (0..p)
                .filter(|&k| sv[k] > cut)
                .map(|k| (vt[(k, j)] / sv[k]).powi(2))
                .sum::<f64>()
                * s2
        })
        .collect()
}

/// The bandwidth part of a prepared row's time under a class's parameters (µs).
fn bandwidth_time(r: &Prepared, p: &ClassParams) -> f64 {
    r.x / p.eta[r.family] * p.ramp(r.fills, r.x, r.n_nodes)
}

/// Fits the latency shared by every class to the rows below 64 KB (where it dominates) after
/// their bandwidth part under the current class parameters: NCCL's per-step and per-hop
/// latencies are kept and `lat_fixed`, the launch and completion time NCCL's model leaves out,
/// is the Huber-weighted mean (iteratively reweighted: a row more than 15% off counts less,
/// since launch modes differ, e.g. CUDA graphs) of the measured time less NCCL's latency, in
/// relative terms. NCCL's hop latencies are not scaled: the per-hop costs the rows imply differ
/// more between systems (and network transports) than one scale can follow, so a fitted scale
/// predicts systems left out worse. Returns the value and its standard error; 0 without rows.
fn fit_latency(rows: &[Prepared], classes: &[ClassParams]) -> (f64, f64) {
    let small: Vec<(&Prepared, f64)> = rows
        .iter()
        .filter(|r| r.bytes < LATENCY_BYTES)
        .map(|r| {
            let p = classes
                .iter()
                .find(|c| c.class == r.class)
                .copied()
                .unwrap_or(ClassParams::identity(r.class));
            (r, r.t_meas - bandwidth_time(r, &p) - r.lat)
        })
        .collect();
    if small.len() < 2 {
        return (0.0, 0.0);
    }
    let mut huber = vec![1.0; small.len()];
    let mut out = (0.0, 0.0);
    for _ in 0..20 {
        // Weighted least squares for one constant, relative errors: weights (h / t)^2.
        let w: Vec<f64> = small
            .iter()
            .zip(&huber)
            .map(|((r, _), h)| (h / r.t_meas).powi(2))
            .collect();
        let sw: f64 = w.iter().sum();
        let c0 = small.iter().zip(&w).map(|((_, y), w)| w * y).sum::<f64>() / sw;
        let rss: f64 = small
            .iter()
            .zip(&w)
            .map(|((_, y), w)| w * (y - c0).powi(2))
            .sum();
        let se = (rss / (small.len() - 1) as f64 / sw).sqrt();
        let c0 = c0.clamp(LAT_FIXED_RANGE.0, LAT_FIXED_RANGE.1);
        out = (c0, se);
        for (i, (r, y)) in small.iter().enumerate() {
            let rel = ((c0 - y) / r.t_meas).abs();
            huber[i] = if rel <= HUBER { 1.0 } else { HUBER / rel };
        }
    }
    out
}

/// Fit every class's efficiencies and fill time with the shared latency given.
fn fit_classes(prepared: &[Prepared], lat_fixed: f64) -> Vec<ClassParams> {
    let fills: Vec<f64> = (0..FILL_GRID.2)
        .map(|i| 2f64.powf(FILL_GRID.0 + FILL_GRID.1 * i as f64))
        .collect();
    let mut classes = Vec::new();
    let mut no_fill = Vec::new();
    for c in HwClass::ALL {
        let rs: Vec<&Prepared> = prepared.iter().filter(|p| p.class == c).collect();
        let mut p = ClassParams::identity(c);
        p.n_rows = rs.len();
        p.lat_fixed = lat_fixed;
        if rs.is_empty() {
            classes.push(p);
            no_fill.push(c);
            continue;
        }
        // Host-bound caps: the measured plateau of each socket group.
        if c == HwClass::Pcie {
            for g in 0..2 {
                let v: Vec<f64> = rs
                    .iter()
                    .filter(|r| r.cap_group == Some(g))
                    .filter_map(|r| r.busbw_meas)
                    .collect();
                if !v.is_empty() {
                    p.busbw_cap[g] = Some(Data::new(v).median());
                }
            }
            classes.push(p);
            no_fill.push(c);
            continue;
        }
        // Only sizes on the ramp (64 KB .. 512 MB) tell the fill time apart; latency-bound rows
        // are the shared latency's.
        let has_ramp = rs
            .iter()
            .any(|r| (LATENCY_BYTES..512 << 20).contains(&r.bytes));
        if !has_ramp {
            no_fill.push(c);
        }
        // The bandwidth parameters come from the rows the bandwidth term matters for.
        let fit_rows: Vec<&Prepared> = rs
            .iter()
            .copied()
            .filter(|r| r.bytes >= LATENCY_BYTES)
            .collect();
        let exps: &[f64] = if c == HwClass::MultiNode {
            &NODE_EXPS
        } else {
            &[1.0]
        };
        let grid: Vec<(f64, f64)> = if has_ramp {
            fills
                .iter()
                .flat_map(|&t| exps.iter().map(move |&e| (t, e)))
                .chain(std::iter::once((0.0, 1.0)))
                .collect()
        } else {
            vec![(0.0, 1.0)]
        };
        let mut best: Option<(f64, ClassParams)> = None;
        for (t, e) in grid {
            let probe = ClassParams {
                fill_us: t,
                node_exp: e,
                ..p
            };
            if let Some(v) = solve(&fit_rows, &probe, lat_fixed) {
                if best.as_ref().is_none_or(|(err, _)| v.err < *err) {
                    let mut q = probe;
                    q.eta = v.eta;
                    q.se.eta = v.se;
                    best = Some((v.err, q));
                }
            }
        }
        classes.push(best.map(|(_, p)| p).unwrap_or(p));
    }
    // Classes without mid-size rows borrow the median fill time of the single-node classes that
    // have one (per node for the multi-node class).
    let fills: Vec<f64> = classes
        .iter()
        .filter(|p| p.fill_us > 0.0 && p.class != HwClass::MultiNode)
        .map(|p| p.fill_us)
        .collect();
    if !fills.is_empty() {
        let t = Data::new(fills).median();
        for p in classes.iter_mut() {
            if no_fill.contains(&p.class) && p.class != HwClass::Pcie {
                p.fill_us = t;
            }
        }
    }
    classes
}

/// Fit the model to a set of rows: the latency shared by all classes (`fit_latency`, from every
/// latency-bound row: launch and per-step costs are the host's and NCCL's more than the
/// fabric's) and each class's efficiencies and fill time with it, alternately (a few rounds:
/// each depends on the other only through the small rows). A class never seen gets the shared
/// latency and NCCL's bandwidths.
pub fn fit(rows: &[Row]) -> Fit {
    let prepared: Vec<Prepared> = rows.iter().filter_map(prepare).collect();
    let identity: Vec<ClassParams> = HwClass::ALL.map(ClassParams::identity).to_vec();
    let (mut lat, mut se) = fit_latency(&prepared, &identity);
    let mut classes = fit_classes(&prepared, lat);
    for _ in 0..3 {
        (lat, se) = fit_latency(&prepared, &classes);
        classes = fit_classes(&prepared, lat);
    }
    for p in classes.iter_mut() {
        p.se.lat_fixed = se;
    }
    Fit { classes }
}
