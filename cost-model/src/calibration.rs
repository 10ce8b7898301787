//! The calibration set: published nccl-tests measurements (cloud vendors, NVIDIA engineers and
//! users; each row names its source) as data, each with the system it ran on described the way the
//! model sees it.
//!
//! System shapes use the planner's outputs for the bundled DGX A100 / DGX H100 / GB200 tray files
//! (`tests/planner_shapes.rs` checks they agree with what the planner finds); systems without a
//! bundled file are derived by the same NCCL rules from public hardware facts and say so in
//! `derivation`. Where a publication forced an algorithm (`NCCL_ALGO`), the row records it: the
//! Azure guide's script runs `NCCL_ALGO=NVLS` on 8-GPU H100/H200 nodes and `NCCL_ALGO=Ring` on
//! 4-GPU GB200 trays, one process driving every GPU (`-g`), and reports in-place busbw. Where a
//! tuner plugin made the choice, the row records the algorithm and protocol it picked
//! (`Row::tuned`): the AWS p5 job files load aws-ofi-nccl's tuner, whose region table for
//! p5.48xlarge (aws-ofi-nccl v1.15-v1.17, `src/tuner/nccl_ofi_regions.cpp`,
//! `region_init_internal_p5_p5e`) fixes both on more than 2 nodes and leaves 2 nodes to NCCL.

use crate::consts::{Algo, Proto};
use crate::shape::{CommShape, GraphShape};
use crate::types::Collective;
use planner::Pattern;
use topo::PathType;

mod nvl72;
pub use nvl72::{
    held_out_row, racks_from_one_tray_file, RackGraphs, HELD_OUT_NVL72, NVL72_CHECK_SIZES,
};

/// A system the measurements ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    /// DGX A100 / ND A100 v4 / p4d: 8x A100-SXM4, 6 NVSwitches, 12 NVLinks per GPU.
    DgxA100,
    /// DGX H100 / ND H100 v5 / p5: 8x H100-SXM5, 4 NVSwitches, 18 NVLinks per GPU, NVLS;
    /// 8x 400G NICs per node (p5: 32x 100G EFA, the same 400 GB/s per node).
    DgxH100,
    /// 8x H100 SXM nodes with 4x 400G NICs (two GPUs per NIC).
    H100FourNic,
    /// 2x H100 PCIe joined by an NVLink bridge (12 NVLink4 links, no NVSwitch).
    H100PcieBridge,
    /// 8x RTX 5090, PCIe Gen5 x16, dual Xeon 8480+ (no GPU peer-to-peer: paths through the CPUs).
    /// Its runs (NVIDIA/nccl issue 1639) set `NCCL_MIN_NCHANNELS=8` and `NCCL_NTHREADS=256`; the
    /// calibrated PCIe fractions do not depend on the channel count, so the rows leave them out.
    Rtx5090Box,
    /// 8x H100 SXM nodes with 8x 200G NICs, one per GPU (GCP A3 Mega, GPUDirect-TCPXO).
    H100Eight200G,
    /// 8x A100 SXM4 nodes with 4x HDR 200G NICs (two GPUs per NIC).
    A100FourNic,
    /// 2x RTX 2080 Ti joined by an NVLink bridge (2 NVLink2 links, no NVSwitch).
    Rtx2080TiBridge,
    /// RTX 4090s, PCIe Gen4 x16 on one CPU socket, peer-to-peer through the host bridge (the
    /// open kernel modules patched for P2P).
    Rtx4090Box,
    /// 8x RTX 4090, PCIe Gen4 x16, each on its own root port of two AMD EPYC 7542 (NPS4: every GPU
    /// on its own NUMA node); `p2p`: with the P2P-patched kernel modules, else through host memory.
    Rtx4090DualRome {
        /// GPU peer-to-peer enabled.
        p2p: bool,
    },
    /// 8x RTX 5090, PCIe Gen5 x16, two AMD EPYC 9575F, peer-to-peer (P2P-patched kernel modules,
    /// `NCCL_P2P_LEVEL=SYS`).
    Rtx5090DualTurin,
    /// 4x RTX 5090, PCIe Gen5 x16, AMD EPYC Genoa host, no GPU peer-to-peer (through host memory);
    /// NCCL's default settings (NVIDIA/nccl-tests issue 287, run after NCCL 2.26.2's release).
    Rtx5090Genoa,
    /// GB200 NVL72 compute tray: 4 B200 GPUs, 18 NVLink5 links each to the rack's NVSwitches,
    /// Grace (Arm) hosts.
    Gb200Tray,
    /// GB200 NVL72 trays in multi-node NVLink domains (`MNNVL 1`): each NCCL node is one domain
    /// of `ppn / 4` trays behind the rack's NVSwitch trays; several nodes are several domains
    /// (racks, or partitions on different racks) joined by the trays' 4x 400G InfiniBand NICs.
    Gb200Nvl,
    /// GB300 NVL72 trays in multi-node NVLink domains: the same NVLink5 fabric and NICs as
    /// `Gb200Nvl`, Blackwell Ultra GPUs (sm103).
    Gb300Nvl,
}

impl System {
    /// The system's name in the report.
    pub fn name(self) -> String {
        match self {
            System::Rtx4090DualRome { .. } => "Rtx4090DualRome".to_string(),
            s => format!("{s:?}"),
        }
    }

    /// How the shape was obtained.
    pub fn derivation(self) -> &'static str {
        match self {
            System::DgxA100 => "planner output for topologies/dgx-a100.xml (ring 12x20, tree 12x20 one node; ring 8x24, tree 8x30/24 two nodes)",
            System::DgxH100 => "planner output for topologies/dgx-h100.xml (ring 12x30, NVLS 8x40/60 one node; ring 8x48, tree 8x48 chain, NVLS 8x40/48 multi-node)",
            System::H100FourNic => "DGX H100 with 4 of 8 NICs: NCCL's inter-node search gives 4x48 duplicated to 8x24",
            System::H100PcieBridge => "12 NVLink4 links (20.6 GB/s each in NCCL) between 2 GPUs: ring 4x60 duplicated to 8x30",
            System::Rtx5090Box => "PCIe Gen5 x16 (48 GB/s) through the host bridge; 8 GPUs cross the CPU link (SRP 22 GB/s): ring 2x11; 4 GPUs on one socket: ring 2x24",
            System::H100Eight200G => "DGX H100 node with 8x 200G NICs (25 GB/s each): NCCL's inter-node search gives 8x24 (no duplication below 25 GB/s), NVLS 8x40/24",
            System::A100FourNic => "DGX A100 node with 4 of 8 NICs (HDR, 25 GB/s each): ring 4x24, tree 4x30/24 (the DGX A100 two-node graphs with half the channels)",
            System::Rtx2080TiBridge => "2 NVLink links (20 GB/s each in NCCL for sm75) between 2 GPUs: ring 1x40 duplicated to 2x20",
            System::Rtx4090Box => "PCIe Gen4 x16 (24 GB/s) through the host bridge, GPUs on one socket: ring 2x12",
            System::Rtx4090DualRome { .. } => "PCIe Gen4 x16 (24 GB/s); every GPU on its own NUMA node, so the ring crosses CPU links (AMD, 16 GB/s in NCCL): ring 2x8",
            System::Rtx5090DualTurin => "PCIe Gen5 x16 (48 GB/s); 8 GPUs on two sockets, the ring crosses the CPU link (AMD, 16 GB/s in NCCL): ring 2x8",
            System::Rtx5090Genoa => "PCIe Gen5 x16 (48 GB/s) through the host bridge, 4 GPUs taken as on one socket (bus ids 01-61; sockets not stated): ring 2x24",
            System::Gb200Nvl | System::Gb300Nvl => "what NCCL 2.30.7 printed for topologies/gb200-nvl72-tray.xml in one NVLink domain (planner/tests/nccl-2.30.7/mnnvl): ring 16x45, tree 16x45, 32 channels, 24 NVLS channels; NVLS 8x80/90 for 2 trays, 16x40/80 for 4, 32x20/40 for 18 (the 18-tray graph for other domain sizes); three domains of 1 or 2 trays on different racks joined by NET: the planner's graphs with each tray's NICs given GUIDs of their own, as real trays have (one tray each: ring 8x24, tree 8x48/24, NVLS 4x48/48; two trays each: ring 8x48, tree 8x96/48, NVLS 8x48/48; 16 channels); racks of 18 trays joined by NET: what NCCL 2.30.7 printed for two racks of the tray file with each tray's NICs given GUIDs of their own, as real trays have (planner/tests/nccl-2.30.7/mnnvl, hostguids-2dom-18tray: ring 16x45.1, tree 16x45.1, NVLS 32x20/40, 32 channels; with the file's GUIDs shared by every tray: ring 8x24, NVLS 32x6/6)",
            System::Gb200Tray => "what NCCL 2.30.7 printed for topologies/gb200-nvl72-tray.xml (planner/tests/nccl-2.30.7/gb200-nvl72-tray-1node.txt): ring 16x45, tree 16x50, NVLS 4x90, 32 channels, 24 NVLS channels",
        }
    }

    /// The machine without its software configuration: the same box with and without GPU
    /// peer-to-peer is one system when held out.
    pub fn hardware(self) -> System {
        match self {
            System::Rtx4090DualRome { .. } => System::Rtx4090DualRome { p2p: true },
            s => s,
        }
    }

    /// The communicator of `n_nodes` x `ppn` ranks on this system.
    pub fn shape(self, n_nodes: usize, ppn: usize, nvls: bool) -> CommShape {
        let mut s = self.shape_inner(n_nodes, ppn, nvls);
        s.has_nvswitch = matches!(
            self,
            System::DgxA100
                | System::DgxH100
                | System::H100FourNic
                | System::H100Eight200G
                | System::A100FourNic
                | System::Gb200Tray
                | System::Gb200Nvl
                | System::Gb300Nvl
        );
        // GPU PCIe links (NCCL's bandwidth: 1.2 GB/s per GT/s-lane unit, Gen4 x16 24, Gen5 x16 48).
        s.gpu_pci_bw = match self {
            System::DgxA100
            | System::A100FourNic
            | System::Rtx4090Box
            | System::Rtx4090DualRome { .. } => 24.0,
            System::DgxH100
            | System::H100FourNic
            | System::H100Eight200G
            | System::H100PcieBridge
            | System::Rtx5090Box
            | System::Rtx5090DualTurin
            | System::Rtx5090Genoa
            | System::Gb200Tray
            | System::Gb200Nvl
            | System::Gb300Nvl => 48.0,
            System::Rtx2080TiBridge => 12.0,
        };
        // GeForce boards with NVIDIA's driver have no PCIe peer-to-peer: NCCL goes through host
        // memory (the P2P-patched open kernel modules restore it).
        s.gpu_p2p = !matches!(
            self,
            System::Rtx5090Box | System::Rtx5090Genoa | System::Rtx4090DualRome { p2p: false }
        );
        s
    }

    fn shape_inner(self, n_nodes: usize, ppn: usize, nvls: bool) -> CommShape {
        use PathType::*;
        match self {
            System::DgxA100 | System::A100FourNic => {
                if n_nodes == 1 {
                    CommShape::uniform(
                        1,
                        ppn,
                        80,
                        GraphShape::new(Pattern::Ring, 12, 20.0, 20.0, Nvl, Pix),
                        GraphShape::new(Pattern::BalancedTree, 12, 20.0, 20.0, Nvl, Pix),
                    )
                    .with_p2p(32, 32)
                } else {
                    // One channel per NIC.
                    let nch = if self == System::DgxA100 { 8 } else { 4 };
                    let mut ring = GraphShape::new(Pattern::Ring, nch, 24.0, 24.0, Nvl, Pxb);
                    ring.latency_inter = 0.0;
                    CommShape::uniform(
                        n_nodes,
                        ppn,
                        80,
                        ring,
                        GraphShape::new(Pattern::BalancedTree, nch, 30.0, 24.0, Nvl, Pxb),
                    )
                    .with_p2p(16, 2)
                }
            }
            System::DgxH100 | System::H100FourNic | System::H100Eight200G => {
                let s = if n_nodes == 1 {
                    CommShape::uniform(
                        1,
                        ppn,
                        90,
                        GraphShape::new(Pattern::Ring, 12, 30.0, 30.0, Nvl, Pix),
                        GraphShape::new(Pattern::BalancedTree, 12, 30.0, 30.0, Nvl, Pix),
                    )
                    .with_p2p(32, 32)
                } else if self == System::DgxH100 {
                    let mut s = CommShape::uniform(
                        n_nodes,
                        ppn,
                        90,
                        GraphShape::new(Pattern::Ring, 8, 48.0, 48.0, Nvl, Pix),
                        GraphShape::new(Pattern::Tree, 8, 48.0, 48.0, Nvl, Pix),
                    )
                    .with_p2p(16, 4);
                    // Postset doubles 8 to 16; the sm90 multi-node doubling needs nChannels < 16, so
                    // NCCL 2.30 stays at 16 coll / 16 p2p channels (what NCCL printed for DGX H100
                    // x2, planner/tests/nccl-2.30.7/dgx-h100-2node.txt).
                    s.n_channels = 16;
                    s
                } else {
                    CommShape::uniform(
                        n_nodes,
                        ppn,
                        90,
                        GraphShape::new(Pattern::Ring, 8, 24.0, 24.0, Nvl, Pix),
                        GraphShape::new(Pattern::Tree, 8, 24.0, 24.0, Nvl, Pix),
                    )
                    .with_p2p(16, 2)
                };
                if nvls {
                    let bw_inter = if n_nodes == 1 {
                        60.0
                    } else if self == System::DgxH100 {
                        48.0
                    } else {
                        24.0
                    };
                    s.with_nvls(
                        GraphShape::new(Pattern::Nvls, 8, 40.0, bw_inter, Nvl, Pix),
                        16,
                    )
                } else {
                    s
                }
            }
            System::H100PcieBridge => CommShape::uniform(
                1,
                ppn,
                90,
                GraphShape::new(Pattern::Ring, 8, 30.0, 30.0, Nvl, Pix),
                GraphShape::new(Pattern::BalancedTree, 8, 30.0, 30.0, Nvl, Pix),
            )
            .with_p2p(16, 16),
            System::Rtx2080TiBridge => CommShape::uniform(
                1,
                ppn,
                75,
                GraphShape::new(Pattern::Ring, 2, 20.0, 20.0, Nvl, Pix),
                GraphShape::new(Pattern::BalancedTree, 2, 20.0, 20.0, Nvl, Pix),
            )
            .with_p2p(4, 4),
            System::Gb200Tray => {
                let mut s = CommShape::uniform(
                    1,
                    ppn,
                    100,
                    GraphShape::new(Pattern::Ring, 16, 45.0, 45.0, Nvl, Pix),
                    GraphShape::new(Pattern::Tree, 16, 50.0, 50.0, Nvl, Pix),
                )
                .with_p2p(32, 32);
                s.cpu_arch = topo::consts::cpu_arch::ARM;
                if nvls {
                    s.with_nvls(GraphShape::new(Pattern::Nvls, 4, 90.0, 90.0, Nvl, Pix), 24)
                } else {
                    s
                }
            }
            System::Gb200Nvl | System::Gb300Nvl => self.mnnvl_shape(n_nodes, ppn, nvls),
            System::Rtx4090Box => CommShape::uniform(
                1,
                ppn,
                89,
                GraphShape::new(Pattern::Ring, 2, 12.0, 12.0, Phb, Pix),
                GraphShape::new(Pattern::BalancedTree, 2, 12.0, 12.0, Phb, Pix),
            )
            .with_p2p(4, 2),
            System::Rtx4090DualRome { .. } | System::Rtx5090DualTurin => CommShape::uniform(
                1,
                ppn,
                if self == System::Rtx5090DualTurin {
                    120
                } else {
                    89
                },
                GraphShape::new(Pattern::Ring, 2, 8.0, 8.0, Sys, Pix),
                GraphShape::new(Pattern::BalancedTree, 2, 8.0, 8.0, Sys, Pix),
            )
            .with_p2p(4, 2),
            System::Rtx5090Box | System::Rtx5090Genoa => {
                let (bw, ty) = if ppn > 4 { (11.0, Sys) } else { (24.0, Phb) };
                CommShape::uniform(
                    1,
                    ppn,
                    120,
                    GraphShape::new(Pattern::Ring, 2, bw, bw, ty, Pix),
                    GraphShape::new(Pattern::BalancedTree, 2, bw, bw, ty, Pix),
                )
                .with_p2p(4, 2)
            }
        }
    }
}

/// What was measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Measured {
    /// nccl-tests busbw (GB/s).
    BusBw(f64),
    /// Time per operation (µs).
    TimeUs(f64),
}

/// One calibration row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// Label (system as published).
    pub label: &'static str,
    /// System.
    pub system: System,
    /// Nodes.
    pub nodes: usize,
    /// GPUs per node.
    pub ppn: usize,
    /// Collective.
    pub coll: Collective,
    /// nccl-tests size (bytes).
    pub bytes: u64,
    /// Measurement.
    pub measured: Measured,
    /// Algorithm the publication states (forced as NCCL_ALGO would), or `None` for NCCL's choice.
    pub algo: Option<Algo>,
    /// Protocol, when the run's selection is known to have fixed it (forced as NCCL_PROTO would).
    pub proto: Option<Proto>,
    /// NVLS enabled (NCCL_NVLS_ENABLE).
    pub nvls: bool,
    /// NCCL release used, when stated (2.18+ profiles; older or unknown runs use 2.30).
    pub nccl: Option<&'static str>,
    /// Where it was published.
    pub source: &'static str,
}

const KB: u64 = 1 << 10;
const MB: u64 = 1 << 20;
const GB: u64 = 1 << 30;

use Measured::{BusBw as B, TimeUs as T};

/// A row in one line: `(label, system, nodes, ppn, collective, size, measured, forced algorithm,
/// NVLS, NCCL release, source)`.
#[allow(clippy::too_many_arguments)]
const fn r(
    label: &'static str,
    system: System,
    nodes: usize,
    ppn: usize,
    coll: Collective,
    bytes: u64,
    measured: Measured,
    algo: Option<Algo>,
    nvls: bool,
    nccl: Option<&'static str>,
    source: &'static str,
) -> Row {
    Row {
        label,
        system,
        nodes,
        ppn,
        coll,
        bytes,
        measured,
        algo,
        proto: None,
        nvls,
        nccl,
        source,
    }
}

impl Row {
    /// The row with the algorithm and protocol a tuner plugin chose for it (the run's selection was
    /// not NCCL's own).
    const fn tuned(self, algo: Algo, proto: Proto) -> Row {
        Row {
            algo: Some(algo),
            proto: Some(proto),
            ..self
        }
    }
}

const AR: Collective = Collective::AllReduce;
const RS: Collective = Collective::ReduceScatter;
const AG: Collective = Collective::AllGather;
use System::{DgxA100 as A100, DgxH100 as H100, H100Eight200G as A3};

const AZ_A100: &str = "Azure/AI-benchmarking-guide ND_A100_v4_results.md";
const AZ_H100: &str = "Azure/AI-benchmarking-guide ND_H100_v5_results.md";
const AZ_H200: &str = "Azure/AI-benchmarking-guide ND_H200_v5_results.md";
const OCI_A100: &str =
    "oracle-japan/ocitutorials content/hpc/benchmark/run-nccltests-ubuntu/index.md";
const OCI_H100: &str =
    "oracle-japan/ocitutorials content/hpc/benchmark/run-nccltests-h100/index.md";
const NT290: &str = "NVIDIA/nccl-tests issue 290";
/// NCCL 2.27.7 (the repository's Dockerfile when the data was added), `NCCL_BUFFSIZE=8388608`,
/// aws-ofi-nccl's tuner (`k8s/nccl_all_reduce_perf.yaml`); out-of-place busbw.
const P5: &str = "crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv";
const N1229: &str = "NVIDIA/nccl issue 1229";
const A3M: &str = "lessizzmore/create-a3mega-ztan-fork ztan-NCCL-test-result";
const NT44: &str = "NVIDIA/nccl-tests issue 44";
/// Google's TCPXO image and NCCL build (`/var/lib/tcpxo/lib64`, `nccl-env-profile-ll128.sh`; the
/// profile's settings are not printed); out-of-place busbw.
const DSTACK_A3M: &str = "dstackai/dstack examples/clusters/a3mega/README.md";
const NT309: &str = "NVIDIA/nccl-tests issue 309";
const N1469: &str = "NVIDIA/nccl issue 1469";
const TG36: &str = "tinygrad/open-gpu-kernel-modules#36";
const AZ_GB200: &str = "Azure/AI-benchmarking-guide ND_GB200_v6_results.md";
const PPT: &str = "yiguCM/pptest_driver README.md";
const TGR: &str = "tinygrad/open-gpu-kernel-modules README.md";
const CHLC: &str = "blog.chlc.cc/p/rtx4090-gpudirect-p2p-unlocked";
const AIKI: &str = "aikitoria/open-gpu-kernel-modules README.md";
const NT287: &str = "NVIDIA/nccl-tests issue 287";
use System::Rtx4090DualRome as Rome4090;
/// Verda's GB300 NVL72 report: one `mpirun` over the 18 trays of a rack, one GPU per process,
/// NCCL's defaults (no environment, release not stated), 1000 iterations; out-of-place busbw.
const VERDA: &str = "datacrunch-research/blogs gb300-technical-report/gb300_technical_report.md";
/// GB200 NVL72 partitions of 1 or 2 trays on three different racks, IB between them,
/// `NCCL_NVLS_ENABLE=0`, NCCL 2.27.3; ring is NCCL's choice, tree forced; out-of-place busbw.
const N1801: &str = "NVIDIA/nccl issue 1801";
use System::{Gb200Nvl, Gb300Nvl};

/// Every published measurement of the set that names a size (ranges use their ends).
#[rustfmt::skip]
pub const ROWS: &[Row] = &[
    r("Azure ND A100 v4", A100, 1, 8, AR, MB, B(36.22), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 16 * MB, B(109.22), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 128 * MB, B(174.18), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, GB, B(228.10), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 8 * GB, B(231.58), None, false, Some("2.18.5"), AZ_A100),
    r("AWS p4dn.24xlarge", A100, 1, 8, AR, GB, B(230.77), None, false, None, "NVIDIA/nccl issue 527 (NCCL 2.9.9)"),
    r("Azure ND H100 v5", H100, 1, 8, AR, MB, B(43.70), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 16 * MB, B(234.45), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 128 * MB, B(400.61), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, GB, B(466.35), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 8 * GB, B(478.87), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("8x H100 SXM, NVLS off", H100, 1, 8, AR, 4 * GB, B(370.0), Some(Algo::Ring), false, Some("2.30.4"), "NVIDIA/nccl issue 2140"),
    r("8x H100 SXM, NVLS on", H100, 1, 8, AR, 4 * GB, B(480.0), Some(Algo::Nvls), true, Some("2.30.4"), "NVIDIA/nccl issue 2140"),
    r("H100 SXM sweep, 4 GPUs Ring", H100, 1, 4, AR, 4 * GB, B(365.0), Some(Algo::Ring), false, None, "NVIDIA/nccl issue 1455"),
    r("H100 SXM sweep, 5 GPUs NVLS", H100, 1, 5, AR, 4 * GB, B(420.0), Some(Algo::Nvls), true, None, "NVIDIA/nccl issue 1455"),
    r("H100 SXM sweep, 6 GPUs NVLS", H100, 1, 6, AR, 4 * GB, B(440.0), Some(Algo::Nvls), true, None, "NVIDIA/nccl issue 1455"),
    r("H100 SXM sweep, 7 GPUs NVLS", H100, 1, 7, AR, 4 * GB, B(460.0), Some(Algo::Nvls), true, None, "NVIDIA/nccl issue 1455"),
    r("H100 SXM sweep, 8 GPUs NVLS", H100, 1, 8, AR, 4 * GB, B(480.0), Some(Algo::Nvls), true, None, "NVIDIA/nccl issue 1455"),
    r("2x H100 PCIe + NVLink bridge", System::H100PcieBridge, 1, 2, AR, GB, B(115.37), None, false, None, "NVIDIA/nccl issue 1161"),
    r("2x H100 PCIe + NVLink bridge", System::H100PcieBridge, 1, 2, AR, 4 * GB, B(116.26), None, false, None, "NVIDIA/nccl issue 1161"),
    r("8x RTX 5090 PCIe 5", System::Rtx5090Box, 1, 8, AR, 4 * GB, B(28.0), None, false, None, "NVIDIA/nccl issue 1639"),
    r("4x RTX 5090 PCIe 5", System::Rtx5090Box, 1, 4, AR, 4 * GB, B(35.0), None, false, None, "NVIDIA/nccl issue 1639"),
    r("AWS p5.48xlarge x2", H100, 2, 8, AR, 32 * MB, B(147.32), None, true, Some("2.27.7"), P5),
    r("AWS p5.48xlarge x2", H100, 2, 8, AR, GB, B(435.14), None, true, Some("2.27.7"), P5),
    r("AWS p5.48xlarge x2", H100, 2, 8, AR, 8 * GB, B(477.71), None, true, Some("2.27.7"), P5),
    r("AWS p5.48xlarge x4", H100, 4, 8, AR, GB, B(280.30), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x4", H100, 4, 8, AR, 8 * GB, B(356.99), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Simple),
    r("H100 8x400G RoCE x2, NVLS off", H100, 2, 8, AR, 4 * GB, B(330.0), None, false, Some("2.19.3"), "NVIDIA/nccl issue 1221"),
    r("H100 8x400G RoCE x2, NVLS on", H100, 2, 8, AR, 4 * GB, B(430.0), None, true, Some("2.19.3"), "NVIDIA/nccl issue 1221"),
    r("H100 8x400G RoCE x4", H100, 4, 8, AR, 4 * GB, B(320.0), None, true, Some("2.19.3"), "NVIDIA/nccl issue 1221"),
    r("H100 4x400G RoCE x5, Ring", System::H100FourNic, 5, 8, AR, GB, B(190.0), Some(Algo::Ring), false, None, "NVIDIA/nccl issue 1368"),
    r("H100 4x400G RoCE x5, Tree", System::H100FourNic, 5, 8, AR, GB, B(150.0), Some(Algo::Tree), false, None, "NVIDIA/nccl issue 1368"),
    r("2x H100 SXM NVLS, CUDA graphs", H100, 1, 2, AR, 128, T(5.56), None, true, None, "NVIDIA/nccl issue 1259"),
    r("AWS p5 EFA x2, small", H100, 2, 8, AR, 16, T(68.0), None, true, None, "aws/aws-k8s-tester PR 585"),
    r("AWS p5 EFA x2, small", H100, 2, 8, AR, 256, T(69.0), None, true, None, "aws/aws-k8s-tester PR 585"),
    r("Azure ND A100 v4", A100, 1, 8, AR, 4 * KB, B(0.17), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 32 * KB, B(1.37), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 256 * KB, B(10.11), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 4 * MB, B(71.43), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 64 * MB, B(166.63), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 512 * MB, B(221.58), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 4 * GB, B(230.48), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 4 * KB, B(0.27), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 32 * KB, B(1.71), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 256 * KB, B(10.86), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 4 * MB, B(128.73), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 64 * MB, B(361.78), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 512 * MB, B(438.46), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 4 * GB, B(475.54), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H200 v5", H100, 1, 8, AR, 4 * KB, B(0.23), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 32 * KB, B(1.84), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 256 * KB, B(14.75), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, MB, B(52.96), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 4 * MB, B(138.44), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 16 * MB, B(240.41), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 64 * MB, B(368.11), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 256 * MB, B(432.24), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, GB, B(467.58), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 4 * GB, B(477.41), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 8 * GB, B(479.98), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("OCI BM.GPU4.8 (8x A100-40GB)", A100, 1, 8, AR, 10 * GB, B(232.20), None, false, Some("2.26.5"), OCI_A100),
    r("OCI BM.GPU4.8 x2 (16x 100G RoCE)", A100, 2, 8, AR, 10 * GB, B(191.76), None, false, Some("2.26.5"), OCI_A100),
    r("OCI BM.GPU.H100.8 x2 (16x 200G RoCE)", H100, 2, 8, AR, GB, B(446.28), None, true, Some("2.21.5"), OCI_H100),
    r("OCI BM.GPU.H100.8 x2 (16x 200G RoCE)", H100, 2, 8, AR, 4 * GB, B(461.83), None, true, Some("2.21.5"), OCI_H100),
    r("OCI BM.GPU.H100.8 x2 (16x 200G RoCE)", H100, 2, 8, AR, 16 * GB, B(464.57), None, true, Some("2.21.5"), OCI_H100),
    r("8x H100 SXM (nccl-tests 290)", H100, 1, 8, AR, 128 * MB, B(382.99), None, true, None, NT290),
    r("8x H100 SXM (nccl-tests 290)", H100, 1, 8, AR, 256 * MB, B(412.35), None, true, None, NT290),
    r("8x H100 SXM (nccl-tests 290)", H100, 1, 8, AR, 512 * MB, B(431.81), None, true, None, NT290),
    r("8x H100 SXM (nccl-tests 290)", H100, 1, 8, AR, GB, B(465.25), None, true, None, NT290),
    r("8x H100 SXM (nccl-tests 290)", H100, 1, 8, AR, 2 * GB, B(468.57), None, true, None, NT290),
    r("8x H100 SXM (nccl-tests 290)", H100, 1, 8, AR, 4 * GB, B(473.6), None, true, None, NT290),
    r("AWS p5.48xlarge x2", H100, 2, 8, AR, 128 * MB, B(305.13), None, true, Some("2.27.7"), P5),
    r("AWS p5.48xlarge x2", H100, 2, 8, AR, 512 * MB, B(395.99), None, true, Some("2.27.7"), P5),
    r("AWS p5.48xlarge x2", H100, 2, 8, AR, 4 * GB, B(465.81), None, true, Some("2.27.7"), P5),
    r("AWS p5.48xlarge x4", H100, 4, 8, AR, 32 * MB, B(95.38), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x4", H100, 4, 8, AR, 128 * MB, B(229.48), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x4", H100, 4, 8, AR, 512 * MB, B(278.41), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x4", H100, 4, 8, AR, 4 * GB, B(354.45), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Simple),
    r("AWS p5.48xlarge x8", H100, 8, 8, AR, 32 * MB, B(86.74), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x8", H100, 8, 8, AR, 128 * MB, B(156.33), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x8", H100, 8, 8, AR, 512 * MB, B(272.62), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x8", H100, 8, 8, AR, GB, B(274.47), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x8", H100, 8, 8, AR, 4 * GB, B(351.32), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Simple),
    r("AWS p5.48xlarge x8", H100, 8, 8, AR, 8 * GB, B(355.36), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Simple),
    r("AWS p5.48xlarge x16", H100, 16, 8, AR, 32 * MB, B(74.85), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x16", H100, 16, 8, AR, 128 * MB, B(129.2), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x16", H100, 16, 8, AR, 512 * MB, B(223.8), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x16", H100, 16, 8, AR, GB, B(269.23), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x16", H100, 16, 8, AR, 4 * GB, B(306.15), None, true, Some("2.27.7"), P5).tuned(Algo::NvlsTree, Proto::Simple),
    r("AWS p5.48xlarge x16", H100, 16, 8, AR, 8 * GB, B(356.27), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Simple),
    r("AWS p5.48xlarge x32", H100, 32, 8, AR, 32 * MB, B(66.34), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x32", H100, 32, 8, AR, 128 * MB, B(115.78), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x32", H100, 32, 8, AR, 512 * MB, B(156.83), None, true, Some("2.27.7"), P5).tuned(Algo::NvlsTree, Proto::Simple),
    r("AWS p5.48xlarge x32", H100, 32, 8, AR, GB, B(220.08), None, true, Some("2.27.7"), P5).tuned(Algo::NvlsTree, Proto::Simple),
    r("AWS p5.48xlarge x32", H100, 32, 8, AR, 4 * GB, B(302.81), None, true, Some("2.27.7"), P5).tuned(Algo::NvlsTree, Proto::Simple),
    r("AWS p5.48xlarge x32", H100, 32, 8, AR, 8 * GB, B(321.1), None, true, Some("2.27.7"), P5).tuned(Algo::NvlsTree, Proto::Simple),
    r("AWS p5.48xlarge x2", H100, 2, 8, AR, 64 * MB, B(207.00), None, true, Some("2.27.7"), P5),
    r("AWS p5.48xlarge x2", H100, 2, 8, AR, 256 * MB, B(364.46), None, true, Some("2.27.7"), P5),
    r("AWS p5.48xlarge x2", H100, 2, 8, AR, 2 * GB, B(445.05), None, true, Some("2.27.7"), P5),
    r("AWS p5.48xlarge x4", H100, 4, 8, AR, 64 * MB, B(152.41), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x4", H100, 4, 8, AR, 256 * MB, B(273.34), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x4", H100, 4, 8, AR, 2 * GB, B(347.57), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Simple),
    r("AWS p5.48xlarge x8", H100, 8, 8, AR, 64 * MB, B(103.85), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x8", H100, 8, 8, AR, 256 * MB, B(232.09), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x8", H100, 8, 8, AR, 2 * GB, B(278.15), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x16", H100, 16, 8, AR, 64 * MB, B(92.39), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x16", H100, 16, 8, AR, 256 * MB, B(148.11), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x16", H100, 16, 8, AR, 2 * GB, B(270.91), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("AWS p5.48xlarge x32", H100, 32, 8, AR, 64 * MB, B(83.60), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x32", H100, 32, 8, AR, 256 * MB, B(137.99), None, true, Some("2.27.7"), P5).tuned(Algo::Tree, Proto::Ll128),
    r("AWS p5.48xlarge x32", H100, 32, 8, AR, 2 * GB, B(269.47), None, true, Some("2.27.7"), P5).tuned(Algo::Ring, Proto::Ll128),
    r("H100 8x400G x4, ReduceScatter (size not stated)", H100, 4, 8, RS, 8 * GB, B(360.0), None, true, None, N1229),
    r("H100 8x400G x8, ReduceScatter (size not stated)", H100, 8, 8, RS, 8 * GB, B(345.0), None, true, None, N1229),
    r("H100 8x400G x16, ReduceScatter (size not stated)", H100, 16, 8, RS, 8 * GB, B(320.0), None, true, None, N1229),
    r("H100 8x400G x32, ReduceScatter (size not stated)", H100, 32, 8, RS, 8 * GB, B(300.0), None, true, None, N1229),
    r("H100 8x400G x64, ReduceScatter (size not stated)", H100, 64, 8, RS, 8 * GB, B(280.0), None, true, None, N1229),
    r("H100 8x400G x128, ReduceScatter (size not stated)", H100, 128, 8, RS, 8 * GB, B(260.0), None, true, None, N1229),
    r("Azure ND A100 v4", A100, 1, 8, AR, 8 * KB, B(0.33), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 16 * KB, B(0.67), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 128 * KB, B(5.15), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 2 * MB, B(53.54), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 8 * MB, B(89.99), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND A100 v4", A100, 1, 8, AR, 32 * MB, B(132.77), None, false, Some("2.18.5"), AZ_A100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 8 * KB, B(0.53), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 16 * KB, B(0.95), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 128 * KB, B(5.4), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 2 * MB, B(81.93), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 8 * MB, B(172.13), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H100 v5", H100, 1, 8, AR, 32 * MB, B(295.53), Some(Algo::Nvls), true, Some("2.18.5"), AZ_H100),
    r("Azure ND H200 v5", H100, 1, 8, AR, 8 * KB, B(0.47), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 16 * KB, B(0.93), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 128 * KB, B(7.39), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 2 * MB, B(88.78), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 8 * MB, B(181.94), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("Azure ND H200 v5", H100, 1, 8, AR, 32 * MB, B(300.91), Some(Algo::Nvls), true, Some("2.20.5"), AZ_H200),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 128, T(123.0), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 4 * KB, T(126.9), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 32 * KB, T(155.2), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 256 * KB, B(2.94), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, MB, B(9.68), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 4 * MB, B(21.57), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 16 * MB, B(32.18), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 64 * MB, B(99.74), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 256 * MB, B(213.19), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, GB, B(297.86), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 4 * GB, B(330.58), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO)", A3, 2, 8, AR, 8 * GB, B(338.82), None, true, None, A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 8 * MB, B(47.19), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 16 * MB, B(76.89), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 32 * MB, B(110.78), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 64 * MB, B(140.62), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 128 * MB, B(155.67), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 256 * MB, B(165.34), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 512 * MB, B(174.02), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, GB, B(181.94), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 2 * GB, B(185.34), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 4 * GB, B(187.45), None, true, None, DSTACK_A3M),
    r("GCP A3 Mega x2 (8x 200G TCPXO), AllGather", A3, 2, 8, AG, 8 * GB, B(188.54), None, true, None, DSTACK_A3M),
    r("2x RTX 2080 Ti + NVLink bridge", System::Rtx2080TiBridge, 1, 2, AR, 32 * KB, T(13.39), None, false, None, NT44),
    r("2x RTX 2080 Ti + NVLink bridge", System::Rtx2080TiBridge, 1, 2, AR, 128 * KB, B(2.84), None, false, None, NT44),
    r("2x RTX 2080 Ti + NVLink bridge", System::Rtx2080TiBridge, 1, 2, AR, 512 * KB, B(7.28), None, false, None, NT44),
    r("2x RTX 2080 Ti + NVLink bridge", System::Rtx2080TiBridge, 1, 2, AR, 2 * MB, B(14.89), None, false, None, NT44),
    r("2x RTX 2080 Ti + NVLink bridge", System::Rtx2080TiBridge, 1, 2, AR, 8 * MB, B(19.73), None, false, None, NT44),
    r("2x RTX 2080 Ti + NVLink bridge", System::Rtx2080TiBridge, 1, 2, AR, 32 * MB, B(20.51), None, false, None, NT44),
    r("2x RTX 2080 Ti + NVLink bridge", System::Rtx2080TiBridge, 1, 2, AR, 128 * MB, B(20.34), None, false, None, NT44),
    r("Dell XE9680 8x H100 (peak of a sweep to 16 GB)", H100, 1, 8, AR, 16 * GB, B(480.0), None, true, Some("2.26.2"), NT309),
    r("Dell XE9680 8x H100 x2, 8x 400G IB (peak of a sweep to 16 GB)", H100, 2, 8, AR, 16 * GB, B(470.0), None, true, Some("2.26.2"), NT309),
    r("Dell XE9680 8x H100 x4, 8x 400G IB (peak of a sweep to 16 GB)", H100, 4, 8, AR, 16 * GB, B(365.84), None, true, Some("2.26.2"), NT309),
    r("8x A100 SXM4 x3, 4x HDR", System::A100FourNic, 3, 8, AR, 131_072_008, B(96.45), None, false, None, "NVIDIA/nccl-tests issue 119"),
    r("4x RTX 4090 PCIe 4, P2P driver", System::Rtx4090Box, 1, 4, AR, 256 * MB, B(25.72), None, false, None, TG36),
    r("4x RTX 4090 PCIe 4, P2P driver", System::Rtx4090Box, 1, 4, AR, 512 * MB, B(25.82), None, false, None, TG36),
    r("4x RTX 4090 PCIe 4, P2P driver", System::Rtx4090Box, 1, 4, AR, GB, B(25.95), None, false, None, TG36),
    r("16x H100 nodes (NICs not stated)", H100, 16, 8, AR, 16, T(62.15), None, true, Some("2.20.5"), N1469),
    r("16x H100 nodes (NICs not stated)", H100, 16, 8, AR, 128, T(62.38), None, true, Some("2.20.5"), N1469),
    r("16x H100 nodes (NICs not stated)", H100, 16, 8, AR, KB, T(73.73), None, true, Some("2.20.5"), N1469),
    r("16x H100 nodes (NICs not stated)", H100, 16, 8, AR, 4 * KB, T(76.61), None, true, Some("2.20.5"), N1469),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, KB, B(0.10), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, 4 * KB, B(0.38), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, 32 * KB, B(2.88), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, 256 * KB, B(22.41), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, MB, B(80.48), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, 4 * MB, B(146.27), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, 16 * MB, B(331.09), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, 64 * MB, B(550.73), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, 256 * MB, B(593.53), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, GB, B(646.87), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("Azure ND GB200 v6 (one 4-GPU tray)", System::Gb200Tray, 1, 4, AR, 8 * GB, B(679.61), Some(Algo::Ring), true, Some("2.25.1"), AZ_GB200),
    r("4x RTX 4090 PCIe 4, P2P driver (GPUs 0-3 of 8)", System::Rtx4090Box, 1, 4, AR, 32 * MB, B(25.00), None, false, None, PPT),
    r("4x RTX 4090 PCIe 4, P2P driver (GPUs 0-3 of 8)", System::Rtx4090Box, 1, 4, AR, 128 * MB, B(25.27), None, false, None, PPT),
    r("4x RTX 4090 PCIe 4, P2P driver (GPUs 0-3 of 8)", System::Rtx4090Box, 1, 4, AR, GB, B(25.31), None, false, None, PPT),
    r("6x RTX 4090 PCIe 4, P2P driver (tinybox)", System::Rtx4090Box, 1, 6, AR, 32 * MB, B(24.58), None, false, None, TGR),
    r("8x RTX 4090 PCIe 4, 2x EPYC 7542, no P2P", Rome4090 { p2p: false }, 1, 8, AR, 32 * MB, B(15.04), None, false, None, CHLC),
    r("8x RTX 4090 PCIe 4, 2x EPYC 7542, no P2P", Rome4090 { p2p: false }, 1, 8, AR, 128 * MB, B(14.45), None, false, None, CHLC),
    r("8x RTX 4090 PCIe 4, 2x EPYC 7542, P2P driver", Rome4090 { p2p: true }, 1, 8, AR, 32 * MB, B(20.46), None, false, None, CHLC),
    r("8x RTX 4090 PCIe 4, 2x EPYC 7542, P2P driver", Rome4090 { p2p: true }, 1, 8, AR, 128 * MB, B(20.64), None, false, None, CHLC),
    r("8x RTX 5090 PCIe 5, 2x EPYC 9575F, P2P driver", System::Rtx5090DualTurin, 1, 8, AR, 32 * MB, B(45.70), None, false, Some("2.29.7"), AIKI),
    r("8x RTX 5090 PCIe 5, 2x EPYC 9575F, P2P driver", System::Rtx5090DualTurin, 1, 8, AR, 128 * MB, B(43.86), None, false, Some("2.29.7"), AIKI),
    r("4x RTX 5090 PCIe 5, EPYC Genoa, no P2P", System::Rtx5090Genoa, 1, 4, AR, 32 * MB, B(27.06), None, false, None, NT287),
    r("4x RTX 5090 PCIe 5, EPYC Genoa, no P2P", System::Rtx5090Genoa, 1, 4, AR, 128 * MB, B(27.26), None, false, None, NT287),
    r("Verda GB300 NVL72 rack (18 trays)", Gb300Nvl, 1, 72, AR, GB, B(726.71), None, true, None, VERDA),
    r("Verda GB300 NVL72 rack (18 trays)", Gb300Nvl, 1, 72, AR, 2 * GB, B(806.13), None, true, None, VERDA),
    r("Verda GB300 NVL72 rack (18 trays)", Gb300Nvl, 1, 72, AR, 4 * GB, B(849.36), None, true, None, VERDA),
    r("Verda GB300 NVL72 rack (18 trays)", Gb300Nvl, 1, 72, AR, 8 * GB, B(883.45), None, true, None, VERDA),
    r("Verda GB300 NVL72 rack (18 trays)", Gb300Nvl, 1, 72, AR, 16 * GB, B(918.77), None, true, None, VERDA),
    r("GB200 NVL4 x3 racks, IB, NVLS off", Gb200Nvl, 3, 4, AR, 16 * GB, B(196.72), None, false, Some("2.27.3"), N1801),
    r("GB200 NVL8 x3 racks, IB, NVLS off", Gb200Nvl, 3, 8, AR, 16 * GB, B(393.66), None, false, Some("2.27.3"), N1801),
];

/// Size label as nccl-tests users write it.
pub fn size_label(b: u64) -> String {
    if b >= GB && b % GB == 0 {
        format!("{} GB", b / GB)
    } else if b >= MB && b % MB == 0 {
        format!("{} MB", b / MB)
    } else if b >= KB && b % KB == 0 {
        format!("{} KB", b / KB)
    } else {
        format!("{b} B")
    }
}
