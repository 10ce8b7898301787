//! Calibrated mode: NCCL's selection and NCCL's structure (latency per step, bandwidth from the
//! search's channels), with a small set of parameters per hardware class fitted by least squares
//! to the calibration set (`calibration::ROWS`).
//!
//! For the algorithm/protocol NCCL picks, with NCCL's latency `L` and algorithm bandwidth `A`:
//!
//! ```text
//! time = lat_fixed + lat_scale * L + S / (1000 * A_cal) * (1 + (S_half / S)^gamma)
//! A_cal = eta[family] * A           (Ring, Tree, NVLSTree, CollNet, PAT)
//! A_cal = eta[nvls] * nCh * bwIntra (NVLS: the switch reduces, so a GPU's algorithm bandwidth is
//!                                    its NVLink bandwidth whatever the number of GPUs)
//! A_cal = busbw_cap / busbw_factor  (PCIe boxes without GPU peer-to-peer: host-memory bound)
//! 1/eta_eff = 1/eta[family] + net_load_coef * load^2   (multi-node: see `net_load`)
//! ```
//!
//! `L` and `A` come from NCCL 2.30.7's tables even when an older release made the selection
//! (`pricing_model`): the hardware is the same, and older releases' bandwidth formulas (NVLSTree
//! before 2.28, for instance) would otherwise have to be absorbed by the fitted efficiencies.
//! `load` is the network traffic NCCL's ring puts on each GPU's PCIe link relative to that link:
//! with one 400G NIC per Gen5 GPU the link carries the NIC's line rate both ways and the network
//! runs below NCCL's model, with one NIC per two GPUs it does not.
//!
//! `eta` is the effective fraction of NCCL's modelled link bandwidth, `lat_scale` scales NCCL's
//! per-step latencies, and `(S_half, gamma)` describe the pipeline efficiency at small and mid
//! sizes (a log-logistic ramp; `S_half` grows with the node count across the network). Classes:
//! NVSwitch Ampere, NVSwitch Hopper (and newer), direct NVLink, PCIe, multi-node. A class without
//! data for a parameter keeps NCCL's value (eta 1, lat_scale 1) or the median ramp of the fitted
//! classes.
//!
//! Fitting (`fit`): for each class a grid over (gamma, S_half), and for each grid point a weighted
//! linear least-squares solve (nalgebra SVD) for (lat_scale, 1/eta per family) minimising the
//! relative time error; residual statistics use statrs.

use crate::calibration::{Measured, Row, System, ROWS};
use crate::consts::{Algo, Func, Proto};
use crate::model::NcclModel;
use crate::query::{CostModel, Mode};
use crate::settings::TunerSettings;
use crate::shape::CommShape;
use nalgebra::{DMatrix, DVector};
use serde::Serialize;
use statrs::statistics::{Data, Median, OrderStatistics};
use std::sync::OnceLock;
use topo::{NcclVersion, PathType};

/// Hardware classes of the calibrated model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum HwClass {
    /// One node, NVLink through NVSwitches, Volta/Ampere.
    NvSwitchAmpere,
    /// One node, NVLink through NVSwitches, Hopper and newer.
    NvSwitchHopper,
    /// One node, NVLink without a switch (bridges, hybrid cube mesh).
    NvLinkDirect,
    /// One node, PCIe only.
    Pcie,
    /// Several nodes.
    MultiNode,
}

impl HwClass {
    /// All classes.
    pub const ALL: [HwClass; 5] = [
        HwClass::NvSwitchAmpere,
        HwClass::NvSwitchHopper,
        HwClass::NvLinkDirect,
        HwClass::Pcie,
        HwClass::MultiNode,
    ];
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            HwClass::NvSwitchAmpere => "nvswitch-ampere",
            HwClass::NvSwitchHopper => "nvswitch-hopper",
            HwClass::NvLinkDirect => "nvlink-direct",
            HwClass::Pcie => "pcie",
            HwClass::MultiNode => "multi-node",
        }
    }
    /// The class of a communicator.
    pub fn of(s: &CommShape) -> HwClass {
        if s.n_nodes > 1 {
            HwClass::MultiNode
        } else if s.ring.type_intra == PathType::Nvl {
            if s.has_nvswitch {
                if s.min_comp_cap >= 90 {
                    HwClass::NvSwitchHopper
                } else {
                    HwClass::NvSwitchAmpere
                }
            } else {
                HwClass::NvLinkDirect
            }
        } else {
            HwClass::Pcie
        }
    }
}

/// Algorithm families with their own efficiency.
pub const FAMILIES: [&str; 4] = ["ring", "tree", "nvls", "nvls-tree"];

fn family(a: Algo) -> usize {
    match a {
        Algo::Ring => 0,
        Algo::Tree | Algo::CollNetChain | Algo::CollNetDirect | Algo::Pat => 1,
        Algo::Nvls => 2,
        Algo::NvlsTree => 3,
    }
}

/// Parameters of one class.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClassParams {
    /// The class.
    pub class: HwClass,
    /// Fixed time per operation (µs): launch and completion NCCL's model leaves out.
    pub lat_fixed: f64,
    /// Scale on NCCL's latency.
    pub lat_scale: f64,
    /// Effective fraction of NCCL's bandwidth per family (ring, tree, nvls, nvls-tree).
    pub eta: [f64; 4],
    /// Size (bytes, per node for multi-node) at which the pipeline runs at half speed.
    pub s_half: f64,
    /// Steepness of the ramp.
    pub gamma: f64,
    /// Extra inverse efficiency per unit of network load on a GPU's PCIe link ([`net_load`]):
    /// `1/eta_eff = 1/eta[family] + net_load_coef * net_load`.
    pub net_load_coef: f64,
    /// Range of the contention term ([`net_load`] squared) over the rows fitted: predictions
    /// clamp to it rather than extrapolate the efficiency to loads no measurement had.
    pub contention_range: (f64, f64),
    /// Host-bound bus bandwidth caps (GB/s): GPUs on one CPU socket, across sockets.
    pub busbw_cap: [Option<f64>; 2],
    /// Rows this class was fitted to.
    pub n_rows: usize,
}

impl ClassParams {
    /// NCCL's own model expressed in these parameters.
    pub fn identity(class: HwClass) -> ClassParams {
        ClassParams {
            class,
            lat_fixed: 0.0,
            lat_scale: 1.0,
            eta: [1.0; 4],
            s_half: 0.0,
            gamma: 1.0,
            net_load_coef: 0.0,
            contention_range: (0.0, 0.0),
            busbw_cap: [None, None],
            n_rows: 0,
        }
    }
}

/// The calibrated parameters for one communicator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Calibration {
    /// Class parameters.
    pub params: ClassParams,
}

/// The fitted parameters of every class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// One entry per class.
    pub classes: Vec<ClassParams>,
}

impl Fit {
    /// Parameters of a class.
    pub fn class(&self, c: HwClass) -> ClassParams {
        self.classes
            .iter()
            .copied()
            .find(|p| p.class == c)
            .unwrap_or(ClassParams::identity(c))
    }
}

static FITTED: OnceLock<Fit> = OnceLock::new();

/// The fit of the whole calibration set (computed once per process, a few milliseconds).
pub fn fitted() -> &'static Fit {
    FITTED.get_or_init(|| fit(ROWS))
}

impl Calibration {
    /// Parameters for a communicator.
    pub fn for_shape(s: &CommShape) -> Calibration {
        Calibration {
            params: fitted().class(HwClass::of(s)),
        }
    }

    /// NCCL's own model in calibrated form (no fit needed).
    pub fn identity(s: &CommShape) -> Calibration {
        Calibration {
            params: ClassParams::identity(HwClass::of(s)),
        }
    }

    /// Calibrated time (µs) of an algorithm/protocol NCCL chose; `pricing` is
    /// [`pricing_model`]'s reference tables when the selecting release is an older one.
    pub fn time_us(
        &self,
        m: &NcclModel,
        pricing: Option<&NcclModel>,
        f: Func,
        a: Algo,
        p: Proto,
        bytes: u64,
    ) -> f64 {
        let Some((lat, bw)) = priced_lat_bw(m, pricing, f, a, p, bytes) else {
            return f64::NAN;
        };
        let x = self.bandwidth_term(m, f, a, bw as f64, bytes);
        let (lo, hi) = self.params.contention_range;
        let load = contention(net_load(&m.shape)).clamp(lo, hi.max(lo));
        let inv_eta = 1.0 / self.params.eta[family(a)] + self.params.net_load_coef * load;
        self.params.lat_fixed
            + self.params.lat_scale * lat as f64
            + x * inv_eta * ramp(&self.params, bytes, m.shape.n_nodes)
    }

    /// `S / (1000 * A)` with NCCL's structure changed where calibrated mode differs (NVLS, caps),
    /// before the efficiency.
    fn bandwidth_term(&self, m: &NcclModel, f: Func, a: Algo, bw: f64, bytes: u64) -> f64 {
        let s = &m.shape;
        let mut alg = bw;
        if a == Algo::Nvls && f == Func::AllReduce {
            alg = s.nvls.n_channels as f64 * s.nvls.bw_intra as f64;
        }
        let cross_socket = s.ring.type_intra >= PathType::Sys;
        if let Some(cap) = self.params.busbw_cap[cross_socket as usize] {
            let factor = crate::types::Collective::from_func(f).busbw_factor(s.n_ranks);
            // Host-bound: the CPU link and memory set the bus bandwidth, not NCCL's path
            // bandwidth (which can be lower or higher); the cap is on the achieved value.
            alg = cap / factor * self.params.eta[family(a)];
        }
        bytes as f64 / (1000.0 * alg)
    }

    /// Calibrated point-to-point time from the uncalibrated one.
    pub fn p2p_time_us(&self, t: f64, _bytes: u64) -> f64 {
        t / self.params.eta[0]
    }
}

/// How much of a GPU's PCIe link the network traffic takes: the inter-node bandwidth NCCL's ring
/// gives each GPU (`nChannels * bwInter / ppn`) over the GPU's PCIe link bandwidth. About 1 when
/// every GPU has its own NIC of its PCIe link's speed (8x 400G on Gen5, 8x HDR on Gen4: the GPU
/// link carries the NIC's line rate both ways next to its other PCIe traffic), 0.5 with one NIC
/// per two GPUs; 0 on one node or when the PCIe bandwidth is unknown.
pub fn net_load(s: &CommShape) -> f64 {
    if s.n_nodes < 2 || s.gpu_pci_bw <= 0.0 || s.n_ranks == 0 {
        return 0.0;
    }
    let ppn = s.n_ranks as f64 / s.n_nodes as f64;
    s.ring.n_channels as f64 * s.ring.bw_inter as f64 / ppn / s.gpu_pci_bw as f64
}

/// The contention term of a load: convex (queueing-like), negligible for lightly loaded links.
fn contention(load: f64) -> f64 {
    load * load
}

/// The tuning tables calibrated mode prices with: NCCL 2.30's (the most recent model of the same
/// hardware) when the selection comes from an older release. The hardware does not change with
/// the release whose tuner picks the algorithm, so one set of calibrated parameters should not
/// have to absorb differences between releases' bandwidth formulas (e.g. NVLSTree before 2.28).
pub fn pricing_model(m: &NcclModel, settings: &TunerSettings) -> Option<NcclModel> {
    let reference = NcclVersion::DEFAULT.to_string();
    if m.profile.version == reference {
        return None;
    }
    let st = TunerSettings {
        version: None,
        ..settings.clone()
    };
    NcclModel::new(&m.shape, &st, NcclVersion::DEFAULT).ok()
}

/// `(latency, bandwidth)` of a chosen algorithm/protocol in the pricing tables, falling back to
/// the selecting release's own when the reference release has no such combination.
pub fn priced_lat_bw(
    m: &NcclModel,
    pricing: Option<&NcclModel>,
    f: Func,
    a: Algo,
    p: Proto,
    bytes: u64,
) -> Option<(f32, f32)> {
    pricing
        .and_then(|r| r.lat_bw(f, a, p, bytes, 1))
        .or_else(|| m.lat_bw(f, a, p, bytes, 1))
}

fn ramp(p: &ClassParams, bytes: u64, n_nodes: usize) -> f64 {
    if p.s_half <= 0.0 || bytes == 0 {
        return 1.0;
    }
    let s_half = p.s_half * n_nodes as f64;
    1.0 + (s_half / bytes as f64).powf(p.gamma)
}

/// A calibration row priced by both modes.
#[derive(Debug, Clone, Serialize)]
pub struct Scored {
    /// Row index in `ROWS`.
    pub index: usize,
    /// Class.
    pub class: HwClass,
    /// Measured value (busbw GB/s or time µs).
    pub measured: f64,
    /// Whether the value is a time (otherwise busbw).
    pub is_time: bool,
    /// NCCL's choice.
    pub algo: String,
    /// NCCL mode.
    pub nccl: f64,
    /// Calibrated mode.
    pub calibrated: f64,
    /// Calibrated mode fitted without this row's system (leave-one-system-out).
    pub held_out: f64,
}

impl Scored {
    /// Absolute % error of NCCL mode.
    pub fn err_nccl(&self) -> f64 {
        100.0 * (self.nccl - self.measured).abs() / self.measured
    }
    /// Absolute % error of calibrated mode.
    pub fn err_cal(&self) -> f64 {
        100.0 * (self.calibrated - self.measured).abs() / self.measured
    }
    /// Absolute % error of the held-out fit.
    pub fn err_held_out(&self) -> f64 {
        100.0 * (self.held_out - self.measured).abs() / self.measured
    }
}

/// The model a row runs on.
pub fn row_model(r: &Row, mode: Mode) -> CostModel {
    let shape = r.system.shape(r.nodes, r.ppn, r.nvls);
    let version = r
        .nccl
        .and_then(|v| v.parse::<NcclVersion>().ok())
        .unwrap_or(NcclVersion::DEFAULT);
    let settings = TunerSettings {
        algo: r.algo.map(|a| a.name().to_string()),
        ..Default::default()
    };
    CostModel::new(&shape, &settings, version, mode)
        .expect("calibration rows use valid settings (checked by tests)")
}

struct Prepared {
    class: HwClass,
    load: f64,
    family: usize,
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
        load: contention(net_load(cm.shape())),
        family: family(algo),
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
const LAT_SCALE_RANGE: (f64, f64) = (0.3, 10.0);
const LAT_FIXED_RANGE: (f64, f64) = (0.0, 60.0);

/// Weighted least squares for (lat_fixed, lat_scale, 1/eta per family present) at a fixed ramp;
/// returns the parameters and the weighted sum of squared relative errors. Rows of 1 GB and more
/// count twice: that is the regime the model is judged on first.
fn solve(rows: &[&Prepared], s_half: f64, gamma: f64, fit_lat: bool) -> Option<Solved> {
    // A small active set: the free fit first, then with the fixed latency at 0, then with NCCL's
    // latency scale, then both; the best fit inside the plausible ranges wins.
    let variants: &[(bool, bool)] = if fit_lat {
        &[(true, true), (false, true), (true, false), (false, false)]
    } else {
        &[(false, false)]
    };
    variants
        .iter()
        .filter_map(|&(c0, lam)| solve_with(rows, s_half, gamma, c0, lam))
        .min_by(|a, b| a.err.total_cmp(&b.err))
}

/// One least-squares solution.
struct Solved {
    lat_fixed: f64,
    lat_scale: f64,
    eta: [f64; 4],
    net_load_coef: f64,
    err: f64,
}

fn solve_with(
    rows: &[&Prepared],
    s_half: f64,
    gamma: f64,
    fit_fixed: bool,
    fit_scale: bool,
) -> Option<Solved> {
    let fams: Vec<usize> = (0..4)
        .filter(|&k| rows.iter().any(|r| r.family == k))
        .collect();
    // The network-load term needs rows at more than one load within one family to be told apart
    // from that family's efficiency.
    let fit_load = fams.iter().any(|&k| {
        let mut loads = rows.iter().filter(|r| r.family == k).map(|r| r.load);
        let first = loads.next().unwrap_or(0.0);
        loads.any(|l| (l - first).abs() > 1e-6)
    });
    let nlat = fit_fixed as usize + fit_scale as usize;
    let ncol = fams.len() + nlat + fit_load as usize;
    if rows.len() < ncol || ncol == 0 {
        return None;
    }
    let probe = ClassParams {
        s_half,
        gamma,
        ..ClassParams::identity(HwClass::MultiNode)
    };
    let mut a = DMatrix::<f64>::zeros(rows.len(), ncol);
    let mut b = DVector::<f64>::zeros(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let w = if r.bytes >= 1 << 30 { 2.0 } else { 1.0 } / r.t_meas;
        let xr = r.x * ramp(&probe, r.bytes, r.n_nodes);
        let mut c = 0;
        if fit_fixed {
            a[(i, c)] = w;
            c += 1;
        }
        if fit_scale {
            a[(i, c)] = r.lat * w;
        }
        for (j, &k) in fams.iter().enumerate() {
            if r.family == k {
                a[(i, nlat + j)] = xr * w;
            }
        }
        if fit_load {
            a[(i, ncol - 1)] = xr * r.load * w;
        }
        let known = if fit_scale { 0.0 } else { r.lat };
        b[i] = (r.t_meas - known) * w;
    }
    let svd = a.clone().svd(true, true);
    let sol = svd.solve(&b, 1e-12).ok()?;
    let lat_fixed = if fit_fixed { sol[0] } else { 0.0 };
    let lat_scale = if fit_scale {
        sol[fit_fixed as usize]
    } else {
        1.0
    };
    let inside = |v: f64, r: (f64, f64)| v >= r.0 && v <= r.1;
    if !(inside(lat_fixed, LAT_FIXED_RANGE) && inside(lat_scale, LAT_SCALE_RANGE)) {
        return None;
    }
    let net_load_coef = if fit_load { sol[ncol - 1] } else { 0.0 };
    let mut eta = [1.0; 4];
    for (j, &k) in fams.iter().enumerate() {
        let inv = sol[nlat + j];
        // Efficiencies stay plausible at every load the rows have (and at no load).
        let ok = rows
            .iter()
            .filter(|r| r.family == k)
            .map(|r| inv + net_load_coef * r.load)
            .chain(std::iter::once(inv))
            .all(|v| v > 0.0 && inside(1.0 / v, ETA_RANGE));
        if !ok {
            return None;
        }
        eta[k] = 1.0 / inv;
    }
    let resid = &a * &sol - &b;
    Some(Solved {
        lat_fixed,
        lat_scale,
        eta,
        net_load_coef,
        err: resid.norm_squared(),
    })
}

/// Fit every class to a set of rows.
pub fn fit(rows: &[Row]) -> Fit {
    let prepared: Vec<Prepared> = rows.iter().filter_map(prepare).collect();
    let mut classes = Vec::new();
    let mut no_small = Vec::new();
    // gamma <= 1 keeps the ramp's extra time S^(1-gamma) bounded as sizes shrink.
    let gammas: Vec<f64> = (0..=14).map(|i| 0.3 + 0.05 * i as f64).collect();
    let halves: Vec<f64> = (0..=40)
        .map(|i| 2f64.powf(18.0 + 0.25 * i as f64))
        .collect();
    for c in HwClass::ALL {
        let rs: Vec<&Prepared> = prepared.iter().filter(|p| p.class == c).collect();
        let mut p = ClassParams::identity(c);
        p.n_rows = rs.len();
        if rs.is_empty() {
            classes.push(p);
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
            continue;
        }
        // Sizes small enough for latency and the ramp to matter decide what can be fitted.
        let has_small = rs.iter().any(|r| r.bytes < (64 << 20));
        if !has_small {
            no_small.push(c);
        }
        let mut best: Option<(f64, ClassParams)> = None;
        let ramps: Vec<(f64, f64)> = if has_small {
            gammas
                .iter()
                .flat_map(|&g| halves.iter().map(move |&h| (h, g)))
                .chain(std::iter::once((0.0, 1.0)))
                .collect()
        } else {
            vec![(0.0, 1.0)]
        };
        for (h, g) in ramps {
            if let Some(v) = solve(&rs, h, g, has_small) {
                if best.as_ref().is_none_or(|(e, _)| v.err < *e) {
                    best = Some((
                        v.err,
                        ClassParams {
                            lat_fixed: v.lat_fixed,
                            lat_scale: v.lat_scale,
                            eta: v.eta,
                            net_load_coef: v.net_load_coef,
                            contention_range: rs.iter().fold((f64::MAX, 0.0f64), |(lo, hi), r| {
                                (lo.min(r.load), hi.max(r.load))
                            }),
                            s_half: h,
                            gamma: g,
                            ..p
                        },
                    ));
                }
            }
        }
        classes.push(best.map(|(_, p)| p).unwrap_or(p));
    }
    // Classes without small-size data borrow the median ramp of those that have one.
    let ramps: Vec<(f64, f64)> = classes
        .iter()
        .filter(|p| p.s_half > 0.0 && p.class != HwClass::MultiNode)
        .map(|p| (p.s_half, p.gamma))
        .collect();
    if !ramps.is_empty() {
        let h = Data::new(ramps.iter().map(|r| r.0).collect::<Vec<_>>()).median();
        let g = Data::new(ramps.iter().map(|r| r.1).collect::<Vec<_>>()).median();
        for p in classes.iter_mut() {
            if no_small.contains(&p.class) || p.n_rows == 0 {
                p.s_half = h;
                p.gamma = g;
            }
        }
    }
    Fit { classes }
}

/// Score every calibration row with both modes and with a leave-one-system-out fit.
pub fn score() -> Vec<Scored> {
    let full = fitted();
    let mut out = Vec::new();
    for (i, r) in ROWS.iter().enumerate() {
        let Some(f) = r.coll.func() else { continue };
        let _ = f;
        let nccl = row_model(r, Mode::Nccl);
        let dt = crate::DataType::Float32;
        let op = crate::RedOp::Sum;
        let Ok(pn) = nccl.predict(r.coll, r.bytes, dt, op) else {
            continue;
        };
        let mut cal = row_model(r, Mode::Calibrated);
        cal.calibration.params = full.class(HwClass::of(cal.shape()));
        let pc = cal
            .predict(r.coll, r.bytes, dt, op)
            .expect("same selection as NCCL mode");
        let others: Vec<Row> = ROWS
            .iter()
            .filter(|o| !same_system(o, r))
            .copied()
            .collect();
        let held = fit(&others);
        let mut ho = row_model(r, Mode::Calibrated);
        ho.calibration.params = held.class(HwClass::of(ho.shape()));
        let ph = ho.predict(r.coll, r.bytes, dt, op).expect("same selection");
        let (measured, is_time, vn, vc, vh) = match r.measured {
            Measured::BusBw(b) => (b, false, pn.busbw, pc.busbw, ph.busbw),
            Measured::TimeUs(t) => (t, true, pn.time_us, pc.time_us, ph.time_us),
        };
        out.push(Scored {
            index: i,
            class: HwClass::of(cal.shape()),
            measured,
            is_time,
            algo: format!("{}/{}", pn.algo, pn.proto),
            nccl: vn,
            calibrated: vc,
            held_out: vh,
        });
    }
    out
}

fn same_system(a: &Row, b: &Row) -> bool {
    a.system == b.system && (a.nodes > 1) == (b.nodes > 1) && a.source == b.source
}

/// Median and maximum of a list of errors.
pub fn median_max(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut d = Data::new(v.to_vec());
    (d.median(), d.percentile(100))
}

/// ACCURACY.md, generated from the calibration set (a test keeps the checked-in file equal).
pub fn accuracy_report() -> String {
    let rows = score();
    let fit = fitted();
    let mut s = String::new();
    s += "# Accuracy of the cost model\n\n";
    s += "Generated by `cargo run -p cost-model --example accuracy` from the calibration set in\n";
    s += "`cost-model/src/calibration.rs` (published nccl-tests results, each row with its source).\n";
    s += "A test fails when this file and the generated report differ.\n\n";
    s += "- **NCCL mode**: NCCL's own tuning model (the NCCL release of the row when it is stated and 2.18+, else 2.30.7).\n";
    s += "- **Calibrated**: NCCL's selection, with times from the calibrated model (`cost-model/src/calibrated.rs`) fitted to all rows.\n";
    s += "- **Held out**: the calibrated model fitted without any row of the same system and source (leave-one-system-out): how it does on a measurement it has not seen.\n\n";
    s += "Values are busbw in GB/s, or time in µs for the latency rows. Errors are absolute percentages.\n\n";
    s += "| # | system | nodes x GPUs | size | NCCL algo/proto | measured | NCCL mode | err | calibrated | err | held out | err | source |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for sc in &rows {
        let r = &ROWS[sc.index];
        let unit = if sc.is_time { " µs" } else { "" };
        s += &format!(
            "| {} | {} | {}x{} | {} | {} | {:.2}{unit} | {:.2} | {:.1}% | {:.2} | {:.1}% | {:.2} | {:.1}% | {} |\n",
            sc.index + 1,
            r.label,
            r.nodes,
            r.ppn,
            crate::calibration::size_label(r.bytes),
            sc.algo,
            sc.measured,
            sc.nccl,
            sc.err_nccl(),
            sc.calibrated,
            sc.err_cal(),
            sc.held_out,
            sc.err_held_out(),
            r.source
        );
    }
    type Group = (&'static str, Box<dyn Fn(&Scored) -> bool>);
    let groups: [Group; 4] = [
        ("all rows", Box::new(|_| true)),
        (
            "sizes >= 1 GB",
            Box::new(|x: &Scored| ROWS[x.index].bytes >= 1 << 30 && !x.is_time),
        ),
        (
            "sizes 16-128 MB",
            Box::new(|x: &Scored| {
                let b = ROWS[x.index].bytes;
                (16 << 20..=128 << 20).contains(&b) && !x.is_time
            }),
        ),
        (
            "latency rows (< 1 KB)",
            Box::new(|x: &Scored| ROWS[x.index].bytes < 1024),
        ),
    ];
    s += "\n## Summary\n\n";
    s +=
        "| rows | n | NCCL mode median / max | calibrated median / max | held out median / max |\n";
    s += "|---|---|---|---|---|\n";
    for (name, pred) in groups.iter() {
        let sel: Vec<&Scored> = rows.iter().filter(|x| pred(x)).collect();
        let (nm, nx) = median_max(&sel.iter().map(|x| x.err_nccl()).collect::<Vec<_>>());
        let (cm, cx) = median_max(&sel.iter().map(|x| x.err_cal()).collect::<Vec<_>>());
        let (hm, hx) = median_max(&sel.iter().map(|x| x.err_held_out()).collect::<Vec<_>>());
        s += &format!(
            "| {name} | {} | {nm:.1}% / {nx:.1}% | {cm:.1}% / {cx:.1}% | {hm:.1}% / {hx:.1}% |\n",
            sel.len()
        );
    }
    s += "\n## Fitted parameters\n\n";
    s += "| class | rows | lat_fixed (µs) | lat_scale | eta ring / tree / nvls / nvls-tree | net load coef (load² range) | S_half | gamma | busbw cap (same socket / cross socket) |\n";
    s += "|---|---|---|---|---|---|---|---|---|\n";
    let opt = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    for p in &fit.classes {
        s += &format!(
            "| {} | {} | {:.2} | {:.3} | {:.3} / {:.3} / {:.3} / {:.3} | {:.3} ({:.2}-{:.2}) | {} | {:.2} | {} / {} |\n",
            p.class.name(),
            p.n_rows,
            p.lat_fixed,
            p.lat_scale,
            p.eta[0],
            p.eta[1],
            p.eta[2],
            p.eta[3],
            p.net_load_coef,
            p.contention_range.0,
            p.contention_range.1,
            if p.s_half > 0.0 {
                crate::calibration::size_label(p.s_half.round() as u64)
            } else {
                "-".into()
            },
            p.gamma,
            opt(p.busbw_cap[0]),
            opt(p.busbw_cap[1]),
        );
    }
    s += "\nTimes are priced with NCCL 2.30.7's tables whatever release made the selection. `eta` is a family's efficiency with no network load; a multi-node communicator's inverse efficiency grows by `net load coef x load²`, load = the ring's network bandwidth per GPU over the GPU's PCIe link bandwidth (1.0 for 8x 400G on Gen5 GPUs, 0.5 for 4x 400G), clamped to the range the rows cover. S_half is per node for the multi-node class. Systems and how their shapes were obtained:\n\n";
    let mut seen: Vec<System> = Vec::new();
    for r in ROWS {
        if !seen.contains(&r.system) {
            seen.push(r.system);
            s += &format!("- {:?}: {}\n", r.system, r.system.derivation());
        }
    }
    s
}
