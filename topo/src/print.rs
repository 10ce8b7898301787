//! Text output in NCCL's formats: the `=== System : ...` graph print with its path lines
//! (NCCL 2.30.7 `ncclTopoPrint`, `printNodePaths`), and an `nvidia-smi topo -m`-style matrix.

use crate::path::{LinkType, PathType};
use crate::paths::Topology;
use crate::system::{NodeData, NodeKind, System, TopoNode};
use petgraph::graph::NodeIndex;

/// The node name NCCL prints when it starts a line with a node.
pub fn node_line(n: &TopoNode) -> String {
    match &n.data {
        NodeData::Gpu(g) => format!("{} ({})", n.label(), g.rank),
        NodeData::Cpu(c) => format!("{} ({}/{}/{})", n.label(), c.arch, c.vendor, c.model),
        NodeData::Pci { device } | NodeData::Dev { device, .. } => {
            format!("{} ({:x})", n.label(), device)
        }
        _ => n.label(),
    }
}

fn rec(
    sys: &System,
    node: NodeIndex,
    prev: Option<NodeIndex>,
    prefix: &str,
    out: &mut Vec<String>,
) {
    out.push(format!("{prefix}{}", node_line(sys.node(node))));
    let pad = " ".repeat(prefix.len());
    for (_, rem, link) in sys.links(node) {
        let rn = sys.node(rem);
        if link.ty == LinkType::Loc {
            out.push(format!(
                "{pad}+ {}[{:.1}] - {}",
                link.ty.name(),
                link.bw,
                rn.label()
            ));
        } else if link.ty != LinkType::Pci || Some(rem) != prev {
            let head = format!("{pad}+ {}[{:.1}] - ", link.ty.name(), link.bw);
            if link.ty == LinkType::Pci {
                rec(sys, rem, Some(node), &head, out);
            } else if let Some(net) = rn.net() {
                out.push(format!(
                    "{head}{} ({}/{:x}/{}/{:.6})",
                    rn.label(),
                    u8::from(net.coll),
                    net.asic,
                    net.port,
                    net.bw
                ));
            } else {
                out.push(format!("{head}{}", rn.label()));
            }
        }
    }
}

/// The lines NCCL logs at INFO/GRAPH for a system: the header, the node tree from every CPU, the
/// separator, then one paths line per GPU and per NET.
pub fn system(t: &Topology) -> Vec<String> {
    let sys = &t.system;
    let mut out = vec![format!(
        "=== System : maxBw {:.1} totalBw {:.1} ===",
        t.max_bw, t.total_bw
    )];
    for &c in sys.nodes(NodeKind::Cpu) {
        rec(sys, c, None, "", &mut out);
    }
    out.push("==========================================".into());
    out.extend(path_lines(t));
    out
}

/// `printNodePaths` for every GPU and NET: `GPU/0-7000 :GPU/0-7000 (0/5000.0/LOC) ...`, cut at
/// NCCL's 1023-character line buffer.
pub fn path_lines(t: &Topology) -> Vec<String> {
    let sys = &t.system;
    let mut out = Vec::new();
    for kind in [NodeKind::Gpu, NodeKind::Net] {
        for &n in sys.nodes(kind) {
            let mut line = format!("{} :", sys.node(n).label());
            for base in NodeKind::ALL {
                // NCCL allocates a node's paths towards a kind when a search from a node of that
                // kind reaches it, and prints only those: a NET has no paths to an NVSwitch.
                if !t.has_paths_to(base) {
                    continue;
                }
                let reached = (0..sys.count(base)).any(|i| {
                    let p = t.path(n, base, i);
                    p.count() > 0 || p.ty != PathType::Dis
                });
                if !reached {
                    continue;
                }
                for (i, &b) in sys.nodes(base).iter().enumerate() {
                    let p = t.path(n, base, i);
                    line.push_str(&format!(
                        "{} ({}/{:.1}/{}) ",
                        sys.node(b).label(),
                        p.count(),
                        p.bw,
                        p.ty.name()
                    ));
                }
            }
            line.truncate(1023);
            out.push(line);
        }
    }
    out
}

/// A GPU/NIC matrix of path types (like `nvidia-smi topo -m`) followed by the same matrix of
/// path bandwidths, using NCCL's final paths (after P2P, PXN and GDR rules).
pub fn matrix(t: &Topology) -> String {
    let sys = &t.system;
    let ng = sys.count(NodeKind::Gpu);
    let nn = sys.count(NodeKind::Net);
    let mut names: Vec<String> = (0..ng).map(|g| format!("GPU{}", sys.gpu(g).dev)).collect();
    names.extend((0..nn).map(|n| {
        let net = sys
            .node(sys.nodes(NodeKind::Net)[n])
            .net()
            .expect("NET node");
        format!("NIC{}", net.dev)
    }));
    let cell = |r: usize, c: usize, bw: bool| -> String {
        if r == c {
            return " X ".into();
        }
        let p = match (r < ng, c < ng) {
            (true, true) => t.gpu_gpu(r, c),
            (true, false) => t.gpu_net(r, c - ng),
            (false, true) => t.net_gpu(r - ng, c),
            (false, false) => {
                let a = sys.nodes(NodeKind::Net)[r - ng];
                t.path(a, NodeKind::Net, c - ng)
            }
        };
        if bw {
            format!("{:.1}", p.bw)
        } else {
            p.ty.name().to_string()
        }
    };
    let w = names.iter().map(String::len).max().unwrap_or(4).max(6) + 1;
    let mut s = String::new();
    for (title, bw) in [
        ("Path types (NCCL)", false),
        ("Path bandwidth (GB/s)", true),
    ] {
        s.push_str(&format!("{title}\n{:w$}", ""));
        for n in &names {
            s.push_str(&format!("{n:>w$}"));
        }
        s.push('\n');
        for (r, rn) in names.iter().enumerate() {
            s.push_str(&format!("{rn:w$}"));
            for c in 0..names.len() {
                s.push_str(&format!("{:>w$}", cell(r, c, bw)));
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s.push_str("Legend: LOC self, NVL NVLink, NVB NVLink via a GPU, C2C chip-to-chip, PIX one PCIe switch,\n");
    s.push_str("PXB several PCIe switches, P2C C2C then PCIe, PXN via an NVLink peer's NIC, PHB through a CPU,\n");
    s.push_str("SYS across CPUs, NET through the network.\n");
    s
}
