//! `NCCL_GRAPH_DUMP_FILE` / `NCCL_GRAPH_FILE` (`<graphs version="1">`), as NCCL 2.30.7
//! `ncclTopoGetXmlFromGraphs` writes it and `ncclTopoGetGraphFromXml` reads it; the ≤2.20 form
//! (decimal `dev`, NET by device number, no `rank`) and the 2.21-2.29 form (hex `dev`, no `rank`)
//! behind the version profile.

use crate::error::PlanError;
use crate::graph::{Pattern, TopoGraph};
use crate::plan::NodeSearch;
use crate::profile::Profile;
use topo::{NodeKind, PathType, System, XmlElement};

/// `%g` as C prints it for the values graphs hold.
pub fn fmt_g(v: f32) -> String {
    let v = v as f64;
    if v == 0.0 {
        return "0".into();
    }
    let exp = v.abs().log10().floor() as i32;
    if !(-5..6).contains(&exp) {
        let s = format!("{:.5e}", v);
        // Rust prints 1.20000e5; C prints 1.2e+05.
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    let s = format!("{:.*}", decimals, v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `%#lx`.
fn hex_alt(v: i64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{:#x}", v as u64)
    }
}

/// The `<graphs>` tree a rank of node `search` dumps: ring, tree, CollNet direct, CollNet chain,
/// NVLS, with that node's own (not yet aligned) graphs.
pub fn graphs_to_xml(search: &NodeSearch, sys: &System) -> XmlElement {
    let profile = Profile::for_version(sys.version);
    let ngpus = search.ranks.len();
    let mut root = XmlElement::new("graphs").with("version", 1);
    let has_net = if profile.graph_dump_nets_when_inter {
        sys.inter
    } else {
        sys.count(NodeKind::Net) > 0
    };
    let net_dev = |id: i64| -> i64 {
        sys.nodes(NodeKind::Net)
            .iter()
            .map(|&n| sys.node(n))
            .find(|n| n.id as i64 == id)
            .and_then(|n| n.net().map(|x| x.dev as i64))
            .unwrap_or(id)
    };
    let gs = &search.graphs;
    for g in [
        &gs.ring,
        &gs.tree,
        &gs.collnet_direct,
        &gs.collnet_chain,
        &gs.nvls,
    ] {
        let mut x = XmlElement::new("graph")
            .with("id", g.id)
            .with("pattern", g.pattern.number())
            .with("crossnic", g.cross_nic)
            .with("nchannels", g.n_channels)
            .with("speedintra", fmt_g(g.bw_intra))
            .with("speedinter", fmt_g(g.bw_inter))
            .with("latencyinter", fmt_g(g.latency_inter))
            .with("typeintra", g.type_intra.name())
            .with("typeinter", g.type_inter.name())
            .with("samechannels", g.same_channels);
        for c in 0..g.n_channels as usize {
            let mut ch = XmlElement::new("channel");
            let net = |id: i64| -> XmlElement {
                if profile.graph_hex_ids {
                    XmlElement::new("net").with("dev", hex_alt(id))
                } else {
                    XmlElement::new("net").with("dev", net_dev(id))
                }
            };
            if has_net {
                ch = ch.child(net(g.inter[2 * c]));
            }
            for k in 0..ngpus {
                let rank = g.intra[c * ngpus + k];
                let label = search.ranks.iter().position(|&r| r as i32 == rank);
                let gpu = label.and_then(|l| {
                    (0..sys.count(NodeKind::Gpu)).find(|&gi| sys.gpu(gi).rank == l as i32)
                });
                let Some(gi) = gpu else { continue };
                let node = sys.node(sys.nodes(NodeKind::Gpu)[gi]);
                let dev = sys.gpu(gi).dev as i64;
                let e = if profile.graph_hex_ids {
                    let id = ((node.system_id() as i64) << 56) | dev;
                    let e = XmlElement::new("gpu").with("dev", hex_alt(id));
                    if profile.graph_dump_gpu_rank {
                        e.with("rank", rank)
                    } else {
                        e
                    }
                } else {
                    XmlElement::new("gpu").with("dev", dev)
                };
                ch = ch.child(e);
                if g.id == 3 {
                    break;
                }
            }
            if has_net {
                ch = ch.child(net(g.inter[2 * c + 1]));
            }
            x = x.child(ch);
        }
        root = root.child(x);
    }
    root
}

fn attr<'a>(e: &'a XmlElement, k: &str, file: &str) -> crate::error::Result<&'a str> {
    e.get(k).ok_or_else(|| {
        PlanError::GraphFile(format!(
            "{}: <{}> has no '{k}' attribute",
            e.location(file),
            e.name
        ))
    })
}
fn int_attr(e: &XmlElement, k: &str, file: &str) -> crate::error::Result<i64> {
    let s = attr(e, k, file)?;
    topo::settings::parse_c_int(s).ok_or_else(|| {
        PlanError::GraphFile(format!(
            "{}: {k}=\"{s}\" is not an integer",
            e.location(file)
        ))
    })
}

/// Read graph `id` from a `<graphs>` file for this host's system. GPUs are matched by their
/// `dev` (NVML index), giving the system's rank labels. NCCL 2.30 uses the `rank` attribute
/// instead when there is one, which only works on the host that wrote the file; matching by `dev`
/// gives the same result there and a usable one on the other hosts. `Ok(None)` if the file has no
/// graph with that id; the caller applies NCCL's `NCCL_CROSS_NIC=0` rule.
pub fn graph_from_xml(
    root: &XmlElement,
    sys: &System,
    id: i32,
    file: &str,
) -> crate::error::Result<Option<TopoGraph>> {
    let graphs = if root.name == "graphs" {
        root
    } else {
        match root.children.iter().find(|c| c.name == "graphs") {
            Some(g) => g,
            None => {
                return Err(PlanError::GraphFile(format!(
                    "{file}: no <graphs> element (is this a graph dump?)"
                )))
            }
        }
    };
    let ngpus = sys.count(NodeKind::Gpu);
    let mut found = None;
    for x in graphs.subs("graph") {
        if int_attr(x, "id", file)? as i32 != id {
            continue;
        }
        let pattern_n = int_attr(x, "pattern", file)? as i32;
        let pattern = Pattern::from_number(pattern_n).ok_or_else(|| {
            PlanError::GraphFile(format!("{}: unknown pattern {pattern_n}", x.location(file)))
        })?;
        let float = |k: &str| -> crate::error::Result<f32> {
            let s = attr(x, k, file)?;
            s.trim().parse::<f32>().map_err(|_| {
                PlanError::GraphFile(format!("{}: {k}=\"{s}\" is not a number", x.location(file)))
            })
        };
        let ty = |k: &str| -> crate::error::Result<PathType> {
            let s = attr(x, k, file)?;
            PathType::from_name(s)
                .filter(|t| !matches!(t, PathType::C2c | PathType::Net | PathType::Dis))
                .ok_or_else(|| {
                    PlanError::GraphFile(format!(
                        "{}: {k}=\"{s}\" is not a path type NCCL accepts",
                        x.location(file)
                    ))
                })
        };
        let mut g = TopoGraph::new(id, pattern, 0, 0);
        g.cross_nic = int_attr(x, "crossnic", file)? as i32;
        g.n_channels = int_attr(x, "nchannels", file)? as i32;
        g.bw_intra = float("speedintra")?;
        g.bw_inter = float("speedinter")?;
        g.latency_inter = x
            .get("latencyinter")
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0.0);
        g.type_intra = ty("typeintra")?;
        g.type_inter = ty("typeinter")?;
        g.same_channels = int_attr(x, "samechannels", file)? as i32;
        let chans: Vec<&XmlElement> = x.children.iter().collect();
        g.intra = vec![0; chans.len().max(g.n_channels as usize) * ngpus];
        g.inter = vec![0; chans.len().max(g.n_channels as usize) * 2];
        for (c, ch) in chans.iter().enumerate() {
            let (mut n, mut k) = (0, 0);
            for sub in &ch.children {
                let dev_s = attr(sub, "dev", file)?;
                let hex = Profile::for_version(sys.version).graph_hex_ids;
                let dev = if hex {
                    i64::from_str_radix(dev_s.trim().trim_start_matches("0x"), 16)
                } else {
                    dev_s.trim().parse::<i64>()
                }
                .map_err(|_| {
                    PlanError::GraphFile(format!(
                        "{}: dev=\"{dev_s}\" is not a number",
                        sub.location(file)
                    ))
                })?;
                match sub.name.as_str() {
                    "net" if n < 2 => {
                        g.inter[2 * c + n] = net_id_of(sys, dev, hex);
                        n += 1;
                    }
                    "gpu" if k < ngpus => {
                        let by_dev = (0..ngpus)
                            .find(|&gi| sys.gpu(gi).dev as i64 == dev & 0xff_ffff_ffff_ffff);
                        let Some(gi) = by_dev else {
                            return Err(PlanError::GraphFile(format!(
                                "{}: XML Import Channel : dev {dev} not found",
                                sub.location(file)
                            )));
                        };
                        g.intra[c * ngpus + k] = sys.gpu(gi).rank;
                        k += 1;
                    }
                    _ => {}
                }
            }
            if id == 3 {
                // NVLS channels list only the head.
                continue;
            }
            if k != ngpus {
                return Err(PlanError::GraphFile(format!(
                    "{}: channel {c} lists {k} GPU(s) but this node has {ngpus}",
                    ch.location(file)
                )));
            }
        }
        g.n_channels = chans.len() as i32;
        g.intra.truncate(chans.len() * ngpus);
        g.inter.truncate(chans.len() * 2);
        found = Some(g);
    }
    Ok(found)
}

fn net_id_of(sys: &System, dev: i64, hex_ids: bool) -> i64 {
    if hex_ids {
        return dev;
    }
    sys.nodes(NodeKind::Net)
        .iter()
        .map(|&n| sys.node(n))
        .find(|n| n.net().map(|x| x.dev as i64) == Some(dev))
        .map(|n| n.id as i64)
        .unwrap_or(dev)
}

#[cfg(test)]
mod tests {
    use super::fmt_g;
    #[test]
    fn percent_g() {
        assert_eq!(fmt_g(20.0), "20");
        assert_eq!(fmt_g(0.1), "0.1");
        assert_eq!(fmt_g(24.0), "24");
        assert_eq!(fmt_g(0.0), "0");
        assert_eq!(fmt_g(45.1), "45.1");
        assert_eq!(fmt_g(1.2e-6), "1.2e-06");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
    }
}
