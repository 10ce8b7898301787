//! Calibrated mode: NCCL's selection and NCCL's structure (latency per step, bandwidth from the
//! search's channels), with few parameters, each with a physical reading, fitted by least squares
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
//! - `lat_fixed` (µs) is **shared by every hardware class**: the launch and completion time
//!   NCCL's model leaves out, on top of NCCL's own per-step and per-hop latencies (`lat_scale`
//!   stays 1: fitting it too is ill-conditioned on the published rows). It is fitted to every
//!   latency-bound row (< 64 KB) by iteratively reweighted least squares with Huber weights
//!   (`fit_latency`): that time is the host's, the launch mode's and NCCL's more than the
//!   fabric's, and a class with no small-message rows (or a system never seen) still gets a
//!   measured latency instead of NCCL's.
//! - Per class (NVSwitch Ampere, NVSwitch Hopper and newer, direct NVLink, PCIe, multi-node):
//!   `eta` per algorithm family present (the fraction of NCCL's modelled path bandwidth achieved:
//!   protocol and link efficiency), the pipeline ramp `(S_half, gamma)` (the size at which the
//!   bandwidth term runs at half speed; per node for multi-node), the network-load coefficient
//!   (NIC/PCIe saturation) and, for PCIe boxes, the host-bound busbw caps. A class without data
//!   keeps NCCL's bandwidths; a class without ramp data borrows the median ramp of the others.
//!
//! `L` and `A` come from NCCL 2.30.7's tables even when an older release made the selection
//! (`pricing_model`): the hardware is the same, and older releases' bandwidth formulas (NVLSTree
//! before 2.28, for instance) would otherwise have to be absorbed by the fitted efficiencies.
//! `load` is the network traffic NCCL's ring puts on each GPU's PCIe link relative to that link:
//! with one 400G NIC per Gen5 GPU the link carries the NIC's line rate both ways and the network
//! runs below NCCL's model, with one NIC per two GPUs it does not.
//!
//! Fitting (`fit`): the shared latency and the classes alternately (four rounds). For a class, a
//! grid over (gamma, S_half) and for each grid point a weighted linear least-squares solve
//! (nalgebra SVD) for 1/eta per family (and the load coefficient) on the rows >= 64 KB,
//! minimising the relative time error (rows >= 1 GB count twice). Standard errors come from the
//! least-squares covariance `s^2 (A^T A)^-1` at the chosen ramp (`ParamErrors`). The model only
//! prices what NCCL chose: it never changes the algorithm or protocol.

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
    /// Scale on NCCL's latency (its per-step base and per-hop latencies); 1 in the fitted model.
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
    /// Standard errors of `lat_fixed`, `lat_scale` and `eta` (0 where not fitted), from the
    /// least-squares covariance at the chosen ramp: `s^2 (A^T A)^-1`, `s^2` the residual variance
    /// of the relative errors; `eta`'s by the delta method from `1/eta`'s.
    pub se: ParamErrors,
}

/// Standard errors of a class's linear parameters.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct ParamErrors {
    /// Of `lat_fixed` (µs).
    pub lat_fixed: f64,
    /// Of `lat_scale`.
    pub lat_scale: f64,
    /// Of `eta` per family.
    pub eta: [f64; 4],
    /// Of `net_load_coef`.
    pub net_load_coef: f64,
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
            se: ParamErrors {
                lat_fixed: 0.0,
                lat_scale: 0.0,
                eta: [0.0; 4],
                net_load_coef: 0.0,
            },
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
    /// Calibrated mode fitted without any row of this row's source (leave-one-source-out).
    pub held_src: f64,
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
    /// Absolute % error of the leave-one-source-out fit.
    pub fn err_held_src(&self) -> f64 {
        100.0 * (self.held_src - self.measured).abs() / self.measured
    }
    /// The row's size band (`BANDS`).
    pub fn band(&self) -> usize {
        band_of(ROWS[self.index].bytes)
    }
}

/// Size bands of the report: latency-bound, pipeline ramp, bandwidth-bound, asymptotic.
pub const BANDS: [&str; 4] = ["< 64 KB", "64 KB - 16 MB", "16 MB - 512 MB", ">= 512 MB"];

/// The band of a size (nccl-tests size column).
pub fn band_of(bytes: u64) -> usize {
    match bytes {
        b if b < 64 << 10 => 0,
        b if b < 16 << 20 => 1,
        b if b < 512 << 20 => 2,
        _ => 3,
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
const LAT_FIXED_RANGE: (f64, f64) = (0.0, 60.0);

/// Weighted least squares for a class's bandwidth parameters (1/eta per family present, and the
/// network-load coefficient) at a fixed ramp, with the latency known (`lat` = the shared
/// `(lat_fixed, lat_scale)`); returns the parameters and the weighted sum of squared relative
/// errors. Rows of 1 GB and more count twice: that is the regime the model is judged on first.
fn solve(rows: &[&Prepared], s_half: f64, gamma: f64, lat: Lat) -> Option<Solved> {
    solve_with(rows, s_half, gamma, lat)
}

/// One least-squares solution.
struct Solved {
    eta: [f64; 4],
    net_load_coef: f64,
    err: f64,
    se: ParamErrors,
}

fn solve_with(rows: &[&Prepared], s_half: f64, gamma: f64, lat: Lat) -> Option<Solved> {
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
    let ncol = fams.len() + fit_load as usize;
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
        for (j, &k) in fams.iter().enumerate() {
            if r.family == k {
                a[(i, j)] = xr * w;
            }
        }
        if fit_load {
            a[(i, ncol - 1)] = xr * r.load * w;
        }
        b[i] = (r.t_meas - lat.0 - lat.1 * r.lat) * w;
    }
    let svd = a.clone().svd(true, true);
    let sol = svd.solve(&b, 1e-12).ok()?;
    let inside = |v: f64, r: (f64, f64)| v >= r.0 && v <= r.1;
    let net_load_coef = if fit_load { sol[ncol - 1] } else { 0.0 };
    let mut eta = [1.0; 4];
    for (j, &k) in fams.iter().enumerate() {
        let inv = sol[j];
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
    let err = resid.norm_squared();
    let var = covariance_diag(&svd, err, rows.len());
    let mut se = ParamErrors::default();
    for (j, &k) in fams.iter().enumerate() {
        // d(eta)/d(1/eta) = -eta^2.
        se.eta[k] = var[j].sqrt() * eta[k] * eta[k];
    }
    if fit_load {
        se.net_load_coef = var[ncol - 1].sqrt();
    }
    Some(Solved {
        eta,
        net_load_coef,
        err,
        se,
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

/// The bandwidth part of a prepared row's time under a class's parameters (µs).
fn bandwidth_time(r: &Prepared, p: &ClassParams) -> f64 {
    let (lo, hi) = p.contention_range;
    let load = r.load.clamp(lo, hi.max(lo));
    let inv_eta = 1.0 / p.eta[r.family] + p.net_load_coef * load;
    r.x * inv_eta * ramp(p, r.bytes, r.n_nodes)
}

/// The latency shared by every class: `lat_fixed + lat_scale[protocol] * L`.
type Lat = (f64, f64);

/// Fits the shared latency to the rows below 64 KB (where it dominates) after their bandwidth
/// part under the current class parameters: `lat_scale` stays 1 (NCCL's per-step and per-hop
/// latencies as NCCL computes them) and `lat_fixed`, the launch and completion time NCCL's model
/// leaves out, is the Huber-weighted mean (iteratively reweighted: a row more than 15% off counts
/// less, since launch modes differ, e.g. CUDA graphs) of the measured time less NCCL's latency, in
/// relative terms. (Fitting `lat_scale` too is ill-conditioned on the published rows: the
/// latency-bound rows barely vary `L`, and the fit trades the two terms against each other.)
/// Returns the parameters and their standard errors; NCCL's own latency (0, 1) without rows.
fn fit_latency(rows: &[Prepared], classes: &[ClassParams]) -> (Lat, Lat) {
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
    let none = ((0.0, 1.0), (0.0, 0.0));
    if small.len() < 2 {
        return none;
    }
    let mut huber = vec![1.0; small.len()];
    let mut out = none;
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
        out = ((c0, 1.0), (se, 0.0));
        for (i, (r, y)) in small.iter().enumerate() {
            let rel = ((c0 - y) / r.t_meas).abs();
            huber[i] = if rel <= HUBER { 1.0 } else { HUBER / rel };
        }
    }
    out
}

/// Rows below this size fit the shared latency (the "< 64 KB" band).
const LATENCY_BYTES: u64 = 64 << 10;
/// Huber threshold of the latency fit (relative error).
const HUBER: f64 = 0.15;

/// Fit every class's bandwidth parameters and ramp with the latency given.
fn fit_classes(prepared: &[Prepared], lat: Lat) -> Vec<ClassParams> {
    let mut classes = Vec::new();
    let mut no_ramp = Vec::new();
    // gamma <= 1 keeps the ramp's extra time S^(1-gamma) bounded as sizes shrink.
    let gammas: Vec<f64> = (0..=7).map(|i| 0.3 + 0.1 * i as f64).collect();
    let halves: Vec<f64> = (0..=20).map(|i| 2f64.powf(18.0 + 0.5 * i as f64)).collect();
    for c in HwClass::ALL {
        let rs: Vec<&Prepared> = prepared.iter().filter(|p| p.class == c).collect();
        let mut p = ClassParams::identity(c);
        p.n_rows = rs.len();
        (p.lat_fixed, p.lat_scale) = lat;
        if rs.is_empty() {
            classes.push(p);
            no_ramp.push(c);
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
            no_ramp.push(c);
            continue;
        }
        // Only sizes on the ramp (64 KB .. 512 MB) tell its parameters apart; latency-bound rows
        // are the shared latency's.
        let has_ramp = rs
            .iter()
            .any(|r| (LATENCY_BYTES..512 << 20).contains(&r.bytes));
        if !has_ramp {
            no_ramp.push(c);
        }
        // The bandwidth parameters come from the rows the bandwidth term matters for.
        let fit_rows: Vec<&Prepared> = rs
            .iter()
            .copied()
            .filter(|r| r.bytes >= LATENCY_BYTES)
            .collect();
        let mut best: Option<(f64, ClassParams)> = None;
        let ramps: Vec<(f64, f64)> = if has_ramp {
            gammas
                .iter()
                .flat_map(|&g| halves.iter().map(move |&h| (h, g)))
                .chain(std::iter::once((0.0, 1.0)))
                .collect()
        } else {
            vec![(0.0, 1.0)]
        };
        for (h, g) in ramps {
            if let Some(v) = solve(&fit_rows, h, g, lat) {
                if best.as_ref().is_none_or(|(e, _)| v.err < *e) {
                    best = Some((
                        v.err,
                        ClassParams {
                            eta: v.eta,
                            net_load_coef: v.net_load_coef,
                            contention_range: fit_rows
                                .iter()
                                .fold((f64::MAX, 0.0f64), |(lo, hi), r| {
                                    (lo.min(r.load), hi.max(r.load))
                                }),
                            s_half: h,
                            gamma: g,
                            se: v.se,
                            ..p
                        },
                    ));
                }
            }
        }
        classes.push(best.map(|(_, p)| p).unwrap_or(p));
    }
    // Classes without ramp data borrow the median ramp of the single-node classes that have one
    // (per node for the multi-node class).
    let ramps: Vec<(f64, f64)> = classes
        .iter()
        .filter(|p| p.s_half > 0.0 && p.class != HwClass::MultiNode)
        .map(|p| (p.s_half, p.gamma))
        .collect();
    if !ramps.is_empty() {
        let h = Data::new(ramps.iter().map(|r| r.0).collect::<Vec<_>>()).median();
        let g = Data::new(ramps.iter().map(|r| r.1).collect::<Vec<_>>()).median();
        for p in classes.iter_mut() {
            if no_ramp.contains(&p.class) && p.class != HwClass::Pcie {
                p.s_half = h;
                p.gamma = g;
            }
        }
    }
    classes
}

/// Fit the model to a set of rows: the latency shared by all classes (`fit_latency`, from every
/// latency-bound row: launch and per-step costs are the host's and NCCL's more than the
/// fabric's) and each class's bandwidth and ramp with it, alternately (a few rounds: each depends
/// on the other only through the small rows). A class never seen gets the shared latency and
/// NCCL's bandwidths.
pub fn fit(rows: &[Row]) -> Fit {
    let prepared: Vec<Prepared> = rows.iter().filter_map(prepare).collect();
    let identity: Vec<ClassParams> = HwClass::ALL.map(ClassParams::identity).to_vec();
    let (mut lat, mut lat_se) = fit_latency(&prepared, &identity);
    let mut classes = fit_classes(&prepared, lat);
    for _ in 0..3 {
        (lat, lat_se) = fit_latency(&prepared, &classes);
        classes = fit_classes(&prepared, lat);
    }
    for p in classes.iter_mut() {
        p.se.lat_fixed = lat_se.0;
        p.se.lat_scale = lat_se.1;
    }
    Fit { classes }
}

static SCORED: OnceLock<Vec<Scored>> = OnceLock::new();

/// Score every calibration row with both modes, with a leave-one-system-out fit and with a
/// leave-one-source-out fit (computed once per process; one fit per held-out group).
pub fn score() -> &'static [Scored] {
    SCORED.get_or_init(score_rows)
}

fn score_rows() -> Vec<Scored> {
    use std::collections::HashMap;
    let full = fitted();
    let mut by_system: HashMap<(System, bool, &str), Fit> = HashMap::new();
    let mut by_source: HashMap<&str, Fit> = HashMap::new();
    let mut out = Vec::new();
    for (i, r) in ROWS.iter().enumerate() {
        if r.coll.func().is_none() {
            continue;
        }
        let nccl = row_model(r, Mode::Nccl);
        let dt = crate::DataType::Float32;
        let op = crate::RedOp::Sum;
        let Ok(pn) = nccl.predict(r.coll, r.bytes, dt, op) else {
            continue;
        };
        let with = |fit: &Fit| {
            let mut m = row_model(r, Mode::Calibrated);
            m.calibration.params = fit.class(HwClass::of(m.shape()));
            m.predict(r.coll, r.bytes, dt, op)
                .expect("same selection as NCCL mode")
        };
        let pc = with(full);
        let held = by_system
            .entry((r.system, r.nodes > 1, r.source))
            .or_insert_with(|| {
                let others: Vec<Row> = ROWS
                    .iter()
                    .filter(|o| !same_system(o, r))
                    .copied()
                    .collect();
                fit(&others)
            });
        let ph = with(held);
        let held_src = by_source.entry(source_key(r.source)).or_insert_with(|| {
            let others: Vec<Row> = ROWS
                .iter()
                .filter(|o| source_key(o.source) != source_key(r.source))
                .copied()
                .collect();
            fit(&others)
        });
        let ps = with(held_src);
        let (measured, is_time, vn, vc, vh, vs) = match r.measured {
            Measured::BusBw(b) => (b, false, pn.busbw, pc.busbw, ph.busbw, ps.busbw),
            Measured::TimeUs(t) => (t, true, pn.time_us, pc.time_us, ph.time_us, ps.time_us),
        };
        out.push(Scored {
            index: i,
            class: HwClass::of(nccl.shape()),
            measured,
            is_time,
            algo: format!("{}/{}", pn.algo, pn.proto),
            nccl: vn,
            calibrated: vc,
            held_out: vh,
            held_src: vs,
        });
    }
    out
}

/// The publication a source string names: the repository, or the repository and issue/PR
/// number (one vendor guide's several result files are one source).
pub fn source_key(source: &str) -> &str {
    let mut ends = source.match_indices(' ').map(|(i, _)| i);
    let first = ends.next().unwrap_or(source.len());
    let rest = &source[first..];
    if rest.starts_with(" issue ") || rest.starts_with(" PR ") {
        let second = ends.next().unwrap_or(source.len());
        let third = ends.next().unwrap_or(source.len());
        let _ = second;
        &source[..third]
    } else {
        &source[..first]
    }
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

/// What the calibration set covers: rows, systems (as published), NCCL releases stated, sources
/// (publications), collectives, multi-node rows, size bands.
#[derive(Debug, Clone, Serialize)]
pub struct Coverage {
    /// Rows.
    pub rows: usize,
    /// Distinct systems as published (labels).
    pub systems: usize,
    /// Distinct hardware systems per source, single- and multi-node apart (the groups
    /// leave-one-system-out holds out).
    pub system_groups: usize,
    /// Distinct NCCL releases stated.
    pub releases: Vec<&'static str>,
    /// Distinct sources (`source_key`).
    pub sources: usize,
    /// Rows that are not AllReduce.
    pub non_allreduce: usize,
    /// Multi-node rows.
    pub multi_node: usize,
    /// Rows per band (`BANDS`).
    pub per_band: [usize; 4],
}

/// The coverage of the calibration set.
pub fn coverage() -> Coverage {
    let mut labels: Vec<&str> = ROWS.iter().map(|r| r.label).collect();
    labels.sort();
    labels.dedup();
    let mut releases: Vec<&'static str> = ROWS.iter().filter_map(|r| r.nccl).collect();
    releases.sort_by_key(|v| v.parse::<NcclVersion>().ok());
    releases.dedup();
    let mut sources: Vec<&str> = ROWS.iter().map(|r| source_key(r.source)).collect();
    sources.sort();
    sources.dedup();
    let mut groups: Vec<(String, bool, &str)> = ROWS
        .iter()
        .map(|r| (format!("{:?}", r.system), r.nodes > 1, r.source))
        .collect();
    groups.sort();
    groups.dedup();
    let mut per_band = [0; 4];
    for r in ROWS {
        per_band[band_of(r.bytes)] += 1;
    }
    Coverage {
        rows: ROWS.len(),
        systems: labels.len(),
        system_groups: groups.len(),
        releases,
        sources: sources.len(),
        non_allreduce: ROWS
            .iter()
            .filter(|r| r.coll != crate::types::Collective::AllReduce)
            .count(),
        multi_node: ROWS.iter().filter(|r| r.nodes > 1).count(),
        per_band,
    }
}

/// ACCURACY.md, generated from the calibration set (a test keeps the checked-in file equal).
pub fn accuracy_report() -> String {
    let rows = score();
    let fit = fitted();
    let cov = coverage();
    let mm = |sel: &[&Scored], e: fn(&Scored) -> f64| -> String {
        let (m, x) = median_max(&sel.iter().map(|x| e(x)).collect::<Vec<_>>());
        format!("{m:.1}% / {x:.1}%")
    };
    let mut s = String::new();
    s += "# Accuracy of the cost model\n\n";
    s += "Generated by `cargo run -p cost-model --example accuracy` from the calibration set in\n";
    s += "`cost-model/src/calibration.rs` (published nccl-tests results, each row with its source).\n";
    s += "A test fails when this file and the generated report differ. The plot `docs/accuracy.svg`\n";
    s += "comes from the same run (`-- --svg docs/accuracy.svg`).\n\n";
    s += "- **NCCL mode**: NCCL's own tuning model (the NCCL release of the row when it is stated and 2.18+, else 2.30.7).\n";
    s += "- **Calibrated**: NCCL's selection, with times from the calibrated model (`cost-model/src/calibrated.rs`).\n";
    s += "  - **system held out** (the headline): fitted without any row of the same system and source (leave-one-system-out): how it does on hardware it has not seen.\n";
    s += "  - **source held out**: fitted without any row of the same publication (leave-one-source-out; one vendor guide's result files are one source).\n";
    s += "  - **fitted to all**: fitted to every row, the row itself included (what `--mode calibrated` uses).\n\n";
    s += "Errors are absolute percentages of busbw (GB/s), or of the time (µs) for rows published as times.\n\n";
    s += &format!(
        "Data: {} rows, {} systems as published ({} held-out groups: hardware x single/multi-node x source), {} sources, NCCL releases stated: {}; {} multi-node rows, {} rows not AllReduce; rows per band: {}.\n\n",
        cov.rows,
        cov.systems,
        cov.system_groups,
        cov.sources,
        cov.releases.join(", "),
        cov.multi_node,
        cov.non_allreduce,
        BANDS
            .iter()
            .zip(cov.per_band)
            .map(|(b, n)| format!("{b}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    s += "## Measurements the fit has not seen\n\n";
    s += "Median / maximum absolute error per size band.\n\n";
    s += "| size band | n | NCCL mode | calibrated, system held out | calibrated, source held out | calibrated, fitted to all |\n";
    s += "|---|---|---|---|---|---|\n";
    for b in 0..=BANDS.len() {
        let sel: Vec<&Scored> = rows
            .iter()
            .filter(|x| b == BANDS.len() || x.band() == b)
            .collect();
        s += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            BANDS.get(b).copied().unwrap_or("all sizes"),
            sel.len(),
            mm(&sel, Scored::err_nccl),
            mm(&sel, Scored::err_held_out),
            mm(&sel, Scored::err_held_src),
            mm(&sel, Scored::err_cal),
        );
    }
    let band_rows = |b: usize| -> Vec<&Scored> { rows.iter().filter(|x| x.band() == b).collect() };
    let med = |sel: &[&Scored], e: fn(&Scored) -> f64| {
        median_max(&sel.iter().map(|x| e(x)).collect::<Vec<_>>())
    };
    let yes = |ok: bool| if ok { "met" } else { "not met" };
    let (big, mid, small) = (band_rows(3), band_rows(2), band_rows(0));
    let (bh, bx) = med(&big, Scored::err_held_out);
    let bn = med(&big, Scored::err_nccl).0;
    let mh = med(&mid, Scored::err_held_out).0;
    let sh = med(&small, Scored::err_held_out).0;
    let sn = med(&small, Scored::err_nccl).0;
    s += "\nTargets on the system-held-out column:\n\n";
    s += "| target | value | |\n|---|---|---|\n";
    s += &format!(
        "| >= 512 MB: median <= 4% and below NCCL mode's ({bn:.1}%) | {bh:.1}% | {} |\n",
        yes(bh <= 4.0 && bh < bn)
    );
    s += &format!(
        "| >= 512 MB: maximum <= 15% | {bx:.1}% | {} |\n",
        yes(bx <= 15.0)
    );
    s += &format!(
        "| 16 MB - 512 MB: median <= 10% | {mh:.1}% | {} |\n",
        yes(mh <= 10.0)
    );
    s += &format!(
        "| < 64 KB: median <= 25% and below NCCL mode's ({sn:.1}%) | {sh:.1}% | {} |\n",
        yes(sh <= 25.0 && sh < sn)
    );
    let mut worst: Vec<&Scored> = rows.iter().collect();
    worst.sort_by(|a, b| b.err_held_out().total_cmp(&a.err_held_out()));
    s += "\nLargest system-held-out errors: ";
    s += &worst
        .iter()
        .take(6)
        .map(|x| {
            let r = &ROWS[x.index];
            format!(
                "#{} {} {} {:.0}%",
                x.index + 1,
                r.label,
                crate::calibration::size_label(r.bytes),
                x.err_held_out()
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    s += ".\n";
    s += "\n![measured vs predicted time per operation, NCCL mode and calibrated with the system held out](docs/accuracy.svg)\n";
    s += "\nPer hardware class (system held out):\n\n";
    s += "| class | n | NCCL mode | calibrated, system held out | calibrated, source held out |\n";
    s += "|---|---|---|---|---|\n";
    for c in HwClass::ALL {
        let sel: Vec<&Scored> = rows.iter().filter(|x| x.class == c).collect();
        if sel.is_empty() {
            continue;
        }
        s += &format!(
            "| {} | {} | {} | {} | {} |\n",
            c.name(),
            sel.len(),
            mm(&sel, Scored::err_nccl),
            mm(&sel, Scored::err_held_out),
            mm(&sel, Scored::err_held_src),
        );
    }
    s += "\n## Rows\n\n";
    s += "| # | system | nodes x GPUs | collective | size | NCCL algo/proto | measured | NCCL mode | err | system held out | err | source held out | err | fitted to all | err | NCCL | source |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for sc in rows {
        let r = &ROWS[sc.index];
        let unit = if sc.is_time { " µs" } else { "" };
        s += &format!(
            "| {} | {} | {}x{} | {} | {} | {} | {:.2}{unit} | {:.2} | {:.1}% | {:.2} | {:.1}% | {:.2} | {:.1}% | {:.2} | {:.1}% | {} | {} |\n",
            sc.index + 1,
            r.label,
            r.nodes,
            r.ppn,
            r.coll.name(),
            crate::calibration::size_label(r.bytes),
            sc.algo,
            sc.measured,
            sc.nccl,
            sc.err_nccl(),
            sc.held_out,
            sc.err_held_out(),
            sc.held_src,
            sc.err_held_src(),
            sc.calibrated,
            sc.err_cal(),
            r.nccl.unwrap_or("-"),
            r.source
        );
    }
    s += "\n## Fitted parameters\n\n";
    s += "Fitted to all rows; `±` is one standard error from the least-squares covariance (at the chosen ramp; 0 where the parameter is not fitted).\n\n";
    s += "| class | rows | lat_fixed (µs) | lat_scale | eta ring | eta tree | eta nvls | eta nvls-tree | net load coef (load² range) | S_half | gamma | busbw cap (same socket / cross socket) |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    let opt = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    for p in &fit.classes {
        let eta = |k: usize| format!("{:.3} ± {:.3}", p.eta[k], p.se.eta[k]);
        s += &format!(
            "| {} | {} | {:.2} ± {:.2} | {:.3} ± {:.3} | {} | {} | {} | {} | {:.3} ± {:.3} ({:.2}-{:.2}) | {} | {:.2} | {} / {} |\n",
            p.class.name(),
            p.n_rows,
            p.lat_fixed,
            p.se.lat_fixed,
            p.lat_scale,
            p.se.lat_scale,
            eta(0),
            eta(1),
            eta(2),
            eta(3),
            p.net_load_coef,
            p.se.net_load_coef,
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
    s += "\nWhat the parameters mean: `lat_fixed` is the launch and completion time per operation NCCL's model leaves out, shared by all classes; `lat_scale` is the factor on NCCL's per-step latencies (its base latency plus the per-hop NVLink/PCIe/network latencies), kept at 1; `eta` is the fraction of NCCL's modelled path bandwidth an algorithm family achieves (protocol and link efficiency), with no network load; a multi-node communicator's inverse efficiency grows by `net load coef x load²` (NIC and PCIe saturation), load = the ring's network bandwidth per GPU over the GPU's PCIe link bandwidth (1.0 for 8x 400G on Gen5 GPUs, 0.5 for 4x 400G), clamped to the range the rows cover; `S_half` and `gamma` describe the pipeline ramp at small and mid sizes (the bandwidth term is multiplied by `1 + (S_half/S)^gamma`; S_half is per node for the multi-node class). Times are priced with NCCL 2.30.7's tables whatever release made the selection.\n\n";
    s += "Systems and how their shapes were obtained:\n\n";
    let mut seen: Vec<System> = Vec::new();
    for r in ROWS {
        if !seen.contains(&r.system) {
            seen.push(r.system);
            s += &format!("- {:?}: {}\n", r.system, r.system.derivation());
        }
    }
    s
}
