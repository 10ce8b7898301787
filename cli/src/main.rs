//! `ncclsim`: the command line over the `topo`, `planner` and `cost-model` crates. Thin by design:
//! argument parsing, reading files, printing.

#[cfg(feature = "fuzz")]
mod fuzz;
mod plan;
mod predict;
mod python;
mod run;
mod trace;
mod whatif;

use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;
use std::sync::Arc;
use topo::lint::Severity;
use topo::{Cluster, Completion, NodeKind, TopoSettings};

/// Planning allocates many small, short-lived objects (XML copies, topologies, search state);
/// mimalloc serves them markedly faster than the system allocator (BENCHMARKS.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "ncclsim",
    version,
    about = "NCCL collective-communication simulator: topologies, plans and predictions without GPUs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Topology commands: show, paths, check, dot, dump.
    #[command(subcommand)]
    Topo(TopoCmd),
    /// Plan the world communicator and its splits as NCCL builds them (graphs, rings, trees,
    /// channel counts) and print NCCL's INFO lines, graph dump, JSON or DOT.
    Plan(plan::PlanArgs),
    /// Predicted nccl-tests tables (time, algbw, busbw, algorithm/protocol, channels) per size.
    Predict(predict::PredictArgs),
    /// Compare two configurations (topology, edits, NCCL settings, release) or sweep one key.
    Whatif(whatif::WhatifArgs),
    /// Runtime traces (NCCLSIM_TRACE): summarize them, or reprice their calls on other hardware.
    #[command(subcommand)]
    Trace(trace::TraceCmd),
    /// Run a program (a torchrun job, an MPI-less C program, ...) on ncclsim's libnccl.so.2 and
    /// fake CUDA libraries, once per simulated node, with the simulation's settings.
    Run(run::RunArgs),
    /// Fuzz the parsers, the planner and the command line with hostile input (see RELIABILITY.md).
    #[cfg(feature = "fuzz")]
    #[command(hide = true)]
    Fuzz(fuzz::FuzzArgs),
}

#[derive(Subcommand)]
enum TopoCmd {
    /// Print the system as NCCL's GRAPH debug output does (`=== System : maxBw ... totalBw ... ===`).
    Show {
        #[command(flatten)]
        input: Input,
        /// Output format.
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        format: String,
    },
    /// GPU/NIC matrix of NCCL path types and bandwidths (like `nvidia-smi topo -m`).
    Paths {
        #[command(flatten)]
        input: Input,
    },
    /// Lint a topology file; exit status 1 when anything at warning level or above is found.
    Check {
        /// Topology XML file.
        file: String,
    },
    /// Graphviz DOT of the topology (SVG with --svg when the `dot` program is installed).
    Dot {
        #[command(flatten)]
        input: Input,
        /// Write SVG to this file (needs Graphviz's `dot`).
        #[arg(long)]
        svg: Option<String>,
    },
    /// The topology XML NCCL would dump (NCCL_TOPO_DUMP_FILE format), after skeleton completion.
    Dump {
        #[command(flatten)]
        input: Input,
    },
}

#[derive(Args)]
struct Input {
    /// Topology XML file (one node).
    file: String,
    /// Number of identical nodes.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = crate::parse_nodes)]
    nodes: usize,
    /// GPU model to complete skeleton files with (e.g. A100-SXM4, H100-SXM5, V100-SXM2, A10G, RTX4090).
    #[arg(long)]
    gpu: Option<String>,
    /// NIC speed for NIC slots without <net> (e.g. 200G, 400G).
    #[arg(long)]
    nic_speed: Option<String>,
    /// NCCL release to reproduce (2.18 .. 2.30).
    #[arg(long)]
    nccl_version: Option<String>,
    /// NCCL settings, e.g. --env NCCL_P2P_LEVEL=SYS (the process environment is read too).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// GPUs per NVLink domain spanning nodes (multi-node NVLink, e.g. 72 for an NVL72 rack).
    /// Default: nodes whose NVLinks go to an external NVSwitch fabric (GB200/GB300 trays) form
    /// domains of up to 72 GPUs; other nodes none. `--env NCCL_MNNVL_ENABLE=0` turns it off.
    #[arg(long = "nvl-domain", value_name = "GPUS")]
    nvl_domain: Option<usize>,
    /// Identity of the NICs of nodes built from one file when an NVLink domain's nodes are
    /// fused: per-host (default: each node's NICs are its own, as on real trays) or as-file (the
    /// file's `guid`s on every node, as NCCL reads one NCCL_TOPO_FILE given to every host; equal
    /// GUIDs are one NIC to NCCL's search).
    #[arg(long = "nic-guids", value_name = "MODE", default_value = "per-host", value_parser = ["per-host", "as-file"])]
    nic_guids: String,
}

fn settings(input: &Input) -> Result<TopoSettings, String> {
    let pairs = plan::env_pairs(&input.env, input.nccl_version.as_deref())?;
    TopoSettings::from_lookup(|k| plan::lookup(&pairs, k)).map_err(|e| e.to_string())
}

fn load(input: &Input) -> Result<Cluster, String> {
    let s = settings(input)?;
    load_cluster(
        &input.file,
        input.nodes,
        &s,
        input.gpu.as_deref(),
        input.nic_speed.as_deref(),
        input.nvl_domain,
        nic_guids(&input.nic_guids),
    )
}

/// `--nic-guids`: the identity of the NICs of nodes built from one file.
pub(crate) fn nic_guids(mode: &str) -> topo::NicGuids {
    match mode {
        "as-file" => topo::NicGuids::AsFile,
        _ => topo::NicGuids::PerHost,
    }
}

/// `--nvl-domain`: how the nodes are grouped into NVLink domains.
pub(crate) fn nvl_domains(gpus: Option<usize>) -> topo::NvlDomains {
    gpus.map_or(topo::NvlDomains::Auto, topo::NvlDomains::Gpus)
}

/// `--nodes`: a whole number of nodes a cluster can have.
pub(crate) fn parse_nodes(s: &str) -> Result<usize, String> {
    let bad = || {
        format!(
            "'{s}' is not a node count: a whole number from 1 to {}",
            topo::cluster::MAX_NODES
        )
    };
    let n: usize = s.trim().parse().map_err(|_| bad())?;
    check_nodes(n).map_err(|_| bad())?;
    Ok(n)
}

/// A node count a cluster can have (checked before anything is allocated per node).
pub(crate) fn check_nodes(nodes: usize) -> Result<(), String> {
    if nodes == 0 {
        return Err("--nodes must be at least 1".into());
    }
    if nodes > topo::cluster::MAX_NODES {
        return Err(format!(
            "--nodes {nodes}: a cluster has at most {} nodes",
            topo::cluster::MAX_NODES
        ));
    }
    Ok(())
}

/// `nodes` copies of one node file, skeletons completed with `gpu` / `nic_speed`.
pub(crate) fn load_cluster(
    file: &str,
    nodes: usize,
    s: &TopoSettings,
    gpu: Option<&str>,
    nic_speed: Option<&str>,
    nvl_domain: Option<usize>,
    nic_guids: topo::NicGuids,
) -> Result<Cluster, String> {
    let gpu = gpu
        .map(topo::profiles::gpu_model)
        .transpose()
        .map_err(|e| e.to_string())?;
    let nic = nic_speed
        .map(topo::profiles::parse_nic_speed)
        .transpose()
        .map_err(|e| e.to_string())?;
    check_nodes(nodes)?;
    let xml = Arc::new(topo::read_xml(file).map_err(|e| e.to_string())?);
    let hosts: Vec<(String, Arc<topo::XmlElement>)> = (0..nodes)
        .map(|_| (file.to_string(), xml.clone()))
        .collect();
    let mut c = Cluster::from_hosts(
        &hosts,
        s,
        Completion {
            gpu,
            nic_speed_mbps: nic,
        },
    )
    .map_err(|e| e.to_string())?;
    c.set_nvl_domains(nvl_domains(nvl_domain))
        .map_err(|e| e.to_string())?;
    c.nic_guids = nic_guids;
    for n in &c.notes {
        eprintln!("note: {n}");
    }
    Ok(c)
}

/// Render DOT text to an SVG file with Graphviz's `dot`.
pub(crate) fn write_svg(dot: &str, out: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = std::process::Command::new("dot")
        .args(["-Tsvg", "-o", out])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "--svg needs Graphviz's `dot` program ({e}); without --svg the DOT text is printed"
            )
        })?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(dot.as_bytes())
        .map_err(|e| e.to_string())?;
    let st = child.wait().map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("dot failed with {st}"));
    }
    eprintln!("wrote {out}");
    Ok(())
}

fn summary(c: &Cluster) -> String {
    let t = &c.nodes[0].topo;
    let s = &t.system;
    let (ccmin, ccmax) = s.comp_cap().unwrap_or((0, 0));
    format!(
        "# {} node(s) x {} GPU(s) = {} GPUs; per node: {} NVSwitch(es) (NCCL: {} NVS node), {} NIC(s), {} NET(s), {} CPU(s), {} PCI switch(es); sm {}{}; NCCL {} model",
        c.nodes.len(),
        s.count(NodeKind::Gpu),
        c.n_gpus(),
        topo::profiles::nvswitch_targets(&c.nodes[0].xml),
        s.count(NodeKind::Nvs),
        s.count(NodeKind::Nic),
        s.count(NodeKind::Net),
        s.count(NodeKind::Cpu),
        s.count(NodeKind::Pci),
        ccmin,
        if ccmax != ccmin { format!("-{ccmax}") } else { String::new() },
        s.version
    )
}

/// The line naming node 0's NVLink clique when the topology shown is fused across it.
fn domain_summary(c: &Cluster, t: &topo::Topology) -> String {
    let s = &t.system;
    format!(
        "# multi-node NVLink: node 0's clique fuses {} node(s) = {} GPUs ({} NVLink domain(s) in the cluster); NCCL's fused system: {} NVS node, {} CPU(s), {} NET(s)",
        s.n_hosts(),
        s.count(NodeKind::Gpu),
        c.nvl_domains(),
        s.count(NodeKind::Nvs),
        s.count(NodeKind::Cpu),
        s.count(NodeKind::Net)
    )
}

fn json(c: &Cluster) -> serde_json::Value {
    let t = &c.nodes[0].topo;
    let s = &t.system;
    let gpus: Vec<_> = (0..s.count(NodeKind::Gpu))
        .map(|g| {
            let info = s.gpu(g);
            serde_json::json!({"dev": info.dev, "rank": info.rank, "sm": info.sm, "busid": info.busid, "gdr": info.gdr,
                "model": info.model, "nvml_p2p": info.nvml_p2p})
        })
        .collect();
    let nets: Vec<_> = s
        .nodes(NodeKind::Net)
        .iter()
        .map(|&n| serde_json::to_value(s.node(n).net()).unwrap_or_default())
        .collect();
    let paths: Vec<Vec<String>> = (0..gpus.len())
        .map(|g| {
            (0..gpus.len())
                .map(|p| t.gpu_gpu(g, p).ty.name().to_string())
                .collect()
        })
        .collect();
    serde_json::json!({
        "nodes": c.nodes.len(),
        "gpus_per_node": gpus.len(),
        "nccl_version": s.version.to_string(),
        "max_bw": t.max_bw,
        "total_bw": t.total_bw,
        "nvswitches": s.count(NodeKind::Nvs),
        "nics": s.count(NodeKind::Nic),
        "gpus": gpus,
        "nets": nets,
        "gpu_paths": paths,
        "notes": c.notes,
    })
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.cmd {
        Cmd::Topo(TopoCmd::Show { input, format }) => {
            let c = load(&input)?;
            if format == "json" {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json(&c)).map_err(|e| e.to_string())?
                );
            } else {
                println!("{}", summary(&c));
                let s = settings(&input)?;
                match c.clique_topology(0, &s).map_err(|e| e.to_string())? {
                    Some(t) => {
                        println!("{}", domain_summary(&c, &t));
                        for line in topo::print::system(&t) {
                            println!("{line}");
                        }
                    }
                    None => {
                        for line in topo::print::system(&c.nodes[0].topo) {
                            println!("{line}");
                        }
                    }
                }
            }
        }
        Cmd::Topo(TopoCmd::Paths { input }) => {
            let c = load(&input)?;
            println!("{}", summary(&c));
            print!("{}", topo::print::matrix(&c.nodes[0].topo));
        }
        Cmd::Topo(TopoCmd::Check { file }) => {
            // A file that cannot be read or parsed is bad input (exit 2), not a lint finding.
            let text = topo::read_text(&file).map_err(|e| e.to_string())?;
            let root = topo::xml::parse(&text, &file).map_err(|e| e.to_string())?;
            let findings = topo::lint::check(&text, &root, &file);
            for f in &findings {
                println!("{f}");
            }
            let bad = findings
                .iter()
                .filter(|f| f.severity >= Severity::Warning)
                .count();
            println!(
                "{file}: {} error(s), {} warning(s), {} note(s)",
                findings
                    .iter()
                    .filter(|f| f.severity == Severity::Error)
                    .count(),
                findings
                    .iter()
                    .filter(|f| f.severity == Severity::Warning)
                    .count(),
                findings
                    .iter()
                    .filter(|f| f.severity == Severity::Info)
                    .count()
            );
            return Ok(if bad > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            });
        }
        Cmd::Topo(TopoCmd::Dot { input, svg }) => {
            let c = load(&input)?;
            let dot = topo::dot::to_dot(&c.nodes[0].topo);
            match svg {
                None => print!("{dot}"),
                Some(out) => write_svg(&dot, &out)?,
            }
        }
        Cmd::Topo(TopoCmd::Dump { input }) => {
            let c = load(&input)?;
            print!("{}", topo::xml::write(&c.nodes[0].xml));
        }
        Cmd::Plan(args) => plan::run(&args)?,
        Cmd::Predict(args) => predict::run(&args)?,
        Cmd::Whatif(args) => whatif::run(&args)?,
        Cmd::Trace(cmd) => trace::run(&cmd)?,
        Cmd::Run(args) => return run::run(&args),
        #[cfg(feature = "fuzz")]
        Cmd::Fuzz(a) => {
            let fails = fuzz::run(&a, |args| run(fuzz::parse::<Cli>(args)?).map(|_| ()))?;
            return Ok(if fails > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    // Behave like other Unix tools when the reader goes away (`ncclsim ... | head`).
    // SAFETY: setting a signal disposition to its default at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Plans of very large clusters fill hundreds of MB once; with transparent huge pages the
    // kernel may compact memory synchronously to back each 2 MiB page, which costs more
    // system time than the planning itself on a busy machine. 4 KiB pages keep it linear.
    // The allocator option alone does not stop the allocator from advising huge pages for its
    // arenas, so the process also opts out of them (`PR_SET_THP_DISABLE`; failure only costs
    // time, so its result is not checked).
    // SAFETY: sets an allocator option (an integer) and a process attribute before the large
    // allocations start.
    unsafe {
        libmimalloc_sys::mi_option_set(libmimalloc_sys::mi_option_large_os_pages, 0);
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ncclsim: {e}");
            ExitCode::from(2)
        }
    }
}
