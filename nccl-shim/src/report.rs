//! The end-of-run report's NCCL part: per communicator this process belongs to (its id, size,
//! rank and plan summary) and per operation, the calls, bytes, predicted communication time,
//! time spent waiting for other ranks and share of the process's predicted total.
//!
//! The fake CUDA core owns the report file (`NCCLSIM_REPORT=FILE`, `%h` host and `%p` pid
//! replaced as in `NCCL_DEBUG_FILE`; its devices' current and peak memory, API call counts):
//! this module hands it an `nccl` section through the core's vtable, at every
//! `ncclCommDestroy`/`ncclCommFinalize` (the file is written then) and at exit, so one JSON
//! file holds both and the core knows nothing of NCCL. With `NCCL_DEBUG=INFO` the same report
//! is printed as INFO lines at exit, with the peak memory of each visible GPU.
//!
//! Operations are counted when they run: a captured operation at each replay of its graph.

use crate::clock::SimDuration;
use crate::trace::round3;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// One communicator of this process, as planned; its fields in the order the `nccl` section
/// gives them.
#[derive(Serialize)]
struct CommEntry {
    name: String,
    nranks: usize,
    rank: usize,
    nodes: usize,
    coll_channels: usize,
    ring_channels: i32,
    tree_channels: i32,
    nvls_channels: usize,
    p2p_channels: usize,
    destroyed: bool,
    /// Per operation name: calls, bytes, predicted ns, waited ns.
    #[serde(skip)]
    ops: BTreeMap<&'static str, [u64; 4]>,
}

/// Communicators by (id, rank): a process may hold several ranks of one communicator.
type Registry = BTreeMap<(u64, usize), CommEntry>;

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Whether the run environment names a report file (`NCCLSIM_REPORT`).
fn report_asked() -> bool {
    fake_cuda_client::run_env().is_ok_and(|e| e.report.is_some())
}

/// Whether a report is asked for (`NCCLSIM_REPORT`, or `NCCL_DEBUG=INFO`).
pub fn enabled() -> bool {
    static E: OnceLock<bool> = OnceLock::new();
    *E.get_or_init(|| report_asked() || crate::error::level() >= crate::error::Level::Info)
}

extern "C" fn at_exit() {
    ffi_boundary::callback::<crate::error::NcclError, ()>(
        "at_exit",
        || (),
        || {
            publish(true);
            if crate::error::level() >= crate::error::Level::Info {
                for line in text_lines() {
                    crate::error::info(&line);
                }
            }
        },
    );
}

/// Records a planned communicator (at init).
pub fn comm_planned(magic: u64, rank: usize, plan: &planner::CommPlan) {
    if !enabled() {
        return;
    }
    static AT_EXIT: OnceLock<()> = OnceLock::new();
    AT_EXIT.get_or_init(|| {
        // SAFETY: registering a plain extern "C" function; libnccl.so.2 stays loaded until
        // exit once a communicator exists (its handles point into it). The fake CUDA core
        // registered its own exit handler when it started, before any communicator, so this
        // one runs first and the core's writes the final report after it.
        unsafe { libc::atexit(at_exit) };
    });
    let e = CommEntry {
        nranks: plan.n_ranks,
        rank,
        nodes: plan.n_nodes,
        name: plan.name.clone(),
        coll_channels: plan.n_channels,
        ring_channels: plan.graphs.ring.n_channels,
        tree_channels: plan.graphs.tree.n_channels,
        nvls_channels: plan.nvls_channels,
        p2p_channels: plan.p2p_channels,
        destroyed: false,
        ops: BTreeMap::new(),
    };
    if let Ok(mut r) = registry().lock() {
        r.insert((magic, rank), e);
    }
}

/// Counts one operation that ran: its bytes, predicted and waited virtual time.
pub fn op_ran(
    magic: u64,
    rank: usize,
    op: &'static str,
    bytes: u64,
    predicted: SimDuration,
    waited: SimDuration,
) {
    if !enabled() {
        return;
    }
    if let Ok(mut r) = registry().lock() {
        if let Some(e) = r.get_mut(&(magic, rank)) {
            let t = e.ops.entry(op).or_default();
            t[0] += 1;
            t[1] += bytes;
            t[2] += predicted.as_nanos();
            t[3] += waited.as_nanos();
        }
    }
}

/// A communicator rank ends (`ncclCommDestroy`, `ncclCommFinalize`): the
/// report is written now, so it exists even if the process does not exit normally later.
pub fn comm_ended(magic: u64, rank: usize, destroyed: bool) {
    if !enabled() {
        return;
    }
    if let Ok(mut r) = registry().lock() {
        if let Some(e) = r.get_mut(&(magic, rank)) {
            e.destroyed |= destroyed;
        }
    }
    publish(true);
}

/// Hands the `nccl` section to the core (written to the file now with `write`).
fn publish(write: bool) {
    if !report_asked() {
        return;
    }
    let json = section_json();
    if let Err(e) = crate::cuda::report_section("nccl", &json, write) {
        crate::error::warn(&format!("NCCLSIM_REPORT: {e}"));
    }
}

fn total_ns(r: &Registry) -> u64 {
    r.values().flat_map(|e| e.ops.values()).map(|t| t[2]).sum()
}

/// Nanoseconds summed in the registry as microseconds.
fn micros(ns: u64) -> f64 {
    SimDuration::from_nanos(ns).as_micros_f64()
}

fn share(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        100.0 * part as f64 / total as f64
    }
}

/// One operation of a communicator in the `nccl` section.
#[derive(Serialize)]
struct OpJson<'a> {
    op: &'a str,
    calls: u64,
    bytes: u64,
    predicted_us: f64,
    waited_us: f64,
    share_pct: f64,
}

/// One communicator rank in the `nccl` section.
#[derive(Serialize)]
struct CommJson<'a> {
    comm: String,
    #[serde(flatten)]
    entry: &'a CommEntry,
    calls: u64,
    bytes: u64,
    predicted_us: f64,
    share_pct: f64,
    ops: Vec<OpJson<'a>>,
}

/// The `nccl` section.
#[derive(Serialize)]
struct SectionJson<'a> {
    communicators: Vec<CommJson<'a>>,
    predicted_us: f64,
    /// A folded job: which ranks ran and which were virtual.
    #[serde(skip_serializing_if = "Option::is_none")]
    fold: Option<FoldJson>,
}

/// A folded job as this process saw it: the mesh, the folded dimensions, the job's ranks, the
/// ranks that ran (the others were virtual copies of them), this process's rank and how many
/// ranks each real rank stands for.
#[derive(Serialize)]
struct FoldJson {
    mesh: String,
    folded: String,
    ranks: usize,
    real_ranks: usize,
    job_rank: Option<usize>,
    stands_for: usize,
}

fn fold_json() -> Option<FoldJson> {
    let env = fake_cuda_client::run_env().ok()?;
    let f = env.fold.as_ref()?;
    Some(FoldJson {
        mesh: f.mesh().to_string(),
        folded: f.to_string(),
        ranks: f.ranks(),
        real_ranks: f.real_ranks().len(),
        job_rank: env.job_rank,
        stands_for: f.multiplicity(),
    })
}

/// The `nccl` section: communicators with their operations, and the process's total.
pub fn section_json() -> String {
    let Ok(r) = registry().lock() else {
        return "null".into();
    };
    let total = total_ns(&r);
    let communicators = r
        .iter()
        .map(|((magic, _), e)| {
            let ops = e
                .ops
                .iter()
                .map(|(op, t)| OpJson {
                    op,
                    calls: t[0],
                    bytes: t[1],
                    predicted_us: micros(t[2]),
                    waited_us: micros(t[3]),
                    share_pct: round3(share(t[2], total)),
                })
                .collect();
            let (calls, bytes, ns) = e
                .ops
                .values()
                .fold((0, 0, 0), |a, t| (a.0 + t[0], a.1 + t[1], a.2 + t[2]));
            CommJson {
                comm: format!("{magic:#x}"),
                entry: e,
                calls,
                bytes,
                predicted_us: micros(ns),
                share_pct: round3(share(ns, total)),
                ops,
            }
        })
        .collect();
    serde_json::to_string(&SectionJson {
        communicators,
        predicted_us: micros(total),
        fold: fold_json(),
    })
    .unwrap_or_else(|_| "null".into())
}

/// The report as text lines (what `NCCL_DEBUG=INFO` prints at exit).
pub fn text_lines() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(r) = registry().lock() {
        let total = total_ns(&r);
        out.push(format!(
            "NCCLSIM report: {} communicator rank(s), predicted communication {:.3} us",
            r.len(),
            micros(total)
        ));
        if let Some(f) = fold_json() {
            out.push(format!(
                "NCCLSIM report: job of {} ranks (mesh {}) folded over {}: {} ranks ran, each standing for {}; the others were virtual",
                f.ranks, f.mesh, f.folded, f.real_ranks, f.stands_for
            ));
        }
        for ((magic, _), e) in r.iter() {
            out.push(format!(
                "NCCLSIM report: comm {magic:#x} {} nRanks {} rank {} nNodes {}: {} coll channels, {} ring, {} tree, {} nvls, {} p2p",
                e.name, e.nranks, e.rank, e.nodes, e.coll_channels, e.ring_channels,
                e.tree_channels, e.nvls_channels, e.p2p_channels
            ));
            for (op, t) in &e.ops {
                out.push(format!(
                    "NCCLSIM report:   {op:<14} calls {:>6} bytes {:>14} predicted {:>12.3} us ({:5.1}%) waited {:>12.3} us",
                    t[0], t[1], micros(t[2]), share(t[2], total), micros(t[3])
                ));
            }
        }
    }
    for dev in 0..crate::cuda::device_count().unwrap_or(0) {
        let (Ok((current, peak)), Ok(id)) = (
            crate::cuda::memory_stats(dev),
            crate::cuda::device_identity(dev),
        ) else {
            continue;
        };
        if peak == 0 {
            continue;
        }
        out.push(format!(
            "NCCLSIM report: GPU {dev} ({}) peak memory {peak} bytes, {current} at exit",
            id.bus_id()
        ));
    }
    out
}
