//! Communicators: who the members are, how they reach each other, and how they are created
//! (`ncclCommInitRank*`, `ncclCommSplit`, `ncclCommShrink`; NCCL 2.30.7 `src/init.cc`).
//!
//! Every member is known as (host, simulated node, GPU): the host decides the data path (ranks
//! with the same host hash share memory), the simulated node and GPU are what the planner
//! plans on. The simulated node is `NCCLSIM_NODE` of the member's process when set, else the
//! index of its host in order of first appearance.

use crate::bootstrap::{self, Dec, Enc, Hub};
use crate::cuda::{self, DeviceIdentity};
use crate::error::{NcclError, Result};
use crate::host::HostGroup;
use crate::shm::PeerArenas;
use crate::types::CommConfig;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use topo::hash::fnv1a;

/// One member of a communicator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Host identity (NCCL's host hash: `NCCL_HOSTID`, else host name and boot id).
    pub host_hash: u64,
    /// Host name, for messages.
    pub hostname: String,
    /// Process id.
    pub pid: u32,
    /// CUDA device ordinal in its process.
    pub cuda_dev: i32,
    /// The device's physical index and PCI bus id.
    pub device: DeviceIdentity,
    /// Simulated node (for plans).
    pub node: i32,
    /// Address of its hub listener (meaningful for rank 0 only).
    pub hub_addr: SocketAddrV4,
}

impl Member {
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u64(self.host_hash)
            .str(&self.hostname)
            .u64(self.pid as u64)
            .i64(self.cuda_dev as i64)
            .i64(self.device.physical as i64);
        for w in self.device.pci {
            e.u64(w as u64);
        }
        e.i64(self.node as i64)
            .u64(u32::from(*self.hub_addr.ip()) as u64)
            .u64(self.hub_addr.port() as u64);
        e.0
    }

    fn decode(b: &[u8]) -> Result<Member> {
        let mut d = Dec::new(b);
        let host_hash = d.u64()?;
        let hostname = d.str()?;
        let pid = d.u64()? as u32;
        let cuda_dev = d.i64()? as i32;
        let physical = d.i64()? as i32;
        let mut pci = [0u32; 4];
        for w in &mut pci {
            *w = d.u64()? as u32;
        }
        let node = d.i64()? as i32;
        let ip = Ipv4Addr::from(d.u64()? as u32);
        let port = d.u64()? as u16;
        Ok(Member {
            host_hash,
            hostname,
            pid,
            cuda_dev,
            device: DeviceIdentity { physical, pci },
            node,
            hub_addr: SocketAddrV4::new(ip, port),
        })
    }
}

/// This process's host hash: `NCCL_HOSTID`, else the machine's host name and the kernel's
/// boot id. The kernel's name, not the one `gethostname` shows the program: simulated nodes of
/// one machine (each with its own name under `ncclsim run`) share memory.
pub fn host_hash() -> u64 {
    if let Ok(id) = std::env::var("NCCL_HOSTID") {
        return fnv1a(id.as_bytes());
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    fnv1a(format!("{}{}", crate::error::machine_name(), boot.trim()).as_bytes())
}

/// This process's simulated node (`NCCLSIM_NODE` of the run environment), if it was placed.
fn env_node() -> Option<i32> {
    fake_cuda_client::run_env().ok()?.node.map(|n| n as i32)
}

/// A communicator, as one rank holds it.
pub struct Comm {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub nranks: usize,
    /// CUDA device ordinal in this process.
    pub cuda_dev: i32,
    /// Every member, by rank.
    pub members: Vec<Member>,
    /// Random per-communicator magic (children derive theirs from it).
    pub magic: u64,
    /// Configuration.
    pub config: CommConfig,
    /// The hub connections (allgather for split and setup).
    pub hub: Mutex<Hub>,
    /// The data path's share: this host's ranks, their segment, links to other hosts, the
    /// numbering of operations (lent to `exec` by every operation).
    pub group: HostGroup,
    /// Set by `ncclCommAbort` (shared with `group`).
    pub abort: Arc<AtomicBool>,
    /// First asynchronous error (`ncclCommGetAsyncError`).
    pub async_error: AtomicI32,
    /// When the operations enqueued so far complete, which `ncclCommFinalize` waits for.
    pub done: crate::clock::Completion,
    /// Children made by split/shrink (NCCL's childCount).
    pub child_count: AtomicU32,
    /// PreMulSum operations created on this communicator.
    pub redops: Mutex<crate::ops::RedOps>,
    /// NCCL's plan and cost model for this communicator (None with the simulation off).
    pub sim: Option<Arc<crate::sim::CommSim>>,
    /// The `ncclComm_t` the program holds for it.
    pub handle: usize,
    /// Set when an operation could not be priced (reported once).
    pub prediction_failed: AtomicBool,
    /// This rank's count in the bootstrap root of its unique id, when this process runs that
    /// root: while held, the root refuses late peers with the reason.
    pub root_member: Option<bootstrap::RootMember>,
    /// The members' job ranks and representatives when some are virtual (a folded job): the
    /// data path (`group`, `hub`) then holds the real members only.
    pub fold: Option<Arc<crate::fold::Folding>>,
}

impl Comm {
    /// Reports that the cost model could not price an operation (it then takes no simulated
    /// time): a warning, the first time on this communicator.
    pub fn prediction_failed(&self, kind: crate::types::Collective, e: &dyn std::fmt::Display) {
        if !self.prediction_failed.swap(true, Ordering::Relaxed) {
            crate::error::warn(&format!(
                "comm {:#x} rank {}: {} has no predicted time ({e}); operations the model cannot price take no simulated time (reported once per communicator)",
                self.magic,
                self.rank,
                kind.nccl_name()
            ));
        }
    }

    /// Number of distinct hosts.
    pub fn host_count(&self) -> usize {
        let mut h: Vec<u64> = self.members.iter().map(|m| m.host_hash).collect();
        h.sort_unstable();
        h.dedup();
        h.len()
    }

    /// NCCL's Init COMPLETE line for this rank, as `api` made it; `more` goes before
    /// `- Init COMPLETE` (the commId, or a split's parent, color and key).
    fn log_init_complete(&self, api: &str, more: std::fmt::Arguments) {
        let me = &self.members[self.rank].device;
        crate::error::info(&format!(
            "{api} comm {:#x} rank {} nranks {} cudaDev {} nvmlDev {} busId {:x} {more} - Init COMPLETE",
            self.handle,
            self.rank,
            self.nranks,
            self.cuda_dev,
            me.physical,
            me.bus_id_int(),
        ));
    }
}

/// What a rank brings to a communicator it joins.
pub struct Joining {
    /// Rank in the new communicator.
    pub rank: usize,
    /// Its size.
    pub nranks: usize,
    /// CUDA device ordinal.
    pub cuda_dev: i32,
    /// Configuration.
    pub config: CommConfig,
    /// The communicator's abort flag (set by `ncclCommAbort`, also during init).
    pub abort: Arc<AtomicBool>,
    /// The `ncclComm_t` the program gets (what NCCL's `comm %p` log fields show).
    pub handle: usize,
    /// The call that creates the communicator (`ncclCommInitRank`, ...), as NCCL's Init
    /// COMPLETE line names it.
    pub api: &'static str,
}

fn my_member(cuda_dev: i32, hub_addr: SocketAddrV4) -> Result<Member> {
    Ok(Member {
        host_hash: host_hash(),
        hostname: crate::error::host_name().to_string(),
        pid: std::process::id(),
        cuda_dev,
        device: cuda::device_identity(cuda_dev)?,
        node: env_node().unwrap_or(-1),
        hub_addr,
    })
}

/// Fills simulated nodes left unset (-1) with the member's host index.
fn assign_nodes(members: &mut [Member]) {
    let mut hosts: Vec<u64> = Vec::new();
    for m in members.iter_mut() {
        let idx = match hosts.iter().position(|h| *h == m.host_hash) {
            Some(i) => i,
            None => {
                hosts.push(m.host_hash);
                hosts.len() - 1
            }
        };
        if m.node < 0 {
            m.node = idx as i32;
        }
    }
}

fn check_members(members: &[Member]) -> Result<()> {
    for (i, a) in members.iter().enumerate() {
        for (j, b) in members.iter().enumerate().skip(i + 1) {
            if a.node == b.node
                && a.host_hash == b.host_hash
                && a.device.physical == b.device.physical
            {
                return Err(NcclError::invalid_usage(format!(
                    "Duplicate GPU detected : rank {i} and rank {j} both on CUDA device {} (bus id {}) of node {}",
                    a.device.physical,
                    a.device.bus_id(),
                    a.node
                )));
            }
        }
    }
    Ok(())
}

/// The other processes of `rank`'s host among `members`: (first rank, pid, host name).
fn local_processes(members: &[Member], rank: usize) -> Vec<(usize, u32, String)> {
    let mut out: Vec<(usize, u32, String)> = Vec::new();
    for (r, m) in members.iter().enumerate() {
        if m.host_hash == members[rank].host_hash
            && m.pid != std::process::id()
            && !out.iter().any(|p| p.1 == m.pid)
        {
            out.push((r, m.pid, m.hostname.clone()));
        }
    }
    out
}

/// An offer of a descriptor to the members, withdrawn when dropped.
struct Offer((u32, u64));

impl Drop for Offer {
    fn drop(&mut self) {
        crate::cuda::fd_withdraw(self.0 .0);
    }
}

/// Creates a communicator once every member's info is known (`members`) and the hub is
/// formed: sets up this host's shared segment.
fn assemble(
    j: Joining,
    mut members: Vec<Member>,
    magic: u64,
    mut hub: Hub,
    folding: Option<crate::fold::Folding>,
) -> Result<Comm> {
    assign_nodes(&mut members);
    check_members(&members)?;
    let me = &members[j.rank];
    let local_ranks: Vec<usize> = (0..j.nranks)
        .filter(|&r| members[r].host_hash == me.host_hash)
        .collect();
    let index = local_ranks
        .iter()
        .position(|&r| r == j.rank)
        .expect("invariant: a rank is on its own host");
    let len = crate::exec::segment_len(local_ranks.len());
    // The host's first rank creates the segment and offers its descriptor to the members (the
    // core's descriptor broker); everyone learns (pid, key, secret) through the hub, and the
    // others receive the descriptor from the creator.
    let created = if index == 0 {
        let m = crate::shm::create("ncclsim-comm", len)?;
        crate::exec::init_segment(&m, magic, local_ranks.len());
        let fd = m
            .fd()
            .ok_or_else(|| NcclError::internal("a created segment has a descriptor"))?;
        let offer = Offer(crate::cuda::fd_offer(fd)?);
        Some((m, offer))
    } else {
        None
    };
    let mut mine = Enc::default();
    if let Some((_, Offer((key, secret)))) = &created {
        mine.u64(std::process::id() as u64)
            .u64(u64::from(*key))
            .u64(*secret);
    }
    let all = hub.allgather(&mine.0)?;
    let (opened, offer) = match created {
        Some((m, offer)) => (Ok(m), Some(offer)),
        None => (
            (|| {
                let mut d = Dec::new(&all[local_ranks[0]]);
                let (pid, key, secret) = (d.u64()? as u32, d.u64()? as u32, d.u64()?);
                let m = crate::shm::open_peer(pid, key, secret, Some(len), "ncclsim-comm")?;
                crate::exec::check_segment(&m, magic, local_ranks.len())?;
                Ok(m)
            })(),
            None,
        ),
    };
    // No rank leaves init before every rank of its host mapped the segment: the creator could
    // otherwise destroy the communicator, closing the descriptor the others fetch. A rank that
    // could not map it fails every rank alike. Then the offer ends: nobody else may fetch it.
    let mut flag = Enc::default();
    flag.u64(u64::from(opened.is_ok()));
    let flags = hub.allgather(&flag.0);
    drop(offer);
    let flags = flags?;
    let segment = opened?;
    if let Some(r) = flags.iter().position(|b| Dec::new(b).u64().ok() != Some(1)) {
        return Err(NcclError::remote(format!(
            "rank {r} could not map its host's communicator segment"
        )));
    }
    let remote: Vec<bool> = members
        .iter()
        .map(|m| m.host_hash != members[j.rank].host_hash)
        .collect();
    let links = if remote.iter().any(|&r| r) {
        crate::net::Links::connect(&mut hub, magic, j.rank, &remote)?
    } else {
        crate::net::Links::none(j.nranks)
    };
    let processes = local_processes(&members, j.rank);
    let shares_with_processes = local_ranks
        .iter()
        .any(|&r| members[r].pid != std::process::id());
    // The program's communicator: every member, virtual ones as their place in the job.
    let (rank, nranks, full) = match &folding {
        Some(f) => (f.real[j.rank], f.global.len(), full_members(&members, f)?),
        None => (j.rank, j.nranks, members),
    };
    let sim = simulate(&full, rank, magic, &j.config, j.handle);
    let group = HostGroup {
        rank: j.rank,
        nranks: j.nranks,
        cuda_dev: j.cuda_dev,
        shares_with_processes,
        ranks: local_ranks,
        index,
        segment,
        processes: Arc::new(processes),
        peers: Mutex::new(PeerArenas::default()),
        links,
        op_seq: AtomicU64::new(0),
        p2p_counts: Mutex::new((vec![0; j.nranks], vec![0; j.nranks])),
        abort: j.abort.clone(),
    };
    Ok(Comm {
        sim,
        handle: j.handle,
        rank,
        nranks,
        cuda_dev: j.cuda_dev,
        members: full,
        magic,
        config: j.config,
        hub: Mutex::new(hub),
        group,
        abort: j.abort,
        async_error: AtomicI32::new(0),
        done: Default::default(),
        child_count: AtomicU32::new(0),
        redops: Mutex::new(Default::default()),
        prediction_failed: AtomicBool::new(false),
        root_member: None,
        fold: folding.map(Arc::new),
    })
}

/// Every member of a folded communicator: the real ones as they joined, each virtual one on
/// its job rank's node (`NCCLSIM_NODES` nodes of equal size) and GPU (its representative's
/// GPU shifted by their distance within the node when the representative's GPU is its local
/// rank, else the same GPU), as a process of no host here.
fn full_members(real: &[Member], f: &crate::fold::Folding) -> Result<Vec<Member>> {
    let env = fake_cuda_client::run_env().map_err(|e| NcclError::invalid_usage(e.to_string()))?;
    let job = env
        .fold
        .as_ref()
        .map_or(f.global.len(), run_env::Fold::ranks);
    let per = (job / env.nodes.unwrap_or(1).max(1)).max(1);
    Ok((0..f.global.len())
        .map(|m| {
            let r = &real[f.inner[m]];
            if f.rep[m] == m {
                return r.clone();
            }
            let (g, p) = (f.global[m], f.global[f.rep[m]]);
            let node = (g / per) as i32;
            let mut v = r.clone();
            if r.device.physical as usize == p % per {
                v.device.physical = (g % per) as i32;
            }
            v.node = node;
            v.pid = 0;
            v.host_hash = topo::hash::fnv1a(format!("virtual node {node}").as_bytes());
            v.hostname = format!("virtual-node{node}");
            v
        })
        .collect())
}

/// Plans the communicator on the simulated hardware, prints NCCL's init lines for this rank
/// (`NCCL_DEBUG=INFO`) and writes `NCCL_GRAPH_DUMP_FILE` on `NCCL_GRAPH_DUMP_FILE_RANK`
/// (default 0). A communicator that cannot be planned still runs, without predictions.
fn simulate(
    members: &[Member],
    rank: usize,
    magic: u64,
    config: &CommConfig,
    handle: usize,
) -> Option<Arc<crate::sim::CommSim>> {
    let sim = crate::sim::sim()?;
    let m: Vec<(usize, i32)> = members
        .iter()
        .map(|m| (m.node.max(0) as usize, m.device.physical))
        .collect();
    let name = config.comm_name.clone().unwrap_or_else(|| "comm".into());
    match sim.plan(&m, &name) {
        Ok(c) => {
            crate::report::comm_planned(magic, rank, &c.plan);
            if crate::error::level() >= crate::error::Level::Info {
                for line in sim.info_lines(&c, rank, handle as u64) {
                    crate::error::info(&line);
                }
            }
            if crate::trace::enabled() {
                let g = &c.plan.graphs;
                let args = crate::trace::args(serde_json::json!({
                    "comm": format!("{magic:#x}"),
                    "rank": rank,
                    "nranks": m.len(),
                    "nodes": c.plan.n_nodes,
                    "members": m,
                    "ring_channels": g.ring.n_channels,
                    "tree_channels": g.tree.n_channels,
                    "coll_channels": c.plan.n_channels,
                }));
                crate::trace::instant("comm_init", crate::clock::SimTime::ZERO, &args);
            }
            let topo_rank = std::env::var("NCCL_TOPO_DUMP_FILE_RANK")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0usize);
            if let (Ok(path), true) = (std::env::var("NCCL_TOPO_DUMP_FILE"), rank == topo_rank) {
                let nodes = m.iter().map(|x| x.0).max().unwrap_or(0) + 1;
                let written = sim.topo_dump(nodes).and_then(|x| {
                    std::fs::write(&path, x).map_err(|e| NcclError::system(&path, e))
                });
                if let Err(e) = written {
                    crate::error::warn(&format!("NCCL_TOPO_DUMP_FILE {path}: {e}"));
                }
            }
            let dump_rank = std::env::var("NCCL_GRAPH_DUMP_FILE_RANK")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0usize);
            if let (Ok(path), true) = (std::env::var("NCCL_GRAPH_DUMP_FILE"), rank == dump_rank) {
                let node = c.plan.ranks[rank].node;
                if let Some(search) = c.plan.searches.get(node) {
                    if let Some(t) = search.topo.as_ref() {
                        let xml = planner::graph_xml::graphs_to_xml(search, &t.system);
                        if let Err(e) = std::fs::write(&path, topo::xml::write(&xml)) {
                            crate::error::warn(&format!("NCCL_GRAPH_DUMP_FILE {path}: {e}"));
                        }
                    }
                }
            }
            Some(c)
        }
        Err(e) => {
            crate::error::warn(&format!("no plan for this communicator: {e}"));
            None
        }
    }
}

/// `ncclCommInitRank`: joins the communicator of `id` as `j.rank`.
pub fn init_rank(id: &crate::types::UniqueId, j: Joining) -> Result<Comm> {
    if j.nranks == 0 || j.rank >= j.nranks {
        return Err(NcclError::invalid_argument(format!(
            "rank {} is not in 0..{} (nranks)",
            j.rank, j.nranks
        )));
    }
    let (magic, _) = bootstrap::decode_id(id)?;
    let joined = join(id, j);
    if joined.is_err() {
        // Ranks waiting on a root this process runs learn of the failure now, not at the
        // deadline.
        bootstrap::stop_root(magic);
    }
    joined
}

fn join(id: &crate::types::UniqueId, j: Joining) -> Result<Comm> {
    let (magic, root) = bootstrap::decode_id(id)?;
    // With NCCL_COMM_ID, rank 0 runs the root at that address (no ncclGetUniqueId thread).
    if magic == bootstrap::NCCL_MAGIC && j.rank == 0 {
        if let Some(at) = bootstrap::comm_id_env()? {
            if at == root {
                let l = bootstrap::listen(Some(at))?;
                bootstrap::spawn_root(l, magic);
            }
        }
    }
    let name = j.config.comm_name.clone().unwrap_or_else(|| "comm".into());
    let folding = match crate::fold::members_of(j.nranks, j.rank)? {
        Some((fold, global)) => crate::fold::Folding::of(fold, &global, &name)?,
        None => None,
    };
    if let Some(f) = &folding {
        if f.rep[j.rank] != j.rank {
            return Err(NcclError::invalid_usage(format!(
                "rank {} of {name} is virtual under the job's fold: it has no process",
                j.rank
            )));
        }
    }
    // The real members meet as a communicator of their own (the data path's).
    let (irank, in_n) = folding
        .as_ref()
        .map_or((j.rank, j.nranks), |f| (f.inner[j.rank], f.real.len()));
    cuda::set_device(j.cuda_dev)?;
    let listener = if irank == 0 {
        Some(bootstrap::listen(None)?)
    } else {
        None
    };
    let hub_addr = match &listener {
        Some(l) => bootstrap::local_addr(l)?,
        None => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
    };
    let me = my_member(j.cuda_dev, hub_addr)?;
    let root_member = bootstrap::RootMember::join(magic);
    let table = bootstrap::exchange_with_root(root, magic, irank, in_n, &me.encode(), &j.abort)?;
    let members = table
        .iter()
        .map(|b| Member::decode(b))
        .collect::<Result<Vec<_>>>()?;
    // NCCLSIM_TEST_KILL_IN_INIT=R (tests only: cargo feature `fault-injection`, and debug
    // builds, see `Cargo.toml`): rank R's process kills itself (SIGKILL) between the root's
    // table and the hub, so tests can lose a rank mid-init.
    #[cfg(any(feature = "fault-injection", debug_assertions))]
    if std::env::var("NCCLSIM_TEST_KILL_IN_INIT").is_ok_and(|v| v.trim() == j.rank.to_string()) {
        // SAFETY: raising a signal has no memory effects.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    let hub = Hub::form(
        listener,
        members[0].hub_addr,
        magic,
        (irank, in_n),
        local_processes(&members, irank),
        &j.abort,
    )?;
    let api = j.api;
    let inner = Joining {
        rank: irank,
        nranks: in_n,
        ..j
    };
    let mut comm = assemble(inner, members, magic, hub, folding)?;
    comm.root_member = root_member;
    comm.log_init_complete(api, format_args!("commId {:#x}", comm.magic));
    Ok(comm)
}

mod split;
pub use split::split;
