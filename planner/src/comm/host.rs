//! One host's search as every rank of a communicator on it runs it in `initTransportsRank`
//! (NCCL 2.30.7 `src/init.cc`): build the host's topology for the communicator's GPUs, search the
//! ring, tree, CollNet and NVLS graphs (`ncclTopoCompute`), and record per-GPU NET facts
//! (`ncclTopoGetLocalNetCountByBw` in `src/graph/topo.cc`).

use super::nvls::nvls_supported;
use crate::error::{PlanError, Result};
use crate::graph::{graph_id, Pattern, TopoGraph};
use crate::graph_xml;
use crate::plan::CommGraphs;
use crate::search::Searcher;
use crate::settings::PlannerSettings;
use std::sync::Arc;
use topo::{BuildOptions, Cluster, HostXml, NodeKind, System, Topology};

/// What a host search records about each GPU's NETs.
#[derive(Debug, Clone, Copy)]
pub struct GpuNets {
    /// The slowest of its NETs (`ncclTopoGetMinNetBw`'s per-rank part; 0 without NETs).
    pub min_bw: f32,
    /// `ncclTopoGetLocalNetCountByBw` (2.29+): NETs in channel order until their bandwidth
    /// reaches the GPU's bandwidth to its CPU, and their total bandwidth.
    pub count_by_bw: (usize, f32),
    /// `getLocalNetCountByBw` of 2.20-2.28: the closest NETs, in index order, while their total
    /// stays below the bandwidth of a link from the GPU straight to a CPU (none behind a switch).
    pub count_by_bw_2_20: usize,
}

/// A host's search: the topology its ranks see and the graphs found, in local rank labels
/// (0..k in the order of the comm's ranks on that host).
#[derive(Debug, Clone)]
pub struct HostSearch {
    /// The topology (only this comm's GPUs on the host).
    pub topo: Arc<Topology>,
    /// The graphs found (CollNet and NVLS with zero channels when not searched).
    pub graphs: CommGraphs,
    /// INFO lines printed by the search.
    pub notes: Vec<String>,
    /// Whether NVLS is supported on this host for this comm (`ncclNvlsInit`).
    pub nvls_support: bool,
    /// Search steps used.
    pub steps: u64,
    /// GPU index of each local rank label.
    pub labels: Vec<usize>,
    /// Per GPU: its NET facts.
    pub gpu_nets: Vec<GpuNets>,
}

/// Stack bytes one level of the search recursion may take (debug builds keep far larger frames).
const STACK_PER_LEVEL: usize = if cfg!(debug_assertions) {
    8 << 10
} else {
    1 << 10
};

/// Search one host's graphs as `initTransportsRank` does.
///
/// The search recurses once per GPU of a channel and again for the next channel (as NCCL's
/// `ncclTopoSearchRecGpu` does), so its depth grows with GPUs x channels: up to about 37,000
/// levels for NCCL's largest node. When that may not fit the caller's stack, the search runs
/// on a thread of its own with a stack sized for it.
pub(super) fn search_host(
    topo: Arc<Topology>,
    settings: &PlannerSettings,
    graph_file: Option<&topo::XmlElement>,
    collnet: bool,
    file: &str,
) -> Result<HostSearch> {
    let levels =
        (topo.system.count(NodeKind::Gpu) + 4) * (settings.topo.version.max_channels() + 1);
    let need = levels * STACK_PER_LEVEL;
    if need <= 1 << 20 {
        return search_host_here(topo, settings, graph_file, collnet, file);
    }
    std::thread::scope(|sc| {
        std::thread::Builder::new()
            .name("ncclsim-search".into())
            .stack_size(need + (1 << 20))
            .spawn_scoped(sc, || {
                search_host_here(topo, settings, graph_file, collnet, file)
            })
            .map_err(|e| PlanError::Thread(e.to_string()))?
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

fn search_host_here(
    topo: Arc<Topology>,
    settings: &PlannerSettings,
    graph_file: Option<&topo::XmlElement>,
    collnet: bool,
    file: &str,
) -> Result<HostSearch> {
    let mut s = Searcher::new(&topo, settings);
    let ngpus = topo.system.count(NodeKind::Gpu);
    let loaded = |id: i32| -> Result<Option<TopoGraph>> {
        match graph_file {
            None => Ok(None),
            Some(x) => graph_xml::graph_from_xml(x, &topo.system, id, file),
        }
    };
    let maxch = settings.topo.version.max_channels();
    let mut ring = TopoGraph::new(graph_id::RING, Pattern::Ring, 1, (maxch / 2) as i32);
    s.compute(&mut ring, loaded(graph_id::RING)?.as_ref());
    let mut tree = TopoGraph::new(
        graph_id::TREE,
        Pattern::BalancedTree,
        ring.n_channels,
        ring.n_channels,
    );
    s.compute(&mut tree, loaded(graph_id::TREE)?.as_ref());
    let mut chain = TopoGraph::new(
        graph_id::COLLNET_CHAIN,
        Pattern::Tree,
        ring.n_channels,
        ring.n_channels,
    );
    chain.coll_net = true;
    let mut direct = TopoGraph::new(
        graph_id::COLLNET_DIRECT,
        Pattern::CollnetDirect,
        1,
        maxch as i32,
    );
    direct.coll_net = true;
    if collnet {
        s.compute(&mut chain, loaded(graph_id::COLLNET_CHAIN)?.as_ref());
        s.compute(&mut direct, loaded(graph_id::COLLNET_DIRECT)?.as_ref());
    }
    let mut nvls = TopoGraph::new(graph_id::NVLS, Pattern::Nvls, 1, maxch as i32);
    let nvls_support = nvls_supported(&topo.system, settings, ngpus);
    if nvls_support {
        s.compute(&mut nvls, loaded(graph_id::NVLS)?.as_ref());
    }
    let gpu_nets = (0..ngpus)
        .map(|g| {
            let bw = topo
                .local_net_cycle(g)
                .iter()
                .map(|&n| topo.gpu_net(g, n).bw)
                .fold(f32::MAX, f32::min);
            GpuNets {
                min_bw: if bw < f32::MAX { bw } else { 0.0 },
                count_by_bw: local_net_count_by_bw(&topo, g),
                count_by_bw_2_20: local_net_count_by_bw_2_20(&topo, g),
            }
        })
        .collect();
    Ok(HostSearch {
        labels: local_gpu_of_label(&topo.system),
        gpu_nets,
        graphs: CommGraphs {
            ring,
            tree,
            collnet_chain: chain,
            nvls,
            collnet_direct: direct,
        },
        notes: std::mem::take(&mut s.notes),
        steps: s.steps,
        nvls_support,
        topo: topo.clone(),
    })
}

/// Build the topology of host `h` for the ranks on `devs` (the paths do not depend on whether
/// the communicator spans hosts; `inter` is set on the result).
pub(super) fn build_topology(
    cluster: &Cluster,
    host_xml: &HostXml,
    h: usize,
    devs: &[i32],
    inter: bool,
    name: &str,
    settings: &PlannerSettings,
) -> Result<Topology> {
    let node = &cluster.nodes[h];
    let opts = BuildOptions {
        version: settings.topo.version,
        gpus: Some(devs.to_vec()),
        rank_base: 0,
        inter,
        fusion: settings.topo.nic_fusion.clone(),
        ..BuildOptions::default()
    };
    let sys = System::from_host_xml(host_xml, &node.source, &opts)?;
    if sys.count(NodeKind::Gpu) != devs.len() {
        let dev = devs
            .iter()
            .copied()
            .find(|&d| !(0..sys.count(NodeKind::Gpu)).any(|g| sys.gpu(g).dev == d))
            .unwrap_or(-1);
        return Err(PlanError::NoSuchGpu {
            comm: name.to_string(),
            host: h,
            file: node.source.clone(),
            dev,
        });
    }
    Ok(Topology::new(sys, &settings.topo))
}

/// Search a host's graphs on `topo` (CollNet only when a NET of the host supports it).
pub(super) fn search_topology(
    topo: Arc<Topology>,
    settings: &PlannerSettings,
    graph_file: Option<&topo::XmlElement>,
) -> Result<HostSearch> {
    let collnet = settings.collnet_enable
        && topo.system.inter
        && (0..topo.system.count(NodeKind::Net)).any(|n| {
            topo.system
                .node(topo.system.nodes(NodeKind::Net)[n])
                .net()
                .is_some_and(|x| x.coll)
        });
    search_host(
        topo,
        settings,
        graph_file,
        collnet,
        settings.graph_file.as_deref().unwrap_or(""),
    )
}

/// Local GPU index (in the host system) of each local rank label.
pub(super) fn local_gpu_of_label(sys: &System) -> Vec<usize> {
    let n = sys.count(NodeKind::Gpu);
    let mut v = vec![0; n];
    for g in 0..n {
        v[sys.gpu(g).rank as usize] = g;
    }
    v
}

/// `ncclTopoGetLocalNetCountByBw`: (count, bw).
pub(super) fn local_net_count_by_bw(topo: &Topology, g: usize) -> (usize, f32) {
    let gpu_bw = topo
        .local_cpu(g)
        .map(|c| {
            topo.path(topo.system.nodes(NodeKind::Gpu)[g], NodeKind::Cpu, c)
                .bw
        })
        .unwrap_or(0.0);
    let mut count = 0;
    let mut total = 0.0f32;
    for n in topo.local_net_cycle(g) {
        total += topo.gpu_net(g, n).bw;
        count += 1;
        if total >= gpu_bw {
            break;
        }
    }
    (count, total)
}

/// `getLocalNetCountByBw` as 2.20-2.28 count: the GPU's bandwidth is that of its link to a CPU
/// (the last one; 0 when it sits behind a PCI switch), and the closest NETs are taken in index
/// order while their total stays below it.
pub(super) fn local_net_count_by_bw_2_20(topo: &Topology, g: usize) -> usize {
    let sys = &topo.system;
    let gpu_bw = sys
        .links(sys.nodes(NodeKind::Gpu)[g])
        .filter(|(_, r, _)| sys.node(*r).kind == NodeKind::Cpu)
        .map(|(_, _, l)| l.bw)
        .last()
        .unwrap_or(0.0);
    let mut total = 0.0f32;
    let mut count = 0;
    for n in topo.get_local(NodeKind::Gpu, g, NodeKind::Net) {
        if total >= gpu_bw {
            break;
        }
        total += topo.gpu_net(g, n).bw;
        count += 1;
    }
    count
}
