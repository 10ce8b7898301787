//! The topology graph NCCL builds from the XML (NCCL 2.30.7 `ncclTopoGetSystemFromXml`, with the
//! 2.18-2.29 structure behind the version profile): nodes, links with NCCL's bandwidths, NCCL's link
//! order, BCM switch flattening and CPU interconnect.
//!
//! Construction follows NCCL's own order (CPUs and their PCI trees, NVLinks, C2C, pcilinks, flatten,
//! connect CPUs, sort) on a plain arena so that NCCL's ordering rules carry over exactly; the result
//! is handed out as a petgraph graph plus, per node, its links in NCCL's order.

use crate::consts::{self, class, cpu_arch, cpu_model, cpu_vendor, LOC_BW};
use crate::error::{Result, TopoError};
use crate::path::LinkType;
use crate::profiles;
use crate::version::NcclVersion;
use crate::xml::XmlElement;
use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use std::sync::Arc;

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

/// The topology of one host as NCCL models it.
#[derive(Debug, Clone)]
pub struct System {
    /// The graph: nodes with NCCL data, directed links with type and bandwidth.
    pub graph: DiGraph<TopoNode, TopoLink>,
    /// Each node's outgoing links in NCCL's order (bandwidth-sorted, then NVL / PCI down / PCI up / SYS).
    pub adj: Vec<Vec<EdgeIndex>>,
    /// Nodes of each kind in NCCL's order (`system->nodes[type]`), indexed by `NodeKind::idx`.
    pub by_kind: [Vec<NodeIndex>; 7],
    /// The NCCL release modelled.
    pub version: NcclVersion,
    /// `system->inter`: whether the communicator spans more than this host.
    pub inter: bool,
}

/// Options for turning XML into a `System`.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Version profile.
    pub version: NcclVersion,
    /// Keep only these NVML devices, giving them ranks `rank_base + i` in this order; `None` keeps
    /// every `<gpu>` that has a `rank` (the usual single-communicator view), ranks renumbered by `dev`
    /// order from `rank_base`.
    pub gpus: Option<Vec<i32>>,
    /// First rank on this host.
    pub rank_base: i32,
    /// Whether the communicator spans several hosts (sets `system->inter`).
    pub inter: bool,
    /// How NIC ports are fused into virtual NICs (2.30+).
    pub fusion: crate::settings::NicFusion,
}

impl System {
    /// Build the system from a topology XML tree the way NCCL does at init.
    pub fn from_xml(root: &XmlElement, file: &str, opts: &BuildOptions) -> Result<System> {
        let (fused, devs) = check_and_fuse(root, file, &opts.fusion, opts.version)?;
        Self::from_claimable(fused.as_ref().unwrap_or(root), &devs, file, opts)
    }

    /// [`Self::from_xml`] on a host XML already checked and NIC-fused for `opts.version` and
    /// `opts.fusion` (made once, used by every communicator on that host).
    pub fn from_host_xml(host: &HostXml, file: &str, opts: &BuildOptions) -> Result<System> {
        if host.version != opts.version || host.fusion != opts.fusion {
            let again = HostXml::prepare(&host.root, file, &opts.fusion, opts.version)?;
            return Self::from_host_xml(&again, file, opts);
        }
        Self::from_claimable(&host.root, &host.devs, file, opts)
    }

    /// Claim and trim a checked, NIC-fused host XML whose claimable GPU devs are `devs`, then
    /// build the graph.
    fn from_claimable(
        root: &XmlElement,
        devs: &[i32],
        file: &str,
        opts: &BuildOptions,
    ) -> Result<System> {
        let xml = claim_and_trim(root, devs, file, opts)?;
        let mut b = Builder::new(file, opts.version);
        b.build(&xml)?;
        Ok(b.finish(opts.inter))
    }

    /// Node data.
    pub fn node(&self, n: NodeIndex) -> &TopoNode {
        &self.graph[n]
    }
    /// Links of a node in NCCL order, as (edge, target, link).
    pub fn links(
        &self,
        n: NodeIndex,
    ) -> impl Iterator<Item = (EdgeIndex, NodeIndex, TopoLink)> + '_ {
        self.adj[n.index()].iter().map(move |&e| {
            let (_, t) = self
                .graph
                .edge_endpoints(e)
                .expect("adjacency lists only hold edges of this graph");
            (e, t, self.graph[e])
        })
    }
    /// Nodes of a kind, in NCCL's order.
    pub fn nodes(&self, k: NodeKind) -> &[NodeIndex] {
        &self.by_kind[k.idx()]
    }
    /// Number of nodes of a kind.
    pub fn count(&self, k: NodeKind) -> usize {
        self.by_kind[k.idx()].len()
    }
    /// GPU data of the i-th GPU.
    pub fn gpu(&self, i: usize) -> &GpuInfo {
        self.graph[self.by_kind[0][i]]
            .gpu()
            .expect("by_kind[GPU] only holds GPU nodes")
    }
    /// The node a GPU's PCI/NVLink/C2C links attach to: its DEV in 2.30, the GPU itself before.
    pub fn gpu_attach(&self, gpu: NodeIndex) -> NodeIndex {
        if !self.version.has_dev_nodes() {
            return gpu;
        }
        self.links(gpu)
            .find(|(_, t, l)| l.ty == LinkType::Loc && self.graph[*t].kind == NodeKind::Dev)
            .map(|x| x.1)
            .unwrap_or(gpu)
    }
    /// Index of a node among the nodes of its kind.
    pub fn index_of(&self, n: NodeIndex) -> usize {
        let k = self.graph[n].kind;
        self.by_kind[k.idx()]
            .iter()
            .position(|&m| m == n)
            .expect("every node is listed under its kind")
    }
    /// Minimum and maximum GPU compute capability.
    pub fn comp_cap(&self) -> Option<(i32, i32)> {
        let sms: Vec<i32> = self
            .nodes(NodeKind::Gpu)
            .iter()
            .filter_map(|&g| self.graph[g].sm())
            .collect();
        Some((*sms.iter().min()?, *sms.iter().max()?))
    }
    /// The first CPU's (arch, vendor, model), as `ncclTopoCpuType` reports it.
    pub fn cpu_type(&self) -> (i32, i32, i32) {
        self.nodes(NodeKind::Cpu)
            .first()
            .and_then(|&c| self.graph[c].cpu())
            .map(|c| (c.arch, c.vendor, c.model))
            .unwrap_or((0, -1, -1))
    }
}

/// `busIdToInt64`: the hex digits of a bus id concatenated ("0000:07:00.0" -> 0x7000).
pub fn busid_to_int(s: &str) -> u64 {
    let mut v: u64 = 0;
    for c in s.chars().take(17) {
        if c == '.' || c == ':' {
            continue;
        }
        match c.to_digit(16) {
            Some(d) => v = v.wrapping_mul(16).wrapping_add(d as u64),
            None => break,
        }
    }
    v
}

const LOCAL_MASK: u64 = 0x00ff_ffff_ffff_ffff;

fn topo_id(system_id: u64, local: u64) -> u64 {
    (system_id << 56) + (local & LOCAL_MASK)
}

/// A host's topology XML as every local rank has it before claiming its GPU: checked, with NCCL's
/// NIC fusion ([`crate::fusion`]) applied, and the devs of its GPUs that have a rank. Every rank of
/// a host fuses the same file the same way, so this is made once per host and kept.
#[derive(Debug, Clone)]
pub struct HostXml {
    root: Arc<XmlElement>,
    devs: Vec<i32>,
    version: NcclVersion,
    fusion: crate::settings::NicFusion,
}

impl HostXml {
    /// Check `root` and fuse its NIC ports as NCCL `version` does under `fusion`.
    pub fn prepare(
        root: &Arc<XmlElement>,
        file: &str,
        fusion: &crate::settings::NicFusion,
        version: NcclVersion,
    ) -> Result<HostXml> {
        let (fused, devs) = check_and_fuse(root, file, fusion, version)?;
        Ok(HostXml {
            root: fused.map(Arc::new).unwrap_or_else(|| root.clone()),
            devs,
            version,
            fusion: fusion.clone(),
        })
    }

    /// The devs of the GPUs that have a rank, in increasing order.
    pub fn devs(&self) -> &[i32] {
        &self.devs
    }
}

/// Check that `root` is a topology, fuse its NIC ports (`None` when nothing is fused) and list
/// the devs of its GPUs that have a rank, in increasing order.
fn check_and_fuse(
    root: &XmlElement,
    file: &str,
    fusion: &crate::settings::NicFusion,
    version: NcclVersion,
) -> Result<(Option<XmlElement>, Vec<i32>)> {
    if root.name != "system" {
        return Err(TopoError::Semantic {
            at: root.location(file),
            element: root.name.to_string(),
            msg: "is not a topology: the top element must be <system version=\"1\">".into(),
        });
    }
    match root.get("version").map(str::trim) {
        Some("1") => {}
        Some(v) => {
            return Err(TopoError::Semantic {
                at: root.location(file),
                element: "system".into(),
                msg: format!(
                    "has version {v}; NCCL needs version 1 (XML Topology has wrong version)"
                ),
            })
        }
        None => {
            return Err(TopoError::Semantic {
                at: root.location(file),
                element: "system".into(),
                msg: "has no version attribute (NCCL needs version=\"1\")".into(),
            })
        }
    }
    // NIC fusion comes before the trim; every local rank fuses the same file the same way.
    let fused = crate::fusion::fuse_nics(root, file, fusion, version)?.map(|(x, _)| x);
    // Which GPU devs can be claimed.
    let mut devs: Vec<i32> = Vec::new();
    fused.as_ref().unwrap_or(root).walk(&mut |e, _| {
        if e.name == "gpu" && e.get("rank").is_some() {
            if let Some(d) = e.get("dev").and_then(crate::settings::parse_c_int) {
                devs.push(d as i32);
            }
        }
    });
    devs.sort_unstable();
    Ok((fused, devs))
}

/// NCCL's claim-and-trim step on a prepared host XML: GPUs not claimed by a rank are dropped
/// together with PCI/CPU/NIC/NET subtrees that hold nothing kept (`ncclTopoTrimXml`); claimed GPUs
/// get their rank.
fn claim_and_trim(
    root: &XmlElement,
    devs: &[i32],
    file: &str,
    opts: &BuildOptions,
) -> Result<XmlElement> {
    let order: Vec<i32> = match &opts.gpus {
        Some(list) => {
            for d in list {
                if !devs.contains(d) {
                    return Err(TopoError::Model(format!(
                        "{file}: GPU dev {d} is not in the topology (it has {})",
                        if devs.is_empty() {
                            "no GPUs".to_string()
                        } else {
                            format!("devs {devs:?}")
                        }
                    )));
                }
            }
            list.clone()
        }
        None => devs.to_vec(),
    };
    if !opts.version.at_least(2, 23) || order.len() <= 1 {
        // Up to 2.22 every rank fills the topology of all its node's GPUs from one XML.
        return Ok(claimed_copy(root, &order, opts.rank_base));
    }
    // 2.23+: each local rank trims the XML to its own GPU (plus the NICs), then the ranks' XMLs
    // are fused in local-rank order (`ncclTopoFuseXml`): branches a later rank adds go after the
    // ones already there, which is how NCCL's GPU order can differ from the file's.
    let mut fused: Option<XmlElement> = None;
    for (i, &dev) in order.iter().enumerate() {
        let mine = claimed_copy(root, &[dev], opts.rank_base + i as i32);
        match &mut fused {
            None => fused = Some(mine),
            Some(dst) => fuse(dst, &mine),
        }
    }
    Ok(fused.expect("at least two ranks"))
}

/// `xmlTopoFuseXmlRecursive`: merge `src`'s children into `dst`, matching children with the same
/// name and exactly the same attributes.
fn fuse(dst: &mut XmlElement, src: &XmlElement) {
    for c in &src.children {
        let same = |n: &XmlElement| {
            n.name == c.name
                && (Arc::ptr_eq(&n.attrs, &c.attrs)
                    || (n.attrs.len() == c.attrs.len()
                        && c.attrs
                            .iter()
                            .all(|(k, v)| n.attrs.iter().any(|(nk, nv)| nk == k && nv == v))))
        };
        match dst.children.iter_mut().find(|n| same(n)) {
            Some(d) => fuse(d, c),
            None => dst.children.push(c.clone()),
        }
    }
}

/// Whether `e` holds a GPU this rank claims or a NET with a device ([`claimed_copy`]'s rule),
/// without copying anything.
fn holds_claimed(e: &XmlElement, order: &[i32]) -> bool {
    match e.name.as_str() {
        "gpu" => {
            e.get("rank").is_some()
                && e.get("dev")
                    .and_then(crate::settings::parse_c_int)
                    .is_some_and(|d| order.contains(&(d as i32)))
        }
        "net" => e.get("dev").is_some(),
        "pci" | "cpu" | "nic" => e.children.iter().any(|c| holds_claimed(c, order)),
        _ => true,
    }
}

/// A copy of `e` with this rank's GPUs claimed (their `rank` set, in `order` from `rank_base`)
/// and the PCI/CPU/NIC/NET subtrees that hold nothing claimed left out (`ncclTopoTrimXml`).
/// Unclaimed GPUs outside such subtrees stay (NCCL's AddPci drops their PCI branch itself);
/// what is left out is never copied.
fn claimed_copy(e: &XmlElement, order: &[i32], rank_base: i32) -> XmlElement {
    if e.name == "net" {
        return e.clone();
    }
    if e.name == "gpu" {
        let mut out = e.clone();
        if e.get("rank").is_some() {
            let dev = e.get("dev").and_then(crate::settings::parse_c_int);
            if let Some(i) = dev.and_then(|d| order.iter().position(|&o| o == d as i32)) {
                out.set("rank", rank_base + i as i32);
            }
        }
        return out;
    }
    let trimmable = |c: &XmlElement| matches!(c.name.as_str(), "pci" | "cpu" | "nic" | "net");
    XmlElement {
        name: e.name.clone(),
        attrs: e.attrs.clone(),
        children: e
            .children
            .iter()
            .filter(|c| !trimmable(c) || holds_claimed(c, order))
            .map(|c| claimed_copy(c, order, rank_base))
            .collect(),
        line: e.line,
        col: e.col,
    }
}

struct BNode {
    kind: NodeKind,
    id: u64,
    data: NodeData,
    links: Vec<BLink>,
    alive: bool,
}

#[derive(Clone, Copy)]
struct BLink {
    ty: LinkType,
    rem: usize,
    bw: f32,
}

struct Builder<'f> {
    file: &'f str,
    v: NcclVersion,
    nodes: Vec<BNode>,
    by_kind: [Vec<usize>; 7],
    host_hashes: Vec<String>,
}

impl<'f> Builder<'f> {
    fn new(file: &'f str, v: NcclVersion) -> Self {
        Builder {
            file,
            v,
            nodes: Vec::new(),
            by_kind: Default::default(),
            host_hashes: Vec::new(),
        }
    }

    fn err(&self, e: &XmlElement, msg: impl Into<String>) -> TopoError {
        TopoError::Semantic {
            at: e.location(self.file),
            element: e.name.to_string(),
            msg: msg.into(),
        }
    }
    fn attr<'a>(&self, e: &'a XmlElement, key: &str) -> Result<&'a str> {
        e.get(key).ok_or_else(|| {
            self.err(
                e,
                format!(
                    "has no {key} attribute (NCCL: Attribute {key} of node {} not found)",
                    e.name
                ),
            )
        })
    }
    /// `xmlGetAttrInt`: required, parsed like `strtol(s, NULL, 0)` (garbage reads as 0).
    fn attr_int(&self, e: &XmlElement, key: &str) -> Result<i64> {
        Ok(crate::settings::parse_c_int(self.attr(e, key)?).unwrap_or(0))
    }
    fn attr_int_default(&self, e: &XmlElement, key: &str, d: i64) -> i64 {
        e.get(key)
            .map(|s| crate::settings::parse_c_int(s).unwrap_or(0))
            .unwrap_or(d)
    }

    fn get_node(&self, kind: NodeKind, id: u64) -> Option<usize> {
        self.by_kind[kind.idx()]
            .iter()
            .copied()
            .find(|&i| self.nodes[i].id == id)
    }
    fn create(&mut self, kind: NodeKind, id: u64, data: NodeData) -> usize {
        let i = self.nodes.len();
        self.nodes.push(BNode {
            kind,
            id,
            data,
            links: Vec::new(),
            alive: true,
        });
        self.by_kind[kind.idx()].push(i);
        i
    }

    /// `ncclTopoConnectNodes`: aggregate with an existing link of the same type to the same node,
    /// then bubble towards the front past links of strictly lower bandwidth.
    fn connect(&mut self, a: usize, b: usize, ty: LinkType, bw: f32) {
        let links = &mut self.nodes[a].links;
        let mut pos = match links.iter().position(|l| l.rem == b && l.ty == ty) {
            Some(p) => {
                links[p].bw += bw;
                p
            }
            None => {
                links.push(BLink { ty, rem: b, bw });
                links.len() - 1
            }
        };
        while pos > 0 && links[pos - 1].bw < links[pos].bw {
            links.swap(pos - 1, pos);
            pos -= 1;
        }
    }

    fn system_id(&mut self, cpu: &XmlElement) -> u64 {
        let h = cpu.get("host_hash").unwrap_or("").to_string();
        match self.host_hashes.iter().position(|x| *x == h) {
            Some(i) => i as u64,
            None => {
                self.host_hashes.push(h);
                (self.host_hashes.len() - 1) as u64
            }
        }
    }

    fn build(&mut self, root: &XmlElement) -> Result<()> {
        for cpu in root.subs("cpu") {
            self.add_cpu(cpu)?;
        }
        self.add_nvlinks(root, None, 0)?;
        self.add_c2c(root, None, 0)?;
        self.add_pcilinks(root, None, 0)?;
        self.flatten_bcm();
        self.connect_cpus();
        let cpus = self.by_kind[NodeKind::Cpu.idx()].clone();
        for c in cpus {
            self.sort_rec(c, None, 0);
        }
        Ok(())
    }

    fn add_cpu(&mut self, x: &XmlElement) -> Result<()> {
        let numaid = self.attr_int(x, "numaid")? as i32;
        let sid = self.system_id(x);
        let arch_s = self.attr(x, "arch")?;
        let arch = consts::CPU_ARCH.lookup(arch_s).unwrap_or_else(|f| f);
        let mut vendor = -1;
        let mut model = -1;
        if arch == cpu_arch::X86 {
            vendor = consts::CPU_VENDOR
                .lookup(self.attr(x, "vendor")?)
                .unwrap_or_else(|f| f);
            if vendor == cpu_vendor::INTEL {
                let fam = self.attr_int(x, "familyid")?;
                let m = self.attr_int(x, "modelid")?;
                let new_models = self.v.at_least(2, 26);
                model = if fam == 6 && m >= 0xCF && new_models {
                    cpu_model::INTEL_ERP
                } else if fam == 6 && m >= 0x8F && new_models {
                    cpu_model::INTEL_SRP
                } else if fam == 6 && m >= 0x55 {
                    cpu_model::INTEL_SKL
                } else {
                    cpu_model::INTEL_BDW
                };
            } else if vendor == cpu_vendor::ZHAOXIN {
                let fam = self.attr_int(x, "familyid")?;
                let m = self.attr_int(x, "modelid")?;
                if fam == 7 && m == 0x5B {
                    model = cpu_model::YONGFENG;
                }
            }
        }
        let info = CpuInfo {
            numaid,
            arch,
            vendor,
            model,
            affinity: x.get("affinity").map(str::to_string),
        };
        let cpu = self.create(
            NodeKind::Cpu,
            topo_id(sid, numaid as u64),
            NodeData::Cpu(info),
        );
        for sub in &x.children {
            match sub.name.as_str() {
                "pci" => self.add_pci(sub, cpu, sid, numaid)?,
                "nic" => {
                    // The numa id is masked out of the id: every CPU-attached NIC of a host is NIC 0.
                    let id = topo_id(sid, (numaid as u64) << 56);
                    let nic = match self.get_node(NodeKind::Nic, id) {
                        Some(n) => n,
                        None => {
                            let n = self.create(NodeKind::Nic, id, NodeData::Nic);
                            self.connect(cpu, n, LinkType::Pci, LOC_BW);
                            self.connect(n, cpu, LinkType::Pci, LOC_BW);
                            n
                        }
                    };
                    self.add_nic(sub, nic, sid)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn add_pci(&mut self, x: &XmlElement, parent: usize, sid: u64, numaid: i32) -> Result<()> {
        let class_s = self.attr(x, "class")?;
        let ty = consts::PCI_CLASS.lookup(class_s).unwrap_or_else(|f| f);
        let busid_s = self.attr(x, "busid")?;
        let busid = busid_to_int(busid_s);
        let mut width = self.attr_int(x, "link_width")?;
        let speed_s = self.attr(x, "link_speed")?;
        if width == 0 {
            width = 16;
        }
        let speed = consts::PCI_GEN.lookup(speed_s).unwrap_or_else(|f| f);
        let bw = (width as f64 * speed as f64 / 80.0) as f32;

        for g in x.subs("gpu") {
            if g.get("rank").is_none() {
                // NCCL returns early: the whole PCI subtree is dropped.
                return Ok(());
            }
            self.add_gpu(x, g, parent, sid, busid, bw)?;
        }
        let mut node = None;
        if let Some(nic_x) = x.subs("nic").next() {
            let id = topo_id(sid, ((numaid as u64) << 56).wrapping_add(busid));
            let nic = match self.get_node(NodeKind::Nic, id) {
                Some(n) => n,
                None => {
                    let n = self.create(NodeKind::Nic, id, NodeData::Nic);
                    node = Some(n);
                    n
                }
            };
            self.add_nic(nic_x, nic, sid)?;
        } else if ty == class::PCI {
            let n = self.create(
                NodeKind::Pci,
                topo_id(sid, busid),
                NodeData::Pci {
                    device: pci_device(x),
                },
            );
            for sub in &x.children {
                if sub.name == "pci" {
                    self.add_pci(sub, n, sid, numaid)?;
                }
            }
            node = Some(n);
        }
        if let Some(n) = node {
            self.connect(n, parent, LinkType::Pci, bw);
            self.connect(parent, n, LinkType::Pci, bw);
        }
        Ok(())
    }

    fn add_gpu(
        &mut self,
        pci: &XmlElement,
        g: &XmlElement,
        parent: usize,
        sid: u64,
        busid: u64,
        bw: f32,
    ) -> Result<()> {
        let rank = self.attr_int(g, "rank")? as i32;
        let sm = self.attr_int(g, "sm")? as i32;
        let dev = self.attr_int(g, "dev")? as i32;
        let gdr = self.attr_int(g, "gdr")? != 0;
        let device = pci_device(pci);
        let model = profiles::gpu_by_pci_device(((device >> 32) & 0xffff) as u32);
        let info = GpuInfo {
            dev,
            rank,
            sm,
            gdr,
            busid: self.attr(pci, "busid")?.to_string(),
            nvml_p2p: model.map(|m| m.p2p).unwrap_or(true),
            model: model.map(|m| m.name),
        };
        if self.v.has_dev_nodes() {
            let dev_id = topo_id(sid, busid);
            let d = match self.get_node(NodeKind::Dev, dev_id) {
                Some(d) => d,
                None => {
                    let d = self.create(NodeKind::Dev, dev_id, NodeData::Dev { device, dev, sm });
                    self.connect(d, parent, LinkType::Pci, bw);
                    self.connect(parent, d, LinkType::Pci, bw);
                    d
                }
            };
            let n_gpus = self.nodes[d]
                .links
                .iter()
                .filter(|l| self.nodes[l.rem].kind == NodeKind::Gpu)
                .count() as u64;
            let gpu = self.create(
                NodeKind::Gpu,
                topo_id(sid, (n_gpus << 40) | (busid & ((1u64 << 40) - 1))),
                NodeData::Gpu(info),
            );
            self.connect(d, gpu, LinkType::Loc, LOC_BW);
            self.connect(gpu, d, LinkType::Loc, LOC_BW);
        } else {
            let gpu = self.create(NodeKind::Gpu, topo_id(sid, busid), NodeData::Gpu(info));
            self.connect(gpu, parent, LinkType::Pci, bw);
            self.connect(parent, gpu, LinkType::Pci, bw);
        }
        Ok(())
    }

    fn add_nic(&mut self, x: &XmlElement, nic: usize, sid: u64) -> Result<()> {
        for n in x.subs("net") {
            if n.get("dev").is_none() {
                continue;
            }
            if self.attr_int_default(n, "net", 1) == 0 {
                continue;
            }
            let dev = self.attr_int(n, "dev")? as i32;
            let id = topo_id(sid, dev as u64);
            let asic = match n.get("guid") {
                Some(s) => u64::from_str_radix(
                    s.trim().trim_start_matches("0x").trim_start_matches("0X"),
                    16,
                )
                .unwrap_or(0),
                None => id,
            };
            let mut mbps = self.attr_int_default(n, "speed", 0);
            if mbps <= 0 {
                mbps = 10000;
            }
            let bw = (mbps as f64 / 8000.0) as f32;
            let latency = n
                .get("latency")
                .and_then(|s| s.trim().parse::<f32>().ok())
                .unwrap_or(0.0);
            let info = NetInfo {
                name: n.get("name").unwrap_or("").to_string(),
                dev,
                asic,
                port: self.attr_int_default(n, "port", 0) as i32,
                bw,
                latency,
                gdr: self.attr_int_default(n, "gdr", 0) != 0,
                coll: self.attr_int_default(n, "coll", 0) != 0,
                max_channels: self.attr_int_default(n, "maxconn", self.v.max_channels() as i64)
                    as i32,
                rail: self.attr_int_default(n, "rail", -1) as i32,
                plane: self.attr_int_default(n, "plane", -1) as i32,
            };
            if self.get_node(NodeKind::Net, id).is_some() {
                return Err(self.err(
                    n,
                    format!("dev {dev} is used by two <net> elements of the same host"),
                ));
            }
            let net = self.create(NodeKind::Net, id, NodeData::Net(info));
            self.connect(nic, net, LinkType::Net, bw);
            self.connect(net, nic, LinkType::Net, bw);
        }
        Ok(())
    }

    /// The node a GPU's links attach to (DEV in 2.30, the GPU itself before), by bus id.
    fn attach_node(&self, sid: u64, busid: u64) -> Option<usize> {
        let kind = if self.v.has_dev_nodes() {
            NodeKind::Dev
        } else {
            NodeKind::Gpu
        };
        self.get_node(kind, topo_id(sid, busid))
    }

    fn find_local_cpu(&self, node: usize, from: Option<usize>) -> Option<usize> {
        if self.nodes[node].kind == NodeKind::Cpu {
            return Some(node);
        }
        for l in &self.nodes[node].links {
            let k = self.nodes[l.rem].kind;
            if l.ty == LinkType::Pci
                && Some(l.rem) != from
                && (k == NodeKind::Pci || k == NodeKind::Cpu)
            {
                if let Some(c) = self.find_local_cpu(l.rem, Some(node)) {
                    return Some(c);
                }
            }
        }
        None
    }

    /// Walk the XML like NCCL's `ncclTopoAddNvLinks` (bus id of the closest enclosing pci).
    fn add_nvlinks(&mut self, x: &XmlElement, parent_busid: Option<&str>, sid: u64) -> Result<()> {
        self.walk_gpu_subs(x, parent_busid, sid, &mut |b, el, attach, sid| {
            if el.name != "nvlink" {
                return Ok(());
            }
            let count = b.attr_int(el, "count")?;
            let tclass = b.attr(el, "tclass")?;
            let target_ty = consts::PCI_CLASS.lookup(tclass).unwrap_or_else(|f| f);
            let sm = b.nodes[attach].data_sm();
            let nvl_bw = consts::nvlink_bw(sm, b.v);
            let bw = (count as f64 * nvl_bw as f64) as f32;
            if target_ty == class::GPU {
                let target = b.attr(el, "target")?;
                if let Some(rem) = b.attach_node(sid, busid_to_int(target)) {
                    b.connect(attach, rem, LinkType::Nvl, bw);
                }
            } else {
                let remote = if target_ty == class::CPU {
                    b.find_local_cpu(attach, None)
                } else {
                    Some(match b.by_kind[NodeKind::Nvs.idx()].first() {
                        Some(&n) => n,
                        None => b.create(NodeKind::Nvs, 0, NodeData::Nvs),
                    })
                };
                if let Some(r) = remote {
                    b.connect(attach, r, LinkType::Nvl, bw);
                    b.connect(r, attach, LinkType::Nvl, bw);
                }
            }
            Ok(())
        })
    }

    fn add_c2c(&mut self, x: &XmlElement, parent_busid: Option<&str>, sid: u64) -> Result<()> {
        self.walk_gpu_subs(x, parent_busid, sid, &mut |b, el, attach, _| {
            if el.name != "c2c" {
                return Ok(());
            }
            let count = b.attr_int(el, "count")?;
            let bwv = b.attr_int(el, "bw")?;
            let bw = ((bwv * count) as f64 / 1000.0) as f32;
            if let Some(cpu) = b.find_local_cpu(attach, None) {
                b.connect(attach, cpu, LinkType::C2c, bw);
                b.connect(cpu, attach, LinkType::C2c, bw);
            }
            Ok(())
        })
    }

    /// Visit every child of a claimed `<gpu>` (nvlink, c2c) with the node its links attach to.
    #[allow(clippy::type_complexity)]
    fn walk_gpu_subs(
        &mut self,
        x: &XmlElement,
        parent_busid: Option<&str>,
        sid: u64,
        f: &mut dyn FnMut(&mut Self, &XmlElement, usize, u64) -> Result<()>,
    ) -> Result<()> {
        let sid = if x.name == "cpu" {
            self.system_id(x)
        } else {
            sid
        };
        if x.name == "gpu" {
            if x.get("rank").is_none() {
                return Ok(());
            }
            let Some(busid) = parent_busid else {
                return Ok(());
            };
            let Some(attach) = self.attach_node(sid, busid_to_int(busid)) else {
                return Err(self.err(x, format!("of {busid} is not in the system")));
            };
            for sub in &x.children {
                f(self, sub, attach, sid)?;
            }
            return Ok(());
        }
        let busid = x.get("busid").or(parent_busid);
        for sub in &x.children {
            self.walk_gpu_subs(sub, busid, sid, f)?;
        }
        Ok(())
    }

    fn add_pcilinks(&mut self, x: &XmlElement, parent_busid: Option<&str>, sid: u64) -> Result<()> {
        let sid = if x.name == "cpu" {
            self.system_id(x)
        } else {
            sid
        };
        if x.name == "pcilink" {
            let pb = parent_busid.map(busid_to_int).unwrap_or(0);
            let Some(pci) = self.get_node(NodeKind::Pci, topo_id(sid, pb)) else {
                return Err(self.err(
                    x,
                    format!(
                        "is inside {}, which is not a PCI switch NCCL keeps (Add PCI Link error)",
                        parent_busid.unwrap_or("?")
                    ),
                ));
            };
            let target = self.attr(x, "target")?;
            if let Some(rem) = self.get_node(NodeKind::Pci, topo_id(sid, busid_to_int(target))) {
                self.connect(pci, rem, LinkType::Loc, LOC_BW);
            }
            return Ok(());
        }
        let busid = x.get("busid").or(parent_busid);
        for sub in &x.children {
            self.add_pcilinks(sub, busid, sid)?;
        }
        Ok(())
    }

    fn remove_node(&mut self, i: usize) {
        let kind = self.nodes[i].kind;
        self.nodes[i].alive = false;
        self.by_kind[kind.idx()].retain(|&n| n != i);
        for n in &mut self.nodes {
            n.links.retain(|l| l.rem != i);
        }
    }

    /// `ncclTopoFlattenBcmSwitches`.
    fn flatten_bcm(&mut self) {
        fn bcm_gen(id: u64, level: u64) -> u32 {
            if id & 0xffff_ffff_ffff_f000 == 0x1000_c010_1000_a000 {
                return 4;
            }
            if id & 0xffff_ffff_ffff_f000 == (0x1000_c030_1000_0000 | (level * 0x1000)) {
                return 5;
            }
            0
        }
        'restart: loop {
            let pcis = self.by_kind[NodeKind::Pci.idx()].clone();
            for sw in pcis {
                let NodeData::Pci { device } = self.nodes[sw].data else {
                    continue;
                };
                let gen = bcm_gen(device, 0);
                if gen == 0 {
                    continue;
                }
                let subs: Vec<usize> = self.nodes[sw]
                    .links
                    .iter()
                    .filter(|l| {
                        self.nodes[l.rem].kind == NodeKind::Pci
                            && matches!(self.nodes[l.rem].data, NodeData::Pci { device } if bcm_gen(device, 1) == gen)
                    })
                    .map(|l| l.rem)
                    .collect();
                self.nodes[sw].links.retain(|l| !subs.contains(&l.rem));
                for sub in subs {
                    let sub_links = self.nodes[sub].links.clone();
                    for l in sub_links {
                        if l.rem == sw {
                            continue;
                        }
                        self.nodes[sw].links.push(l);
                        if let Some(back) =
                            self.nodes[l.rem].links.iter_mut().find(|b| b.rem == sub)
                        {
                            back.rem = sw;
                        }
                    }
                    self.remove_node(sub);
                }
                if let NodeData::Pci { device } = &mut self.nodes[sw].data {
                    *device |= 0xffff;
                }
                continue 'restart;
            }
            break;
        }
    }

    fn inter_cpu_bw(&self, cpu: &CpuInfo) -> f32 {
        match (cpu.arch, cpu.vendor) {
            (cpu_arch::POWER, _) => consts::P9_BW,
            (cpu_arch::ARM, _) => consts::ARM_BW,
            (cpu_arch::X86, cpu_vendor::INTEL) => match cpu.model {
                cpu_model::INTEL_ERP => consts::ERP_QPI_BW,
                cpu_model::INTEL_SRP => consts::SRP_QPI_BW,
                cpu_model::INTEL_SKL => consts::SKL_QPI_BW,
                _ => consts::BDW_QPI_BW,
            },
            (cpu_arch::X86, cpu_vendor::AMD) => consts::AMD_BW,
            (cpu_arch::X86, cpu_vendor::ZHAOXIN) => {
                if cpu.model == cpu_model::YONGFENG {
                    consts::YONGFENG_ZPI_BW
                } else {
                    consts::ZPI_BW
                }
            }
            _ => LOC_BW,
        }
    }

    fn connect_cpus(&mut self) {
        let cpus = self.by_kind[NodeKind::Cpu.idx()].clone();
        for &a in &cpus {
            for &b in &cpus {
                if a == b || self.nodes[a].id >> 56 != self.nodes[b].id >> 56 {
                    continue;
                }
                let NodeData::Cpu(info) = &self.nodes[a].data else {
                    continue;
                };
                let bw = self.inter_cpu_bw(info);
                self.connect(a, b, LinkType::Sys, bw);
            }
        }
    }

    /// `ncclTopoSort`: move the up link last, recurse down the PCI tree.
    fn sort_rec(&mut self, node: usize, up: Option<usize>, depth: usize) {
        if depth > 64 {
            return; // a PCI cycle cannot come from a tree-shaped XML; stop rather than recurse forever
        }
        if let Some(u) = up {
            if let Some(p) = self.nodes[node].links.iter().position(|l| l.rem == u) {
                let l = self.nodes[node].links.remove(p);
                self.nodes[node].links.push(l);
            }
        }
        let kids: Vec<usize> = self.nodes[node]
            .links
            .iter()
            .filter(|l| l.ty == LinkType::Pci && Some(l.rem) != up)
            .map(|l| l.rem)
            .collect();
        for k in kids {
            self.sort_rec(k, Some(node), depth + 1);
        }
    }

    fn finish(mut self, inter: bool) -> System {
        let mut graph = DiGraph::with_capacity(
            self.nodes.len(),
            self.nodes.iter().map(|n| n.links.len()).sum(),
        );
        let mut map = vec![NodeIndex::end(); self.nodes.len()];
        let mut by_kind: [Vec<NodeIndex>; 7] = Default::default();
        for k in NodeKind::ALL {
            for &i in &self.by_kind[k.idx()] {
                let n = &mut self.nodes[i];
                let ni = graph.add_node(TopoNode {
                    kind: n.kind,
                    id: n.id,
                    data: std::mem::replace(&mut n.data, NodeData::Nic),
                });
                map[i] = ni;
                by_kind[k.idx()].push(ni);
            }
        }
        let mut adj = vec![Vec::new(); graph.node_count()];
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.alive {
                continue;
            }
            for l in &n.links {
                let e = graph.add_edge(map[i], map[l.rem], TopoLink { ty: l.ty, bw: l.bw });
                adj[map[i].index()].push(e);
            }
        }
        System {
            graph,
            adj,
            by_kind,
            version: self.v,
            inter,
        }
    }
}

impl BNode {
    fn data_sm(&self) -> i32 {
        match &self.data {
            NodeData::Gpu(g) => g.sm,
            NodeData::Dev { sm, .. } => *sm,
            _ => 0,
        }
    }
}

/// `ncclTopoGetIntDevice`: vendor/device/subsystem ids packed into 64 bits.
pub fn pci_device(x: &XmlElement) -> u64 {
    let f = |k: &str| {
        x.get(k)
            .and_then(crate::settings::parse_c_int)
            .map(|v| v as u64 & 0xffff)
            .unwrap_or(0)
    };
    (f("vendor") << 48)
        + (f("device") << 32)
        + (f("subsystem_vendor") << 16)
        + f("subsystem_device")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn busids() {
        assert_eq!(busid_to_int("0000:07:00.0"), 0x7000);
        assert_eq!(busid_to_int("0001:00:00.0"), 0x10_0000);
        assert_eq!(busid_to_int("ffff:ff:01.0"), 0xf_ffff_f010);
    }
}
