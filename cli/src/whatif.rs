//! `ncclsim whatif`: two configurations side by side (another topology, topology edits, NCCL
//! settings, another NCCL release), or a parallel sweep of one edit key.

use crate::predict::{build, parse_sweep, rows, Built, Sweep, SweepArgs, SystemArgs};
use clap::Args;
use cost_model::edit::Edit;
use cost_model::{Collective, Mode};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use std::io::IsTerminal;

/// `ncclsim whatif`.
#[derive(Args)]
pub struct WhatifArgs {
    #[command(flatten)]
    pub system: SystemArgs,
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Configuration B's topology (default: A's, edited by --set).
    #[arg(long)]
    pub vs: Option<String>,
    /// Configuration B's node count (default: A's; with --vs, e.g. 9 DGX H100 nodes against 18
    /// NVL72 trays).
    #[arg(long = "vs-nodes", value_parser = crate::parse_nodes)]
    pub vs_nodes: Option<usize>,
    /// Edit of B: nvlink.count=N, nic.speed=400G, nic.count=N, pcie.gen=N, nodes=N,
    /// nvl-domain=GPUS (GPUs per NVLink domain spanning nodes).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Sweep one key over values, computed in parallel: nodes=1,2,4,8, nvl-domain=8,36,72 (any
    /// --set key).
    #[arg(long = "sweep", value_name = "KEY=V1,V2,...")]
    pub sweep_key: Option<String>,
    /// Write the sweep (or the comparison) as CSV to this file (default: stdout).
    #[arg(long)]
    pub csv: Option<String>,
    /// Write an SVG: busbw vs size per configuration.
    #[arg(long)]
    pub plot: Option<String>,
}

fn band_summary(
    b: &Built,
    coll: Collective,
    sizes: &[u64],
    r: &[(u64, cost_model::Prediction)],
) -> Vec<String> {
    // Algorithm per size band: consecutive sizes with the same choice.
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=r.len() {
        let same =
            i < r.len() && (r[i].1.algo, r[i].1.proto) == (r[start].1.algo, r[start].1.proto);
        if !same {
            out.push(format!(
                "  {:>8} .. {:<8} {}/{} ({} ch)",
                cost_model::calibration::size_label(sizes[start]),
                cost_model::calibration::size_label(sizes[i - 1]),
                r[start].1.algo,
                r[start].1.proto,
                r[start].1.channels
            ));
            start = i;
        }
    }
    let _ = (b, coll);
    out
}

/// `ncclsim whatif`.
pub fn run(args: &WhatifArgs) -> Result<(), String> {
    let Sweep {
        colls,
        sizes,
        dtype,
        op,
        mode,
    } = parse_sweep(&args.sweep)?;
    let coll = *colls.first().ok_or("--op: nothing to compare")?;
    if let Some(sw) = &args.sweep_key {
        return sweep(args, sw, coll, &sizes, mode);
    }
    let (domain_b, set) = split_domain(&args.set)?;
    let edits = set
        .iter()
        .map(|s| Edit::parse(s).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    // With neither --vs nor --set, B is A under --env / --nccl-version; otherwise those apply to
    // both and B differs by its topology or edits.
    let settings_only =
        args.vs.is_none() && edits.is_empty() && domain_b.is_none() && args.vs_nodes.is_none();
    let mut sys_a = args.system.clone();
    if settings_only {
        if args.system.env.is_empty() && args.system.nccl_version.is_none() {
            return Err("whatif needs a B: --vs FILE, --set KEY=VALUE, --env NAME=VALUE, --nccl-version V or --sweep KEY=V1,V2".into());
        }
        sys_a.env.clear();
        sys_a.nccl_version = None;
    }
    let a = build(&sys_a, &[], &[], mode)?;
    let mut sys_b = args.system.clone();
    if let Some(vs) = &args.vs {
        sys_b.topo = vs.clone();
    }
    if let Some(n) = args.vs_nodes {
        sys_b.nodes = n;
    }
    if domain_b.is_some() {
        sys_b.nvl_domain = domain_b;
    }
    let b = build(&sys_b, &[], &edits, mode)?;
    let ra = rows(&a.model, coll, &sizes, dtype, op)?;
    let rb = rows(&b.model, coll, &sizes, dtype, op)?;
    println!("# A: {} ({})", sys_a.topo, a.summary);
    for l in band_summary(&a, coll, &sizes, &ra) {
        println!("#{l}");
    }
    let mut bdesc = vec![sys_b.topo.clone()];
    if let Some(n) = args.vs_nodes {
        bdesc.push(format!("--vs-nodes {n}"));
    }
    bdesc.extend(args.set.iter().cloned());
    bdesc.extend(args.system.env.iter().cloned());
    bdesc.extend(args.system.nccl_version.iter().map(|v| format!("NCCL {v}")));
    println!("# B: {} ({})", bdesc.join(" "), b.summary);
    for l in band_summary(&b, coll, &sizes, &rb) {
        println!("#{l}");
    }
    let mut csv = String::from(
        "size,a_time_us,a_busbw,a_algo,b_time_us,b_busbw,b_algo,busbw_ratio_b_over_a\n",
    );
    println!(
        "# {:>10}  {:>10} {:>8} {:>16}  {:>10} {:>8} {:>16}  {:>6}",
        "size", "A time", "A busbw", "A algo", "B time", "B busbw", "B algo", "B/A"
    );
    for ((_, pa), (_, pb)) in ra.iter().zip(rb.iter()) {
        let ratio = if pa.busbw > 0.0 {
            pb.busbw / pa.busbw
        } else {
            f64::NAN
        };
        println!(
            "{:>12}  {:>10.2} {:>8.2} {:>16}  {:>10.2} {:>8.2} {:>16}  {:>6.3}",
            pa.bytes,
            pa.time_us,
            pa.busbw,
            format!("{}/{}", pa.algo, pa.proto),
            pb.time_us,
            pb.busbw,
            format!("{}/{}", pb.algo, pb.proto),
            ratio
        );
        csv += &format!(
            "{},{:.3},{:.4},{}/{},{:.3},{:.4},{}/{},{:.5}\n",
            pa.bytes,
            pa.time_us,
            pa.busbw,
            pa.algo,
            pa.proto,
            pb.time_us,
            pb.busbw,
            pb.algo,
            pb.proto,
            ratio
        );
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, csv).map_err(|e| format!("{path}: {e}"))?;
    }
    if let Some(path) = &args.plot {
        let line = |r: &[(u64, cost_model::Prediction)]| -> Vec<(f64, f64)> {
            r.iter()
                .filter(|x| x.1.bytes > 0)
                .map(|x| (x.1.bytes as f64, x.1.busbw))
                .collect()
        };
        crate::predict::draw(
            path,
            &format!("{}: A vs B", coll.name()),
            &[
                ("A".into(), line(&ra), false),
                ("B".into(), line(&rb), true),
            ],
        )?;
        eprintln!("wrote {path}");
    }
    Ok(())
}

fn sweep(
    args: &WhatifArgs,
    spec: &str,
    coll: Collective,
    sizes: &[u64],
    mode: Mode,
) -> Result<(), String> {
    let (key, values) = spec
        .split_once('=')
        .ok_or_else(|| format!("--sweep-key {spec}: expected KEY=V1,V2,..."))?;
    // Each value: an edit of the topology, or a domain size.
    let edits: Vec<(String, Option<Edit>, Option<usize>)> = values
        .split(',')
        .filter(|v| !v.is_empty())
        .map(|v| {
            if key == NVL_DOMAIN {
                parse_domain(v).map(|d| (v.to_string(), None, Some(d)))
            } else {
                Edit::from_key(key, v)
                    .map(|e| (v.to_string(), Some(e), None))
                    .map_err(|e| e.to_string())
            }
        })
        .collect::<Result<_, _>>()?;
    let (domain_fixed, set) = split_domain(&args.set)?;
    let fixed = set
        .iter()
        .map(|s| Edit::parse(s).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let Sweep { dtype, op, .. } = parse_sweep(&args.sweep)?;
    let bar = ProgressBar::new(edits.len() as u64);
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}").map_err(|e| e.to_string())?,
    );
    type Run = (String, Vec<(u64, cost_model::Prediction)>);
    let results: Vec<Result<Run, String>> = edits
        .par_iter()
        .map(|(v, e, d)| {
            let mut all = fixed.clone();
            all.extend(e.iter().cloned());
            let mut system = args.system.clone();
            if let Some(d) = d.or(domain_fixed) {
                system.nvl_domain = Some(d);
            }
            let built = build(&system, &[], &all, mode)?;
            let r = rows(&built.model, coll, sizes, dtype, op)?;
            bar.inc(1);
            bar.set_message(format!("{key}={v}"));
            Ok((v.clone(), r))
        })
        .collect();
    bar.finish_and_clear();
    let mut csv = format!("{key},size,time_us,algbw,busbw,algo,proto,channels\n");
    let mut lines = Vec::new();
    for r in results {
        let (v, rs) = r?;
        for (_, p) in &rs {
            csv += &format!(
                "{v},{},{:.3},{:.4},{:.4},{},{},{}\n",
                p.bytes, p.time_us, p.algbw, p.busbw, p.algo, p.proto, p.channels
            );
        }
        lines.push((
            format!("{key}={v}"),
            rs.iter()
                .filter(|x| x.1.bytes > 0)
                .map(|x| (x.1.bytes as f64, x.1.busbw))
                .collect(),
            false,
        ));
    }
    match &args.csv {
        Some(path) => std::fs::write(path, &csv).map_err(|e| format!("{path}: {e}"))?,
        None => print!("{csv}"),
    }
    if let Some(path) = &args.plot {
        crate::predict::draw(path, &format!("{}: sweep of {key}", coll.name()), &lines)?;
        eprintln!("wrote {path}");
    }
    Ok(())
}

/// The `--set` / `--sweep` key of the NVLink domain size (GPUs per domain).
const NVL_DOMAIN: &str = "nvl-domain";

fn parse_domain(v: &str) -> Result<usize, String> {
    v.trim()
        .parse::<usize>()
        .ok()
        .filter(|&d| d > 0)
        .ok_or_else(|| format!("{NVL_DOMAIN}={v}: expected a GPU count of at least 1"))
}

/// `--set` edits without the domain size, and the domain size if one is set (the last wins).
fn split_domain(set: &[String]) -> Result<(Option<usize>, Vec<String>), String> {
    let mut domain = None;
    let mut rest = Vec::new();
    for s in set {
        match s.split_once('=') {
            Some((k, v)) if k.trim() == NVL_DOMAIN => domain = Some(parse_domain(v)?),
            _ => rest.push(s.clone()),
        }
    }
    Ok((domain, rest))
}
