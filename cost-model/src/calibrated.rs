//! Calibrated mode: NCCL's selection and NCCL's structure (latency per step, bandwidth from the
//! search's channels), with few parameters, each with a physical reading, fitted by least squares
//! to the calibration set (`calibration::ROWS`).
//!
//! For the algorithm/protocol NCCL picks, with NCCL's latency `L` and algorithm bandwidth `A`:
//!
//! ```text
//! time = lat_fixed + L + D * level_bytes / (1000 * bwInter) + x / eta[family] * (1 + T / (x + T / max(D, 1)))
//!                                             x = S / (1000 * A)
//!        (the level term for Simple and LL128; the fill for Simple, and for LL128 on one node)
//! A    = nCh * bwIntra             for NVLS AllReduce (the switch reduces: a GPU's algorithm
//!                                  bandwidth is its NVLink bandwidth whatever the GPU count)
//! A    = pcie_eff[path] * gpu_pci_bw / busbw_factor   for PCIe boxes
//! T    = stage_bytes * stages / (1000 * bw_channel)   one node
//! T    = fill_us * n_nodes^node_exp                   several nodes
//! D    = 2 * ceil(log2(n_nodes))   for trees across nodes (Tree, NVLSTree), else 0
//! ```
//!
//! - `lat_fixed` (µs) is **shared by every hardware class**: the launch and completion time
//!   NCCL's model leaves out, on top of NCCL's own per-step and per-hop latencies. It is fitted
//!   to every latency-bound row (< 64 KB) by iteratively reweighted least squares with Huber
//!   weights (`fit::fit_latency`): that time is the host's, the launch mode's and NCCL's more than
//!   the fabric's, and a class with no small-message rows (or a system never seen) still gets a
//!   measured latency instead of NCCL's.
//! - `stage_bytes` is **shared by every single-node class**: the data a pipeline stage holds per
//!   channel before the next stage runs at full rate. A Simple or LL128 transfer passes through
//!   `stages` stages in sequence (`Pipeline`): a ring AllReduce's slice crosses `2 (n - 1)` GPUs
//!   (reduce-scatter, then all-gather), an NVLS AllReduce's four (scatter, reduce and multicast
//!   through the switch, gather: the warp groups of `RunWorkColl<ncclFuncAllReduce, ..,
//!   NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE>` in NCCL 2.30.7's `src/device/all_reduce.h`), each at the
//!   channel's bandwidth (the graph's `bwIntra`). So the fill time `T` follows from the GPU count,
//!   the algorithm and the link speed, and carries over to systems never seen: eight A100s on
//!   20 GB/s channels fill for longer than four GB200s on 45 GB/s ones. A transfer whose bandwidth
//!   time is `x` pays `x * T / (x + T)` more: about `T` once `x` is well above it, about `x` below
//!   it (LL, with no chunk pipeline, pays none). A tree across nodes pays up to `D x` below its
//!   fill (`x * T / (x + T / D)`): each of its `D` levels forwards a whole chunk before the next
//!   level can start, where a ring step moves only a slice of the data.
//! - Per class (NVSwitch Ampere, NVSwitch Hopper and newer, direct NVLink, PCIe, multi-node):
//!   `eta` per algorithm family present (the fraction of NCCL's modelled path bandwidth achieved:
//!   protocol and link efficiency; rings and trees with LL128 are families of their own, since
//!   NCCL prices LL128 with its own factors). PCIe boxes have bus bandwidths relative to the
//!   GPU's PCIe link instead of NCCL's path bandwidth, and no fill. A class or family without
//!   data keeps NCCL's bandwidths (with the shared latency and stage size).
//! - Several nodes: the fill time `fill_us * n_nodes^node_exp` (the node-level pipeline), and
//!   `level_bytes`, the data one level of the inter-node tree receives per network channel
//!   before the next level can forward it at full rate: a tree of `n_nodes` nodes has
//!   `ceil(log2(n_nodes))` levels, crossed up (reduce) and down (broadcast), each taking
//!   `level_bytes` at the graph's inter-node bandwidth per channel (`bwInter`). A system with
//!   slower NICs (8x 200G instead of 8x 400G) so takes twice as long per level. NCCL's ring
//!   latency already counts each of its network steps, so a ring pays none. A transport's own
//!   per-message latency is not separate: it is in the fitted size.
//!
//! `L` and `A` come from NCCL 2.30.7's tables even when an older release made the selection
//! (`pricing_model`): the hardware is the same, and older releases' bandwidth formulas (NVLSTree
//! before 2.28, for instance) would otherwise have to be absorbed by the fitted efficiencies.
//!
//! Fitting (`fit`, in `calibrated/fit.rs`): the shared latency and the classes alternately
//! (four rounds). The stage size is chosen on a grid (the value minimising the single-node
//! classes' summed error), the multi-node fill time and node exponent on a grid too; for each
//! grid point a weighted linear least-squares solve (nalgebra SVD) gives `1/eta` per family (and
//! `level_bytes`) on the rows of 64 KB and more (256 MB and more for LL128 across nodes, which
//! pays no fill to explain its climb), minimising the relative time error (rows of 1 GB and more
//! count twice). Standard errors come from the least-squares covariance
//! `s^2 (A^T A)^-1` at the chosen grid point (`ParamErrors`).
//! The model only prices what NCCL chose: it never changes the algorithm or protocol.

use crate::calibration::{Row, ROWS};
use crate::consts::{Algo, Func, Proto};
use crate::model::NcclModel;
use crate::query::{CostModel, Mode};
use crate::settings::TunerSettings;
use crate::shape::CommShape;
use serde::Serialize;
use std::sync::OnceLock;
use topo::{NcclVersion, PathType};

mod fit;
pub use fit::fit;

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
    /// One NVLink domain spanning hosts (multi-node NVLink: the trays of an NVL72 rack behind
    /// the rack's NVLink5 switch trays), as one NCCL node.
    Mnnvl,
    /// Several nodes.
    MultiNode,
}

impl HwClass {
    /// All classes.
    pub const ALL: [HwClass; 6] = [
        HwClass::NvSwitchAmpere,
        HwClass::NvSwitchHopper,
        HwClass::NvLinkDirect,
        HwClass::Pcie,
        HwClass::Mnnvl,
        HwClass::MultiNode,
    ];
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            HwClass::NvSwitchAmpere => "nvswitch-ampere",
            HwClass::NvSwitchHopper => "nvswitch-hopper",
            HwClass::NvLinkDirect => "nvlink-direct",
            HwClass::Pcie => "pcie",
            HwClass::Mnnvl => "mnnvl",
            HwClass::MultiNode => "multi-node",
        }
    }
    /// The class of a communicator.
    pub fn of(s: &CommShape) -> HwClass {
        if s.n_nodes > 1 {
            HwClass::MultiNode
        } else if s.mnnvl {
            HwClass::Mnnvl
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

/// Algorithm and protocol families with their own efficiency: the algorithms with Simple (and
/// LL), and rings and trees with LL128, whose 120-of-128-byte lines and flag polling NCCL's
/// model prices with its own factors, which miss by a different amount than Simple's.
pub const FAMILIES: [&str; N_FAMILIES] = [
    "ring",
    "tree",
    "nvls",
    "nvls-tree",
    "ring LL128",
    "tree LL128",
];

/// Number of efficiency families.
pub const N_FAMILIES: usize = 6;

fn family(a: Algo, p: Proto) -> usize {
    let ll128 = p == Proto::Ll128;
    match a {
        Algo::Ring if ll128 => 4,
        Algo::Ring => 0,
        Algo::Tree | Algo::CollNetChain | Algo::CollNetDirect | Algo::Pat if ll128 => 5,
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
    /// Effective fraction of NCCL's bandwidth per family (`FAMILIES`: ring, tree, nvls, nvls-tree,
    /// ring LL128, tree LL128).
    pub eta: [f64; 6],
    /// Data a pipeline stage holds per channel (bytes) before the next stage runs at full rate,
    /// shared by the single-node classes; 0 for no fill.
    pub stage_bytes: f64,
    /// Pipeline fill time (µs) of a multi-node communicator on one node; 0 for none.
    pub fill_us: f64,
    /// How the multi-node fill time grows with the node count: `fill_us * n_nodes^node_exp`.
    pub node_exp: f64,
    /// Data (bytes) one level of an inter-node tree receives per network channel before it
    /// forwards at full rate (multi-node class); 0 for none.
    pub level_bytes: f64,
    /// PCIe boxes: the bus bandwidth as a fraction of a GPU's PCIe link bandwidth (NCCL's
    /// figure: 24 GB/s for Gen4 x16, 48 for Gen5 x16), per path (`PciePath`): peer-to-peer on
    /// one socket, peer-to-peer across sockets, through host memory on one socket, across.
    pub pcie_eff: [Option<f64>; 4],
    /// Rows this class was fitted to.
    pub n_rows: usize,
    /// Standard errors of `lat_fixed` and `eta` (0 where not fitted), from the least-squares
    /// covariance at the chosen fill time: `s^2 (A^T A)^-1`, `s^2` the residual variance of the
    /// relative errors; `eta`'s by the delta method from `1/eta`'s.
    pub se: ParamErrors,
}

/// Standard errors of a class's linear parameters.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct ParamErrors {
    /// Of `lat_fixed` (µs).
    pub lat_fixed: f64,
    /// Of `eta` per family.
    pub eta: [f64; 6],
    /// Of `level_bytes`.
    pub level_bytes: f64,
}

impl ClassParams {
    /// NCCL's own model expressed in these parameters.
    pub fn identity(class: HwClass) -> ClassParams {
        ClassParams {
            class,
            lat_fixed: 0.0,
            eta: [1.0; N_FAMILIES],
            stage_bytes: 0.0,
            fill_us: 0.0,
            node_exp: 1.0,
            level_bytes: 0.0,
            pcie_eff: [None; 4],
            n_rows: 0,
            se: ParamErrors::default(),
        }
    }

    /// The pipeline fill factor on a bandwidth time `x` (µs) of a transfer through `pipe`, for a
    /// protocol `p`.
    fn ramp(&self, p: Proto, x: f64, pipe: &Pipeline) -> f64 {
        if !fills(p, pipe.n_nodes) || x <= 0.0 {
            return 1.0;
        }
        let t = if pipe.n_nodes > 1 {
            self.fill_us * (pipe.n_nodes as f64).powf(self.node_exp)
        } else {
            self.stage_bytes * pipe.stage_us_per_byte
        };
        if t <= 0.0 {
            return 1.0;
        }
        // Below the fill, a transfer pays its bandwidth time once more per stage that holds all
        // of it before passing it on: once for NCCL's chunked one-node pipelines and rings (a
        // ring step moves a slice of the data), once per level for a tree across nodes (each
        // level forwards the whole of a chunk).
        let d = pipe.tree_levels.max(1.0);
        1.0 + t / (x + t / d)
    }

    /// The time of a transfer beyond NCCL's latency: the tree levels and the bandwidth term with
    /// its efficiency and fill (µs).
    fn transfer_us(&self, family: usize, p: Proto, x: f64, pipe: &Pipeline) -> f64 {
        let levels = if pays_levels(p) {
            self.level_bytes * pipe.level_us_per_byte
        } else {
            0.0
        };
        levels + x / self.eta[family] * self.ramp(p, x, pipe)
    }
}

/// The pipeline a transfer goes through, from NCCL's structure: how many stages a slice crosses
/// on one node, at what bandwidth, and how many inter-node tree levels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pipeline {
    /// Nodes.
    pub n_nodes: usize,
    /// Stages a slice crosses in sequence over the channel's bandwidth (one node), as µs per
    /// byte held per stage: `stages / (1000 * bwIntra)`; 0 when unknown.
    pub stage_us_per_byte: f64,
    /// The tree levels crossed (`tree_levels`; a ring's network steps are in NCCL's latency) as
    /// µs per byte a level holds: `tree_levels / (1000 * bwInter)`.
    pub level_us_per_byte: f64,
    /// Inter-node tree levels crossed, up and down (`2 * ceil(log2(n_nodes))` for Tree and
    /// NVLSTree on several nodes, 0 otherwise).
    pub tree_levels: f64,
}

impl Pipeline {
    /// The pipeline of algorithm `a` running `f` on a communicator.
    pub fn of(s: &CommShape, f: Func, a: Algo) -> Pipeline {
        let n = s.n_ranks.max(1) as f64;
        let both_ways = f == Func::AllReduce;
        let stages = match a {
            // Scatter, reduce through the switch, multicast through the switch, gather.
            Algo::Nvls | Algo::NvlsTree if both_ways => 4.0,
            Algo::Nvls | Algo::NvlsTree => 2.0,
            // A ring or chain: each GPU forwards the slice once per phase.
            _ if both_ways => 2.0 * (n - 1.0),
            _ => n - 1.0,
        };
        let bw = s.graph(a).bw_intra as f64;
        let bw_inter = s.graph(a).bw_inter as f64;
        let tree_levels = match a {
            Algo::Tree | Algo::NvlsTree if s.n_nodes > 1 && bw_inter > 0.0 => {
                2.0 * (s.n_nodes as f64).log2().ceil()
            }
            _ => 0.0,
        };
        let level_us_per_byte = if tree_levels > 0.0 {
            tree_levels / (1000.0 * bw_inter)
        } else {
            0.0
        };
        Pipeline {
            n_nodes: s.n_nodes.max(1),
            stage_us_per_byte: if bw > 0.0 {
                stages / (1000.0 * bw)
            } else {
                0.0
            },
            level_us_per_byte,
            tree_levels,
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
        let x = self.bandwidth_term(m, f, a, p, bw as f64, bytes);
        let pipe = Pipeline::of(&m.shape, f, a);
        self.params.lat_fixed + lat as f64 + self.params.transfer_us(family(a, p), p, x, &pipe)
    }

    /// `S / (1000 * A)` with NCCL's structure changed where calibrated mode differs (NVLS, caps),
    /// before the efficiency.
    fn bandwidth_term(
        &self,
        m: &NcclModel,
        f: Func,
        a: Algo,
        p: Proto,
        bw: f64,
        bytes: u64,
    ) -> f64 {
        let s = &m.shape;
        let mut alg = bw;
        if a == Algo::Nvls && f == Func::AllReduce {
            alg = s.nvls.n_channels as f64 * s.nvls.bw_intra as f64;
        }
        if let Some(eff) = self.params.pcie_eff[pcie_path(s)] {
            if s.gpu_pci_bw > 0.0 {
                let factor = crate::types::Collective::from_func(f).busbw_factor(s.n_ranks);
                // PCIe boxes: each GPU's link carries the ring's traffic, directly to its peer
                // or through host memory; the achieved bus bandwidth is a fraction of that link
                // (NCCL's path bandwidth can be lower, through CPU links, or higher).
                alg = eff * s.gpu_pci_bw as f64 / factor * self.params.eta[family(a, p)];
            }
        }
        bytes as f64 / (1000.0 * alg)
    }

    /// Calibrated point-to-point time from the uncalibrated one.
    pub fn p2p_time_us(&self, t: f64, _bytes: u64) -> f64 {
        t / self.params.eta[0]
    }
}

/// The PCIe path of a communicator's GPUs (the index of `ClassParams::pcie_eff`): peer-to-peer
/// (0, 1) or through host memory (2, 3), the ring within one CPU socket (0, 2) or across
/// sockets (1, 3: NCCL's path type SYS).
pub fn pcie_path(s: &CommShape) -> usize {
    2 * (!s.gpu_p2p) as usize + (s.ring.type_intra >= PathType::Sys) as usize
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

/// The model a row runs on.
pub fn row_model(r: &Row, mode: Mode) -> CostModel {
    let shape = r.system.shape(r.nodes, r.ppn, r.nvls);
    let version = r
        .nccl
        .and_then(|v| v.parse::<NcclVersion>().ok())
        .unwrap_or(NcclVersion::DEFAULT);
    let settings = TunerSettings {
        algo: r.algo.map(|a| a.name().to_string()),
        proto: r.proto.map(|p| p.name().to_string()),
        ..Default::default()
    };
    CostModel::new(&shape, &settings, version, mode)
        .expect("calibration rows use valid settings (checked by tests)")
}

/// Whether a protocol pays the inter-node tree levels: Simple and LL128 move data in chunks a
/// level receives before it forwards them; LL moves 8-byte flagged lines, each consumed as it
/// lands, and NCCL's LL bandwidth already prices it per size.
fn pays_levels(p: Proto) -> bool {
    p != Proto::Ll
}

/// Whether a protocol pays the pipeline fill on `n_nodes` nodes: Simple everywhere; LL128 on one
/// node only. Across nodes LL128 reaches NCCL's LL128 bandwidth without a node-level fill: AWS
/// p5 rings of 4 to 32 nodes with LL128 (forced by AWS's tuner plugin) come within 1.2-4.4% of
/// NCCL's own LL128 time from 1 GB to 2 GB, and within 1.3% at 512 MB on 4 and 8 nodes; with the
/// node-level fill they came out 13-19% slow when their system was held out. LL pays none (see [`pays_levels`]).
fn fills(p: Proto, n_nodes: usize) -> bool {
    match p {
        Proto::Ll => false,
        Proto::Ll128 => n_nodes <= 1,
        Proto::Simple => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn multi_node(fill_us: f64) -> ClassParams {
        ClassParams {
            fill_us,
            node_exp: 1.0,
            ..ClassParams::identity(HwClass::MultiNode)
        }
    }

    /// Below the fill a ring pays its bandwidth time once more, a tree across 32 nodes once per
    /// level crossed (10); far above the fill both pay the fill time once.
    #[test]
    fn a_tree_pays_per_level_below_the_fill_and_the_fill_above_it() {
        let p = multi_node(100.0);
        let t = 100.0 * 32.0;
        let ring = Pipeline {
            n_nodes: 32,
            stage_us_per_byte: 0.0,
            level_us_per_byte: 0.0,
            tree_levels: 0.0,
        };
        let tree = Pipeline {
            tree_levels: 10.0,
            ..ring
        };
        let small = 1e-3;
        assert!((p.ramp(Proto::Simple, small, &ring) - 2.0).abs() < 1e-3);
        assert!((p.ramp(Proto::Simple, small, &tree) - 11.0).abs() < 1e-2);
        let big = 1e9;
        for pipe in [&ring, &tree] {
            let extra = big * (p.ramp(Proto::Simple, big, pipe) - 1.0);
            assert!((extra - t).abs() / t < 1e-3, "{extra}");
        }
        // LL128 across nodes and LL anywhere pay no fill.
        assert_eq!(p.ramp(Proto::Ll128, small, &tree), 1.0);
        assert_eq!(p.ramp(Proto::Ll, small, &ring), 1.0);
    }
}
