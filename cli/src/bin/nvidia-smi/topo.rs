//! `topo -m`: the GPU/NIC matrix of NCCL's path types that `ncclsim topo paths` prints, computed
//! by the `topo` crate from the node the fake libraries simulate, in nvidia-smi's layout (tab
//! separated, CPU and NUMA affinity columns, legends).
//!
//! The node is the fake CUDA core's, as the run environment names it (`run_env::RunEnv`):
//! `NCCLSIM_TOPO`, else `NCCL_TOPO_FILE`, else the bundled DGX A100; `NCCLSIM_GPU` completes
//! skeleton files; `NCCL_*` settings are read as `ncclsim topo paths` reads them. A cell is NCCL's path type, except that an NVLink path (NVL) is written
//! `NV#`, # being the NVLinks the GPU has on it (to the peer, or to the NVSwitches), and a
//! GPU's own cell `X`.

use std::sync::Arc;
use topo::system::TopoNode;
use topo::{LinkType, NodeKind, PathType, Topology};

const BUNDLED: &str = include_str!("../../../../topologies/dgx-a100.xml");

/// The simulated node's topology with NCCL's paths.
fn load() -> Result<Arc<Topology>, String> {
    let env = run_env::RunEnv::current().map_err(|e| e.to_string())?;
    let (text, source) = match &env.topo {
        Some(f) => {
            let f = f.to_string_lossy().into_owned();
            (topo::read_text(&f).map_err(|e| e.to_string())?, f)
        }
        None => (BUNDLED.to_string(), "dgx-a100.xml".to_string()),
    };
    let xml = Arc::new(topo::xml::parse(&text, &source).map_err(|e| e.to_string())?);
    let gpu = env
        .gpu_model
        .as_deref()
        .map(topo::profiles::gpu_model)
        .transpose()
        .map_err(|e| e.to_string())?;
    let settings = topo::TopoSettings::from_env().map_err(|e| e.to_string())?;
    let cluster = topo::Cluster::from_hosts(
        &[(source, xml)],
        &settings,
        topo::Completion {
            gpu,
            nic_speed_mbps: None,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(cluster.nodes[0].topo.clone())
}

/// NVLinks of GPU `g` on its NVLink path to GPU `p`: the direct links, else all its links to
/// NVSwitches.
fn nvlinks(t: &Topology, g: usize, p: usize) -> usize {
    let sys = &t.system;
    // NVLinks leave from the node a GPU's links attach to (its DEV node from NCCL 2.30 on).
    let attach = |i: usize| sys.gpu_attach(sys.nodes(NodeKind::Gpu)[i]);
    let (gn, pn) = (attach(g), attach(p));
    let per = topo::consts::nvlink_bw(sys.gpu(g).sm, topo::NcclVersion::DEFAULT).max(1.0);
    let links: Vec<_> = sys
        .links(gn)
        .filter(|(_, _, l)| l.ty == LinkType::Nvl)
        .collect();
    let direct: f32 = links
        .iter()
        .filter(|(_, r, _)| *r == pn)
        .map(|(_, _, l)| l.bw)
        .sum();
    let bw = if direct > 0.0 {
        direct
    } else {
        links
            .iter()
            .filter(|(_, r, _)| sys.node(*r).kind == NodeKind::Nvs)
            .map(|(_, _, l)| l.bw)
            .sum()
    };
    (bw / per).round() as usize
}

/// A CPU affinity mask (`ffff0000,00000000`: 32-bit words, most significant first) as CPU
/// ranges, `48-63,176-191`.
fn cpu_list(mask: &str) -> String {
    let mut cpus = Vec::new();
    for (w, word) in mask.rsplit(',').enumerate() {
        let bits = u32::from_str_radix(word.trim(), 16).unwrap_or(0);
        cpus.extend((0..32).filter(|b| bits >> b & 1 == 1).map(|b| w * 32 + b));
    }
    let mut ranges: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        ranges.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    if ranges.is_empty() {
        "N/A".into()
    } else {
        ranges.join(",")
    }
}

fn cell(t: &Topology, ng: usize, r: usize, c: usize) -> String {
    if r == c {
        return " X ".into();
    }
    let sys = &t.system;
    let p = match (r < ng, c < ng) {
        (true, true) => t.gpu_gpu(r, c),
        (true, false) => t.gpu_net(r, c - ng),
        (false, true) => t.net_gpu(r - ng, c),
        (false, false) => t.path(sys.nodes(NodeKind::Net)[r - ng], NodeKind::Net, c - ng),
    };
    if p.ty == PathType::Nvl && r < ng && c < ng {
        format!("NV{}", nvlinks(t, r, c))
    } else {
        p.ty.name().to_string()
    }
}

fn net_of(n: &TopoNode) -> (i32, String) {
    n.net().map(|x| (x.dev, x.name.clone())).unwrap_or_default()
}

/// `nvidia-smi topo -m`.
pub fn matrix() -> Result<String, String> {
    let t = load()?;
    let sys = &t.system;
    let ng = sys.count(NodeKind::Gpu);
    let nn = sys.count(NodeKind::Net);
    // Rows in NVML order (the GPUs' `dev`), then the NICs in NCCL's order.
    let mut gpus: Vec<usize> = (0..ng).collect();
    gpus.sort_by_key(|&g| sys.gpu(g).dev);
    let order: Vec<usize> = gpus.iter().copied().chain(ng..ng + nn).collect();
    let name = |i: usize| {
        if i < ng {
            format!("GPU{}", sys.gpu(i).dev)
        } else {
            format!(
                "NIC{}",
                net_of(sys.node(sys.nodes(NodeKind::Net)[i - ng])).0
            )
        }
    };
    let mut out = String::from("\t");
    for &i in &order {
        out += &format!("{}\t", name(i));
    }
    out += "CPU Affinity\tNUMA Affinity\tGPU NUMA ID\n";
    for &r in &order {
        out += &format!("{}\t", name(r));
        for &c in &order {
            out += &format!("{}\t", cell(&t, ng, r, c));
        }
        if r < ng {
            let cpu = t
                .local_cpu(r)
                .and_then(|c| sys.node(sys.nodes(NodeKind::Cpu)[c]).cpu().cloned());
            let affinity = cpu
                .as_ref()
                .and_then(|c| c.affinity.as_deref())
                .map(cpu_list)
                .unwrap_or_else(|| "N/A".into());
            let numa = cpu
                .map(|c| c.numaid.to_string())
                .unwrap_or_else(|| "N/A".into());
            out += &format!("{affinity}\t{numa}\t\tN/A");
        }
        out = out.trim_end_matches('\t').to_string();
        out += "\n";
    }
    out += "\nLegend:\n\n";
    for (k, v) in [
        ("X   ", "Self"),
        ("SYS ", "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)"),
        ("PHB ", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
        ("PXB ", "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)"),
        ("PIX ", "Connection traversing at most a single PCIe bridge"),
        ("NVB ", "Connection traversing NVLink through an intermediate GPU"),
        ("PXN ", "Connection through an NVLink peer GPU and its PCIe path to the NIC"),
        ("C2C ", "Connection traversing a chip-to-chip link to the CPU"),
        ("P2C ", "Connection traversing a chip-to-chip link, then PCIe"),
        ("NV# ", "Connection traversing a bonded set of # NVLinks"),
    ] {
        out += &format!("  {k} = {v}\n");
    }
    if nn > 0 {
        out += "\nNIC Legend:\n\n";
        for &n in sys.nodes(NodeKind::Net) {
            let (dev, nic) = net_of(sys.node(n));
            out += &format!("  NIC{dev}: {nic}\n");
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_masks_become_cpu_ranges() {
        assert_eq!(
            cpu_list("00000000,00000000,ffff0000,00000000,00000000,00000000,ffff0000,00000000"),
            "48-63,176-191"
        );
        assert_eq!(cpu_list("00000005"), "0,2");
        assert_eq!(cpu_list("00000000"), "N/A");
    }
}
