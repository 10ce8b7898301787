//! The run environment: what a process of an `ncclsim run` job is told about the simulated
//! machine and its place in it, parsed in one place with one policy.
//!
//! `ncclsim run` writes these variables for every process it starts (a user may also set them
//! by hand; README.md, "Environment"); the fake CUDA core, NVML, the launch helper and
//! `libnccl.so.2` all read them through [`RunEnv`], so every library sees the same job and a bad
//! value is refused the same way everywhere: an [`EnvError`] naming the variable, its value and
//! what was expected. A variable that is unset, empty or only blanks counts as unset.
//!
//! The crate is stateless apart from [`RunEnv::current`], the parse of the process's
//! environment, kept with the text of what it read ([`RunEnv::current_text`]). Each shared
//! library that links this crate holds its own copy of that cache, so the process's one parse
//! is the fake CUDA core's: the core answers its text through its vtable
//! (`run_environment`), and the libraries loaded beside it (`libnccl.so.2`, NVML) parse that
//! text ([`RunEnv::from_text`], through `fake_cuda_client::run_env`), so a variable the
//! program changes after CUDA started gives no library another job. Only the code that runs
//! before there is a core (the client finding the core library, the launch helper before
//! `main`) reads the environment itself. NCCL's own variables (`NCCL_*`) keep NCCL's meaning and are
//! read by the settings of the layer NCCL reads them in (`topo`, `planner`, `cost-model`);
//! only `NCCL_TOPO_FILE`, the node file NCCL and the fake GPUs both describe, is here too.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The names of the variables, each written once here.
pub mod names {
    /// The node file of every simulated node (`--topo`).
    pub const TOPO: &str = "NCCLSIM_TOPO";
    /// NCCL's own node file variable, read when [`TOPO`] is unset.
    pub const NCCL_TOPO_FILE: &str = "NCCL_TOPO_FILE";
    /// The GPU model that completes a skeleton node file (`--gpu`).
    pub const GPU: &str = "NCCLSIM_GPU";
    /// This process's simulated node, from 0.
    pub const NODE: &str = "NCCLSIM_NODE";
    /// The job's simulated node count (`--nodes`).
    pub const NODES: &str = "NCCLSIM_NODES";
    /// Ranks per simulated node of an MPI or Slurm launch (`--procs-per-node`).
    pub const RANKS_PER_NODE: &str = "NCCLSIM_RANKS_PER_NODE";
    /// GPUs per NVLink domain (`--nvl-domain`).
    pub const NVL_DOMAIN: &str = "NCCLSIM_NVL_DOMAIN";
    /// The launcher whose ranks place themselves: `mpi` or `slurm`.
    pub const LAUNCHER: &str = "NCCLSIM_LAUNCHER";
    /// `1`: the simulated node's host name in `gethostname`/`uname`.
    pub const HOSTNAMES: &str = "NCCLSIM_HOSTNAMES";
    /// `real` or `virtual` (`--clock`).
    pub const CLOCK: &str = "NCCLSIM_CLOCK";
    /// `<CLOCK_REALTIME ns>,<CLOCK_MONOTONIC ns>` when the job's virtual clocks start.
    pub const CLOCK_EPOCH: &str = "NCCLSIM_CLOCK_EPOCH";
    /// `run`, `time` or `off` (`--compute`).
    pub const COMPUTE: &str = "NCCLSIM_COMPUTE";
    /// `0`: torch ops compute (or shape) without taking modelled time.
    pub const COMPUTE_TIME: &str = "NCCLSIM_COMPUTE_TIME";
    /// `nccl` or `calibrated` (`--model`).
    pub const MODEL: &str = "NCCLSIM_MODEL";
    /// `0` turns the planning and pricing of NCCL calls off.
    pub const SIM: &str = "NCCLSIM_SIM";
    /// `1`: stream work waits out its modelled time in real time (`--pace`).
    pub const PACE: &str = "NCCLSIM_PACE";
    /// `1`: a raw kernel launch the core cannot run is an error.
    pub const STRICT_KERNELS: &str = "NCCLSIM_STRICT_KERNELS";
    /// Measured kernel times, an nsys or Orion CSV (`--kernel-times`).
    pub const KERNEL_TIMES: &str = "NCCLSIM_KERNEL_TIMES";
    /// How launches are matched to [`KERNEL_TIMES`] rows.
    pub const KERNEL_TIMES_MATCH: &str = "NCCLSIM_KERNEL_TIMES_MATCH";
    /// The most host memory this process's device memory may commit (bytes, K/M/G/T).
    pub const HOST_MEMORY: &str = "NCCLSIM_HOST_MEMORY";
    /// The device memory kept cached by freed allocations (bytes, K/M/G/T).
    pub const CACHE_LIMIT: &str = "NCCLSIM_CACHE_LIMIT";
    /// The directory traces are written to (`--trace`).
    pub const TRACE: &str = "NCCLSIM_TRACE";
    /// Where the end-of-run report goes (`--report`).
    pub const REPORT: &str = "NCCLSIM_REPORT";
    /// The job directory every process publishes its telemetry record in.
    pub const JOB_DIR: &str = "NCCLSIM_JOB_DIR";
    /// The deadline of one wait, seconds (default 600).
    pub const TIMEOUT: &str = "NCCLSIM_TIMEOUT";
    /// `1`: the descriptor broker checks peers more strictly.
    pub const HARDEN: &str = "NCCLSIM_HARDEN";
    /// The path of `libncclsim_cuda.so`, when not found by its SONAME.
    pub const CUDA_CORE: &str = "NCCLSIM_CUDA_CORE";
    /// The job's rank layout, `NAME=SIZE,...` (`--mesh`).
    pub const MESH: &str = "NCCLSIM_MESH";
    /// The mesh dimensions whose ranks other than the first are virtual (`--fold`).
    pub const FOLD: &str = "NCCLSIM_FOLD";
    /// This process's rank in the job, as torchrun and `ncclsim run` give it (the launchers'
    /// own variable, read for a folded job's communicators).
    pub const JOB_RANK: &str = "RANK";
}

pub mod mesh;
pub use mesh::{Fold, Mesh};

/// A value of the environment that cannot be used: which variable, its value, what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: expected {expected}")]
pub struct EnvError {
    /// The variable.
    pub name: &'static str,
    /// Its value as found.
    pub value: String,
    /// What it must be.
    pub expected: &'static str,
}

/// The host clock a process sees (`NCCLSIM_CLOCK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Clock {
    /// The machine's own clocks.
    #[default]
    Real,
    /// The job's virtual clock: host time moves with the simulated work it waits for.
    Virtual,
}

/// What torch ops on the simulated GPUs do (`NCCLSIM_COMPUTE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    /// Compute their values on the CPU over the device memory.
    Run,
    /// Take their modelled time only (shapes from meta kernels, values undefined).
    Time,
    /// Leave kernels uncomputed.
    Off,
}

/// Which model prices NCCL calls (`NCCLSIM_MODEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Model {
    /// NCCL's own tuning model.
    #[default]
    Nccl,
    /// The model calibrated on published measurements.
    Calibrated,
}

/// The launcher whose ranks place themselves on simulated nodes (`NCCLSIM_LAUNCHER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// OpenMPI, PMIx or MPICH's Hydra.
    Mpi,
    /// Slurm's `srun`.
    Slurm,
}

impl Launcher {
    /// The name `ncclsim run` writes.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Mpi => "mpi",
            Launcher::Slurm => "slurm",
        }
    }

    /// The variables the launcher gives each rank its rank in (the first one set wins); the
    /// launcher's own processes (`mpirun`, its daemons, `srun`) have none of them.
    pub fn rank_vars(self) -> &'static [&'static str] {
        match self {
            Launcher::Mpi => &["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"],
            Launcher::Slurm => &["SLURM_PROCID"],
        }
    }
}

/// Both clocks when a job's virtual time started, as the launcher read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockEpoch {
    /// `CLOCK_REALTIME`, ns.
    pub realtime_ns: i128,
    /// `CLOCK_MONOTONIC`, ns.
    pub monotonic_ns: i128,
}

/// The job and this process's place in it, as the environment describes them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunEnv {
    /// The node file (`NCCLSIM_TOPO`, else `NCCL_TOPO_FILE`); `None`: the bundled DGX A100.
    pub topo: Option<PathBuf>,
    /// The GPU model completing a skeleton node file (`NCCLSIM_GPU`).
    pub gpu_model: Option<String>,
    /// This process's simulated node (`NCCLSIM_NODE`); `None` before a launcher placed it.
    pub node: Option<u32>,
    /// The job's node count (`NCCLSIM_NODES`, at least 1).
    pub nodes: Option<usize>,
    /// Ranks per node of an MPI or Slurm launch (`NCCLSIM_RANKS_PER_NODE`, at least 1).
    pub ranks_per_node: Option<usize>,
    /// GPUs per NVLink domain (`NCCLSIM_NVL_DOMAIN`, at least 1); `None`: as the hardware
    /// groups them.
    pub nvl_domain: Option<usize>,
    /// The self-placing launcher (`NCCLSIM_LAUNCHER`).
    pub launcher: Option<Launcher>,
    /// This process has its rank from that launcher ([`Launcher::rank_vars`]); `false` in the
    /// launcher's own processes.
    pub launcher_rank: bool,
    /// Simulated host names (`NCCLSIM_HOSTNAMES=1`).
    pub hostnames: bool,
    /// The host clock (`NCCLSIM_CLOCK`).
    pub clock: Clock,
    /// When the job's virtual clocks started (`NCCLSIM_CLOCK_EPOCH`).
    pub clock_epoch: Option<ClockEpoch>,
    /// What torch ops do (`NCCLSIM_COMPUTE`); `None` outside `ncclsim run`.
    pub compute: Option<Compute>,
    /// Torch ops take their modelled time ([`names::COMPUTE_TIME`], default on).
    pub compute_priced: bool,
    /// The model pricing NCCL calls (`NCCLSIM_MODEL`).
    pub model: Model,
    /// Whether NCCL calls are planned and priced (`NCCLSIM_SIM`, default on).
    pub sim: bool,
    /// Real-time pacing of stream work (`NCCLSIM_PACE`).
    pub pace: bool,
    /// Raw kernels the core cannot run are errors (`NCCLSIM_STRICT_KERNELS`).
    pub strict_kernels: bool,
    /// Measured kernel times (`NCCLSIM_KERNEL_TIMES`).
    pub kernel_times: Option<PathBuf>,
    /// Their matching rule (`NCCLSIM_KERNEL_TIMES_MATCH`), checked by `kernel-times`.
    pub kernel_times_match: Option<String>,
    /// Host memory this process's device memory may commit (`NCCLSIM_HOST_MEMORY`), bytes.
    pub host_memory: Option<u64>,
    /// Device memory cached by freed allocations (`NCCLSIM_CACHE_LIMIT`), bytes.
    pub cache_limit: Option<u64>,
    /// The trace directory (`NCCLSIM_TRACE`).
    pub trace: Option<PathBuf>,
    /// The report's destination template (`NCCLSIM_REPORT`).
    pub report: Option<OsString>,
    /// The job directory (`NCCLSIM_JOB_DIR`).
    pub job_dir: Option<PathBuf>,
    /// The deadline of one wait (`NCCLSIM_TIMEOUT`, seconds, default 600).
    pub timeout: Duration,
    /// Stricter peer checks in the descriptor broker (`NCCLSIM_HARDEN`).
    pub harden: bool,
    /// The core library's path (`NCCLSIM_CUDA_CORE`).
    pub cuda_core: Option<PathBuf>,
    /// The job's rank layout with its folded dimensions ([`names::MESH`], [`names::FOLD`]):
    /// which ranks run and which are virtual copies of a representative.
    pub fold: Option<Fold>,
    /// This process's rank in the job ([`names::JOB_RANK`]).
    pub job_rank: Option<usize>,
}

/// The default deadline of one wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

impl RunEnv {
    /// The environment of this process, parsed on first use and kept: every later call gives
    /// the same answer (variables set afterwards are not seen).
    pub fn current() -> Result<&'static RunEnv, &'static EnvError> {
        process().0.as_ref()
    }

    /// The variables [`current`](RunEnv::current)'s parse read, as they were then: every one
    /// that was set, `NAME=VALUE` each ended by a NUL byte, in the order they were read. A
    /// library that gets this text from another (the fake CUDA core's `run_environment`)
    /// and parses it with [`from_text`](RunEnv::from_text) sees the job exactly as that
    /// library does, whatever the process set in its environment in between.
    pub fn current_text() -> &'static [u8] {
        &process().1
    }

    /// Parses a text of [`current_text`](RunEnv::current_text)'s form.
    pub fn from_text(text: &[u8]) -> Result<RunEnv, EnvError> {
        use std::os::unix::ffi::OsStrExt;
        let vars: Vec<(&[u8], &[u8])> = text
            .split(|&b| b == 0)
            .filter_map(|entry| {
                let eq = entry.iter().position(|&b| b == b'=')?;
                Some((&entry[..eq], &entry[eq + 1..]))
            })
            .collect();
        RunEnv::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name.as_bytes())
                .map(|(_, v)| std::ffi::OsStr::from_bytes(v).to_os_string())
        })
    }

    /// Parses this process's environment now.
    pub fn from_process() -> Result<RunEnv, EnvError> {
        RunEnv::from_lookup(|k| std::env::var_os(k))
    }

    /// Parses the variables `var` gives (the process's, or the environment a launcher is
    /// about to give its children).
    pub fn from_lookup(var: impl Fn(&str) -> Option<OsString>) -> Result<RunEnv, EnvError> {
        let r = Reader { var: &var };
        let env = RunEnv {
            topo: r
                .path(names::TOPO)
                .or_else(|| r.path(names::NCCL_TOPO_FILE)),
            gpu_model: r.text(names::GPU)?,
            node: r.number(names::NODE, 0, "a simulated node index (0, 1, ...)")?,
            nodes: r.number(names::NODES, 1, "a node count (1, 2, ...)")?,
            ranks_per_node: r.number(names::RANKS_PER_NODE, 1, "a rank count (1, 2, ...)")?,
            nvl_domain: r.number(
                names::NVL_DOMAIN,
                1,
                "a whole number of GPUs per NVLink domain",
            )?,
            launcher: r.choice(
                names::LAUNCHER,
                &[("mpi", Launcher::Mpi), ("slurm", Launcher::Slurm)],
                "mpi or slurm",
            )?,
            launcher_rank: false,
            hostnames: r.flag(names::HOSTNAMES)?.unwrap_or(false),
            clock: r
                .choice(
                    names::CLOCK,
                    &[("real", Clock::Real), ("virtual", Clock::Virtual)],
                    "real or virtual",
                )?
                .unwrap_or_default(),
            clock_epoch: r.parsed(
                names::CLOCK_EPOCH,
                parse_epoch,
                "<CLOCK_REALTIME ns>,<CLOCK_MONOTONIC ns>",
            )?,
            compute: r.choice(
                names::COMPUTE,
                &[
                    ("run", Compute::Run),
                    ("time", Compute::Time),
                    ("off", Compute::Off),
                ],
                "run, time or off",
            )?,
            compute_priced: r.flag(names::COMPUTE_TIME)?.unwrap_or(true),
            model: r
                .choice(
                    names::MODEL,
                    &[("nccl", Model::Nccl), ("calibrated", Model::Calibrated)],
                    "nccl or calibrated",
                )?
                .unwrap_or_default(),
            sim: r.flag(names::SIM)?.unwrap_or(true),
            pace: r.flag(names::PACE)?.unwrap_or(false),
            strict_kernels: r.flag(names::STRICT_KERNELS)?.unwrap_or(false),
            kernel_times: r.path(names::KERNEL_TIMES),
            kernel_times_match: r.text(names::KERNEL_TIMES_MATCH)?,
            host_memory: r.parsed(names::HOST_MEMORY, parse_bytes, BYTES)?,
            cache_limit: r.parsed(names::CACHE_LIMIT, parse_bytes, BYTES)?,
            trace: r.path(names::TRACE),
            report: r.os(names::REPORT),
            job_dir: r.path(names::JOB_DIR),
            timeout: r
                .parsed(
                    names::TIMEOUT,
                    parse_seconds,
                    "a positive number of seconds",
                )?
                .unwrap_or(DEFAULT_TIMEOUT),
            harden: r.flag(names::HARDEN)?.unwrap_or(false),
            cuda_core: r.path(names::CUDA_CORE),
            fold: fold(&r)?,
            job_rank: r.number(names::JOB_RANK, 0, "a rank (0, 1, ...)")?,
        };
        let launcher_rank = env
            .launcher
            .is_some_and(|l| l.rank_vars().iter().any(|v| var(v).is_some()));
        Ok(RunEnv {
            launcher_rank,
            ..env
        })
    }

    /// This process's node, 0 when no launcher placed it.
    pub fn node_or_zero(&self) -> u32 {
        self.node.unwrap_or(0)
    }

    /// The job runs on the virtual host clock (`NCCLSIM_CLOCK=virtual`).
    pub fn virtual_clock(&self) -> bool {
        self.clock == Clock::Virtual
    }

    /// This process reads the virtual host clock: the job runs on it and the process is one
    /// of the job's programs, not a process of an MPI or Slurm launcher itself (`mpirun`, its
    /// daemons and `srun` keep real time: their own timeouts and event loops need it).
    pub fn virtual_host_clock(&self) -> bool {
        self.virtual_clock() && (self.launcher.is_none() || self.launcher_rank)
    }
}

/// The process's parse and the text of what it read ([`RunEnv::current_text`]).
fn process() -> &'static (Result<RunEnv, EnvError>, Vec<u8>) {
    static ENV: OnceLock<(Result<RunEnv, EnvError>, Vec<u8>)> = OnceLock::new();
    ENV.get_or_init(|| {
        use std::os::unix::ffi::OsStrExt;
        let text = std::cell::RefCell::new(Vec::new());
        let env = RunEnv::from_lookup(|name| {
            let value = std::env::var_os(name)?;
            let mut t = text.borrow_mut();
            t.extend_from_slice(name.as_bytes());
            t.push(b'=');
            t.extend_from_slice(value.as_bytes());
            t.push(0);
            Some(value)
        });
        (env, text.into_inner())
    })
}

const BYTES: &str = "a byte count (1234, 64K, 8M, 4G, 1T)";

/// The mesh and its folded dimensions. A mesh without a fold runs every rank (no fold).
fn fold<F: Fn(&str) -> Option<OsString>>(r: &Reader<'_, F>) -> Result<Option<Fold>, EnvError> {
    let mesh = r.parsed(
        names::MESH,
        |v| Mesh::parse(v).ok(),
        "NAME=SIZE,... (distinct names, sizes at least 1)",
    )?;
    let Some(text) = r.text(names::FOLD)? else {
        return Ok(None);
    };
    let Some(mesh) = mesh else {
        return Err(EnvError {
            name: names::FOLD,
            value: text,
            expected: "a fold of the job's mesh, which NCCLSIM_MESH must give",
        });
    };
    Fold::parse(mesh, &text).map(Some).map_err(|_| EnvError {
        name: names::FOLD,
        value: text,
        expected: "dimensions of NCCLSIM_MESH, comma-separated, each once",
    })
}

/// Reads one variable at a time with the crate's policy: blank is unset, a bad value an error.
struct Reader<'a, F: Fn(&str) -> Option<OsString>> {
    var: &'a F,
}

impl<F: Fn(&str) -> Option<OsString>> Reader<'_, F> {
    /// The raw value, `None` when unset or blank.
    fn os(&self, name: &str) -> Option<OsString> {
        let v = (self.var)(name)?;
        let blank = v.to_str().is_some_and(|s| s.trim().is_empty());
        (!blank).then_some(v)
    }

    fn path(&self, name: &str) -> Option<PathBuf> {
        self.os(name).map(PathBuf::from)
    }

    fn text(&self, name: &'static str) -> Result<Option<String>, EnvError> {
        match self.os(name) {
            None => Ok(None),
            Some(v) => v
                .into_string()
                .map(|s| Some(s.trim().to_string()))
                .map_err(|v| EnvError {
                    name,
                    value: v.to_string_lossy().into_owned(),
                    expected: "UTF-8 text",
                }),
        }
    }

    fn parsed<T>(
        &self,
        name: &'static str,
        parse: impl Fn(&str) -> Option<T>,
        expected: &'static str,
    ) -> Result<Option<T>, EnvError> {
        let Some(v) = self.text(name)? else {
            return Ok(None);
        };
        parse(&v).map(Some).ok_or(EnvError {
            name,
            value: v,
            expected,
        })
    }

    fn number<T: std::str::FromStr + PartialOrd + From<u8>>(
        &self,
        name: &'static str,
        least: u8,
        expected: &'static str,
    ) -> Result<Option<T>, EnvError> {
        self.parsed(
            name,
            |v| v.parse::<T>().ok().filter(|n| *n >= T::from(least)),
            expected,
        )
    }

    fn choice<T: Copy>(
        &self,
        name: &'static str,
        choices: &[(&str, T)],
        expected: &'static str,
    ) -> Result<Option<T>, EnvError> {
        self.parsed(
            name,
            |v| choices.iter().find(|(n, _)| *n == v).map(|(_, c)| *c),
            expected,
        )
    }

    fn flag(&self, name: &'static str) -> Result<Option<bool>, EnvError> {
        self.parsed(name, parse_flag, "1 or 0 (true or false)")
    }
}

fn parse_flag(v: &str) -> Option<bool> {
    match v {
        "1" | "true" => Some(true),
        "0" | "false" => Some(false),
        _ => None,
    }
}

fn parse_seconds(v: &str) -> Option<Duration> {
    let s: f64 = v.parse().ok()?;
    (s.is_finite() && s > 0.0).then(|| Duration::from_secs_f64(s.min(1e9)))
}

fn parse_epoch(v: &str) -> Option<ClockEpoch> {
    let (a, b) = v.split_once(',')?;
    Some(ClockEpoch {
        realtime_ns: a.trim().parse().ok()?,
        monotonic_ns: b.trim().parse().ok()?,
    })
}

/// `1234`, `64K`, `8M`, `4G`, `1T` (binary multiples) as bytes; `None` for anything else or a
/// count past `u64`.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 10),
        (i, 'm' | 'M') => (&t[..i], 20),
        (i, 'g' | 'G') => (&t[..i], 30),
        (i, 't' | 'T') => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: u64 = digits.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pairs` in `current_text`'s form.
    fn text(pairs: &[(&str, &str)]) -> Vec<u8> {
        pairs
            .iter()
            .flat_map(|(n, v)| format!("{n}={v}\0").into_bytes())
            .collect()
    }

    #[test]
    fn the_text_form_parses_as_the_variables_do() {
        let job = [
            (names::NODE, "1"),
            (names::NODES, "2"),
            (names::MESH, "dp=2,local=8"),
            (names::FOLD, "dp"),
            (names::CLOCK, "virtual"),
            (names::TRACE, "/tmp/a=b"),
        ];
        let (a, b) = (env(&job).unwrap(), RunEnv::from_text(&text(&job)).unwrap());
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_eq!(b.node, Some(1));
        assert_eq!(b.trace.as_deref(), Some(std::path::Path::new("/tmp/a=b")));
        // A bad value is the same error either way; an empty text is no job at all.
        let bad = [(names::NODE, "x")];
        assert_eq!(
            env(&bad).unwrap_err().to_string(),
            RunEnv::from_text(&text(&bad)).unwrap_err().to_string()
        );
        assert_eq!(
            format!("{:?}", RunEnv::from_text(b"").unwrap()),
            format!("{:?}", env(&[]).unwrap())
        );
    }

    fn env(pairs: &[(&str, &str)]) -> Result<RunEnv, EnvError> {
        RunEnv::from_lookup(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn nothing_set_is_the_bundled_node_on_real_time() {
        let e = env(&[]).unwrap();
        assert_eq!(e.topo, None);
        assert_eq!(e.node, None);
        assert_eq!(e.clock, Clock::Real);
        assert_eq!(e.compute, None);
        assert!(e.sim && !e.pace && !e.hostnames);
        assert_eq!(e.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn a_job_as_ncclsim_run_writes_it() {
        let e = env(&[
            ("NCCLSIM_TOPO", "/t/dgx-h100.xml"),
            ("NCCL_TOPO_FILE", "/other.xml"),
            ("NCCLSIM_NODE", " 3 "),
            ("NCCLSIM_NODES", "4"),
            ("NCCLSIM_NVL_DOMAIN", "72"),
            ("NCCLSIM_LAUNCHER", "mpi"),
            ("NCCLSIM_CLOCK", "virtual"),
            ("NCCLSIM_CLOCK_EPOCH", "1700000000000000000,12345"),
            ("NCCLSIM_COMPUTE", "time"),
            ("NCCLSIM_MODEL", "calibrated"),
            ("NCCLSIM_SIM", "0"),
            ("NCCLSIM_HOST_MEMORY", "8G"),
            ("NCCLSIM_TIMEOUT", "2.5"),
            ("NCCLSIM_MESH", "dp=4,local=8"),
            ("NCCLSIM_FOLD", "dp"),
        ])
        .unwrap();
        let fold = e.fold.as_ref().unwrap();
        assert_eq!((fold.ranks(), fold.real_ranks().len()), (32, 8));
        assert_eq!(e.topo, Some(PathBuf::from("/t/dgx-h100.xml")));
        assert_eq!(
            (e.node, e.nodes, e.nvl_domain),
            (Some(3), Some(4), Some(72))
        );
        assert_eq!(e.launcher, Some(Launcher::Mpi));
        assert!(e.virtual_clock());
        assert_eq!(
            e.clock_epoch,
            Some(ClockEpoch {
                realtime_ns: 1_700_000_000_000_000_000,
                monotonic_ns: 12345
            })
        );
        assert_eq!(e.compute, Some(Compute::Time));
        assert_eq!(e.model, Model::Calibrated);
        assert!(!e.sim);
        assert_eq!(e.host_memory, Some(8 << 30));
        assert_eq!(e.timeout, Duration::from_millis(2500));
    }

    #[test]
    fn a_launchers_own_processes_keep_real_time() {
        let virt = [("NCCLSIM_CLOCK", "virtual")];
        assert!(env(&virt).unwrap().virtual_host_clock());
        let mpirun = [virt[0], ("NCCLSIM_LAUNCHER", "mpi")];
        assert!(!env(&mpirun).unwrap().virtual_host_clock());
        let rank = [mpirun[0], mpirun[1], ("PMIX_RANK", "3")];
        assert!(env(&rank).unwrap().launcher_rank);
        assert!(env(&rank).unwrap().virtual_host_clock());
        let srun = [virt[0], ("NCCLSIM_LAUNCHER", "slurm"), ("PMIX_RANK", "3")];
        assert!(!env(&srun).unwrap().virtual_host_clock());
        assert!(!env(&[("PMIX_RANK", "3")]).unwrap().virtual_host_clock());
    }

    #[test]
    fn nccl_topo_file_is_read_when_ncclsim_topo_is_unset_or_blank() {
        let e = env(&[("NCCLSIM_TOPO", " "), ("NCCL_TOPO_FILE", "/n.xml")]).unwrap();
        assert_eq!(e.topo, Some(PathBuf::from("/n.xml")));
    }

    #[test]
    fn a_bad_value_names_the_variable_the_value_and_what_it_must_be() {
        let cases = [
            ("NCCLSIM_NODE", "abc", "node index"),
            ("NCCLSIM_NODE", "-1", "node index"),
            ("NCCLSIM_NODES", "0", "node count"),
            ("NCCLSIM_NVL_DOMAIN", "0", "GPUs per NVLink domain"),
            ("NCCLSIM_CLOCK", "virt", "real or virtual"),
            ("NCCLSIM_COMPUTE", "fast", "run, time or off"),
            ("NCCLSIM_MODEL", "mine", "nccl or calibrated"),
            ("NCCLSIM_PACE", "yes", "1 or 0"),
            ("NCCLSIM_CACHE_LIMIT", "8Q", "byte count"),
            ("NCCLSIM_TIMEOUT", "-3", "positive number of seconds"),
            ("NCCLSIM_CLOCK_EPOCH", "12", "CLOCK_MONOTONIC"),
            ("NCCLSIM_LAUNCHER", "pbs", "mpi or slurm"),
        ];
        for (name, value, expected) in cases {
            let e = env(&[(name, value)]).unwrap_err();
            assert_eq!((e.name, e.value.as_str()), (name, value));
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("{name}={value:?}: expected ")),
                "{text}"
            );
            assert!(text.contains(expected), "{text}");
        }
    }

    #[test]
    fn a_fold_needs_a_mesh_that_has_its_dimensions() {
        let e = env(&[("NCCLSIM_FOLD", "dp")]).unwrap_err();
        assert_eq!(e.name, "NCCLSIM_FOLD");
        let e = env(&[("NCCLSIM_MESH", "dp=2"), ("NCCLSIM_FOLD", "tp")]).unwrap_err();
        assert_eq!((e.name, e.value.as_str()), ("NCCLSIM_FOLD", "tp"));
        let e = env(&[("NCCLSIM_MESH", "dp=0"), ("NCCLSIM_FOLD", "dp")]).unwrap_err();
        assert_eq!(e.name, "NCCLSIM_MESH");
        assert_eq!(env(&[("NCCLSIM_MESH", "dp=2")]).unwrap().fold, None);
    }

    #[test]
    fn a_clock_epoch_is_two_integers() {
        let e = |v: &str| parse_epoch(v).map(|e| (e.realtime_ns, e.monotonic_ns));
        assert_eq!(e("12,34"), Some((12, 34)));
        assert_eq!(
            e(" 1700000000000000000 , 5 "),
            Some((1_700_000_000_000_000_000, 5))
        );
        assert_eq!(e("12"), None);
        assert_eq!(e("a,b"), None);
    }

    #[test]
    fn byte_counts_take_binary_suffixes_and_refuse_overflow() {
        assert_eq!(parse_bytes("1234"), Some(1234));
        assert_eq!(parse_bytes("64k"), Some(64 << 10));
        assert_eq!(parse_bytes("1T"), Some(1 << 40));
        assert_eq!(parse_bytes("99999999T"), None);
        assert_eq!(parse_bytes("G"), None);
    }

    proptest::proptest! {
        #[test]
        fn any_value_of_any_variable_parses_or_names_that_variable(
            name in proptest::sample::select(vec![
                names::NODE, names::NODES, names::NVL_DOMAIN, names::CLOCK, names::COMPUTE,
                names::HOST_MEMORY, names::TIMEOUT, names::CLOCK_EPOCH, names::SIM, names::MESH,
            ]),
            value in "\\PC{0,12}",
        ) {
            if let Err(e) = env(&[(name, &value)]) {
                proptest::prop_assert_eq!(e.name, name);
                proptest::prop_assert_eq!(e.value, value.trim());
            }
        }
    }
}
