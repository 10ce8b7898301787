//! Topology edits for what-if studies (`ncclsim whatif --set KEY=VALUE`), applied to the XML
//! before the cluster is built, so every layer sees the edited hardware the way it would see a
//! file that said so.
//!
//! Keys: `nvlink.count` (NVLinks per GPU, spread over its `<nvlink>` elements), `nic.speed`
//! (every `<net speed>`, e.g. `400G`), `nic.count` (keep the first N NETs), `pcie.gen` (every
//! `<pci link_speed>`), and `nodes` (not an XML edit: the caller's node count).

use crate::error::{CostError, Result};
use topo::XmlElement;

/// One edit.
#[derive(Debug, Clone, PartialEq)]
pub enum Edit {
    /// NVLinks per GPU.
    NvlinkCount(u32),
    /// NIC speed in Mb/s.
    NicSpeed(u64),
    /// Number of NETs per node.
    NicCount(usize),
    /// PCIe generation of every link.
    PcieGen(u32),
    /// Number of nodes.
    Nodes(usize),
}

/// The keys `--set` and `--sweep` accept.
pub const KEYS: [&str; 5] = [
    "nvlink.count",
    "nic.speed",
    "nic.count",
    "pcie.gen",
    "nodes",
];

impl Edit {
    /// Parse `KEY=VALUE`.
    pub fn parse(kv: &str) -> Result<Edit> {
        let (k, v) = kv.split_once('=').ok_or_else(|| CostError::Setting {
            name: kv.into(),
            value: String::new(),
            msg: format!("expected KEY=VALUE with KEY one of {}", KEYS.join(", ")),
        })?;
        Edit::from_key(k.trim(), v.trim())
    }

    /// From a key and a value.
    pub fn from_key(k: &str, v: &str) -> Result<Edit> {
        let bad = |msg: &str| CostError::Setting {
            name: k.into(),
            value: v.into(),
            msg: msg.into(),
        };
        let int = |max: u64| -> Result<u64> {
            v.parse::<u64>()
                .ok()
                .filter(|x| *x >= 1 && *x <= max)
                .ok_or_else(|| bad(&format!("expected an integer from 1 to {max}")))
        };
        Ok(match k {
            "nvlink.count" => Edit::NvlinkCount(int(64)? as u32),
            "nic.speed" => {
                Edit::NicSpeed(topo::profiles::parse_nic_speed(v).map_err(|e| bad(&e.to_string()))?)
            }
            "nic.count" => Edit::NicCount(int(64)? as usize),
            "pcie.gen" => Edit::PcieGen(int(6)? as u32),
            "nodes" => Edit::Nodes(int(65536)? as usize),
            _ => {
                return Err(bad(&format!(
                    "unknown key (expected one of {})",
                    KEYS.join(", ")
                )))
            }
        })
    }

    /// Apply to one node's topology XML. `Nodes` changes nothing here.
    pub fn apply(&self, root: &mut XmlElement) -> Result<()> {
        match *self {
            Edit::NvlinkCount(n) => {
                let mut gpus = 0;
                for_each_mut(root, "gpu", &mut |g| {
                    let k = g.children.iter().filter(|c| c.name == "nvlink").count() as u32;
                    if k == 0 {
                        return;
                    }
                    gpus += 1;
                    let links = g.children.iter_mut().filter(|c| c.name == "nvlink");
                    for (i, c) in (0u32..).zip(links) {
                        let cnt = n / k + u32::from(i < n % k);
                        c.set("count", cnt);
                    }
                    g.children
                        .retain(|c| c.name != "nvlink" || c.get("count") != Some("0"));
                });
                if gpus == 0 {
                    return Err(CostError::Setting {
                        name: "nvlink.count".into(),
                        value: n.to_string(),
                        msg: "the topology has no <nvlink> to change".into(),
                    });
                }
            }
            Edit::NicSpeed(mbps) => {
                let mut nets = 0;
                for_each_mut(root, "net", &mut |e| {
                    e.set("speed", mbps);
                    nets += 1;
                });
                if nets == 0 {
                    return Err(CostError::Setting {
                        name: "nic.speed".into(),
                        value: mbps.to_string(),
                        msg: "the topology has no <net> to change".into(),
                    });
                }
            }
            Edit::NicCount(n) => {
                let mut seen = 0;
                remove_nets_after(root, n, &mut seen);
                if seen < n {
                    return Err(CostError::Setting {
                        name: "nic.count".into(),
                        value: n.to_string(),
                        msg: format!("the topology has only {seen} <net> (edits remove NICs, they do not invent them)"),
                    });
                }
            }
            Edit::PcieGen(g) => {
                let s = topo::consts::pcie_speed_str(g);
                for_each_mut(root, "pci", &mut |e| {
                    if e.get("link_speed").is_some() {
                        e.set("link_speed", s);
                    }
                });
            }
            Edit::Nodes(_) => {}
        }
        Ok(())
    }
}

fn for_each_mut(e: &mut XmlElement, name: &str, f: &mut dyn FnMut(&mut XmlElement)) {
    if e.name == name {
        f(e);
    }
    for c in e.children.iter_mut() {
        for_each_mut(c, name, f);
    }
}

/// Keep the first `keep` `<net>` elements in document order; drop the rest and `<nic>` elements
/// left without a `<net>`.
fn remove_nets_after(e: &mut XmlElement, keep: usize, seen: &mut usize) {
    e.children.retain(|c| {
        if c.name == "net" {
            *seen += 1;
            *seen <= keep
        } else {
            true
        }
    });
    for c in e.children.iter_mut() {
        remove_nets_after(c, keep, seen);
    }
    e.children
        .retain(|c| c.name != "nic" || c.children.iter().any(|n| n.name == "net"));
}

/// Apply a list of edits; returns the node count an edit asked for, if any.
pub fn apply_all(root: &mut XmlElement, edits: &[Edit]) -> Result<Option<usize>> {
    let mut nodes = None;
    for e in edits {
        if let Edit::Nodes(n) = e {
            nodes = Some(*n);
        }
        e.apply(root)?;
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dgx() -> XmlElement {
        topo::read_xml(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../topologies/dgx-a100.xml"
        ))
        .unwrap()
    }

    fn collect<'a>(e: &'a XmlElement, name: &str, out: &mut Vec<&'a XmlElement>) {
        if e.name == name {
            out.push(e);
        }
        for c in &e.children {
            collect(c, name, out);
        }
    }

    #[test]
    fn edits_change_the_xml() {
        let mut x = dgx();
        Edit::parse("nvlink.count=6")
            .unwrap()
            .apply(&mut x)
            .unwrap();
        let mut v = Vec::new();
        collect(&x, "nvlink", &mut v);
        assert!(!v.is_empty() && v.iter().all(|n| n.get("count") == Some("1")));
        Edit::parse("nic.speed=400G")
            .unwrap()
            .apply(&mut x)
            .unwrap();
        let mut n = Vec::new();
        collect(&x, "net", &mut n);
        assert!(n.iter().all(|e| e.get("speed") == Some("400000")));
        let before = n.len();
        Edit::parse("nic.count=4").unwrap().apply(&mut x).unwrap();
        let mut n = Vec::new();
        collect(&x, "net", &mut n);
        assert_eq!(n.len(), 4);
        assert!(before > 4);
        Edit::parse("pcie.gen=5").unwrap().apply(&mut x).unwrap();
        let mut p = Vec::new();
        collect(&x, "pci", &mut p);
        assert!(p
            .iter()
            .filter(|e| e.get("link_speed").is_some())
            .all(|e| e.get("link_speed") == Some("32.0 GT/s PCIe")));
    }

    #[test]
    fn bad_edits_are_named() {
        assert!(Edit::parse("nvlink.cnt=6")
            .unwrap_err()
            .to_string()
            .contains("unknown key"));
        assert!(Edit::parse("nodes=0")
            .unwrap_err()
            .to_string()
            .contains("from 1"));
        assert!(Edit::parse("nic.speed=fast").is_err());
        let e = Edit::parse("nic.count=64")
            .unwrap()
            .apply(&mut dgx())
            .unwrap_err();
        assert!(e.to_string().contains("only"), "{e}");
        assert_eq!(apply_all(&mut dgx(), &[Edit::Nodes(4)]).unwrap(), Some(4));
    }
}
