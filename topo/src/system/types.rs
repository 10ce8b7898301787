//! The nodes and links of NCCL's topology graph (NCCL 2.30.7 `src/graph/topo.h`:
//! `struct ncclTopoNode`, `struct ncclTopoLink`, the node types and their per-type data).

use crate::path::LinkType;

/// Node types, in NCCL's numbering order (`topoNodeTypeStr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum NodeKind {
    /// A CUDA device as NCCL sees it (one rank).
    Gpu,
    /// A PCIe switch.
    Pci,
    /// The (single) NVSwitch node.
    Nvs,
    /// A CPU / NUMA domain.
    Cpu,
    /// A NIC (PCI device; multi-port NICs are one NIC node).
    Nic,
    /// A network port as the net plugin reports it.
    Net,
    /// 2.30: the physical GPU device a GPU node hangs off.
    Dev,
}

impl NodeKind {
    /// All kinds, in NCCL's type order.
    pub const ALL: [NodeKind; 7] = [
        NodeKind::Gpu,
        NodeKind::Pci,
        NodeKind::Nvs,
        NodeKind::Cpu,
        NodeKind::Nic,
        NodeKind::Net,
        NodeKind::Dev,
    ];
    /// NCCL's name.
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Gpu => "GPU",
            NodeKind::Pci => "PCI",
            NodeKind::Nvs => "NVS",
            NodeKind::Cpu => "CPU",
            NodeKind::Nic => "NIC",
            NodeKind::Net => "NET",
            NodeKind::Dev => "DEV",
        }
    }
    /// Index into per-kind tables.
    pub fn idx(self) -> usize {
        self as usize
    }
}

/// Data of a GPU node.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuInfo {
    /// NVML device index.
    pub dev: i32,
    /// Rank that owns this GPU.
    pub rank: i32,
    /// Compute capability x10.
    pub sm: i32,
    /// GPUDirect RDMA support.
    pub gdr: bool,
    /// PCI bus id string as in the XML.
    pub busid: String,
    /// Whether NVML reports P2P as supported for this board (GeForce cards report no P2P).
    pub nvml_p2p: bool,
    /// Marketing name of the board when known from its PCI device id.
    pub model: Option<&'static str>,
}

/// Data of a CPU node.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CpuInfo {
    /// NUMA id.
    pub numaid: i32,
    /// `NCCL_TOPO_CPU_ARCH_*` (0 unknown).
    pub arch: i32,
    /// `NCCL_TOPO_CPU_VENDOR_*` (-1 when not x86).
    pub vendor: i32,
    /// `NCCL_TOPO_CPU_MODEL_*` (-1 unknown).
    pub model: i32,
    /// Affinity mask string, if given.
    pub affinity: Option<String>,
}

/// Data of a NET node.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NetInfo {
    /// Device name (IB device / netdev).
    pub name: String,
    /// Plugin device index.
    pub dev: i32,
    /// Physical ASIC id (guid; the node id when absent).
    pub asic: u64,
    /// Port.
    pub port: i32,
    /// Bandwidth GB/s (`speed/8000`).
    pub bw: f32,
    /// Latency µs.
    pub latency: f32,
    /// GPUDirect RDMA support.
    pub gdr: bool,
    /// CollNet support.
    pub coll: bool,
    /// Max connections (channels).
    pub max_channels: i32,
    /// Rail id (-1 undefined).
    pub rail: i32,
    /// Plane id (-1 undefined).
    pub plane: i32,
    /// `net->net.pciId`: identifies the PCI device the port sits on (a hash of its bus id, or
    /// of the ASIC id without one); rails are matched by it across hosts of an NVLink domain
    /// under `NCCL_MNNVL_RAIL_PER_HOST`.
    pub pci_id: u64,
}

/// Type-specific node data.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum NodeData {
    /// GPU.
    Gpu(GpuInfo),
    /// PCI switch: packed vendor/device/subvendor/subdevice.
    Pci {
        /// `vendor<<48 | device<<32 | subsystem_vendor<<16 | subsystem_device`.
        device: u64,
    },
    /// NVSwitch.
    Nvs,
    /// CPU.
    Cpu(CpuInfo),
    /// NIC.
    Nic,
    /// NET.
    Net(NetInfo),
    /// DEV (2.30).
    Dev {
        /// Packed PCI ids.
        device: u64,
        /// NVML index.
        dev: i32,
        /// Compute capability.
        sm: i32,
    },
}

/// A node of the topology graph.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TopoNode {
    /// Kind.
    pub kind: NodeKind,
    /// NCCL id: `systemId<<56 | local id`.
    pub id: u64,
    /// Kind-specific data.
    pub data: NodeData,
}

impl TopoNode {
    /// `systemId` part of the id.
    pub fn system_id(&self) -> u64 {
        self.id >> 56
    }
    /// Local part of the id.
    pub fn local_id(&self) -> u64 {
        self.id & 0x00ff_ffff_ffff_ffff
    }
    /// `GPU/0-7000` style name.
    pub fn label(&self) -> String {
        format!(
            "{}/{:x}-{:x}",
            self.kind.name(),
            self.system_id(),
            self.local_id()
        )
    }
    /// GPU data, if a GPU.
    pub fn gpu(&self) -> Option<&GpuInfo> {
        match &self.data {
            NodeData::Gpu(g) => Some(g),
            _ => None,
        }
    }
    /// CPU data, if a CPU.
    pub fn cpu(&self) -> Option<&CpuInfo> {
        match &self.data {
            NodeData::Cpu(c) => Some(c),
            _ => None,
        }
    }
    /// NET data, if a NET.
    pub fn net(&self) -> Option<&NetInfo> {
        match &self.data {
            NodeData::Net(n) => Some(n),
            _ => None,
        }
    }
    /// Compute capability of a GPU or DEV.
    pub fn sm(&self) -> Option<i32> {
        match &self.data {
            NodeData::Gpu(g) => Some(g.sm),
            NodeData::Dev { sm, .. } => Some(*sm),
            _ => None,
        }
    }
}

/// A directed link.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TopoLink {
    /// Type.
    pub ty: LinkType,
    /// Bandwidth GB/s.
    pub bw: f32,
}
