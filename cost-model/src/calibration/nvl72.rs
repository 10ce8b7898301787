//! NVL72 systems: GB200 and GB300 trays in multi-node NVLink domains, and the published
//! multi-rack measurements kept out of the fit to check it.

use super::{Measured, Row, System};
use crate::consts::Algo;
use crate::shape::{CommShape, GraphShape};
use crate::types::Collective;
use planner::Pattern;
use topo::PathType;

impl System {
    /// The communicator of `n_nodes` NVLink domains of `ppn` GPUs (`ppn / 4` trays each), with
    /// the graphs NCCL 2.30.7 found for the GB200 tray file (`derivation`).
    pub(super) fn mnnvl_shape(self, n_nodes: usize, ppn: usize, nvls: bool) -> CommShape {
        use PathType::{Nvl, P2c, Pix};
        let sm = if self == System::Gb300Nvl { 103 } else { 100 };
        let (mut s, nvls_graph, nvls_channels) = if n_nodes == 1 {
            let mut s = CommShape::uniform(
                1,
                ppn,
                sm,
                GraphShape::new(Pattern::Ring, 16, 45.0, 45.0, Nvl, Pix),
                GraphShape::new(Pattern::BalancedTree, 16, 45.0, 45.0, Nvl, Pix),
            )
            .with_p2p(32, 32);
            s.n_channels = 32;
            let (ch, intra, inter) = match ppn {
                8 => (8, 80.0, 90.0),
                16 => (16, 40.0, 80.0),
                _ => (32, 20.0, 40.0),
            };
            (
                s,
                GraphShape::new(Pattern::Nvls, ch, intra, inter, Nvl, Pix),
                24,
            )
        } else if ppn <= 8 {
            // Domains of one or two trays on different racks joined by the trays' NICs: the
            // planner's graphs for three such domains, each tray's NICs with GUIDs of their own.
            let k = (ppn / 4) as f32;
            let mut s = CommShape::uniform(
                n_nodes,
                ppn,
                sm,
                GraphShape::new(Pattern::Ring, 8, 24.0 * k, 24.0 * k, Nvl, P2c),
                GraphShape::new(Pattern::BalancedTree, 8, 48.0 * k, 24.0 * k, Nvl, P2c),
            )
            .with_p2p(16, 4);
            s.n_channels = 16;
            let nvls = GraphShape::new(Pattern::Nvls, 4 * k as i32, 48.0, 48.0, Nvl, P2c);
            (s, nvls, 24)
        } else {
            let g = RackGraphs::of(true, n_nodes);
            g.shape(n_nodes, ppn, sm)
        };
        s.mnnvl = ppn > 4;
        s.cpu_arch = topo::consts::cpu_arch::ARM;
        if nvls {
            s = s.with_nvls(nvls_graph, nvls_channels);
        }
        s
    }
}

/// The graphs the planner finds for racks of 18 GB200 trays joined by NET, from the bundled
/// tray file: every tray a copy of the file, so the trays' NICs share its GUIDs (`distinct`
/// false: NCCL takes port k of every tray as one ASIC and shares its bandwidth between the trays
/// during the search), or each tray's NICs given GUIDs of their own, as real trays have
/// (`distinct` true).
#[derive(Debug, Clone, Copy)]
pub struct RackGraphs {
    ring: (i32, f32, f32),
    tree: (i32, f32, f32),
    nvls: (i32, f32, f32),
    channels: usize,
    nvls_channels: usize,
    p2p: (usize, usize),
}

impl RackGraphs {
    /// The planner's graphs for `racks` racks (2 to 20 racks give the same graphs; NVLS
    /// channels are 32 for 2 racks and 24 for 20).
    pub fn of(distinct: bool, racks: usize) -> RackGraphs {
        let nvls_channels = if racks > 2 { 24 } else { 32 };
        if distinct {
            RackGraphs {
                ring: (16, 45.1, 45.1),
                tree: (16, 45.1, 45.1),
                nvls: (32, 20.0, 40.0),
                channels: 32,
                nvls_channels,
                p2p: (32, 1),
            }
        } else {
            RackGraphs {
                ring: (8, 24.0, 24.0),
                tree: (8, 48.0, 24.0),
                nvls: (32, 6.0, 6.0),
                channels: 16,
                nvls_channels,
                p2p: (16, 1),
            }
        }
    }

    /// The communicator, with its NVLS graph and NVLS channel count.
    fn shape(self, n_nodes: usize, ppn: usize, sm: i32) -> (CommShape, GraphShape, usize) {
        use PathType::{Nvl, P2c};
        let g = |(n, a, b): (i32, f32, f32), p| GraphShape::new(p, n, a, b, Nvl, P2c);
        let mut s = CommShape::uniform(
            n_nodes,
            ppn,
            sm,
            g(self.ring, Pattern::Ring),
            g(self.tree, Pattern::BalancedTree),
        )
        .with_p2p(self.p2p.0, self.p2p.1);
        s.n_channels = self.channels;
        (s, g(self.nvls, Pattern::Nvls), self.nvls_channels)
    }
}

/// `racks` GB200 NVL72 racks with NVLS, planned from copies of the tray file (shared NIC GUIDs):
/// what `ncclsim predict --topo topologies/gb200-nvl72-tray.xml --nodes 18*racks --nic-guids
/// as-file` plans (without `--nic-guids`, each tray's NICs are its own: `System::Gb200Nvl`).
pub fn racks_from_one_tray_file(racks: usize) -> CommShape {
    let (mut s, nvls, ch) = RackGraphs::of(false, racks).shape(racks, 72, 100);
    s.mnnvl = true;
    s.cpu_arch = topo::consts::cpu_arch::ARM;
    s.with_nvls(nvls, ch)
}

/// CoreWeave's published GB200 NVL72 AllReduce tables (`coreweave/nccl-tests` README.md,
/// "Expected Performance / GB200", NCCL 2.26.2 as the README states; the single-rack block first
/// appeared with the repository's NVL72 Slurm example, which set `NCCL_NVLS_ENABLE=1`): one
/// rack, two racks and twenty racks of 18 trays. Never fitted: they check the fit.
/// `(racks, bytes, out-of-place busbw, in-place busbw)`.
pub const HELD_OUT_NVL72: &[(usize, u64, f64, f64)] = &[
    (1, 512 * MB, 586.06, 576.74),
    (1, GB, 681.17, 724.06),
    (1, 2 * GB, 757.78, 773.62),
    (1, 4 * GB, 839.16, 835.32),
    (1, 8 * GB, 834.57, 846.82),
    (2, 512 * MB, 493.94, 508.83),
    (2, GB, 596.10, 597.59),
    (2, 2 * GB, 680.30, 680.91),
    (2, 4 * GB, 743.09, 745.36),
    (2, 8 * GB, 793.06, 791.88),
    (2, 16 * GB, 810.41, 820.36),
    (20, 512 * MB, 150.95, 150.16),
    (20, GB, 218.85, 218.54),
    (20, 2 * GB, 286.52, 284.49),
    (20, 4 * GB, 346.38, 343.71),
    (20, 8 * GB, 381.48, 382.11),
    (20, 16 * GB, 405.74, 404.77),
];

/// The sizes the NVL72 targets are stated for (1 to 8 GB).
pub const NVL72_CHECK_SIZES: std::ops::RangeInclusive<u64> = GB..=8 * GB;

const MB: u64 = 1 << 20;
const GB: u64 = 1 << 30;

/// A held-out CoreWeave measurement as a calibration row (NCCL's own choice, NVLS on).
pub fn held_out_row(racks: usize, bytes: u64, busbw: f64) -> Row {
    Row {
        label: "CoreWeave GB200 NVL72",
        system: System::Gb200Nvl,
        nodes: racks,
        ppn: 72,
        coll: Collective::AllReduce,
        bytes,
        measured: Measured::BusBw(busbw),
        algo: None::<Algo>,
        proto: None,
        nvls: true,
        nccl: Some("2.26.2"),
        source: "coreweave/nccl-tests README.md",
    }
}
