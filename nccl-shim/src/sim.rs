//! The simulation a communicator carries: NCCL's plan for its members on the simulated
//! hardware (the planner, exactly as `ncclsim plan` runs it) and the cost model that prices
//! each of its operations (`ncclsim predict`'s model), so every call gets NCCL's algorithm,
//! protocol, channels and a predicted time.
//!
//! The hardware is the node topology the fake CUDA core reads (`NCCLSIM_TOPO`, else
//! `NCCL_TOPO_FILE`, else the bundled DGX A100), one copy per simulated node; NCCL's
//! environment variables act as in `ncclsim plan`/`predict` (`NCCL_MNNVL_*` included: nodes
//! whose NVLinks go to an external NVSwitch fabric form NVLink domains of up to 72 GPUs, or of
//! `NCCLSIM_NVL_DOMAIN` GPUs, and communicators spanning them are planned as multi-node
//! NVLink cliques, as on an NVL72 rack); `NCCLSIM_MODEL=calibrated`
//! selects the calibrated times; `NCCLSIM_SIM=0` turns the simulation off.

use crate::error::{self, NcclError, Result};
use cost_model::types::{Collective, DataType, RedOp};
use cost_model::{CostModel, Mode, Prediction, TunerSettings};
use planner::{CommPlan, Member, Planner, PlannerSettings};
use run_env::RunEnv;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use topo::cluster::{Cluster, Completion};

/// A communicator's plan and model.
pub struct CommSim {
    /// NCCL's plan for the communicator.
    pub plan: CommPlan,
    /// Its tuning model.
    pub model: CostModel,
}

/// Plans by member list ((simulated node, physical GPU) per rank).
type PlanCache = HashMap<Vec<(usize, i32)>, Arc<CommSim>>;

/// The process's simulation settings and caches.
pub struct Sim {
    source: String,
    xml: Arc<topo::XmlElement>,
    planner: PlannerSettings,
    tuner: TunerSettings,
    mode: Mode,
    /// The GPU model completing a skeleton node file (`NCCLSIM_GPU`).
    gpu: Option<&'static topo::profiles::GpuModel>,
    nvl_domains: topo::NvlDomains,
    planners: Mutex<HashMap<usize, Arc<Planner>>>,
    comms: Mutex<PlanCache>,
}

fn load(env: &RunEnv) -> Result<Sim> {
    let (source, xml) = match &env.topo {
        Some(path) => {
            let path = path.to_string_lossy().into_owned();
            let xml = topo::read_xml(&path).map_err(|e| NcclError::invalid_usage(e.to_string()))?;
            (path, xml)
        }
        None => (
            format!("{} (bundled)", fake_cuda_abi::BUNDLED_NAME),
            topo::xml::parse(fake_cuda_abi::BUNDLED_XML, "dgx-a100.xml")
                .map_err(|e| NcclError::internal(e.to_string()))?,
        ),
    };
    let planner =
        PlannerSettings::from_env().map_err(|e| NcclError::invalid_argument(e.to_string()))?;
    let tuner =
        TunerSettings::from_env().map_err(|e| NcclError::invalid_argument(e.to_string()))?;
    let mode = match env.model {
        run_env::Model::Calibrated => Mode::Calibrated,
        run_env::Model::Nccl => Mode::Nccl,
    };
    let gpu = match &env.gpu_model {
        Some(g) => Some(
            topo::profiles::gpu_model(g)
                .map_err(|e| NcclError::invalid_argument(format!("NCCLSIM_GPU: {e}")))?,
        ),
        None => None,
    };
    Ok(Sim {
        source,
        gpu,
        nvl_domains: topo::mnnvl::domains_of(env.nvl_domain),
        xml: Arc::new(xml),
        planner,
        tuner,
        mode,
        planners: Mutex::new(HashMap::new()),
        comms: Mutex::new(HashMap::new()),
    })
}

/// Whether the job computes nothing (`--compute time`: torch ops take their time and write
/// no values).
fn dataless() -> bool {
    static D: OnceLock<bool> = OnceLock::new();
    *D.get_or_init(|| {
        fake_cuda_client::run_env().is_ok_and(|e| e.compute == Some(run_env::Compute::Time))
    })
}

/// The most bytes a buffer of an operation may have for its data to move under
/// `--compute time`.
pub const MOVED_UNDER_COMPUTE_TIME: usize = 64 << 10;

/// Whether an operation whose largest buffer on any rank is `bytes` moves its data. Under
/// `--compute time` device buffers mostly hold no defined values (ops compute nothing), so
/// large operations only meet their ranks and take their predicted time, moving nothing and
/// committing no host memory; small ones still move their bytes, because programs exchange
/// host-made values through them (a barrier's flag, a loss or a timing gathered on every rank,
/// DDP's parameter-shape check), and those are defined: they were copied from the host.
/// Every rank decides alike: it depends only on the call's arguments.
pub fn moves_data(bytes: usize) -> bool {
    !dataless() || bytes <= MOVED_UNDER_COMPUTE_TIME
}

/// The largest buffer of collective `kind` of `count` elements of `dtype` on `nranks` ranks,
/// in bytes (the root's, for rooted ones).
pub fn largest_buffer(
    kind: crate::types::Collective,
    count: usize,
    dtype: crate::types::DataType,
    nranks: usize,
) -> usize {
    let (s, r) = kind.extents(count, nranks, 0, 0);
    s.max(r).saturating_mul(dtype.size())
}

/// The process's simulation, or None when it is off or cannot load (said once).
pub fn sim() -> Option<&'static Sim> {
    static S: OnceLock<Option<Sim>> = OnceLock::new();
    S.get_or_init(|| {
        let env = match fake_cuda_client::run_env() {
            Ok(env) => env,
            Err(e) => {
                error::warn(&format!("simulation off: {e}"));
                return None;
            }
        };
        if !env.sim {
            return None;
        }
        match load(env) {
            Ok(s) => Some(s),
            Err(e) => {
                error::warn(&format!("simulation off: {e}"));
                None
            }
        }
    })
    .as_ref()
}

impl Sim {
    /// The planner of `nodes` simulated nodes (it keeps its host searches for later
    /// communicators).
    fn planner(&self, nodes: usize) -> Result<Arc<Planner>> {
        let mut m = self
            .planners
            .lock()
            .map_err(|_| NcclError::internal("planner cache poisoned"))?;
        if let Some(p) = m.get(&nodes) {
            return Ok(p.clone());
        }
        let hosts: Vec<(String, Arc<topo::XmlElement>)> = (0..nodes)
            .map(|_| (self.source.clone(), self.xml.clone()))
            .collect();
        let mut cluster = Cluster::from_hosts(
            &hosts,
            &self.planner.topo,
            Completion {
                gpu: self.gpu,
                nic_speed_mbps: None,
            },
        )
        .map_err(|e| NcclError::invalid_usage(format!("{}: {e}", self.source)))?;
        // The NVLink domains the fake NVML reports as GPU fabric information: as `ncclsim plan`
        // groups the nodes (`NCCLSIM_NVL_DOMAIN` for its `--nvl-domain`). Nodes are packed in
        // order, so planning fewer nodes than the job has gives the first ones the same domains.
        cluster
            .set_nvl_domains(self.nvl_domains)
            .map_err(|e| NcclError::invalid_usage(format!("{}: {e}", self.source)))?;
        let p = Arc::new(Planner::new(cluster, self.planner.clone()));
        m.insert(nodes, p.clone());
        Ok(p)
    }

    /// Plans a communicator whose rank r is GPU `members[r].1` (physical index) of simulated
    /// node `members[r].0`; cached per member list.
    pub fn plan(&self, members: &[(usize, i32)], name: &str) -> Result<Arc<CommSim>> {
        if let Some(c) = self
            .comms
            .lock()
            .map_err(|_| NcclError::internal("plan cache poisoned"))?
            .get(members)
        {
            return Ok(c.clone());
        }
        let nodes = members.iter().map(|m| m.0).max().unwrap_or(0) + 1;
        let planner = self.planner(nodes)?;
        // Physical index i is the i-th GPU of the node in `dev` order (the core's numbering).
        let devs = planner.host_devs();
        let pm = members
            .iter()
            .map(|&(node, phys)| {
                let dev = devs.get(phys as usize).copied().ok_or_else(|| {
                    NcclError::invalid_usage(format!(
                        "GPU {phys} is not in {} ({} GPUs)",
                        self.source,
                        devs.len()
                    ))
                })?;
                Ok(Member { host: node, dev })
            })
            .collect::<Result<Vec<_>>>()?;
        let plan = planner
            .plan(&pm, name, None)
            .map_err(|e| NcclError::invalid_usage(e.to_string()))?;
        let model = CostModel::from_plan(&plan, &self.tuner, self.mode)
            .map_err(|e| NcclError::invalid_usage(e.to_string()))?;
        let c = Arc::new(CommSim { plan, model });
        self.comms
            .lock()
            .map_err(|_| NcclError::internal("plan cache poisoned"))?
            .insert(members.to_vec(), c.clone());
        Ok(c)
    }

    /// The node topology XML NCCL writes to `NCCL_TOPO_DUMP_FILE` (after completion), as
    /// `ncclsim topo dump` prints it.
    pub fn topo_dump(&self, nodes: usize) -> Result<String> {
        let p = self.planner(nodes.max(1))?;
        Ok(topo::xml::write(&p.cluster().nodes[0].xml))
    }

    /// The INFO lines NCCL prints at init for `rank` (graphs, rings, trees, tuning), as
    /// `ncclsim plan --format info --rank R` prints them.
    pub fn info_lines(&self, c: &CommSim, rank: usize, comm: u64) -> Vec<String> {
        c.model.init_info_lines(&c.plan, rank, comm)
    }
}

/// The last collective priced on a thread and its price.
struct LastPrice {
    /// Held, so the address cannot be another communicator's while it is kept here.
    comm: Arc<CommSim>,
    call: (Collective, usize, DataType, i32, usize),
    price: Prediction,
}

thread_local! {
    static LAST: std::cell::RefCell<Option<LastPrice>> = const { std::cell::RefCell::new(None) };
}

/// [`predict`] of a communicator's collective, answered without the model when it repeats the
/// thread's last priced one (loops issue the same collective call after call; a price depends
/// only on the communicator's model and the call). A call the model cannot price is not kept.
pub fn predict_repeated(
    c: &Arc<CommSim>,
    kind: Collective,
    count: usize,
    dtype: DataType,
    op: i32,
    nranks: usize,
) -> std::result::Result<Prediction, cost_model::CostError> {
    let call = (kind, count, dtype, op, nranks);
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some(l) = last
            .as_ref()
            .filter(|l| Arc::ptr_eq(&l.comm, c) && l.call == call)
        {
            return Ok(l.price.clone());
        }
        let price = predict(c, kind, count, dtype, op, nranks)?;
        *last = Some(LastPrice {
            comm: c.clone(),
            call,
            price: price.clone(),
        });
        Ok(price)
    })
}

/// The cost model's view of a collective call: its collective and its nccl-tests size. An
/// error names what the model could not price.
pub fn predict(
    c: &CommSim,
    kind: Collective,
    count: usize,
    dtype: DataType,
    op: i32,
    nranks: usize,
) -> std::result::Result<Prediction, cost_model::CostError> {
    let per_rank = count as u64 * dtype.size() as u64;
    let bytes = match kind {
        Collective::AllReduce | Collective::Reduce | Collective::Broadcast => per_rank,
        _ => per_rank * nranks as u64,
    };
    c.model
        .predict(kind, bytes, dtype, RedOp::from_nccl(op as i64))
}

/// The price of a group's sends and receives: NCCL runs them concurrently on its p2p channels,
/// so the batch lasts as long as its largest direction, priced by where each peer is (NVLink or
/// PCIe inside the node, the network outside).
pub fn predict_p2p(c: &CommSim, sides: (u64, u64)) -> Prediction {
    c.model.predict_peers(sides.0, sides.1)
}

/// A group's bytes with peers on this rank's node and with peers elsewhere, each side the
/// larger of what is sent and what is received (the two directions travel on separate
/// channels).
pub fn p2p_sides(
    members: &[crate::comm::Member],
    rank: usize,
    ops: &[crate::ops::P2p],
) -> (u64, u64) {
    let me = members[rank].node;
    let (mut sent, mut recv) = ([0u64; 2], [0u64; 2]);
    for o in ops {
        let remote = usize::from(members.get(o.peer).is_some_and(|m| m.node != me));
        let side = if o.send { &mut sent } else { &mut recv };
        side[remote] += o.bytes as u64;
    }
    (sent[0].max(recv[0]), sent[1].max(recv[1]))
}

/// `ncclGroupSimulateEnd`'s estimate (µs) for a group's operations: each communicator's
/// collectives as NCCL groups and tunes them (`estimatedTime` is the last aggregate's time, as
/// NCCL leaves it); 0 without the simulation or collectives. `ops` are the group's operations,
/// each with its communicator (any key that tells communicators apart) and that communicator's
/// simulation.
pub fn simulate_group(ops: &[(usize, Option<&CommSim>, &crate::ops::Op)]) -> Result<f64> {
    use crate::ops::Op;
    let mut t = 0.0;
    let mut done: Vec<usize> = Vec::new();
    for &(key, sim, _) in ops {
        if done.contains(&key) {
            continue;
        }
        done.push(key);
        let Some(sim) = sim else {
            continue;
        };
        let group: Vec<cost_model::GroupOp> = ops
            .iter()
            .filter(|(k, _, _)| *k == key)
            .filter_map(|(_, _, o)| match o {
                // NCCL groups and tunes only its tuned functions.
                Op::Coll(c) if c.kind.func().is_some() => Some(cost_model::GroupOp {
                    coll: c.kind,
                    count: c.count as u64,
                    dtype: c.dtype,
                    op: RedOp::from_nccl(c.op as i64),
                }),
                Op::Coll(_) => None,
                Op::P2p(_) => None,
            })
            .collect();
        if group.is_empty() {
            continue;
        }
        let est = sim
            .model
            .simulate_group(&group)
            .map_err(|e| NcclError::internal(e.to_string()))?;
        t = est.nccl_estimated_time_us;
    }
    Ok(t)
}
