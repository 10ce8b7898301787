//! `NCCL_GRAPH_DUMP_FILE` / `NCCL_GRAPH_FILE` (`<graphs version="1">`), as NCCL 2.30.7
//! `ncclTopoGetXmlFromGraphs` writes it and `ncclTopoGetGraphFromXml` reads it; the ≤2.20 form
//! (decimal `dev`, NET by device number, no `rank`) and the 2.21-2.29 form (hex `dev`, no `rank`)
//! behind the version profile.

use crate::error::PlanError;
use crate::graph::{graph_id, Pattern, TopoGraph};
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
    let reader = GraphReader {
        sys,
        id,
        file,
        ngpus: sys.count(NodeKind::Gpu),
        hex: Profile::for_version(sys.version).graph_hex_ids,
    };
    let mut found = None;
    for x in graphs.subs("graph") {
        if int_in(x, "id", 0, 4, file)? as i32 != id {
            continue;
        }
        if found.is_some() {
            return Err(reader.err(x, format!("graph id {id} given twice")));
        }
        found = Some(reader.graph(x)?);
    }
    Ok(found)
}

/// Reads one `<graph>` element of a graph file against this host's system.
struct GraphReader<'a> {
    sys: &'a System,
    /// The graph id being read.
    id: i32,
    file: &'a str,
    ngpus: usize,
    /// Whether `dev` attributes are hexadecimal (the release's graph dump format).
    hex: bool,
}

impl GraphReader<'_> {
    fn err(&self, e: &XmlElement, msg: String) -> PlanError {
        PlanError::GraphFile(format!("{}: <{}> {msg}", e.location(self.file), e.name))
    }

    /// The graph's attributes, then its channels.
    fn graph(&self, x: &XmlElement) -> crate::error::Result<TopoGraph> {
        let (id, file, ngpus) = (self.id, self.file, self.ngpus);
        // NCCL keeps at most MAXCHANNELS/2 searched channels (Postset doubles them).
        let max_channels = self.sys.version.max_channels() / 2;
        let pattern_n = int_in(x, "pattern", 1, 6, file)? as i32;
        let pattern = Pattern::from_number(pattern_n)
            .ok_or_else(|| self.err(x, format!("pattern=\"{pattern_n}\" is not a pattern")))?;
        // The patterns NCCL searches each graph with (a single GPU searches a chain).
        let fits = match id {
            graph_id::RING => pattern == Pattern::Ring,
            graph_id::TREE | graph_id::COLLNET_CHAIN => pattern.is_tree(),
            graph_id::NVLS => matches!(pattern, Pattern::Nvls | Pattern::Tree),
            _ => matches!(pattern, Pattern::CollnetDirect | Pattern::Tree),
        };
        if !fits || (ngpus == 1 && !matches!(pattern, Pattern::Ring | Pattern::Tree)) {
            return Err(self.err(
                x,
                format!("pattern=\"{pattern_n}\" is not a pattern of graph {id} on {ngpus} GPU(s)"),
            ));
        }
        let float = |k: &str| -> crate::error::Result<f32> {
            let s = attr(x, k, file)?;
            s.trim()
                .parse::<f32>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| self.err(x, format!("{k}=\"{s}\" is not a non-negative number")))
        };
        let ty = |k: &str| -> crate::error::Result<PathType> {
            let s = attr(x, k, file)?;
            PathType::from_name(s)
                .filter(|t| !matches!(t, PathType::C2c | PathType::Net | PathType::Dis))
                .ok_or_else(|| self.err(x, format!("{k}=\"{s}\" is not a path type NCCL accepts")))
        };
        let mut g = TopoGraph::new(id, pattern, 0, 0);
        g.cross_nic = int_in(x, "crossnic", 0, 2, file)? as i32;
        let nchannels = int_in(x, "nchannels", 0, max_channels as i64, file)? as usize;
        g.bw_intra = float("speedintra")?;
        g.bw_inter = float("speedinter")?;
        g.latency_inter = match x.get("latencyinter") {
            Some(_) => float("latencyinter")?,
            None => 0.0,
        };
        g.type_intra = ty("typeintra")?;
        g.type_inter = ty("typeinter")?;
        g.same_channels = int_in(x, "samechannels", 0, 1, file)? as i32;
        if let Some(c) = x.children.iter().find(|c| c.name != "channel") {
            return Err(self.err(c, "is not a <channel>".into()));
        }
        let chans = &x.children;
        if chans.len() != nchannels {
            return Err(self.err(
                x,
                format!(
                    "nchannels=\"{nchannels}\" but it has {} <channel> element(s)",
                    chans.len()
                ),
            ));
        }
        g.intra = vec![0; nchannels * ngpus];
        g.inter = vec![0; nchannels * 2];
        for (c, ch) in chans.iter().enumerate() {
            self.channel(&mut g, c, ch)?;
        }
        g.n_channels = nchannels as i32;
        Ok(g)
    }

    /// Channel `c`: its GPUs (by `dev`) into `g.intra`, its NETs into `g.inter`.
    fn channel(&self, g: &mut TopoGraph, c: usize, ch: &XmlElement) -> crate::error::Result<()> {
        let (sys, ngpus) = (self.sys, self.ngpus);
        // NVLS channels list only their head GPU.
        let gpus_per_channel = if self.id == graph_id::NVLS { 1 } else { ngpus };
        // Inter-node graphs enter and leave each channel through a NET.
        let nets_per_channel = if sys.inter { 2 } else { 0 };
        let (mut n, mut k) = (0, 0);
        for sub in &ch.children {
            let (dev, dev_s) = self.dev(sub)?;
            match sub.name.as_str() {
                "net" => {
                    if n == 2 {
                        return Err(self.err(sub, format!("channel {c}: a third <net>")));
                    }
                    let Some(net) = net_id_of(sys, dev, self.hex) else {
                        return Err(
                            self.err(sub, format!("dev=\"{dev_s}\": this node has no such NET"))
                        );
                    };
                    g.inter[2 * c + n] = net;
                    n += 1;
                }
                "gpu" => {
                    if k == gpus_per_channel {
                        return Err(self.err(
                            sub,
                            format!(
                                "channel {c} lists more than {gpus_per_channel} GPU(s) \
                                 (this node has {ngpus})"
                            ),
                        ));
                    }
                    let by_dev =
                        (0..ngpus).find(|&gi| sys.gpu(gi).dev as i64 == dev & 0xff_ffff_ffff_ffff);
                    let Some(gi) = by_dev else {
                        return Err(
                            self.err(sub, format!("XML Import Channel : dev {dev} not found"))
                        );
                    };
                    let rank = sys.gpu(gi).rank;
                    if g.intra[c * ngpus..c * ngpus + k].contains(&rank) {
                        return Err(self.err(
                            sub,
                            format!("dev=\"{dev_s}\": channel {c} lists this GPU twice"),
                        ));
                    }
                    g.intra[c * ngpus + k] = rank;
                    k += 1;
                }
                _ => return Err(self.err(sub, "is not a <gpu> or <net>".into())),
            }
        }
        if k != gpus_per_channel {
            return Err(self.err(
                ch,
                format!("channel {c} lists {k} GPU(s) but needs {gpus_per_channel}"),
            ));
        }
        if n != nets_per_channel && !(n == 2 && nets_per_channel == 0) {
            return Err(self.err(
                ch,
                format!(
                    "channel {c} lists {n} <net>(s); a graph {} nodes needs 2 per channel",
                    if sys.inter { "across" } else { "within" }
                ),
            ));
        }
        Ok(())
    }

    /// A `<gpu>` or `<net>`'s `dev`, decimal or hexadecimal as the release writes it, with the
    /// text it was read from.
    fn dev<'e>(&self, sub: &'e XmlElement) -> crate::error::Result<(i64, &'e str)> {
        let dev_s = attr(sub, "dev", self.file)?;
        let dev = if self.hex {
            let t = dev_s.trim();
            let t = t
                .strip_prefix("0x")
                .or_else(|| t.strip_prefix("0X"))
                .unwrap_or(t);
            i64::from_str_radix(t, 16)
        } else {
            dev_s.trim().parse::<i64>()
        }
        .map_err(|_| self.err(sub, format!("dev=\"{dev_s}\" is not a number")))?;
        Ok((dev, dev_s))
    }
}

/// An integer attribute within `lo..=hi`.
fn int_in(e: &XmlElement, k: &str, lo: i64, hi: i64, file: &str) -> crate::error::Result<i64> {
    let v = int_attr(e, k, file)?;
    if !(lo..=hi).contains(&v) {
        return Err(PlanError::GraphFile(format!(
            "{}: <{}> {k}=\"{v}\" is not in {lo}..{hi}",
            e.location(file),
            e.name
        )));
    }
    Ok(v)
}

/// The id of the NET a channel names: by id in the hex form, by device number before.
fn net_id_of(sys: &System, dev: i64, hex_ids: bool) -> Option<i64> {
    sys.nodes(NodeKind::Net)
        .iter()
        .map(|&n| sys.node(n))
        .find(|n| {
            if hex_ids {
                n.id as i64 == dev
            } else {
                n.net().map(|x| x.dev as i64) == Some(dev)
            }
        })
        .map(|n| n.id as i64)
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
