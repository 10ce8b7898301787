//! Which launcher a command is, and how `ncclsim run` starts it.
//!
//! torchrun and plain programs are started once per simulated node (torchrun launches that
//! node's workers). MPI launchers (`mpirun`, `mpiexec`, ...) and Slurm's `srun` launch every
//! rank of the job themselves, so they are started once, and each rank finds its simulated
//! node from its launcher's variables (`libncclsim_launch.so`, preloaded, reads
//! `NCCLSIM_LAUNCHER`, `NCCLSIM_NODES` and `NCCLSIM_RANKS_PER_NODE`).

use super::{checked_count, quote, Copy, RunArgs};
use std::collections::BTreeMap;
use std::path::Path;

/// How the command launches its ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// OpenMPI, MPICH or another MPI's `mpirun`/`mpiexec`: started once.
    Mpi,
    /// Slurm's `srun`: started once.
    Slurm,
    /// torchrun (`python -m torch.distributed.run`): started once per node.
    Torchrun,
    /// Any other program: started once per node (`--procs-per-node` copies each).
    Plain,
}

impl Launcher {
    /// The `--launcher` value (`auto` detects from the command).
    pub fn from_arg(arg: &str, command: &[String]) -> Launcher {
        match arg {
            "mpi" => Launcher::Mpi,
            "slurm" => Launcher::Slurm,
            "torchrun" => Launcher::Torchrun,
            "plain" => Launcher::Plain,
            _ => detect(command),
        }
    }

    /// Whether the command is started once and spreads its own ranks over the nodes.
    pub fn spreads_ranks(self) -> bool {
        matches!(self, Launcher::Mpi | Launcher::Slurm)
    }

    /// The `NCCLSIM_LAUNCHER` value.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Mpi => "mpi",
            Launcher::Slurm => "slurm",
            Launcher::Torchrun => "torchrun",
            Launcher::Plain => "plain",
        }
    }
}

const MPI_NAMES: &[&str] = &[
    "mpirun",
    "mpiexec",
    "orterun",
    "prterun",
    "prun",
    "mpiexec.hydra",
    "mpiexec.mpich",
    "mpirun.mpich",
    "mpiexec.openmpi",
    "mpirun.openmpi",
];

/// The launcher a command line is, by its program's name.
pub fn detect(command: &[String]) -> Launcher {
    let base = |s: &str| {
        Path::new(s)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let Some(prog) = command.first().map(|p| base(p)) else {
        return Launcher::Plain;
    };
    if MPI_NAMES.contains(&prog.as_str()) {
        return Launcher::Mpi;
    }
    if prog == "srun" {
        return Launcher::Slurm;
    }
    if prog == "torchrun" {
        return Launcher::Torchrun;
    }
    if prog.starts_with("python") {
        let module = command
            .windows(2)
            .find(|w| w[0] == "-m")
            .map(|w| w[1].as_str());
        if matches!(
            module,
            Some("torch.distributed.run" | "torch.distributed.launch")
        ) {
            return Launcher::Torchrun;
        }
    }
    Launcher::Plain
}

/// The number of ranks the launcher's command line asks for, when it says so in a form read
/// here (`-np K`, `-n K`, `-c K`, `--np K`, `--n K`; srun's `-n K`, `-nK`, `--ntasks=K`).
pub fn requested_ranks(launcher: Launcher, command: &[String]) -> Option<usize> {
    let flags: &[&str] = match launcher {
        Launcher::Mpi => &["-np", "-n", "-c", "--np", "--n"],
        Launcher::Slurm => &["-n", "--ntasks"],
        _ => return None,
    };
    // Only the launcher's own options: the first word not starting with '-' after an option
    // value is the program, and its options are not the launcher's.
    let mut i = 1;
    while i < command.len() {
        let a = &command[i];
        for f in flags {
            if a == f {
                return command.get(i + 1)?.parse().ok();
            }
            if let Some(v) = a.strip_prefix(&format!("{f}=")) {
                return v.parse().ok();
            }
        }
        if launcher == Launcher::Slurm {
            if let Some(v) = a.strip_prefix("-n").filter(|v| !v.is_empty()) {
                if let Ok(n) = v.parse() {
                    return Some(n);
                }
            }
        }
        if !a.starts_with('-') {
            return None;
        }
        i += 1;
    }
    None
}

/// The user's `--env NCCLSIM_NODE=K`: it names the node of every process, so it only goes with
/// one simulated node (any other count would be overruled, and is refused instead).
pub fn user_node(base: &BTreeMap<String, String>, nodes: usize) -> Result<Option<String>, String> {
    let inherited = std::env::var("NCCLSIM_NODE").ok();
    let Some(v) = base.get("NCCLSIM_NODE") else {
        if let Some(v) = inherited {
            eprintln!(
                "ncclsim run: NCCLSIM_NODE={v} from the environment is not used: the simulated \
                 node comes from --nodes (or from --env NCCLSIM_NODE=K with --nodes 1)"
            );
        }
        return Ok(None);
    };
    let k: usize = v
        .trim()
        .parse()
        .ok()
        .filter(|&k| k < topo::cluster::MAX_NODES)
        .ok_or_else(|| format!("--env NCCLSIM_NODE={v:?}: not a node index"))?;
    if nodes > 1 {
        return Err(format!(
            "--env NCCLSIM_NODE={k} would put every process on node {k}, but --nodes {nodes} \
             places each process on its own node; drop one of them (with --nodes 1, \
             NCCLSIM_NODE picks the node, e.g. this machine's node of a multi-machine job)"
        ));
    }
    Ok(Some(k.to_string()))
}

/// An MPI launcher or srun, started once: its ranks place themselves (`launcher`).
pub fn launched(
    args: &RunArgs,
    base: &BTreeMap<String, String>,
    nodes: usize,
    kind: Launcher,
) -> Result<Vec<Copy>, String> {
    if args.procs_per_node != 1 {
        return Err(format!(
            "--procs-per-node: {} starts the ranks itself (its -np / -n); --ranks-per-node says \
             how many go on each simulated node",
            quote(&args.command[0])
        ));
    }
    let per = args
        .ranks_per_node
        .map(|p| checked_count("ranks-per-node", p, 4096))
        .transpose()?;
    if let Some(k) = requested_ranks(kind, &args.command) {
        match per {
            None if k % nodes != 0 => {
                return Err(format!(
                    "{}: {k} ranks do not divide over --nodes {nodes}; give --ranks-per-node",
                    quote(&args.command[0])
                ))
            }
            Some(p) if k > p * nodes => {
                return Err(format!(
                    "{}: {k} ranks do not fit on --nodes {nodes} x --ranks-per-node {p}",
                    quote(&args.command[0])
                ))
            }
            _ => {}
        }
    }
    let mut env = base.clone();
    env.insert("NCCLSIM_LAUNCHER".into(), kind.name().into());
    env.insert("NCCLSIM_NODES".into(), nodes.to_string());
    if let Some(p) = per {
        env.insert("NCCLSIM_RANKS_PER_NODE".into(), p.to_string());
    }
    if nodes > 1 {
        env.entry("NCCLSIM_HOSTNAMES".into())
            .or_insert_with(|| "1".into());
    }
    Ok(vec![Copy {
        node: 0,
        rank: 0,
        argv: args.command.clone(),
        env,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn launchers_by_program_name() {
        assert_eq!(detect(&words("mpirun -np 16 ./a")), Launcher::Mpi);
        assert_eq!(
            detect(&words("/usr/bin/mpiexec.hydra -n 4 a")),
            Launcher::Mpi
        );
        assert_eq!(detect(&words("srun -n 16 ./a")), Launcher::Slurm);
        assert_eq!(
            detect(&words("torchrun --nproc_per_node 8 s.py")),
            Launcher::Torchrun
        );
        assert_eq!(
            detect(&words("python3 -m torch.distributed.run s.py")),
            Launcher::Torchrun
        );
        assert_eq!(detect(&words("python3 s.py")), Launcher::Plain);
        assert_eq!(detect(&words("./all_reduce_perf -g 8")), Launcher::Plain);
    }

    #[test]
    fn rank_counts_from_the_launchers_options() {
        let mpi = |s| requested_ranks(Launcher::Mpi, &words(s));
        assert_eq!(mpi("mpirun -np 16 ./a"), Some(16));
        assert_eq!(mpi("mpirun --allow-run-as-root -n 8 ./a -n 3"), Some(8));
        assert_eq!(mpi("mpirun --np=12 ./a"), Some(12));
        // The program's own -n is not the launcher's.
        assert_eq!(mpi("mpirun ./a -n 3"), None);
        let srun = |s| requested_ranks(Launcher::Slurm, &words(s));
        assert_eq!(srun("srun -n16 ./a"), Some(16));
        assert_eq!(srun("srun --ntasks=4 ./a"), Some(4));
        assert_eq!(srun("srun -N 2 ./a"), None);
    }
}
