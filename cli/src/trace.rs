//! `ncclsim trace summarize|reprice|kernels DIR`: what the runtime's traces (`NCCLSIM_TRACE=DIR`,
//! Perfetto JSON files per process) say about a run, what the same calls would cost on other
//! hardware, and the kernel list of a process ([`kernels`]).
//!
//! Every rank traces its own view of each operation, so per communicator and operation the
//! figures are per rank: calls, bytes and predicted time averaged over the ranks that traced.
//! Per step (`--steps`, see [`steps`]) they are per process.

use clap::{Args, Subcommand};
use cost_model::types::{Collective, DataType, RedOp};
use cost_model::{CostModel, Mode};
use std::collections::BTreeMap;

mod compute;
mod kernels;
mod overlap;
mod steps;

#[derive(Subcommand)]
pub enum TraceCmd {
    /// Per communicator and operation: calls, bytes, predicted time and share of the total.
    Summarize(SummarizeArgs),
    /// The traced calls planned and priced on another topology, side by side with the original.
    Reprice(RepriceArgs),
    /// One process's compute and NCCL operations in launch order, in nsys's GPU trace columns.
    Kernels(KernelsArgs),
}

#[derive(Args)]
pub struct KernelsArgs {
    /// Directory the runtime wrote with NCCLSIM_TRACE.
    dir: String,
    /// The process to list (default: the first traced process).
    #[arg(long)]
    pid: Option<u64>,
    /// Output format: csv (nsys's `--report gputrace --format csv` columns) or table.
    #[arg(long, default_value = "csv", value_parser = ["csv", "table"])]
    format: String,
}

#[derive(Args)]
pub struct SummarizeArgs {
    /// Directory the runtime wrote with NCCLSIM_TRACE.
    dir: String,
    /// Output format.
    #[arg(long, default_value = "table", value_parser = ["table", "csv", "json"])]
    format: String,
    /// Per step instead: the program's cudaProfilerStart/Stop ranges, else the steps its
    /// framework marked (torch's optimizer steps, torch.profiler's step()), else its
    /// repeating call pattern.
    #[arg(long)]
    steps: bool,
}

#[derive(Args)]
pub struct RepriceArgs {
    /// Directory the runtime wrote with NCCLSIM_TRACE.
    dir: String,
    /// Topology XML of the other hardware (one node).
    #[arg(long)]
    topo: String,
    /// Number of nodes of the other hardware (default: as many as the run used).
    #[arg(long)]
    nodes: Option<usize>,
    /// NCCL settings for the other hardware, e.g. --env NCCL_ALGO=Ring.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// nccl (NCCL's model) or calibrated.
    #[arg(long, default_value = "nccl", value_parser = ["nccl", "calibrated"])]
    mode: String,
    /// Output format.
    #[arg(long, default_value = "table", value_parser = ["table", "csv", "json"])]
    format: String,
    /// Also plot the predicted communication time per step, traced and repriced (SVG).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<String>,
}

/// One traced operation.
struct Call {
    /// Index of the trace file (process) it came from.
    proc: usize,
    /// The process id it recorded.
    pid: u64,
    /// Start and duration (µs of virtual time).
    ts: f64,
    dur: f64,
    waited_us: f64,
    /// The profiler range it ran in.
    step: Option<u64>,
    /// The training steps its process marked as ended before it (optimizer or profiler steps).
    mark: u64,
    comm: String,
    rank: u64,
    name: String,
    bytes: u64,
    dtype: String,
    op: i64,
    predicted_us: f64,
    /// Send/receive batches: bytes with peers on the rank's node and on other nodes.
    sides: Option<(u64, u64)>,
}

/// A communicator as its init event describes it.
struct CommInfo {
    nranks: usize,
    members: Vec<(usize, i32)>,
}

/// The trace files of `dir` (`*.json`, in name order), each with its events.
type TraceFiles = Vec<(std::path::PathBuf, Vec<serde_json::Value>)>;

fn trace_files(dir: &str) -> Result<TraceFiles, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{dir}: {e}"))?;
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!(
            "{dir}: no trace files (*.json); run with NCCLSIM_TRACE={dir}"
        ));
    }
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| format!("{}: not a trace: {e}", f.display()))?;
            match v {
                serde_json::Value::Array(events) => Ok((f, events)),
                _ => Err(format!("{}: not a JSON array of events", f.display())),
            }
        })
        .collect()
}

/// What [`read`] gives.
type Traced = (Vec<Call>, BTreeMap<String, CommInfo>, steps::Marks);

/// The NCCL calls of the traces in `dir`, their communicators, and per process the training
/// steps it marked (`step_end` events of its compute trace).
fn read(dir: &str) -> Result<Traced, String> {
    let mut calls = Vec::new();
    let mut comms = BTreeMap::new();
    let mut marks = steps::Marks::default();
    for (proc, (_, events)) in trace_files(dir)?.iter().enumerate() {
        for e in events {
            let a = &e["args"];
            if e["name"] == "step_end" && e["cat"] == "step" {
                marks.add(
                    e["pid"].as_u64().unwrap_or(0),
                    a["mark"].as_u64(),
                    a["by"].as_str(),
                );
                continue;
            }
            let comm = a["comm"].as_str().unwrap_or_default().to_string();
            if e["name"] == "comm_init" {
                let members = a["members"]
                    .as_array()
                    .map(|m| {
                        m.iter()
                            .filter_map(|p| Some((p[0].as_u64()? as usize, p[1].as_i64()? as i32)))
                            .collect()
                    })
                    .unwrap_or_default();
                comms.insert(
                    comm,
                    CommInfo {
                        nranks: a["nranks"].as_u64().unwrap_or(0) as usize,
                        members,
                    },
                );
                continue;
            }
            // Compute operations (ncclsim's Python package) are not NCCL calls.
            if e["ph"] != "X" || e["cat"] == "compute" {
                continue;
            }
            calls.push(Call {
                proc,
                pid: e["pid"].as_u64().unwrap_or(0),
                ts: e["ts"].as_f64().unwrap_or(0.0),
                dur: e["dur"].as_f64().unwrap_or(0.0),
                waited_us: a["waited_us"].as_f64().unwrap_or(0.0),
                step: a["step"].as_u64(),
                mark: a["mark"].as_u64().unwrap_or(0),
                comm,
                rank: a["rank"].as_u64().unwrap_or(0),
                name: e["name"].as_str().unwrap_or("?").to_string(),
                bytes: a["bytes"]
                    .as_u64()
                    .or_else(|| a["sent_bytes"].as_u64())
                    .unwrap_or(0),
                dtype: a["type"].as_str().unwrap_or("Float32").to_string(),
                op: a["op"].as_i64().unwrap_or(0),
                predicted_us: a["predicted_us"].as_f64().unwrap_or(0.0),
                sides: a["node_bytes"].as_u64().zip(a["network_bytes"].as_u64()),
            });
        }
    }
    Ok((calls, comms, marks))
}

/// Per (comm, op): (ranks seen, calls, bytes, predicted µs), summed over ranks.
type Totals = BTreeMap<(String, String), (std::collections::BTreeSet<u64>, u64, u64, f64)>;

fn totals<'a>(calls: impl Iterator<Item = (&'a Call, f64)>) -> Totals {
    let mut t: Totals = BTreeMap::new();
    for (c, us) in calls {
        let e = t.entry((c.comm.clone(), c.name.clone())).or_default();
        e.0.insert(c.rank);
        e.1 += 1;
        e.2 += c.bytes;
        e.3 += us;
    }
    t
}

fn per_rank(e: &(std::collections::BTreeSet<u64>, u64, u64, f64)) -> (f64, f64, f64) {
    let n = e.0.len().max(1) as f64;
    (e.1 as f64 / n, e.2 as f64 / n, e.3 / n)
}

pub fn run(cmd: &TraceCmd) -> Result<(), String> {
    match cmd {
        TraceCmd::Summarize(a) => summarize(a),
        TraceCmd::Reprice(a) => reprice(a),
        TraceCmd::Kernels(a) => kernels::print(&a.dir, a.pid, &a.format),
    }
}

fn summarize(a: &SummarizeArgs) -> Result<(), String> {
    let (calls, comms, marks) = read(&a.dir)?;
    if a.steps {
        let s = steps::find(&calls, &marks).ok_or_else(|| no_steps(&a.dir))?;
        let ops = compute::read(&a.dir)?;
        return steps::print(&calls, &s, &ops, &a.format);
    }
    let t = totals(calls.iter().map(|c| (c, c.predicted_us)));
    let total: f64 = t.values().map(|e| per_rank(e).2).sum();
    let rows: Vec<(String, usize, String, f64, f64, f64, f64)> = t
        .iter()
        .map(|((comm, op), e)| {
            let (calls, bytes, us) = per_rank(e);
            let n = comms.get(comm).map_or(0, |c| c.nranks);
            (
                comm.clone(),
                n,
                op.clone(),
                calls,
                bytes,
                us,
                if total > 0.0 { 100.0 * us / total } else { 0.0 },
            )
        })
        .collect();
    match a.format.as_str() {
        "csv" => {
            println!(
                "comm,nranks,op,calls_per_rank,bytes_per_rank,predicted_us_per_rank,share_pct"
            );
            for r in &rows {
                println!(
                    "{},{},{},{:.1},{:.0},{:.3},{:.2}",
                    r.0, r.1, r.2, r.3, r.4, r.5, r.6
                );
            }
        }
        "json" => {
            let v: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| serde_json::json!({"comm": r.0, "nranks": r.1, "op": r.2, "calls_per_rank": r.3, "bytes_per_rank": r.4, "predicted_us_per_rank": r.5, "share_pct": r.6}))
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        }
        _ => {
            println!(
                "# {} operations traced by {} communicator(s); figures per rank",
                calls.len(),
                comms.len()
            );
            println!(
                "{:<20} {:>6} {:<14} {:>8} {:>14} {:>14} {:>7}",
                "comm", "nranks", "op", "calls", "bytes", "predicted_us", "share"
            );
            for r in &rows {
                println!(
                    "{:<20} {:>6} {:<14} {:>8.1} {:>14.0} {:>14.3} {:>6.1}%",
                    r.0, r.1, r.2, r.3, r.4, r.5, r.6
                );
            }
            println!(
                "{:<20} {:>6} {:<14} {:>8} {:>14} {:>14.3} {:>6.1}%",
                "total", "", "", "", "", total, 100.0
            );
        }
    }
    Ok(())
}

fn no_steps(dir: &str) -> String {
    format!(
        "{dir}: no steps: no call ran inside cudaProfilerStart/Stop, the program marked no \
         optimizer or profiler step, and no call pattern repeats"
    )
}

/// A call's collective by the name the trace gives it (NCCL's, `Collective::nccl_name`).
fn collective(name: &str) -> Option<Collective> {
    Collective::ALL.into_iter().find(|c| c.nccl_name() == name)
}

/// A call's data type by the name the trace gives it (the variant's name, `Float32`); calls
/// without a known type price as float.
fn dtype(name: &str) -> DataType {
    DataType::ALL
        .into_iter()
        .find(|d| format!("{d:?}") == name)
        .unwrap_or(DataType::Float32)
}

fn reprice(a: &RepriceArgs) -> Result<(), String> {
    let (calls, comms, marks) = read(&a.dir)?;
    let pairs = crate::plan::env_pairs(&a.env, None)?;
    let psettings = crate::plan::planner_settings(&pairs)?;
    let tsettings = crate::plan::tuner_settings(&pairs)?;
    let mode = if a.mode == "calibrated" {
        Mode::Calibrated
    } else {
        Mode::Nccl
    };
    let used = comms
        .values()
        .flat_map(|c| c.members.iter().map(|m| m.0 + 1))
        .max()
        .unwrap_or(1);
    let nodes = a.nodes.unwrap_or(used);
    if nodes < used {
        return Err(format!("--nodes {nodes}: the run used {used} nodes"));
    }
    let cluster = crate::load_cluster(
        &a.topo,
        nodes,
        &psettings.topo,
        None,
        None,
        None,
        topo::NicGuids::PerHost,
    )?;
    let planner = planner::Planner::new(cluster, psettings);
    let devs = planner.host_devs();
    let mut models: BTreeMap<String, CostModel> = BTreeMap::new();
    for (id, c) in &comms {
        let members =
            c.members
                .iter()
                .map(|&(node, gpu)| {
                    let dev = devs.get(gpu as usize).copied().ok_or_else(|| {
                        format!("{}: no GPU {gpu} (it has {})", a.topo, devs.len())
                    })?;
                    Ok(planner::Member { host: node, dev })
                })
                .collect::<Result<Vec<_>, String>>()?;
        let plan = planner
            .plan(&members, id, None)
            .map_err(|e| format!("communicator {id}: {e}"))?;
        let model = CostModel::from_plan(&plan, &tsettings, mode)
            .map_err(|e| format!("communicator {id}: {e}"))?;
        models.insert(id.clone(), model);
    }
    let priced: Vec<(&Call, f64)> = calls
        .iter()
        .map(|c| {
            let us = match (models.get(&c.comm), collective(&c.name)) {
                // Priced by where the peers are, as the runtime prices them; traces without
                // that split get the communicator's ring-neighbour pattern.
                (Some(m), Some(Collective::SendRecv)) => match c.sides {
                    Some((node, network)) => m.predict_peers(node, network).time_us,
                    None => m.predict_p2p(Collective::SendRecv, c.bytes).time_us,
                },
                (Some(m), Some(coll)) => m
                    .predict(coll, c.bytes, dtype(&c.dtype), RedOp::from_nccl(c.op))
                    .map(|p| p.time_us)
                    .unwrap_or(0.0),
                _ => 0.0,
            };
            (c, us)
        })
        .collect();
    if let Some(path) = &a.plot {
        let s = steps::find(&calls, &marks).ok_or_else(|| no_steps(&a.dir))?;
        let traced: Vec<f64> = calls.iter().map(|c| c.predicted_us).collect();
        let repriced: Vec<f64> = priced.iter().map(|p| p.1).collect();
        steps::plot(
            path,
            &format!(
                "predicted communication time per step: traced vs {nodes} x {} (steps: {})",
                a.topo,
                s.source.describe()
            ),
            &steps::per_step(&calls, &s, &traced),
            &steps::per_step(&calls, &s, &repriced),
        )?;
    }
    let before = totals(calls.iter().map(|c| (c, c.predicted_us)));
    let after = totals(priced.into_iter());
    let rows: Vec<(String, String, f64, f64, f64)> = before
        .iter()
        .map(|(k, e)| {
            let b = per_rank(e).2;
            let x = after.get(k).map_or(0.0, |e| per_rank(e).2);
            (
                k.0.clone(),
                k.1.clone(),
                b,
                x,
                if b > 0.0 { x / b } else { 0.0 },
            )
        })
        .collect();
    let mut rows = rows;
    // Compute (ncclsim's Python package), priced on the other topology's GPUs.
    let ops = compute::read(&a.dir)?;
    if !ops.is_empty() {
        let (b, x) = compute::reprice(&ops, &compute::gpu_of(&a.topo)?);
        rows.push((
            "compute".into(),
            format!("{} ops", ops.len()),
            b,
            x,
            if b > 0.0 { x / b } else { 0.0 },
        ));
    }
    let (tb, ta): (f64, f64) = rows
        .iter()
        .fold((0.0, 0.0), |acc, r| (acc.0 + r.2, acc.1 + r.3));
    match a.format.as_str() {
        "csv" => {
            println!("comm,op,traced_us_per_rank,repriced_us_per_rank,ratio");
            for r in &rows {
                println!("{},{},{:.3},{:.3},{:.4}", r.0, r.1, r.2, r.3, r.4);
            }
        }
        "json" => {
            let v: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| serde_json::json!({"comm": r.0, "op": r.1, "traced_us_per_rank": r.2, "repriced_us_per_rank": r.3, "ratio": r.4}))
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        }
        _ => {
            println!(
                "# {} operations of {} communicator(s) repriced on {} x {}; figures per rank",
                calls.len(),
                comms.len(),
                nodes,
                a.topo
            );
            println!(
                "{:<20} {:<14} {:>14} {:>14} {:>8}",
                "comm", "op", "traced_us", "repriced_us", "ratio"
            );
            for r in &rows {
                println!(
                    "{:<20} {:<14} {:>14.3} {:>14.3} {:>8.3}",
                    r.0, r.1, r.2, r.3, r.4
                );
            }
            println!(
                "{:<20} {:<14} {:>14.3} {:>14.3} {:>8.3}",
                "total",
                "",
                tb,
                ta,
                if tb > 0.0 { ta / tb } else { 0.0 }
            );
        }
    }
    Ok(())
}
