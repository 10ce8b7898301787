//! NIC fusion: physical ports that sit close enough in the XML become one virtual NIC (NCCL 2.30.7
//! `ncclTopoProcessNet`, `ncclTopoMakeVNics`, `ncclTopoGetVNicParent` in `src/graph/topo.cc`, with the
//! IB plugin's `ncclIbMakeVDevice` in `src/transport/net_ib/init.cc` as the net plugin).
//!
//! What NCCL 2.30.7 does, in this module's terms:
//! - The net plugin reports its physical ports first, in plugin order (here: the `<net>` elements
//!   with a `dev`, by `dev`). Then, unless the pass only dumps the XML, virtual devices are made.
//! - `NCCL_NET_FORCE_MERGE` groups are fused first, then every port not placed yet becomes the root
//!   of a group holding each later-unplaced port whose XML distance to it is at most
//!   `NCCL_NET_MERGE_LEVEL` (and, with `NCCL_NET_MERGE_POLICY=RAIL`, the same defined rail), at
//!   most 8 ports per group. Groups of one port are not turned into devices.
//! - The XML distance between ports comes from their lowest common XML ancestor: the same `<nic>`
//!   (or two PCI functions whose bus ids differ only in the last character) is PORT, a PCI switch
//!   with both NICs directly below is PIX, other PCI switches PXB, a CPU PHB, the system SYS.
//! - The IB plugin names the device `a+b+...`, sums the speeds, takes the other properties from
//!   the first port, keeps the rail only when all ports share it, and marks the plane as virtual
//!   (bit 14) plus one bit per distinct plane index of its ports. It numbers the device after all
//!   physical ones.
//! - Each new device gets a `<net>` under the first PCI device above the ports' common ancestor
//!   (a new PCI device with a fresh bus id when that is a PCI bridge or a CPU), in that element's
//!   first `<nic>`. When the ports meet at PIX/PXB/PHB level, the PCI widths on the way are set to
//!   the ports' summed width. The fused physical `<net>`s are dropped (`keep=0`).
//! - Not modelled: the IB plugin's refusal to fuse ports of different link layers (the XML does not
//!   say), and its cap on the number of devices.
//!
//! Before 2.30 the releases that fuse (2.24-2.29) do it differently (2.24-2.26 also turn single
//! ports into renumbered devices, 2.27-2.29 keep the physical ports next to the fused ones); that
//! is not modelled: those profiles see the physical ports.

use crate::error::{Result, TopoError};
use crate::path::PathType;
use crate::settings::{NetMergePolicy, NicFusion};
use crate::system::busid_to_int;
use crate::version::NcclVersion;
use crate::xml::XmlElement;

/// `NCCL_NET_MAX_DEVS_PER_NIC` for the v12 net API NCCL 2.30 uses.
pub const MAX_DEVS_PER_NIC: usize = 8;
/// `NCCL_IB_PLANE_MAX_INDEX`: plane ids are indexed below it; bit 14 marks a fused device.
const PLANE_MAX_INDEX: usize = 14;
/// `PCI_BRIDGE_DEVICE_CLASS`.
const PCI_BRIDGE_CLASS: &str = "0x060400";

/// Whether this release fuses NICs the way this module models it.
pub fn applies(v: NcclVersion) -> bool {
    v.at_least(2, 30)
}

/// One virtual NIC NCCL made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VNic {
    /// Device name (`mlx5_0+mlx5_1`).
    pub name: String,
    /// Plugin device index (after all physical ports).
    pub dev: i64,
    /// Indices of the fused ports in plugin order.
    pub ports: Vec<usize>,
    /// Summed speed, Mb/s.
    pub speed: i64,
    /// Rail id (-1 undefined).
    pub rail: i64,
    /// Plane id (virtual bit plus one bit per plane index).
    pub plane: i64,
}

/// A physical port as the emulated net plugin reports it.
#[derive(Debug, Clone)]
struct Port {
    name: String,
    port: i64,
    speed: i64,
    rail: i64,
    plane_idx: usize,
}

type NodePath = Vec<usize>;

fn at<'a>(root: &'a XmlElement, p: &[usize]) -> &'a XmlElement {
    p.iter().fold(root, |e, &i| &e.children[i])
}

fn at_mut<'a>(root: &'a mut XmlElement, p: &[usize]) -> &'a mut XmlElement {
    p.iter().fold(root, |e, &i| &mut e.children[i])
}

fn int_attr(e: &XmlElement, key: &str, default: i64) -> i64 {
    e.get(key)
        .and_then(crate::settings::parse_c_int)
        .unwrap_or(default)
}

/// The first element (document order) with this tag and attribute value (`xmlFindTagKv`).
fn find_kv(root: &XmlElement, tag: &str, key: &str, value: &str) -> Option<NodePath> {
    fn rec(e: &XmlElement, p: &mut NodePath, tag: &str, key: &str, value: &str) -> bool {
        if e.name == tag && e.get(key) == Some(value) {
            return true;
        }
        for (i, c) in e.children.iter().enumerate() {
            p.push(i);
            if rec(c, p, tag, key, value) {
                return true;
            }
            p.pop();
        }
        false
    }
    let mut p = Vec::new();
    rec(root, &mut p, tag, key, value).then_some(p)
}

/// The physical ports in plugin order: `<net>` elements with a `dev` (not marked `net="0"`), by
/// `dev`. Returns them with the largest `dev`.
fn physical_ports(root: &XmlElement) -> Result<(Vec<Port>, i64)> {
    let mut nets: Vec<(i64, Port, i64)> = Vec::new();
    root.walk(&mut |e, _| {
        // The net plugin reports devices by name and NCCL finds their `<net>` by that name: a
        // `<net>` without one is not a port the plugin can report (it stays a plain NET).
        let named = e.get("name").is_some_and(|n| !n.is_empty());
        if e.name == "net" && named && e.get("dev").is_some() && int_attr(e, "net", 1) != 0 {
            nets.push((
                int_attr(e, "dev", 0),
                Port {
                    name: e.get("name").unwrap_or("").to_string(),
                    port: int_attr(e, "port", 0),
                    speed: int_attr(e, "speed", 0),
                    rail: int_attr(e, "rail", -1),
                    plane_idx: 0,
                },
                int_attr(e, "plane", -1),
            ));
        }
    });
    nets.sort_by_key(|n| n.0);
    let max_dev = nets.iter().map(|n| n.0).max().unwrap_or(-1);
    // The IB plugin indexes plane ids in device order; index 0 is "undefined".
    let mut planes: Vec<i64> = vec![-1];
    let mut ports = Vec::with_capacity(nets.len());
    for (_, mut p, plane) in nets {
        p.plane_idx = match planes.iter().position(|&x| x == plane) {
            Some(i) => i,
            None => {
                if planes.len() == PLANE_MAX_INDEX - 1 {
                    return Err(TopoError::Model(format!(
                        "net {}: NCCL's IB plugin accepts at most {} plane ids",
                        p.name,
                        PLANE_MAX_INDEX - 2
                    )));
                }
                if plane & (1 << PLANE_MAX_INDEX) != 0 {
                    return Err(TopoError::Model(format!(
                        "net {}: plane id {plane} has the virtual-device bit set, which NCCL's IB plugin rejects",
                        p.name
                    )));
                }
                planes.push(plane);
                planes.len() - 1
            }
        };
        ports.push(p);
    }
    Ok((ports, max_dev))
}

/// `ncclFindFirstPciParent`: the closest `<pci>` at or above `p`, or `p` itself when none is
/// found below the system element.
fn first_pci_parent(root: &XmlElement, p: &[usize]) -> NodePath {
    let mut q = p.to_vec();
    while at(root, &q).name != "pci" {
        if q.is_empty() {
            return p.to_vec();
        }
        q.pop();
        if at(root, &q).name == "system" {
            return p.to_vec();
        }
    }
    q
}

/// `ncclTopoCheckPix`: every port's NIC PCI device hangs directly off `common`.
fn check_pix(root: &XmlElement, common: &[usize], nodes: &[NodePath]) -> bool {
    if at(root, common).get("busid").is_none() {
        return false;
    }
    for n in nodes {
        if at(root, n).name != "net" || n.is_empty() {
            continue;
        }
        let nic = &n[..n.len() - 1];
        if at(root, nic).name != "nic" {
            continue;
        }
        if nic.is_empty() {
            return false;
        }
        let pci = &nic[..nic.len() - 1];
        if at(root, pci).name == "pci" && (pci.is_empty() || &pci[..pci.len() - 1] != common) {
            return false;
        }
    }
    true
}

/// `ncclTopoGetPath`: the distance class of a set of ports and the XML element the fused device
/// attaches to.
fn get_path(root: &XmlElement, nodes: &[NodePath]) -> (PathType, NodePath) {
    if nodes.len() == 1 {
        return (PathType::Loc, first_pci_parent(root, &nodes[0]));
    }
    let mut common: Option<NodePath> = None;
    let mut t = 0;
    while t <= nodes[0].len() {
        let mine = &nodes[0][..t];
        let same = nodes[1..].iter().all(|n| t <= n.len() && &n[..t] == mine);
        if same {
            common = Some(mine.to_vec());
            t += 1;
            continue;
        }
        // Diverged: two PCI functions of one device (bus ids equal but for the last character)
        // count as ports of one NIC.
        let multi_port = match at(root, mine).get("busid") {
            None => false,
            Some(b0) => nodes[1..].iter().filter(|n| t <= n.len()).all(|n| {
                match at(root, &n[..t]).get("busid") {
                    Some(b) => {
                        b.len() == b0.len()
                            && b.as_bytes()[..b.len().saturating_sub(1)]
                                == b0.as_bytes()[..b0.len().saturating_sub(1)]
                    }
                    None => false,
                }
            }),
        };
        if multi_port {
            let c = common.expect("the system element is common to all");
            return (PathType::Nvl, first_pci_parent(root, &c));
        }
        break;
    }
    let c = common.expect("the system element is common to all");
    let path = match at(root, &c).name.as_str() {
        "system" => PathType::Sys,
        "cpu" => PathType::Phb,
        "nic" | "net" => PathType::Nvl,
        _ if check_pix(root, &c, nodes) => PathType::Pix,
        _ => PathType::Pxb,
    };
    (path, first_pci_parent(root, &c))
}

/// `ncclTopoFindLinkWidthRec`: (holds a port, width accrued from the ports' PCI chains).
fn link_width_rec(e: &XmlElement, p: &mut NodePath, nodes: &[NodePath]) -> (bool, i64) {
    let mine = if e.name == "pci" {
        int_attr(e, "link_width", 0)
    } else {
        0
    };
    let mut found = nodes.iter().any(|n| n == p);
    let mut total = 0;
    for (i, c) in e.children.iter().enumerate() {
        p.push(i);
        let (f, w) = link_width_rec(c, p, nodes);
        p.pop();
        if f {
            found = true;
            total += w;
        }
    }
    if !found {
        (false, 0)
    } else if total == 0 {
        (true, mine)
    } else if mine > 0 {
        (true, mine.min(total))
    } else {
        (true, total)
    }
}

/// `ncclTopoFindLinkWidth`: the summed PCI width of the ports' chains below `parent`.
fn link_width(root: &XmlElement, parent: &[usize], nodes: &[NodePath]) -> i64 {
    let mut p = parent.to_vec();
    let mut sum = 0;
    for (i, c) in at(root, parent).children.iter().enumerate() {
        p.push(i);
        let (f, w) = link_width_rec(c, &mut p, nodes);
        p.pop();
        if f {
            sum += w;
        }
    }
    sum
}

/// `int64ToBusId`.
fn int_to_busid(id: u64) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:01x}",
        id >> 20,
        (id & 0xff000) >> 12,
        (id & 0xff0) >> 4,
        id & 0xf
    )
}

/// `ncclTopoMakePciParent`: a new PCI device under `parent`, a copy of the first port's NIC PCI
/// device with the next unused bus id. Returns its path.
fn make_pci_parent(root: &mut XmlElement, parent: &[usize], port0: &[usize]) -> Result<NodePath> {
    let nic_pci = (port0.len() >= 2)
        .then(|| &port0[..port0.len() - 2])
        .filter(|p| at(root, p).name == "pci");
    let pci = match nic_pci {
        Some(p) => at(root, p).clone(),
        None => {
            return Err(TopoError::Model(format!(
                "NIC fusion: the PCI device of net {} is not known, NCCL cannot fuse it (Can't find busId of child 0)",
                at(root, port0).get("name").unwrap_or("?")
            )))
        }
    };
    let seed = pci.get("busid").unwrap_or("");
    let mut id = busid_to_int(seed);
    for _ in 0..100 {
        id = id.wrapping_add(1);
        let busid = int_to_busid(id);
        if find_kv(root, "pci", "busid", &busid).is_some() {
            continue;
        }
        let mut e = XmlElement::new("pci").with("busid", &busid);
        for (k, v) in pci.attrs.iter() {
            e.set(k, v);
        }
        e.set("busid", &busid);
        let host = at_mut(root, parent);
        host.children.push(e);
        let mut p = parent.to_vec();
        p.push(host.children.len() - 1);
        return Ok(p);
    }
    Err(TopoError::Model(format!(
        "NIC fusion: no unused PCI bus id after {seed} (NCCL gives up after 100 tries)"
    )))
}

/// The IB plugin's `makeVDevice` for a group of two ports or more.
fn make_vdevice(ports: &[Port], group: &[usize], dev: i64, fusion: &NicFusion) -> Option<VNic> {
    if !fusion.ib_merge_nics {
        return None;
    }
    let rail0 = ports[group[0]].rail;
    let mut rail = rail0;
    let mut plane: i64 = 1 << PLANE_MAX_INDEX;
    for &d in group {
        let p = &ports[d];
        if p.rail == -1 || p.rail != rail0 {
            rail = -1;
        }
        plane |= 1 << p.plane_idx;
    }
    Some(VNic {
        name: group
            .iter()
            .map(|&d| ports[d].name.as_str())
            .collect::<Vec<_>>()
            .join("+"),
        dev,
        ports: group.to_vec(),
        speed: group.iter().map(|&d| ports[d].speed).sum(),
        rail,
        plane,
    })
}

/// C's `atoi`: optional sign and leading decimal digits, 0 when there are none.
fn atoi(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = body
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(body.len());
    let v = body[..end].parse::<i64>().unwrap_or(0);
    if neg {
        -v
    } else {
        v
    }
}

/// One `name[:port]` entry of `NCCL_NET_FORCE_MERGE` (`parseStringList`; rail and plane fields
/// are parsed and ignored).
fn parse_group(group: &str) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for entry in group.split(',').filter(|e| !e.is_empty()) {
        if out.len() == MAX_DEVS_PER_NIC {
            break;
        }
        let mut f = entry.split(':');
        let prefix = f.next().unwrap_or("");
        if prefix.is_empty() {
            continue;
        }
        let port = match f.next() {
            Some(s) if !s.is_empty() => atoi(s),
            _ => -1,
        };
        out.push((prefix.to_string(), port));
    }
    out
}

/// The groups NCCL 2.30.7 fuses, in the order it makes them (`ncclTopoForceMerge` then
/// `ncclTopoAutoMerge`), as virtual devices numbered from `first_dev`.
fn plan_vnics(
    root: &XmlElement,
    ports: &[Port],
    fusion: &NicFusion,
    v: NcclVersion,
    first_dev: i64,
) -> Result<Vec<VNic>> {
    let n = ports.len();
    let mut placed = vec![false; n];
    let mut vnics: Vec<VNic> = Vec::new();
    if let Some(spec) = &fusion.force_merge {
        for group in spec.split(';').filter(|g| !g.is_empty()) {
            let wanted = parse_group(group);
            if wanted.is_empty() {
                return Err(TopoError::Setting {
                    name: "NCCL_NET_FORCE_MERGE".into(),
                    value: spec.clone(),
                    msg: format!("group '{group}' names no NIC; NCCL 2.30.7 retries it forever"),
                });
            }
            let devs: Vec<usize> = (0..n)
                .filter(|&d| {
                    wanted.iter().any(|(name, port)| {
                        *name == ports[d].name
                            && (ports[d].port == -1 || *port == -1 || *port == ports[d].port)
                    })
                })
                .collect();
            if devs.len() != wanted.len() {
                return Err(TopoError::Setting {
                    name: "NCCL_NET_FORCE_MERGE".into(),
                    value: spec.clone(),
                    msg: format!(
                        "group '{group}' matches {} of the host's NICs, {} requested (NCCL fails with Only matched ...)",
                        devs.len(),
                        wanted.len()
                    ),
                });
            }
            if devs.len() > 1 {
                let dev = first_dev + vnics.len() as i64;
                match make_vdevice(ports, &devs, dev, fusion) {
                    Some(vn) => vnics.push(vn),
                    None => {
                        return Err(TopoError::Setting {
                            name: "NCCL_NET_FORCE_MERGE".into(),
                            value: spec.clone(),
                            msg: format!(
                                "the net plugin cannot fuse '{group}' (NCCL_IB_MERGE_NICS=0), NCCL fails"
                            ),
                        })
                    }
                }
            }
            for d in devs {
                placed[d] = true;
            }
        }
    }

    let rail_policy =
        fusion.merge_policy == NetMergePolicy::Rail && v >= NcclVersion::new(2, 30, 7);
    let nodes: Vec<NodePath> = ports
        .iter()
        .map(|p| find_kv(root, "net", "name", &p.name).expect("ports come from the XML"))
        .collect();
    let mut dist = vec![PathType::Loc; n * n];
    for i in 0..n {
        for j in 0..n {
            dist[i * n + j] = get_path(root, &[nodes[i].clone(), nodes[j].clone()]).0;
        }
    }
    let mut i = 0;
    while i < n {
        if !placed[i] {
            let mut group = vec![i];
            placed[i] = true;
            for j in 0..n {
                if dist[i * n + j] <= fusion.merge_level
                    && !placed[j]
                    && j != i
                    && (!rail_policy || (ports[i].rail != -1 && ports[i].rail == ports[j].rail))
                {
                    group.push(j);
                    placed[j] = true;
                }
                if group.len() == MAX_DEVS_PER_NIC {
                    break;
                }
            }
            if group.len() > 1 {
                let dev = first_dev + vnics.len() as i64;
                match make_vdevice(ports, &group, dev, fusion) {
                    Some(vn) => vnics.push(vn),
                    None => {
                        // The plugin refused: NCCL unplaces the group, moves its members out of
                        // reach of the root and restarts the scan (at index 1, as it resets the
                        // loop variable before the loop increments it).
                        placed[i] = false;
                        for &d in &group[1..] {
                            placed[d] = false;
                            dist[i * n + d] = PathType::Dis;
                            dist[d * n + i] = PathType::Dis;
                        }
                        i = 0;
                    }
                }
            }
        }
        i += 1;
    }
    Ok(vnics)
}

/// Add a virtual NIC's `<net>` to the XML where NCCL 2.30.7 puts it (`ncclTopoGetVNicParent`,
/// `ncclTopoFillNet`, `ncclTopoPopulateNics`).
fn place_vnic(root: &mut XmlElement, vn: &VNic, ports: &[Port], file: &str) -> Result<()> {
    let first = &ports[vn.ports[0]];
    let net = match find_kv(root, "net", "name", &vn.name) {
        Some(p) => p,
        None => {
            let nodes: Vec<NodePath> = vn
                .ports
                .iter()
                .map(|&d| find_kv(root, "net", "name", &ports[d].name).expect("port in the XML"))
                .collect();
            let (path, mut parent) = get_path(root, &nodes);
            let width = if matches!(path, PathType::Phb | PathType::Pxb | PathType::Pix) {
                link_width(root, &parent, &nodes)
            } else {
                0
            };
            let net_parent = parent.clone();
            match at(root, &parent).name.as_str() {
                "pci" if at(root, &parent).get("class") == Some(PCI_BRIDGE_CLASS) => {
                    parent = make_pci_parent(root, &parent, &nodes[0])?;
                }
                "cpu" => parent = make_pci_parent(root, &parent, &nodes[0])?,
                "system" => {
                    return Err(TopoError::Model(format!(
                        "{file}: NIC fusion of {} spans NUMA domains, which NCCL refuses (Fusing NET devices from different NUMA domains is not supported); lower NCCL_NET_MERGE_LEVEL",
                        vn.name
                    )))
                }
                _ => {}
            }
            if width > 0 {
                let mut q = parent.clone();
                loop {
                    let e = at_mut(root, &q);
                    if e.name == "pci" {
                        e.set("link_width", width);
                    }
                    if q == net_parent || q.is_empty() {
                        break;
                    }
                    q.pop();
                }
            }
            let host = at_mut(root, &parent);
            let nic = match host.children.iter().position(|c| c.name == "nic") {
                Some(i) => i,
                None => {
                    host.children.push(XmlElement::new("nic"));
                    host.children.len() - 1
                }
            };
            let nic_e = &mut host.children[nic];
            nic_e
                .children
                .push(XmlElement::new("net").with("name", &vn.name));
            let mut p = parent;
            p.push(nic);
            p.push(nic_e.children.len() - 1);
            p
        }
    };
    // The properties the plugin reports for the fused device: its own name, speed, rail and
    // plane; everything else from the first port.
    let src = at(
        root,
        &find_kv(root, "net", "name", &first.name).expect("port in the XML"),
    )
    .clone();
    let e = at_mut(root, &net);
    e.set("dev", vn.dev);
    e.init("latency", 0);
    e.init("speed", vn.speed);
    if let Some(p) = src.get("port") {
        e.init("port", p);
    }
    if vn.rail != -1 {
        e.init("rail", vn.rail);
    }
    e.init("plane", vn.plane);
    if let Some(g) = src.get("guid") {
        e.init("guid", g);
    }
    if let Some(m) = src.get("maxconn") {
        e.init("maxconn", m);
    }
    e.init("gdr", src.get("gdr").unwrap_or("0"));
    // A CollNet plugin fuses the same ports into a device of the same name first; ports marked
    // `coll` stand for that plugin's devices.
    if let Some(c) = src.get("coll") {
        e.init("coll", c);
    }
    e.set("net", 1);
    Ok(())
}

/// Fuse the XML's NIC ports into virtual NICs as NCCL 2.30.7 does at init (outside the dump pass).
/// Returns the fused XML and the devices made, or `None` when nothing is fused (older release,
/// fewer than two ports, or no group).
pub fn fuse_nics(
    root: &XmlElement,
    file: &str,
    fusion: &NicFusion,
    v: NcclVersion,
) -> Result<Option<(XmlElement, Vec<VNic>)>> {
    if !applies(v) {
        return Ok(None);
    }
    let (ports, max_dev) = physical_ports(root)?;
    // No port, nothing to do (not even NCCL_NET_FORCE_MERGE is looked at).
    if ports.is_empty() {
        return Ok(None);
    }
    let first_dev = (ports.len() as i64).max(max_dev + 1);
    let vnics = plan_vnics(root, &ports, fusion, v, first_dev).map_err(|e| match e {
        // Name the host file and the <net> elements the setting was matched against.
        TopoError::Setting { name, value, msg } => {
            let names: Vec<&str> = ports.iter().map(|p| p.name.as_str()).collect();
            TopoError::Setting {
                name,
                value,
                msg: format!(
                    "{msg}; the <net> elements of {file} are {}",
                    names.join(", ")
                ),
            }
        }
        other => other,
    })?;
    if vnics.is_empty() {
        return Ok(None);
    }
    let mut out = root.clone();
    for vn in &vnics {
        place_vnic(&mut out, vn, &ports, file)?;
    }
    // The fused ports leave the topology (`keep=0`, then trimmed).
    let mut gone: Vec<NodePath> = vnics
        .iter()
        .flat_map(|vn| vn.ports.iter())
        .filter_map(|&d| find_kv(&out, "net", "name", &ports[d].name))
        .collect();
    gone.sort();
    gone.dedup();
    for p in gone.iter().rev() {
        let (last, parent) = p.split_last().expect("a net is below the root");
        at_mut(&mut out, parent).children.remove(*last);
    }
    Ok(Some((out, vnics)))
}

#[cfg(test)]
mod tests;
