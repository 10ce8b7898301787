//! Building the graph from the XML in NCCL's order (NCCL 2.30.7 `src/graph/topo.cc`,
//! `ncclTopoGetSystemFromXml`: CPUs and their PCI trees, NVLinks, C2C, pcilinks, BCM switch
//! flattening, CPU links, `ncclTopoSortSystem`) on a small arena, then frozen into a [`System`].

use super::{
    busid_to_int, pci_device, topo_id, CpuInfo, GpuInfo, NetInfo, NodeData, NodeKind, System,
    TopoLink, TopoNode,
};
use crate::consts::{self, class, cpu_arch, cpu_model, cpu_vendor, LOC_BW};
use crate::error::{Result, TopoError};
use crate::path::LinkType;
use crate::profiles;
use crate::version::NcclVersion;
use crate::xml::XmlElement;
use petgraph::graph::{DiGraph, NodeIndex};

/// A node under construction (links still mutable, `alive` false once flattened away).
pub(super) struct BNode {
    pub(super) kind: NodeKind,
    pub(super) id: u64,
    pub(super) data: NodeData,
    pub(super) links: Vec<BLink>,
    pub(super) alive: bool,
}

/// A link under construction: type, remote node index, bandwidth.
#[derive(Clone, Copy)]
pub(super) struct BLink {
    pub(super) ty: LinkType,
    pub(super) rem: usize,
    pub(super) bw: f32,
}

/// The arena the graph is built on, in NCCL's order.
pub(super) struct Builder<'f> {
    pub(super) file: &'f str,
    pub(super) v: NcclVersion,
    pub(super) nodes: Vec<BNode>,
    pub(super) by_kind: [Vec<usize>; 7],
    pub(super) host_hashes: Vec<String>,
}

impl<'f> Builder<'f> {
    pub(super) fn new(file: &'f str, v: NcclVersion) -> Self {
        Builder {
            file,
            v,
            nodes: Vec::new(),
            by_kind: Default::default(),
            host_hashes: Vec::new(),
        }
    }

    pub(super) fn err(&self, e: &XmlElement, msg: impl Into<String>) -> TopoError {
        TopoError::Semantic {
            at: e.location(self.file),
            element: e.name.to_string(),
            msg: msg.into(),
        }
    }
    pub(super) fn attr<'a>(&self, e: &'a XmlElement, key: &str) -> Result<&'a str> {
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
    pub(super) fn attr_int(&self, e: &XmlElement, key: &str) -> Result<i64> {
        Ok(crate::settings::parse_c_int(self.attr(e, key)?).unwrap_or(0))
    }
    pub(super) fn attr_int_default(&self, e: &XmlElement, key: &str, d: i64) -> i64 {
        e.get(key)
            .map(|s| crate::settings::parse_c_int(s).unwrap_or(0))
            .unwrap_or(d)
    }

    pub(super) fn get_node(&self, kind: NodeKind, id: u64) -> Option<usize> {
        self.by_kind[kind.idx()]
            .iter()
            .copied()
            .find(|&i| self.nodes[i].id == id)
    }
    pub(super) fn create(&mut self, kind: NodeKind, id: u64, data: NodeData) -> usize {
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
    pub(super) fn connect(&mut self, a: usize, b: usize, ty: LinkType, bw: f32) {
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

    pub(super) fn system_id(&mut self, cpu: &XmlElement) -> u64 {
        let h = cpu.get("host_hash").unwrap_or("").to_string();
        match self.host_hashes.iter().position(|x| *x == h) {
            Some(i) => i as u64,
            None => {
                self.host_hashes.push(h);
                (self.host_hashes.len() - 1) as u64
            }
        }
    }

    pub(super) fn build(&mut self, root: &XmlElement) -> Result<()> {
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

    pub(super) fn add_cpu(&mut self, x: &XmlElement) -> Result<()> {
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
                    self.add_nic(sub, nic, sid, None)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub(super) fn add_pci(
        &mut self,
        x: &XmlElement,
        parent: usize,
        sid: u64,
        numaid: i32,
    ) -> Result<()> {
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
            self.add_nic(nic_x, nic, sid, Some(busid_s))?;
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

    pub(super) fn add_gpu(
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

    /// `ncclTopoAddNic` / `ncclTopoAddNet`; `pci_busid` is the bus id of the PCI device the NIC
    /// sits on (`None` for a NIC directly under a CPU).
    pub(super) fn add_nic(
        &mut self,
        x: &XmlElement,
        nic: usize,
        sid: u64,
        pci_busid: Option<&str>,
    ) -> Result<()> {
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
                // NCCL hashes the parent PCI bus id, else the ASIC id (`eatHash`/`digestHash`);
                // only equality is used.
                pci_id: match pci_busid {
                    Some(b) => crate::hash::fnv1a(b.as_bytes()),
                    None => crate::hash::fnv1a(&asic.to_le_bytes()),
                },
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
    pub(super) fn attach_node(&self, sid: u64, busid: u64) -> Option<usize> {
        let kind = if self.v.has_dev_nodes() {
            NodeKind::Dev
        } else {
            NodeKind::Gpu
        };
        self.get_node(kind, topo_id(sid, busid))
    }

    pub(super) fn find_local_cpu(&self, node: usize, from: Option<usize>) -> Option<usize> {
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
    pub(super) fn add_nvlinks(
        &mut self,
        x: &XmlElement,
        parent_busid: Option<&str>,
        sid: u64,
    ) -> Result<()> {
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

    pub(super) fn add_c2c(
        &mut self,
        x: &XmlElement,
        parent_busid: Option<&str>,
        sid: u64,
    ) -> Result<()> {
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
    pub(super) fn walk_gpu_subs(
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

    pub(super) fn add_pcilinks(
        &mut self,
        x: &XmlElement,
        parent_busid: Option<&str>,
        sid: u64,
    ) -> Result<()> {
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

    pub(super) fn remove_node(&mut self, i: usize) {
        let kind = self.nodes[i].kind;
        self.nodes[i].alive = false;
        self.by_kind[kind.idx()].retain(|&n| n != i);
        for n in &mut self.nodes {
            n.links.retain(|l| l.rem != i);
        }
    }

    /// `ncclTopoFlattenBcmSwitches`.
    pub(super) fn flatten_bcm(&mut self) {
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

    pub(super) fn inter_cpu_bw(&self, cpu: &CpuInfo) -> f32 {
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

    pub(super) fn connect_cpus(&mut self) {
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
    pub(super) fn sort_rec(&mut self, node: usize, up: Option<usize>, depth: usize) {
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

    pub(super) fn finish(mut self, inter: bool) -> System {
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
    pub(super) fn data_sm(&self) -> i32 {
        match &self.data {
            NodeData::Gpu(g) => g.sm,
            NodeData::Dev { sm, .. } => *sm,
            _ => 0,
        }
    }
}
