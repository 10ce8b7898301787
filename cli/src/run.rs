//! `ncclsim run`: runs an unmodified program on ncclsim's libraries (`libnccl.so.2` and the fake
//! CUDA stack) in place of NVIDIA's, once per simulated node, with the simulation's settings in
//! its environment.
//!
//! The libraries are the ones cargo builds next to this binary (`cargo build --release` puts
//! `libnccl.so`, `libncclsim_cuda.so`, `libcudart12.so`, ... in `target/release`). The loader
//! looks libraries up by their SONAMEs (`libnccl.so.2`, `libcudart.so.13`, ...), so a directory
//! of links under those names is made next to them (`ncclsim-sonames/`) and put first on
//! `LD_LIBRARY_PATH`. A program's `DT_RPATH` (PyTorch's names the directories of NVIDIA's pip
//! wheels) is searched before `LD_LIBRARY_PATH`, so the libraries are also preloaded: a preloaded
//! object satisfies every later `DT_NEEDED` of the same SONAME, whatever the search path says.
//!
//! Nodes: with `--nodes N` a torchrun or plain command is started N times, once per simulated
//! node, each with `NCCLSIM_NODE` set (the fake CUDA core's node, which the runtime also
//! reports as its host), and `--procs-per-node P` starts P copies per node. An MPI launcher
//! (`mpirun`, `mpiexec`) or Slurm's `srun` is started once, and each of its ranks finds its node
//! from the launcher's rank variables (`launcher`, and the preloaded `libncclsim_launch.so`).
//! With more than one node, each node shows its own host name (`NCCLSIM_HOSTNAMES`). Every copy gets the launch environment of
//! torchrun's workers and of `torchrun` itself (`PET_NNODES`, `PET_NODE_RANK`, `PET_MASTER_ADDR`,
//! `PET_MASTER_PORT`: the defaults of its `--nnodes`, `--node_rank`, ... options), and the
//! placeholders `{node}`, `{nodes}`, `{rank}`, `{local_rank}`, `{nranks}` in its arguments are
//! replaced. Each copy runs in its own process group; when one fails the others are stopped
//! (SIGTERM, then SIGKILL), and SIGINT/SIGTERM to `ncclsim run` are passed on. When `ncclsim
//! run` itself ends without stopping them (SIGKILL, a crash), a watcher process stops the
//! copies' groups the same way (`watch`).
//!
//! Tools: `nvidia-smi` (this crate's second binary, over the preloaded fake NVML) is linked into
//! `ncclsim-sonames/bin/`, which goes first on the command's `PATH`, so environment checks and
//! monitors that run it see the simulated node. Every copy gets a job directory
//! (`NCCLSIM_JOB_DIR`, `job`) where each process's fake CUDA core publishes its memory and busy
//! time, so NVML in any process of the run (nvidia-smi, a monitor) sees the whole job.

mod fold;
mod job;
mod launcher;
mod stubs;
mod watch;

use launcher::Launcher;
use run_env::{names, RunEnv};

use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct RunArgs {
    /// Topology XML of one node (default: the fake CUDA core's bundled DGX A100 node).
    #[arg(long)]
    topo: Option<String>,
    /// Simulated nodes: a torchrun or plain command is started once per node, with
    /// NCCLSIM_NODE set; an MPI launcher or srun is started once and its ranks are spread over
    /// the nodes (each with its own host name).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    nodes: i64,
    /// How the command launches ranks: mpi (mpirun/mpiexec) and slurm (srun) are started once
    /// and their ranks placed by OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID;
    /// torchrun and plain are started once per node. auto: from the command's program name.
    #[arg(long, default_value = "auto", value_parser = ["auto", "mpi", "slurm", "torchrun", "plain"])]
    launcher: String,
    /// Ranks of an MPI or Slurm launch per simulated node (default: the job's ranks / --nodes);
    /// rank r is on node r / this.
    #[arg(long, allow_negative_numbers = true)]
    ranks_per_node: Option<i64>,
    /// Copies of the command per node (ranks of a program that does not launch its own).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    procs_per_node: i64,
    /// Write one Perfetto/Chrome trace per rank into this directory (NCCLSIM_TRACE).
    #[arg(long)]
    trace: Option<String>,
    /// Write each process's end-of-run report here (NCCLSIM_REPORT; %h = host, %p = pid).
    #[arg(long)]
    report: Option<String>,
    /// Cost model pricing each call: nccl (NCCL's own tuning model) or calibrated.
    #[arg(long, value_parser = ["nccl", "calibrated"])]
    model: Option<String>,
    /// Hold each completion until the wall clock reaches its virtual time (NCCLSIM_PACE=1), so
    /// programs that time with host clocks see predicted times while ranks have cores to spare.
    #[arg(long, conflicts_with = "clock")]
    pace: bool,
    /// The program's host clock (NCCLSIM_CLOCK): virtual (the default on x86-64 and AArch64;
    /// real with --pace):
    /// clock_gettime, gettimeofday and time read the simulated host's clock, which moves when
    /// the program waits for device work, sleeps, or issues torch ops (see README); real: the
    /// machine's clocks, so host time costs nothing on the devices' timeline.
    #[arg(long, value_parser = ["real", "virtual"])]
    clock: Option<String>,
    /// What torch ops on the simulated GPUs do (NCCLSIM_COMPUTE): run computes their values on
    /// the CPU over the device memory; time computes nothing (shapes only, values undefined,
    /// memory untouched); off leaves kernels uncomputed.
    #[arg(long, default_value = "run", value_parser = ["run", "time", "off"])]
    compute: String,
    /// Measured kernel durations that override the compute model (NCCLSIM_KERNEL_TIMES): nsys's
    /// GPU trace CSV (`nsys stats --report gputrace --format csv`) or Orion's kernel-info CSV,
    /// from one real GPU; every simulated GPU takes them for the launches they match.
    #[arg(long, value_name = "FILE")]
    kernel_times: Option<String>,
    /// How launches find their measured durations (NCCLSIM_KERNEL_TIMES_MATCH): name (the k-th
    /// launch named X takes the k-th duration listed for X) or order (the k-th launch takes the
    /// k-th row).
    #[arg(long, value_parser = ["name", "order"], requires = "kernel_times")]
    kernel_times_match: Option<String>,
    /// GPUs per NVLink domain spanning nodes (NCCLSIM_NVL_DOMAIN), as in `ncclsim plan`: the
    /// simulated NVML reports one GPU fabric (cluster UUID, clique) per domain and NCCL plans
    /// communicators across it as one multi-node NVLink node. Default: nodes whose NVLinks go
    /// to an external NVSwitch fabric (NVL72 trays) form domains of up to 72 GPUs.
    #[arg(long = "nvl-domain", value_name = "GPUS")]
    nvl_domain: Option<usize>,
    /// The job's rank layout for --fold: NAME=SIZE,..., row major, last dimension fastest, its
    /// product the job's ranks (default dp=NODES,local=RANKS-PER-NODE).
    #[arg(long, value_name = "NAME=SIZE,...")]
    mesh: Option<String>,
    /// Run only the ranks whose coordinate in this mesh dimension is 0 (repeatable, or
    /// comma-separated): every other rank is virtual, a copy of the rank with the same
    /// coordinates and 0 in the folded ones, and is not started. The program still sees the
    /// full job (RANK, WORLD_SIZE, every communicator's full member set).
    #[arg(long, value_name = "DIM", value_delimiter = ',')]
    fold: Vec<String>,
    /// More environment for the command, e.g. --env NCCL_DEBUG=INFO (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Directory holding the built libraries (default: NCCLSIM_LIB_DIR, else this binary's
    /// directory, else ../lib/ncclsim beside it).
    #[arg(long)]
    lib_dir: Option<PathBuf>,
    /// More directories for the loader after ncclsim's, e.g. stub libraries of one's own for
    /// a torch installed without NVIDIA's wheels (repeatable).
    #[arg(long, value_name = "DIR")]
    lib_path: Vec<PathBuf>,
    /// Stand-ins for the NVIDIA libraries a torch without NVIDIA's wheels links: auto makes
    /// them once per torch build when the command runs Python or torchrun (cached under
    /// ~/.cache/ncclsim) and puts them on the loader's path after --lib-path; off does not.
    #[arg(long, default_value = "auto", value_parser = ["auto", "off"])]
    torch_stubs: String,
    /// Seconds the other processes get to finish after one failed, before they are stopped
    /// (SIGTERM, then SIGKILL after as long again).
    #[arg(long, default_value_t = 10.0)]
    grace: f64,
    /// Print the environment and commands that would run, and run nothing.
    #[arg(long)]
    dry_run: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// The fake CUDA core (file and SONAME), which `--clock virtual` preloads first.
const CORE: &str = "libncclsim_cuda.so";

/// The built libraries: (file cargo writes, SONAME programs ask for, preloaded).
///
/// Both CUDA runtimes are preloaded: their symbols carry version nodes (`libcudart.so.12`,
/// `libcudart.so.13`), so a program binds to the major it was linked against. The 13 runtime
/// comes first, so unversioned lookups (`dlsym(RTLD_DEFAULT, ...)`) find the current ABI. The
/// cuBLAS and cuBLASLt libraries follow the same rule, and being preloaded they win over
/// NVIDIA's (a pip-installed torch's RPATH names its wheels) and over stub directories given
/// with `--lib-path`.
///
/// The launch library comes first, so that its `gethostname` and `uname` are the ones every
/// program binds to.
const LIBS: &[(&str, &str, bool)] = &[
    ("libncclsim_launch.so", "libncclsim_launch.so", true),
    ("libncclsim_cuda.so", "libncclsim_cuda.so", false),
    ("libnccl.so", "libnccl.so.2", true),
    ("libcudart13.so", "libcudart.so.13", true),
    ("libcudart12.so", "libcudart.so.12", true),
    ("libcuda_driver.so", "libcuda.so.1", true),
    ("libcublas13.so", "libcublas.so.13", true),
    ("libcublas12.so", "libcublas.so.12", true),
    ("libcublaslt13.so", "libcublasLt.so.13", true),
    ("libcublaslt12.so", "libcublasLt.so.12", true),
    ("libnvidia_ml.so", "libnvidia-ml.so.1", true),
];

const BUILD_HINT: &str = "build them with `cargo build --release` at the repository root (or pass --lib-dir / NCCLSIM_LIB_DIR)";

fn lib_dir(args: &RunArgs) -> Result<PathBuf, String> {
    let has_all = |d: &Path| LIBS.iter().all(|(f, _, _)| d.join(f).is_file());
    let missing = |d: &Path| -> Vec<&str> {
        LIBS.iter()
            .filter(|(f, _, _)| !d.join(f).is_file())
            .map(|(f, _, _)| *f)
            .collect()
    };
    let explicit = args
        .lib_dir
        .clone()
        .or_else(|| std::env::var_os("NCCLSIM_LIB_DIR").map(PathBuf::from));
    if let Some(d) = explicit {
        if !has_all(&d) {
            return Err(format!(
                "library directory {}: missing {}; {BUILD_HINT}",
                d.display(),
                missing(&d).join(", ")
            ));
        }
        return Ok(d);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let own = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let candidates = [own.clone(), own.join("../lib/ncclsim")];
    for d in &candidates {
        if has_all(d) {
            return Ok(d.clone());
        }
    }
    Err(format!(
        "ncclsim's libraries are not next to {} (missing {}); {BUILD_HINT}",
        exe.display(),
        missing(&own).join(", ")
    ))
}

/// `dir/ncclsim-sonames/<SONAME>` -> `dir/<file>` links, made idempotently (a link is replaced
/// atomically by renaming a fresh one over it, so concurrent runs never see a missing name).
/// Falls back to a per-user cache directory when `dir` is not writable.
fn soname_dir(dir: &Path) -> Result<PathBuf, String> {
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let try_in = |links: &Path| -> std::io::Result<()> {
        std::fs::create_dir_all(links)?;
        for (file, soname, _) in LIBS {
            let target = dir.join(file);
            let link = links.join(soname);
            if std::fs::read_link(&link).ok().as_deref() == Some(target.as_path()) {
                continue;
            }
            let tmp = links.join(format!(".{soname}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp)?;
            std::fs::rename(&tmp, &link)?;
        }
        Ok(())
    };
    let local = dir.join("ncclsim-sonames");
    match try_in(&local) {
        Ok(()) => Ok(local),
        Err(first) => {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .ok_or_else(|| format!("{}: {first}", local.display()))?;
            let tag = topo::hash::fnv1a(dir.to_string_lossy().as_bytes());
            let cache = base.join(format!("ncclsim/sonames-{tag:016x}"));
            try_in(&cache).map_err(|e| {
                format!(
                    "cannot link the libraries under their SONAMEs in {} ({first}) or {} ({e})",
                    local.display(),
                    cache.display()
                )
            })?;
            Ok(cache)
        }
    }
}

/// The `nvidia-smi` binary built with this one: beside it, else in the library directory.
fn nvidia_smi(lib_dir: &Path) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let own = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    [own.join("nvidia-smi"), lib_dir.join("nvidia-smi")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "nvidia-smi is not next to {} or in {}; {BUILD_HINT}",
                exe.display(),
                lib_dir.display()
            )
        })
}

/// `sonames/bin/nvidia-smi` -> the built `nvidia-smi`, made like the SONAME links: the
/// directory put first on the command's `PATH`.
fn tool_dir(sonames: &Path, smi: &Path) -> Result<PathBuf, String> {
    let bin = sonames.join("bin");
    let smi = smi
        .canonicalize()
        .map_err(|e| format!("{}: {e}", smi.display()))?;
    let link = bin.join("nvidia-smi");
    if std::fs::read_link(&link).ok().as_deref() != Some(smi.as_path()) {
        let made = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(&bin)?;
            let tmp = bin.join(format!(".nvidia-smi.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&smi, &tmp)?;
            std::fs::rename(&tmp, &link)
        })();
        made.map_err(|e| format!("cannot link nvidia-smi into {}: {e}", bin.display()))?;
    }
    Ok(bin)
}

/// A TCP port free on the loopback now, for torchrun's rendezvous.
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("free port: {e}"))
}

fn checked_count(name: &str, v: i64, max: i64) -> Result<usize, String> {
    if v < 1 || v > max {
        return Err(format!("--{name} {v}: must be between 1 and {max}"));
    }
    Ok(v as usize)
}

/// The environment shared by every copy: libraries and simulation settings.
fn base_env(
    args: &RunArgs,
    sonames: &Path,
    tools: &Path,
    torch_stubs: Option<&Path>,
) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    let mut bin = vec![tools.display().to_string()];
    if let Ok(old) = std::env::var("PATH") {
        if !old.is_empty() {
            bin.push(old);
        }
    }
    env.insert("PATH".into(), bin.join(":"));
    let mut path: Vec<String> = vec![sonames.display().to_string()];
    path.extend(args.lib_path.iter().map(|p| p.display().to_string()));
    path.extend(torch_stubs.map(|p| p.display().to_string()));
    if let Ok(old) = std::env::var("LD_LIBRARY_PATH") {
        if !old.is_empty() {
            path.push(old);
        }
    }
    env.insert("LD_LIBRARY_PATH".into(), path.join(":"));
    let mut preload: Vec<String> = LIBS
        .iter()
        .filter(|(_, _, p)| *p)
        .map(|(_, s, _)| sonames.join(s).display().to_string())
        .collect();
    if let Ok(old) = std::env::var("LD_PRELOAD") {
        if !old.is_empty() {
            preload.push(old);
        }
    }
    env.insert("LD_PRELOAD".into(), preload.join(":"));
    if let Some(t) = &args.topo {
        let p = Path::new(t);
        topo::read_xml(t).map_err(|e| format!("--topo: {e}"))?;
        let abs = p.canonicalize().map_err(|e| format!("--topo {t}: {e}"))?;
        env.insert(names::TOPO.into(), abs.display().to_string());
    }
    if let Some(d) = &args.trace {
        std::fs::create_dir_all(d).map_err(|e| format!("--trace {d}: {e}"))?;
        let abs = Path::new(d)
            .canonicalize()
            .map_err(|e| format!("--trace {d}: {e}"))?;
        env.insert(names::TRACE.into(), abs.display().to_string());
    }
    if let Some(d) = args.nvl_domain {
        // Grouped here once, as `ncclsim plan` groups them, so that a domain the nodes do not
        // fit stops the run before any process starts.
        if let Some(t) = &args.topo {
            let nodes = usize::try_from(args.nodes).unwrap_or(1).max(1);
            let s = topo::TopoSettings::default();
            // The grouping's errors name the flag, its value and the file.
            crate::load_cluster(t, nodes, &s, None, None, Some(d), topo::NicGuids::PerHost)?;
        } else if d == 0 {
            return Err("--nvl-domain 0: an NVLink domain needs at least one GPU".into());
        }
        env.insert(names::NVL_DOMAIN.into(), d.to_string());
    }
    if let Some(r) = &args.report {
        env.insert(names::REPORT.into(), r.clone());
    }
    if let Some(m) = &args.model {
        env.insert(names::MODEL.into(), m.clone());
    }
    if args.pace {
        env.insert(names::PACE.into(), "1".into());
    }
    env.insert(names::COMPUTE.into(), args.compute.clone());
    if let Some(f) = &args.kernel_times {
        // Read once here so that a bad file stops the run before any process starts.
        kernel_times::KernelTimes::read(f, kernel_times::MatchBy::Name)
            .map_err(|e| format!("--kernel-times: {e}"))?;
        let abs = Path::new(f)
            .canonicalize()
            .map_err(|e| format!("--kernel-times {f}: {e}"))?;
        env.insert(names::KERNEL_TIMES.into(), abs.display().to_string());
        env.insert(
            names::KERNEL_TIMES_MATCH.into(),
            args.kernel_times_match.as_deref().unwrap_or("name").into(),
        );
    }
    // The Python package first on the path: torch loads it through its backend entry point.
    let mut pythonpath = vec![crate::python::package_dir()?.display().to_string()];
    if let Ok(old) = std::env::var("PYTHONPATH") {
        if !old.is_empty() {
            pythonpath.push(old);
        }
    }
    env.insert("PYTHONPATH".into(), pythonpath.join(":"));
    // The host clock: --clock; else real with --pace or as an inherited NCCLSIM_CLOCK says;
    // else virtual where the clock can be interposed, so the program's own timers (and a
    // framework's tokens/s) read the prediction.
    let interposed = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));
    let clock = match &args.clock {
        Some(c) => Some(c.as_str()),
        None if args.pace || !interposed => Some("real"),
        None if std::env::var_os(names::CLOCK).is_some() => None,
        None => Some("virtual"),
    };
    if let Some(c) = clock {
        env.insert(names::CLOCK.into(), c.into());
    }
    for kv in &args.env {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--env {kv:?}: expected NAME=VALUE"))?;
        env.insert(k.to_string(), v.to_string());
    }
    // The setting the copies will see: --clock or --env, else the one they inherit.
    // Every copy parses what it inherits with these settings over it, as here: a value none
    // of them could use stops the run now, named. (An inherited NCCLSIM_NODE is not passed on.)
    let seen = |env: &BTreeMap<String, String>| {
        RunEnv::from_lookup(|k| {
            env.get(k)
                .map(std::ffi::OsString::from)
                .or_else(|| (k != names::NODE).then(|| std::env::var_os(k)).flatten())
        })
        .map_err(|e| format!("the run environment: {e}"))
    };
    if seen(&env)?.virtual_clock() {
        virtual_clock_env(&mut env, sonames)?;
    }
    seen(&env)?;
    Ok(env)
}

/// The virtual host clock: the core goes first in `LD_PRELOAD` (its clock functions stand in
/// front of the C library's) and every copy gets the same epoch, the launcher's real
/// `CLOCK_REALTIME` and `CLOCK_MONOTONIC` now (`NCCLSIM_CLOCK_EPOCH`).
fn virtual_clock_env(env: &mut BTreeMap<String, String>, sonames: &Path) -> Result<(), String> {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return Err("--clock virtual: only x86-64 and AArch64 builds interpose the clock".into());
    }
    let core = sonames.join(CORE).display().to_string();
    let preload = env.get("LD_PRELOAD").cloned().unwrap_or_default();
    let joined = if preload.is_empty() {
        core
    } else {
        format!("{core}:{preload}")
    };
    env.insert("LD_PRELOAD".into(), joined);
    let now = |clk| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer.
        unsafe { libc::clock_gettime(clk, &mut ts) };
        ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
    };
    let epoch = format!(
        "{},{}",
        now(libc::CLOCK_REALTIME),
        now(libc::CLOCK_MONOTONIC)
    );
    env.entry(names::CLOCK_EPOCH.into()).or_insert(epoch);
    Ok(())
}

/// One process to start: its node, ranks and environment.
struct Copy {
    node: usize,
    rank: usize,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
}

fn copies(
    args: &RunArgs,
    base: &BTreeMap<String, String>,
    port: u16,
    kind: Launcher,
    folded: Option<&(run_env::Fold, usize)>,
) -> Result<Vec<Copy>, String> {
    let nodes = checked_count("nodes", args.nodes, topo::cluster::MAX_NODES as i64)?;
    // Under --fold only nodes with a real rank start; torchrun's agents count only them.
    let started: Vec<usize> = match folded {
        Some((f, per)) => fold::real_nodes(f, *per),
        None => (0..nodes).collect(),
    };
    let user_node = launcher::user_node(base, nodes)?;
    if kind.spreads_ranks() {
        return launcher::launched(args, base, nodes, kind);
    }
    if args.ranks_per_node.is_some() {
        return Err(format!(
            "--ranks-per-node is for MPI and Slurm launchers (--launcher {} here): use \
             --procs-per-node to start copies of the command on each node",
            kind.name()
        ));
    }
    let per = checked_count("procs-per-node", args.procs_per_node, 4096)?;
    let nranks = nodes
        .checked_mul(per)
        .filter(|&n| n <= 65_536)
        .ok_or_else(|| {
            format!("--nodes {nodes} x --procs-per-node {per}: more than 65536 processes")
        })?;
    let mut out = Vec::with_capacity(nranks);
    for (started_index, &node) in started.iter().enumerate() {
        for local in 0..per {
            let rank = node * per + local;
            if kind == Launcher::Plain && folded.is_some_and(|(f, _)| !f.is_real(rank)) {
                continue;
            }
            let sub = |s: &str| {
                s.replace("{node}", &node.to_string())
                    .replace("{nodes}", &nodes.to_string())
                    .replace("{rank}", &rank.to_string())
                    .replace("{local_rank}", &local.to_string())
                    .replace("{nranks}", &nranks.to_string())
            };
            let mut env = base.clone();
            let mut set = |k: &str, v: String| {
                // What the user set (--env or the caller's environment) wins.
                if !env.contains_key(k) && std::env::var_os(k).is_none() {
                    env.insert(k.to_string(), v);
                }
            };
            set("PET_NNODES", started.len().to_string());
            set("PET_NODE_RANK", started_index.to_string());
            set("PET_MASTER_ADDR", "127.0.0.1".into());
            set("PET_MASTER_PORT", port.to_string());
            set("MASTER_ADDR", "127.0.0.1".into());
            set("MASTER_PORT", port.to_string());
            if per > 1 || nodes > 1 {
                set("RANK", rank.to_string());
                set("WORLD_SIZE", nranks.to_string());
                set("LOCAL_RANK", local.to_string());
                set("LOCAL_WORLD_SIZE", per.to_string());
                set("NODE_RANK", node.to_string());
            }
            if nodes > 1 {
                set(names::HOSTNAMES, "1".into());
            }
            // The node is the simulation's (or the user's own --env with one node), never
            // inherited.
            let node_env = user_node.clone().unwrap_or_else(|| node.to_string());
            env.insert(names::NODE.into(), node_env);
            if let Some((f, _)) = folded {
                env.insert(names::NODES.into(), nodes.to_string());
                env.insert(names::MESH.into(), f.mesh().to_string());
                // torch makes one unique id per 128 ranks (ncclCommInitRankScalable), each by
                // the first rank of its block, which may be virtual: one root, rank 0's.
                env.entry("TORCH_NCCL_RANKS_PER_ROOT".into())
                    .or_insert_with(|| f.ranks().to_string());
                env.insert(names::FOLD.into(), f.to_string());
            }
            out.push(Copy {
                node,
                rank,
                argv: args.command.iter().map(|a| sub(a)).collect(),
                env,
            });
        }
    }
    Ok(out)
}

fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,%+@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Signals to pass on to the copies (0 = none yet).
fn register_signals() -> Result<Arc<AtomicUsize>, String> {
    let got = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_usize(sig, got.clone(), sig as usize)
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    Ok(got)
}

fn kill_group(child: &Child, sig: i32) {
    // The copy leads its own process group (process_group(0)), so this reaches its children
    // (torchrun's workers) too.
    let pgid = child.id() as libc::pid_t;
    // SAFETY: killpg only sends a signal; an already-gone group gives ESRCH, which is ignored.
    unsafe {
        libc::killpg(pgid, sig);
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => status.to_string(),
    }
}

pub fn run(args: &RunArgs) -> Result<ExitCode, String> {
    if !(args.grace.is_finite() && (0.0..=86_400.0).contains(&args.grace)) {
        return Err(format!(
            "--grace {}: must be 0 to 86400 seconds",
            args.grace
        ));
    }
    let grace = Duration::from_secs_f64(args.grace);
    let dir = lib_dir(args)?;
    let sonames = soname_dir(&dir)?;
    let tools = tool_dir(&sonames, &nvidia_smi(&dir)?)?;
    let torch_stubs = match (args.torch_stubs.as_str(), args.dry_run) {
        ("auto", false) => stubs::interpreter(&args.command).and_then(|py| {
            let package = crate::python::package_dir().ok()?;
            stubs::for_python(&py, &package)
                .map_err(|e| {
                    eprintln!(
                        "ncclsim run: going on without stand-ins for torch's NVIDIA libraries: {e}"
                    )
                })
                .ok()
                .flatten()
        }),
        _ => None,
    };
    let base = base_env(args, &sonames, &tools, torch_stubs.as_deref())?;
    let port = free_port()?;
    let kind = Launcher::from_arg(&args.launcher, &args.command);
    let folded = fold::of_args(args, kind)?;
    let copies = copies(args, &base, port, kind, folded.as_ref())?;
    if args.dry_run {
        if let Some((f, per)) = &folded {
            for line in fold::describe(f, *per) {
                println!("{line}");
            }
        }
        if kind.spreads_ranks() {
            println!(
                "# launcher {}: started once; each rank finds its simulated node from its rank \
                 variables",
                kind.name()
            );
        }
        for (k, v) in &base {
            println!("{k}={}", quote(v));
        }
        for c in &copies {
            let extra: Vec<String> = c
                .env
                .iter()
                .filter(|(k, v)| base.get(*k) != Some(v))
                .map(|(k, v)| format!("{k}={}", quote(v)))
                .collect();
            let argv: Vec<String> = c.argv.iter().map(|a| quote(a)).collect();
            println!(
                "# node {} rank {}: {} {}",
                c.node,
                c.rank,
                extra.join(" "),
                argv.join(" ")
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let job = job::JobDir::create()?;
    // Forked while the launcher has one thread, before the signal handlers are installed.
    let watcher = watch::Watcher::start(copies.len(), grace, job.path())?;
    let signals = register_signals()?;
    // One slot per copy, emptied when the copy has ended.
    let mut children: Vec<Option<Child>> = Vec::with_capacity(copies.len());
    for c in &copies {
        let mut cmd = Command::new(&c.argv[0]);
        cmd.args(&c.argv[1..])
            .envs(&c.env)
            .env(run_env::names::JOB_DIR, job.path());
        if !c.env.contains_key(names::NODE) {
            // The launcher's ranks place themselves; an inherited node would stop them.
            cmd.env_remove(names::NODE);
        }
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let pipe = watcher.pipe();
        // SAFETY: the hook runs in the child between fork and exec and only makes
        // async-signal-safe calls (`register_self`).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                watch::register_self(pipe)
            });
        }
        match cmd.spawn() {
            Ok(ch) => children.push(Some(ch)),
            Err(e) => {
                for ch in children.iter_mut().flatten() {
                    kill_group(ch, libc::SIGKILL);
                    let _ = ch.wait();
                    watcher.forget(ch.id());
                }
                return Err(format!("cannot start {}: {e}", quote(&c.argv[0])));
            }
        }
    }
    // (copy, how it ended, exit code to pass on, when)
    let mut first_failure: Option<(usize, String, u8, Instant)> = None;
    let mut stop_sent: Option<Instant> = None;
    loop {
        let mut running = 0;
        for (i, slot) in children.iter_mut().enumerate() {
            let Some(ch) = slot else { continue };
            match ch.try_wait() {
                Ok(Some(st)) => {
                    if !st.success() && first_failure.is_none() {
                        use std::os::unix::process::ExitStatusExt;
                        let code = st
                            .code()
                            .map(|c| c.clamp(1, 255) as u8)
                            .unwrap_or_else(|| 128 + st.signal().unwrap_or(1) as u8);
                        first_failure = Some((i, describe(st), code, Instant::now()));
                    }
                    watcher.forget(ch.id());
                    *slot = None;
                }
                Ok(None) => running += 1,
                Err(e) => return Err(format!("waiting for a process: {e}")),
            }
        }
        if running == 0 {
            break;
        }
        let sig = signals.swap(0, Ordering::Relaxed) as i32;
        let want_stop = if sig != 0 {
            Some(sig)
        } else if first_failure
            .as_ref()
            .is_some_and(|f| f.3.elapsed() >= grace)
        {
            Some(libc::SIGTERM)
        } else {
            None
        };
        if let Some(sig) = want_stop {
            // A failure's SIGTERM goes once; signals to `ncclsim run` are passed on each time.
            if stop_sent.is_none() || sig != libc::SIGTERM {
                for ch in children.iter().flatten() {
                    kill_group(ch, sig);
                }
                stop_sent.get_or_insert_with(Instant::now);
            }
        }
        if stop_sent.is_some_and(|t| t.elapsed() >= grace) {
            for ch in children.iter().flatten() {
                kill_group(ch, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    match first_failure {
        None => Ok(ExitCode::SUCCESS),
        Some((i, what, code, _)) => {
            let c = &copies[i];
            if kind.spreads_ranks() {
                eprintln!(
                    "ncclsim run: the launcher ({}) ended with {what}",
                    quote(&c.argv[0])
                );
                return Ok(ExitCode::from(code));
            }
            eprintln!(
                "ncclsim run: node {} rank {} ({}) ended with {what}",
                c.node,
                c.rank,
                quote(&c.argv[0])
            );
            Ok(ExitCode::from(code))
        }
    }
}

#[cfg(test)]
mod tests {
    /// `pip install` (setup.py) must put every library `ncclsim run` looks for beside the binary.
    #[test]
    fn the_python_package_build_ships_every_library() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../setup.py");
        let setup = std::fs::read_to_string(path).expect("setup.py");
        for file in super::LIBS
            .iter()
            .map(|(f, _, _)| *f)
            .chain(["ncclsim", "nvidia-smi"])
        {
            assert!(
                setup.contains(&format!("\"{file}\"")),
                "setup.py lacks {file}"
            );
        }
    }
}
