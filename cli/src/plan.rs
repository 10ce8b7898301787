//! `ncclsim plan`: the world communicator and its split children as NCCL would build them.

use clap::Args;
use cost_model::{CostModel, Mode, TunerSettings};
use planner::split::{parse_dims, parse_split_by};
use planner::{CommPlan, JobPlan, Member, PlannerSettings, SplitSpec};
use std::fmt::Write as _;
use topo::Cluster;

#[derive(Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub system: crate::predict::SystemArgs,
    /// GPUs (dev numbers) of each node the job uses, e.g. 0-3 or 0,2,4,6 (default: all).
    #[arg(long)]
    pub gpus: Option<String>,
    /// Split the world by parallelism dimensions, innermost first: tp=8,dp=2 (pp=..., any names).
    #[arg(long)]
    pub split: Option<String>,
    /// Split by a color/key expression of `rank`, e.g. 'color=rank/8' or 'color=rank%8,key=rank,name=dp'.
    /// Repeatable. A negative color is NCCL_SPLIT_NOCOLOR.
    #[arg(long = "split-by")]
    pub split_by: Vec<String>,
    /// Output format.
    #[arg(long, default_value = "info", value_parser = ["info", "graph-xml", "json", "dot"])]
    pub format: String,
    /// World rank whose view is printed (INFO lines, graph dump); each child is shown from that
    /// rank's view when it is a member, else from its rank 0.
    #[arg(long, default_value_t = 0)]
    pub rank: usize,
    /// Only this communicator (world, tp0, dp3, ...).
    #[arg(long)]
    pub comm: Option<String>,
    /// With --format dot: write SVG to this file (needs Graphviz's `dot`).
    #[arg(long)]
    pub svg: Option<String>,
}

/// NCCL_* from the environment, then `--env`, then `--nccl-version`.
pub fn env_pairs(env: &[String], version: Option<&str>) -> Result<Vec<(String, String)>, String> {
    let mut pairs: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL"))
        .collect();
    for kv in env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--env {kv}: expected NAME=VALUE"))?;
        pairs.push((k.to_string(), v.to_string()));
    }
    if let Some(v) = version {
        pairs.push(("NCCLSIM_NCCL_VERSION".into(), v.to_string()));
    }
    Ok(pairs)
}

/// The value of setting `k` in name/value pairs (the last one wins).
pub fn lookup(pairs: &[(String, String)], k: &str) -> Option<String> {
    pairs
        .iter()
        .rev()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.clone())
}

/// Planner settings from name/value pairs (last one wins).
pub fn planner_settings(pairs: &[(String, String)]) -> Result<PlannerSettings, String> {
    let s = PlannerSettings::from_lookup(|k| lookup(pairs, k)).map_err(|e| e.to_string())?;
    for w in topo::settings::warnings(|k| lookup(pairs, k))
        .into_iter()
        .chain(s.warnings(|k| lookup(pairs, k)))
    {
        warn_once(&w);
    }
    Ok(s)
}

/// Print a warning on stderr, once per process (a what-if sweep reads the same settings for
/// every point).
pub fn warn_once(w: &str) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if !seen.iter().any(|s| s == w) {
        eprintln!("warning: {w}");
        seen.push(w.to_string());
    }
}

/// Tuner settings from name/value pairs (last one wins), with NCCL's complaints as warnings.
pub fn tuner_settings(pairs: &[(String, String)]) -> Result<TunerSettings, String> {
    let s = TunerSettings::from_lookup(|k| lookup(pairs, k)).map_err(|e| e.to_string())?;
    for w in s.warnings() {
        warn_once(&w);
    }
    Ok(s)
}

/// Parse `0-3`, `0,2,4` or `0-1,4-5`.
pub fn parse_gpus(s: &str) -> Result<Vec<i32>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("--gpus {s}: '{part}' is not N or N-M");
        match part.split_once('-') {
            Some((a, b)) => {
                let a: i32 = a.trim().parse().map_err(|_| bad())?;
                let b: i32 = b.trim().parse().map_err(|_| bad())?;
                if b < a || a < 0 || b > MAX_GPU_DEV {
                    return Err(bad());
                }
                v.extend(a..=b);
            }
            None => v.push(part.parse().map_err(|_| bad())?),
        }
        if v.len() > MAX_GPU_DEV as usize {
            return Err(format!("--gpus {s}: more than {MAX_GPU_DEV} GPUs"));
        }
    }
    if v.is_empty() {
        return Err(format!("--gpus '{s}': no GPU"));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(d) = v.iter().find(|&&d| !seen.insert(d)) {
        return Err(format!("--gpus {s}: GPU {d} is listed twice"));
    }
    Ok(v)
}

/// More GPUs than any node has (NCCL keeps at most 576 in a system): a range past this is
/// refused before it is expanded.
const MAX_GPU_DEV: i32 = 4096;

fn members(cluster: &Cluster, gpus: Option<&[i32]>) -> Result<Vec<Member>, String> {
    let all = planner::world_members(cluster);
    let Some(sel) = gpus else { return Ok(all) };
    for h in 0..cluster.nodes.len() {
        for d in sel {
            if !all.iter().any(|m| m.host == h && m.dev == *d) {
                return Err(format!(
                    "--gpus: node {h} ({}) has no GPU with dev {d}",
                    cluster.nodes[h].source
                ));
            }
        }
    }
    Ok(all.into_iter().filter(|m| sel.contains(&m.dev)).collect())
}

/// Load the cluster and plan the job with the NCCL settings `pairs` (see [`env_pairs`]).
pub fn plan(args: &PlanArgs, pairs: &[(String, String)]) -> Result<(Cluster, JobPlan), String> {
    let sys = &args.system;
    let settings = planner_settings(pairs)?;
    let cluster = crate::load_cluster(
        &sys.topo,
        sys.nodes,
        &settings.topo,
        sys.gpu.as_deref(),
        sys.nic_speed.as_deref(),
        sys.nvl_domain,
        crate::nic_guids(&sys.nic_guids),
    )?;
    let gpus = args.gpus.as_deref().map(parse_gpus).transpose()?;
    let members = members(&cluster, gpus.as_deref())?;
    let mut specs: Vec<SplitSpec> = Vec::new();
    if let Some(s) = &args.split {
        specs.push(parse_dims(s).map_err(|e| e.to_string())?);
    }
    for (i, s) in args.split_by.iter().enumerate() {
        specs.push(parse_split_by(s, i).map_err(|e| e.to_string())?);
    }
    let planner = planner::Planner::new(cluster, settings);
    let job = planner
        .plan_job(&members, &specs)
        .map_err(|e| e.to_string())?;
    Ok((planner.into_cluster(), job))
}

/// The rank of `comm` to view it from: the member that is world rank `world`, else 0.
fn view_rank(comm: &CommPlan, world: usize) -> usize {
    comm.ranks
        .iter()
        .find(|r| r.world_rank == world)
        .map(|r| r.rank)
        .unwrap_or(0)
}

/// One-line summary of a communicator.
pub fn summary(c: &CommPlan) -> String {
    let g = &c.graphs;
    let mut s = format!(
        "# comm {}: {} rank(s) on {} node(s); ring {}x{}/{} {}/{}, tree pattern {} {}x{}/{} {}/{}",
        c.name,
        c.n_ranks,
        c.n_nodes,
        g.ring.n_channels,
        g.ring.bw_intra,
        g.ring.bw_inter,
        g.ring.type_intra,
        g.ring.type_inter,
        g.tree.pattern.number(),
        g.tree.n_channels,
        g.tree.bw_intra,
        g.tree.bw_inter,
        g.tree.type_intra,
        g.tree.type_inter
    );
    if let Some(m) = c.ranks.first().and_then(|r| r.mnnvl) {
        let _ = write!(
            s,
            "; MNNVL clique of {} rank(s) (NVLink domain {})",
            m.clique_size, m.nvl_domain_size
        );
    }
    if c.nvls_support {
        let _ = write!(
            s,
            ", nvls {}x{}/{}",
            g.nvls.n_channels, g.nvls.bw_intra, g.nvls.bw_inter
        );
    }
    let _ = write!(
        s,
        "; {} coll / {} nvls / {} p2p channels ({} per peer)",
        c.n_channels, c.nvls_channels, c.p2p_channels, c.p2p_channels_per_peer
    );
    s
}

/// DOT of the rings and trees over the GPUs, one cluster per node.
pub fn dot(c: &CommPlan, max_channels: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph \"{}\" {{", c.name);
    let _ = writeln!(
        s,
        "  graph [rankdir=LR, label=\"{} ({} ranks, {} nodes): ring channels solid, tree channels dashed\"];",
        c.name, c.n_ranks, c.n_nodes
    );
    let _ = writeln!(s, "  node [shape=box, style=rounded];");
    for (n, ranks) in c.node_ranks.iter().enumerate() {
        let _ = writeln!(s, "  subgraph cluster_node{n} {{");
        let host = c.ranks[ranks[0]].host;
        let _ = writeln!(s, "    label=\"node {n} (host {host})\";");
        for &r in ranks {
            let ri = &c.ranks[r];
            let _ = writeln!(
                s,
                "    r{r} [label=\"rank {r}\\nGPU dev {} {}\"];",
                ri.dev, ri.busid
            );
        }
        let _ = writeln!(s, "  }}");
    }
    let palette = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf",
    ];
    for (ch, chan) in c.channels.iter().enumerate().take(max_channels) {
        let color = palette[ch % palette.len()];
        for (r, cr) in chan.iter().enumerate() {
            if cr.ring_next >= 0 {
                let _ = writeln!(
                    s,
                    "  r{r} -> r{} [color=\"{color}\", label=\"ring {ch}\"];",
                    cr.ring_next
                );
            }
            if cr.tree_up >= 0 {
                let _ = writeln!(
                    s,
                    "  r{} -> r{r} [color=\"{color}\", style=dashed, label=\"tree {ch}\"];",
                    cr.tree_up
                );
            }
        }
    }
    let _ = writeln!(s, "}}");
    s
}

/// Run `ncclsim plan`.
pub fn run(args: &PlanArgs) -> Result<(), String> {
    if args.svg.is_some() && args.format != "dot" {
        return Err(format!(
            "--svg needs --format dot (the format is {})",
            args.format
        ));
    }
    let pairs = env_pairs(&args.system.env, args.system.nccl_version.as_deref())?;
    let (_cluster, job) = plan(args, &pairs)?;
    let comms: Vec<&CommPlan> = std::iter::once(&job.world)
        .chain(job.splits.iter())
        .filter(|c| args.comm.as_deref().is_none_or(|n| n == c.name))
        .collect();
    if comms.is_empty() {
        let names: Vec<&str> = std::iter::once(job.world.name.as_str())
            .chain(job.splits.iter().map(|c| c.name.as_str()))
            .collect();
        return Err(format!(
            "--comm {}: no such communicator (have: {})",
            args.comm.as_deref().unwrap_or(""),
            names.join(", ")
        ));
    }
    if args.rank >= job.world.n_ranks {
        return Err(format!(
            "--rank {}: the world has {} ranks",
            args.rank, job.world.n_ranks
        ));
    }
    match args.format.as_str() {
        "json" => {
            let v = if args.comm.is_some() {
                comms[0].to_json()
            } else {
                job.to_json()
            }
            .map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        }
        "graph-xml" => {
            let c = comms[0];
            let r = view_rank(c, args.rank);
            let node = c.ranks[r].node;
            let search = &c.searches[node];
            let topo = search
                .topo
                .as_ref()
                .ok_or("internal: the plan carries no topology")?;
            let xml = planner::graph_xml::graphs_to_xml(search, &topo.system);
            print!("{}", topo::xml::write(&xml));
        }
        "dot" => {
            let text = dot(comms[0], 64);
            match &args.svg {
                None => print!("{text}"),
                Some(out) => crate::write_svg(&text, out)?,
            }
        }
        _ => {
            let tsettings = tuner_settings(&pairs)?;
            for c in comms {
                let r = view_rank(c, args.rank);
                // With what ncclTopoTuneModel prints (the TUNING table on rank 0, threadThresholds).
                let model = CostModel::from_plan(c, &tsettings, Mode::Nccl)
                    .map_err(|e| format!("communicator {}: {e}", c.name))?;
                println!("{}", summary(c));
                println!("# INFO lines as rank {r} of {} prints them", c.name);
                for line in model.init_info_lines(c, r, planner::format::PLANNER_COMM) {
                    println!("NCCL INFO {line}");
                }
                println!();
            }
        }
    }
    // The process ends next: freeing a plan of half a million ranks piece by piece would
    // only cost time.
    std::mem::forget(job);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_gpus;

    #[test]
    fn gpu_lists() {
        assert_eq!(parse_gpus("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        // A GPU listed twice would silently become one rank.
        let e = parse_gpus("0,0").unwrap_err();
        assert!(e.contains("GPU 0 is listed twice"), "{e}");
        assert!(parse_gpus("0-3,2")
            .unwrap_err()
            .contains("GPU 2 is listed twice"));
        // Huge ranges are refused before they are expanded.
        assert!(parse_gpus("0-2147483646").is_err());
        assert!(parse_gpus("-5-3").is_err());
    }
}
