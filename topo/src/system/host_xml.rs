//! A host's XML before building: checked and NIC-fused once (`HostXml`), then claimed and
//! trimmed per communicator (NCCL 2.30.7 `src/graph/topo.cc` / `xml.cc`: `ncclTopoTrimXml`,
//! and from 2.23 `ncclTopoFuseXml` in local-rank order).

use super::BuildOptions;
use crate::error::{Result, TopoError};
use crate::mnnvl::{host_guid, NicGuids};
use crate::version::NcclVersion;
use crate::xml::{XStr, XmlElement};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

/// A host's topology XML as every local rank has it before claiming its GPU: checked, with NCCL's
/// NIC fusion ([`crate::fusion`]) applied, and the devs of its GPUs that have a rank. Every rank of
/// a host fuses the same file the same way, so this is made once per host and kept.
#[derive(Debug, Clone)]
pub struct HostXml {
    pub(super) root: Arc<XmlElement>,
    pub(super) devs: Vec<i32>,
    pub(super) version: NcclVersion,
    pub(super) fusion: crate::settings::NicFusion,
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
/// `NCCL_TOPO_MAX_NODES` of NCCL 2.30.7: nodes of one kind a system can have.
const MAX_NODES_PER_KIND: usize = 576;

/// The first element that makes one kind of node exceed [`MAX_NODES_PER_KIND`], as an error
/// naming it, the kind and the count.
fn too_many_nodes(root: &XmlElement, file: &str) -> Result<()> {
    const KINDS: [(&str, &str, &str); 5] = [
        ("gpu", "GPU", "GPUs"),
        ("nic", "NIC", "NICs"),
        ("net", "NET", "NETs"),
        ("cpu", "CPU", "CPUs"),
        ("pci", "PCI switch", "PCI switches"),
    ];
    let mut counts = [0usize; KINDS.len()];
    let mut first_over: [Option<(usize, usize)>; KINDS.len()] = [None; KINDS.len()];
    root.walk(&mut |e, _| {
        let Some(k) = KINDS.iter().position(|(name, _, _)| e.name == *name) else {
            return;
        };
        if e.name == "pci"
            && e.children
                .iter()
                .any(|c| c.name == "gpu" || c.name == "nic")
        {
            return;
        }
        counts[k] += 1;
        if counts[k] == MAX_NODES_PER_KIND + 1 {
            first_over[k] = Some((e.line, e.col));
        }
    });
    for (k, (name, one, plural)) in KINDS.iter().enumerate() {
        if let Some((line, col)) = first_over[k] {
            return Err(TopoError::Semantic {
                at: crate::error::Location {
                    file: file.to_string(),
                    line,
                    col,
                },
                element: (*name).into(),
                msg: format!(
                    "is {one} {} of {}; NCCL keeps at most {MAX_NODES_PER_KIND} {plural} in a system (NCCL_TOPO_MAX_NODES) and fails",
                    MAX_NODES_PER_KIND + 1,
                    counts[k]
                ),
            });
        }
    }
    Ok(())
}

pub(super) fn check_and_fuse(
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
    // NCCL keeps at most NCCL_TOPO_MAX_NODES (576 in 2.30.7) nodes of each kind in a system
    // and fails init beyond ("tried to create too many nodes of type %d",
    // `ncclTopoCreateNode`); refusing such files first also keeps every step after this one
    // (NIC fusion, paths from every GPU and NET) small. Each `gpu`, `nic`, `net` and `cpu`
    // element is one node; a `pci` element is a PCI node unless it holds a GPU or a NIC.
    too_many_nodes(root, file)?;
    // NIC fusion comes before the trim; every local rank fuses the same file the same way.
    let fused = crate::fusion::fuse_nics(root, file, fusion, version)?.map(|(x, _)| x);
    // Which GPU devs can be claimed: each once, since a local rank claims its GPU by device
    // index (the CUDA ordinal, unique on a host).
    let mut devs: Vec<i32> = Vec::new();
    let mut first_at: HashMap<i32, crate::error::Location> = HashMap::new();
    let mut bad: Option<TopoError> = None;
    fused.as_ref().unwrap_or(root).walk(&mut |e, _| {
        if e.name != "gpu" || bad.is_some() {
            return;
        }
        let Some(v) = e.get("dev") else { return };
        match crate::settings::parse_c_int(v).and_then(|d| i32::try_from(d).ok()) {
            Some(d) if e.get("rank").is_some() => match first_at.entry(d) {
                Entry::Occupied(first) => {
                    bad = Some(TopoError::Semantic {
                        at: e.location(file),
                        element: "gpu".into(),
                        msg: format!(
                            "dev=\"{d}\" is already the device of the <gpu> on line {}; each GPU of a host has its own device index",
                            first.get().line
                        ),
                    })
                }
                Entry::Vacant(slot) => {
                    slot.insert(e.location(file));
                    devs.push(d);
                }
            },
            Some(_) => {}
            None => {
                bad = Some(TopoError::Semantic {
                    at: e.location(file),
                    element: "gpu".into(),
                    msg: format!("dev=\"{v}\" is not a device index (an integer)"),
                })
            }
        }
    });
    if let Some(e) = bad {
        return Err(e);
    }
    devs.sort_unstable();
    Ok((fused, devs))
}

/// NCCL's claim-and-trim step on a prepared host XML: GPUs not claimed by a rank are dropped
/// together with PCI/CPU/NIC/NET subtrees that hold nothing kept (`ncclTopoTrimXml`); claimed GPUs
/// get their rank.
pub(super) fn claim_and_trim(
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

/// One rank of a clique whose topology is fused across hosts: its host's prepared XML, where
/// that came from, its GPU and its host's hash (`host_hash` of every `<cpu>` it contributes).
#[derive(Debug, Clone, Copy)]
pub struct CliqueRank<'a> {
    /// The rank's host XML, checked and NIC-fused.
    pub host: &'a HostXml,
    /// Where the host XML came from.
    pub file: &'a str,
    /// The rank's GPU (`dev`).
    pub dev: i32,
    /// The rank's host hash.
    pub host_hash: u64,
}

/// NCCL's XML fusion across a multi-node NVLink clique (NCCL 2.30.7 `src/graph/topo.cc`
/// `ncclTopoGetSystem` with `comm->MNNVL`): every rank trims its host's XML to its own GPU
/// (plus the NICs), stamps its host's hash on every `<cpu>`, and the ranks' XMLs are fused in
/// clique-rank order. CPUs of different hosts differ by `host_hash`, so each host keeps its own
/// CPUs, PCI trees and NICs; GPUs of one host fuse under their host's CPUs.
///
/// With [`NicGuids::AsFile`] NICs keep the GUIDs of their host's file: hosts described by one
/// file share them, and NCCL, which takes the GUID as the NIC's ASIC identity
/// (`ncclTopoAddNet`), then treats the same port of every such host as one ASIC when it shares
/// NIC bandwidth during the search. With [`NicGuids::PerHost`] (real trays, whose net plugin
/// reports each HCA's own GUID) a GUID an earlier host already has is replaced by one of the
/// host's own.
pub(super) fn fuse_clique(ranks: &[CliqueRank], guids: NicGuids) -> Result<XmlElement> {
    let mut fused: Option<XmlElement> = None;
    // The host each GUID was first seen on.
    let mut owner: HashMap<String, u64> = HashMap::new();
    for (i, r) in ranks.iter().enumerate() {
        if !r.host.devs.contains(&r.dev) {
            return Err(TopoError::Model(format!(
                "{}: GPU dev {} is not in the topology (it has devs {:?})",
                r.file, r.dev, r.host.devs
            )));
        }
        let mut mine = claimed_copy(&r.host.root, &[r.dev], i as i32);
        if guids == NicGuids::PerHost {
            own_guids(&mut mine, r.host_hash, &mut owner);
        }
        let hash = format!("0x{:x}", r.host_hash);
        for c in mine.children.iter_mut().filter(|c| c.name == "cpu") {
            c.set("host_hash", hash.as_str());
        }
        match &mut fused {
            None => fused = Some(mine),
            Some(dst) => fuse(dst, &mine),
        }
    }
    fused.ok_or_else(|| TopoError::Model("a clique needs at least one rank".into()))
}

/// Give the `<net>`s of `e` (one rank's claimed copy of host `host_hash`'s XML) whose GUID an
/// earlier host owns a GUID of this host's own ([`host_guid`]).
fn own_guids(e: &mut XmlElement, host_hash: u64, owner: &mut HashMap<String, u64>) {
    if e.name == "net" {
        if let Some(g) = e.get("guid") {
            let first = *owner.entry(g.to_string()).or_insert(host_hash);
            if first != host_hash {
                let v = g.trim();
                let hex = v
                    .strip_prefix("0x")
                    .or_else(|| v.strip_prefix("0X"))
                    .unwrap_or(v);
                // An unreadable GUID is NCCL's 0 (`strtoull`), shared the same way.
                let n = u64::from_str_radix(hex, 16).unwrap_or(0);
                e.set("guid", format!("0x{:x}", host_guid(n, host_hash)));
            }
        }
    }
    for c in &mut e.children {
        own_guids(c, host_hash, owner);
    }
}

/// `xmlTopoFuseXmlRecursive`: merge `src`'s children into `dst`, matching children with the same
/// name and exactly the same attributes (the first such child of `dst`, which may be one an
/// earlier child of `src` added).
pub(super) fn fuse(dst: &mut XmlElement, src: &XmlElement) {
    // Small lists are scanned as NCCL does; long ones (a file can repeat an element thousands
    // of times) are matched through a map of name and attributes, which finds the same child.
    if dst.children.len() * src.children.len() <= 4096 {
        fuse_by_scan(dst, src);
        return;
    }
    let mut first: HashMap<(XStr, Vec<(XStr, XStr)>), usize> = HashMap::new();
    for (i, n) in dst.children.iter().enumerate() {
        first.entry(fuse_key(n)).or_insert(i);
    }
    for c in &src.children {
        match first.entry(fuse_key(c)) {
            Entry::Occupied(at) => fuse(&mut dst.children[*at.get()], c),
            Entry::Vacant(slot) => {
                slot.insert(dst.children.len());
                dst.children.push(c.clone());
            }
        }
    }
}

/// [`fuse`] by scanning `dst`'s children for each child of `src`.
fn fuse_by_scan(dst: &mut XmlElement, src: &XmlElement) {
    for c in &src.children {
        match dst.children.iter_mut().find(|n| same_element(n, c)) {
            Some(d) => fuse(d, c),
            None => dst.children.push(c.clone()),
        }
    }
}

/// Same name and the same attributes, in any order.
fn same_element(n: &XmlElement, c: &XmlElement) -> bool {
    n.name == c.name
        && (Arc::ptr_eq(&n.attrs, &c.attrs)
            || (n.attrs.len() == c.attrs.len()
                && c.attrs
                    .iter()
                    .all(|(k, v)| n.attrs.iter().any(|(nk, nv)| nk == k && nv == v))))
}

/// Name and sorted attributes: equal exactly when [`same_element`] holds, since no element
/// repeats an attribute name (the reader refuses a repeat; `set` and `init` keep names
/// distinct).
fn fuse_key(e: &XmlElement) -> (XStr, Vec<(XStr, XStr)>) {
    let mut attrs = e.attrs.to_vec();
    attrs.sort_unstable_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    (e.name.clone(), attrs)
}

/// Whether `e` holds a GPU this rank claims or a NET with a device ([`claimed_copy`]'s rule),
/// without copying anything.
pub(super) fn holds_claimed(e: &XmlElement, order: &[i32]) -> bool {
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
pub(super) fn claimed_copy(e: &XmlElement, order: &[i32], rank_base: i32) -> XmlElement {
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

#[cfg(test)]
mod tests {
    use super::{fuse, fuse_by_scan};
    use crate::xml::{parse, write};

    #[test]
    fn fusing_long_child_lists_through_the_map_matches_the_scan() {
        // 300 children on one side, 150 on the other: repeated elements, attributes in another
        // order, nested children to fuse, and new ones.
        let dst: String = (0..300)
            .map(|i| {
                format!(
                    "<pci busid=\"{:x}\" class=\"c{}\"><x a=\"{}\"/></pci>",
                    i % 200,
                    i % 3,
                    i
                )
            })
            .collect();
        let src: String = (0..150)
            .map(|i| {
                format!(
                    "<pci class=\"c{}\" busid=\"{:x}\"><x a=\"{}\"/><y/></pci>",
                    (2 * i) % 3,
                    2 * i,
                    i + 1000
                )
            })
            .collect();
        let dst = parse(&format!("<cpu>{dst}</cpu>"), "d.xml").unwrap();
        let src = parse(&format!("<cpu>{src}</cpu>"), "s.xml").unwrap();
        let (mut by_map, mut by_scan) = (dst.clone(), dst);
        fuse(&mut by_map, &src);
        fuse_by_scan(&mut by_scan, &src);
        assert!(by_map.children.len() > 300, "some children are new");
        assert_eq!(write(&by_map), write(&by_scan));
    }
}
