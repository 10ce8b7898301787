//! Fitting the calibrated model to the calibration set: the shared latency, the shared pipeline
//! stage size, and each class's efficiencies (and the multi-node fill time and tree-level size).

use super::{
    family, fills, pays_levels, pcie_path, priced_lat_bw, pricing_model, row_model, Calibration,
    ClassParams, Fit, HwClass, Pipeline, N_FAMILIES,
};
use crate::calibration::{Measured, Row};
use crate::consts::{Algo, Proto};
use crate::query::Mode;
use nalgebra::{DMatrix, DVector};
use statrs::statistics::{Data, Median};

/// A row as the fit sees it: NCCL's latency and bandwidth time for NCCL's choice, its pipeline,
/// and the measured time.
struct Prepared {
    class: HwClass,
    family: usize,
    proto: Proto,
    lat: f64,
    x: f64,
    bytes: u64,
    pipe: Pipeline,
    t_meas: f64,
    pcie_path: Option<usize>,
    /// Measured bus bandwidth over the GPU's PCIe link bandwidth (PCIe boxes).
    pcie_ratio: Option<f64>,
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
    let class = HwClass::of(cm.shape());
    // NCCL's own bandwidth term in calibrated form: the fit's starting point.
    let x = Calibration {
        params: ClassParams::identity(class),
    }
    .bandwidth_term(&cm.nccl, f, algo, proto, bw as f64, r.bytes);
    let factor = r.coll.busbw_factor(cm.shape().n_ranks);
    let (t_meas, busbw) = match r.measured {
        Measured::TimeUs(t) => (t, None),
        Measured::BusBw(b) => (r.bytes as f64 / (1000.0 * b / factor), Some(b)),
    };
    Some(Prepared {
        class,
        family: family(algo, proto),
        proto,
        lat: lat as f64,
        x,
        bytes: r.bytes,
        pipe: Pipeline::of(cm.shape(), f, algo),
        t_meas,
        pcie_path: (class == HwClass::Pcie).then_some(pcie_path(cm.shape())),
        pcie_ratio: busbw
            .filter(|_| cm.shape().gpu_pci_bw > 0.0)
            .map(|b| b / cm.shape().gpu_pci_bw as f64),
    })
}

/// Plausible ranges: a fit outside them describes the rows, not the hardware.
const ETA_RANGE: (f64, f64) = (0.3, 1.6);
const LAT_FIXED_RANGE: (f64, f64) = (0.0, 60.0);
/// Data per inter-node tree level and network channel (bytes): from nothing to 64 MiB.
const LEVEL_BYTES_RANGE: (f64, f64) = (0.0, 64.0 * 1048576.0);

/// Rows from this size on are bandwidth-bound for the efficiency of a transfer without a fill.
const BANDWIDTH_BOUND: u64 = 256 << 20;
/// Rows below this size fit the shared latency (the "< 64 KB" band).
const LATENCY_BYTES: u64 = 64 << 10;
/// Huber threshold of the latency fit (relative error).
const HUBER: f64 = 0.15;
/// Multi-node pipeline fill times the fit tries (µs): 0.5 µs to 8 ms in steps of sqrt(2).
const FILL_GRID: (f64, f64, usize) = (-1.0, 0.5, 29);
/// Node-count exponents of the multi-node fill time the fit tries.
const NODE_EXPS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];
/// Pipeline stage sizes the fit tries (bytes per channel): 1 KiB to 16 MiB in steps of sqrt(2).
const STAGE_GRID: (f64, f64, usize) = (10.0, 0.5, 29);

fn grid(g: (f64, f64, usize)) -> impl Iterator<Item = f64> {
    (0..g.2).map(move |i| 2f64.powf(g.0 + g.1 * i as f64))
}

/// One least-squares solution of a class's linear parameters.
struct Solved {
    eta: [f64; N_FAMILIES],
    level_bytes: f64,
    err: f64,
    se: [f64; N_FAMILIES],
    se_level_bytes: f64,
}

/// Weighted least squares for a class's 1/eta per family present (and, with `levels`, the data
/// per inter-node tree level) at a fixed fill, with the shared latency known; returns the
/// parameters, their standard errors and the weighted sum of squared relative errors. Rows of
/// 1 GB and more count twice: that is the regime the model is judged on first. `None` when a
/// parameter leaves its plausible range.
fn solve(rows: &[&Prepared], probe: &ClassParams, lat_fixed: f64, levels: bool) -> Option<Solved> {
    let fams: Vec<usize> = (0..N_FAMILIES)
        .filter(|&k| rows.iter().any(|r| r.family == k))
        .collect();
    let levels = levels
        && rows
            .iter()
            .any(|r| pays_levels(r.proto) && r.pipe.level_us_per_byte > 0.0);
    let cols = fams.len() + levels as usize;
    if rows.len() < cols || fams.is_empty() {
        return None;
    }
    let mut a = DMatrix::<f64>::zeros(rows.len(), cols);
    let mut b = DVector::<f64>::zeros(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let w = if r.bytes >= 1 << 30 { 2.0 } else { 1.0 } / r.t_meas;
        let xr = r.x * probe.ramp(r.proto, r.x, &r.pipe);
        let j = fams.iter().position(|&k| k == r.family)?;
        a[(i, j)] = xr * w;
        if levels && pays_levels(r.proto) {
            a[(i, cols - 1)] = r.pipe.level_us_per_byte * w;
        }
        b[i] = (r.t_meas - lat_fixed - r.lat) * w;
    }
    let svd = a.clone().svd(true, true);
    let sol = svd.solve(&b, 1e-12).ok()?;
    let mut eta = [1.0; N_FAMILIES];
    for (j, &k) in fams.iter().enumerate() {
        let inv = sol[j];
        if !(inv > 0.0 && (ETA_RANGE.0..=ETA_RANGE.1).contains(&(1.0 / inv))) {
            return None;
        }
        eta[k] = 1.0 / inv;
    }
    let level_bytes = if levels { sol[cols - 1] } else { 0.0 };
    if !(LEVEL_BYTES_RANGE.0..=LEVEL_BYTES_RANGE.1).contains(&level_bytes) {
        return None;
    }
    let err = (&a * &sol - &b).norm_squared();
    let var = covariance_diag(&svd, err, rows.len());
    let mut se = [0.0; N_FAMILIES];
    for (j, &k) in fams.iter().enumerate() {
        // d(eta)/d(1/eta) = -eta^2.
        se[k] = var[j].sqrt() * eta[k] * eta[k];
    }
    let se_level_bytes = if levels { var[cols - 1].sqrt() } else { 0.0 };
    Some(Solved {
        eta,
        level_bytes,
        err,
        se,
        se_level_bytes,
    })
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

/// Fits the latency shared by every class to the rows below 64 KB (where it dominates) after
/// their transfer time under the current class parameters: NCCL's per-step and per-hop
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
            let transfer = p.transfer_us(r.family, r.proto, r.x, &r.pipe);
            (r, r.t_meas - transfer - r.lat)
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

/// Whether a row can tell its family's efficiency apart: a transfer that pays a pipeline fill
/// is fitted with its fill at every size; one that pays none (LL128 across nodes) only once it
/// is bandwidth-bound (`BANDWIDTH_BOUND` and more), since below that its climb to the plateau,
/// which the model does not describe, would read as a lower efficiency at every size (TCP-offload
/// LL128 rings at 8-32 MB priced AWS EFA rings at 512 MB-2 GB a third slow).
fn tells_efficiency(r: &Prepared) -> bool {
    r.proto == Proto::Ll || fills(r.proto, r.pipe.n_nodes) || r.bytes >= BANDWIDTH_BOUND
}

/// Whether rows on the ramp (64 KB .. 512 MB) are present: only they tell a fill time apart;
/// latency-bound rows are the shared latency's.
fn has_ramp(rows: &[&Prepared]) -> bool {
    rows.iter()
        .any(|r| (LATENCY_BYTES..512 << 20).contains(&r.bytes))
}

/// The best solve over a grid of probes (lowest error), with the probe it was found at.
fn best_of(
    rows: &[&Prepared],
    probes: impl Iterator<Item = ClassParams>,
    lat_fixed: f64,
    levels: bool,
) -> Option<(Solved, ClassParams)> {
    let mut best: Option<(Solved, ClassParams)> = None;
    for probe in probes {
        if let Some(v) = solve(rows, &probe, lat_fixed, levels) {
            if best.as_ref().is_none_or(|(b, _)| v.err < b.err) {
                best = Some((v, probe));
            }
        }
    }
    best
}

fn with_solution(v: &Solved, probe: ClassParams) -> ClassParams {
    let mut q = probe;
    q.eta = v.eta;
    q.se.eta = v.se;
    q.level_bytes = v.level_bytes;
    q.se.level_bytes = v.se_level_bytes;
    q
}

/// Fit every class's linear parameters, the shared stage size and the multi-node fill with the
/// shared latency given.
fn fit_classes(prepared: &[Prepared], lat_fixed: f64) -> Vec<ClassParams> {
    let rows_of = |c: HwClass| -> Vec<&Prepared> {
        prepared
            .iter()
            .filter(|p| p.class == c && p.bytes >= LATENCY_BYTES && tells_efficiency(p))
            .collect()
    };
    let base = |c: HwClass| ClassParams {
        n_rows: prepared.iter().filter(|p| p.class == c).count(),
        lat_fixed,
        ..ClassParams::identity(c)
    };
    // The single-node classes with NVLink share the stage size: the value whose efficiencies fit
    // them best together.
    let single = [
        HwClass::NvSwitchAmpere,
        HwClass::NvSwitchHopper,
        HwClass::NvLinkDirect,
    ];
    let single_rows: Vec<Vec<&Prepared>> = single.iter().map(|&c| rows_of(c)).collect();
    let any_ramp = single_rows.iter().any(|rs| has_ramp(rs));
    let stages: Vec<f64> = if any_ramp {
        grid(STAGE_GRID).chain([0.0]).collect()
    } else {
        vec![0.0]
    };
    let mut best_single: Option<(f64, Vec<ClassParams>)> = None;
    for k in stages {
        let mut total = 0.0;
        let mut fitted = Vec::new();
        let mut ok = true;
        for (&c, rs) in single.iter().zip(&single_rows) {
            let probe = ClassParams {
                stage_bytes: k,
                ..base(c)
            };
            if rs.is_empty() {
                fitted.push(probe);
                continue;
            }
            match solve(rs, &probe, lat_fixed, false) {
                Some(v) => {
                    total += v.err;
                    fitted.push(with_solution(&v, probe));
                }
                None => ok = false,
            }
        }
        if ok && best_single.as_ref().is_none_or(|(e, _)| total < *e) {
            best_single = Some((total, fitted));
        }
    }
    let single_fit =
        best_single.map_or_else(|| single.iter().map(|&c| base(c)).collect(), |(_, v)| v);
    let stage_bytes = single_fit.first().map_or(0.0, |p| p.stage_bytes);

    // PCIe boxes: the bus bandwidth relative to the GPU's PCIe link, the median of each path's
    // rows (bandwidth-bound, 16 MB and more); a path without rows takes the median of the same
    // kind (peer-to-peer or host memory) on either socket count, then of every PCIe row.
    let mut pcie = base(HwClass::Pcie);
    let ratios = |keep: &dyn Fn(usize) -> bool| -> Option<f64> {
        let v: Vec<f64> = prepared
            .iter()
            .filter(|r| r.bytes >= 16 << 20)
            .filter(|r| r.pcie_path.is_some_and(keep))
            .filter_map(|r| r.pcie_ratio)
            .collect();
        (!v.is_empty()).then(|| Data::new(v).median())
    };
    for g in 0..4 {
        pcie.pcie_eff[g] = ratios(&|p| p == g)
            .or_else(|| ratios(&|p| p / 2 == g / 2))
            .or_else(|| ratios(&|_| true));
    }

    // One NVLink domain across hosts: its own efficiencies and its own stage size on the same
    // grid. A rack's AllReduce still climbs from 1 to 16 GB (726 to 919 GB/s on a GB300 rack),
    // far more slowly than one NVSwitch node's: a slice crosses the rack's switch trays and 72
    // GPUs' NVLS channels, so each stage holds more before the next runs at full rate. Without
    // rows the class takes the single-node stage size.
    let mut mnnvl = ClassParams {
        stage_bytes,
        ..base(HwClass::Mnnvl)
    };
    let mnnvl_rows = rows_of(HwClass::Mnnvl);
    if !mnnvl_rows.is_empty() {
        let probes = grid(STAGE_GRID).chain([0.0]).map(|k| ClassParams {
            stage_bytes: k,
            ..mnnvl
        });
        if let Some((v, probe)) = best_of(&mnnvl_rows, probes, lat_fixed, false) {
            mnnvl = with_solution(&v, probe);
        }
    }

    // Several nodes: the fill time and its node exponent on a grid, the data per tree level with
    // the efficiencies.
    let mn_rows = rows_of(HwClass::MultiNode);
    let mut multi = ClassParams {
        stage_bytes,
        ..base(HwClass::MultiNode)
    };
    if !mn_rows.is_empty() {
        let ramp = has_ramp(&mn_rows);
        let probes: Vec<ClassParams> = if ramp {
            grid(FILL_GRID)
                .flat_map(|t| NODE_EXPS.iter().map(move |&e| (t, e)))
                .chain([(0.0, 1.0)])
                .map(|(t, e)| ClassParams {
                    fill_us: t,
                    node_exp: e,
                    ..multi
                })
                .collect()
        } else {
            vec![multi]
        };
        if let Some((v, probe)) = best_of(&mn_rows, probes.into_iter(), lat_fixed, ramp) {
            multi = with_solution(&v, probe);
        }
    }
    let mut classes = single_fit;
    classes.push(pcie);
    classes.push(mnnvl);
    classes.push(multi);
    classes.sort_by_key(|p| HwClass::ALL.iter().position(|&c| c == p.class));
    classes
}

/// Fit the model to a set of rows: the latency shared by all classes (`fit_latency`, from every
/// latency-bound row: launch and per-step costs are the host's and NCCL's more than the
/// fabric's) and each class's parameters with it, alternately (a few rounds: each depends on the
/// other only through the small rows). A class never seen gets the shared latency and stage size
/// and NCCL's bandwidths.
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
