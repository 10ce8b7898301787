//! Which simulated node a rank of a launcher's job is on, from the launcher's own variables.
//!
//! `ncclsim run` starts an MPI or Slurm launcher once and says so with `NCCLSIM_LAUNCHER`
//! (`mpi`, `slurm`), `NCCLSIM_NODES` (N) and optionally `NCCLSIM_RANKS_PER_NODE` (P). Every
//! process the launcher starts reads its rank and the job size from the variables its launcher
//! sets, and the ranks are laid out in blocks: rank r is on node r / P, local rank r % P, with
//! P = size / N unless given (as `mpirun --map-by node` would not, but as `--map-by slot` and
//! Slurm's default block distribution do). Processes without a rank variable (the launcher
//! itself, its daemons) are not placed.

/// Where one rank goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Simulated node.
    pub node: usize,
    /// Rank among the node's ranks.
    pub local: usize,
    /// Ranks per node.
    pub per_node: usize,
    /// Simulated nodes.
    pub nodes: usize,
    /// The launcher's per-host variables that this process has, with their simulated values.
    pub rewrites: Vec<(&'static str, String)>,
}

/// The launchers whose ranks are placed by their variables (`NCCLSIM_LAUNCHER`): OpenMPI
/// (`OMPI_COMM_WORLD_*`), PMIx (`PMIX_RANK`), MPICH/Hydra (`PMI_RANK`, `PMI_SIZE`), and Slurm's
/// `srun` (`SLURM_PROCID`, `SLURM_NTASKS`). Their rank variables are `Launcher::rank_vars`.
pub use run_env::Launcher as Kind;

fn size_vars(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Mpi => &["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "OMPI_UNIVERSE_SIZE"],
        Kind::Slurm => &["SLURM_NTASKS", "SLURM_NPROCS"],
    }
}

/// Per-host variables programs read to pick their GPU: (name, what it becomes).
fn local_vars(kind: Kind) -> &'static [(&'static str, Local)] {
    match kind {
        Kind::Mpi => &[
            ("OMPI_COMM_WORLD_LOCAL_RANK", Local::Rank),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", Local::Size),
            ("OMPI_COMM_WORLD_NODE_RANK", Local::Rank),
            ("MPI_LOCALRANKID", Local::Rank),
            ("MPI_LOCALNRANKS", Local::Size),
            ("PMI_LOCAL_RANK", Local::Rank),
            ("PMI_LOCAL_SIZE", Local::Size),
        ],
        Kind::Slurm => &[
            ("SLURM_LOCALID", Local::Rank),
            ("SLURM_NODEID", Local::Node),
            ("SLURM_NNODES", Local::Nodes),
            ("SLURM_JOB_NUM_NODES", Local::Nodes),
        ],
    }
}

#[derive(Clone, Copy)]
enum Local {
    Rank,
    Size,
    Node,
    Nodes,
}

fn number(
    var: &impl Fn(&str) -> Option<String>,
    names: &[&str],
) -> Result<Option<(String, usize)>, String> {
    for n in names {
        if let Some(v) = var(n) {
            let parsed = v
                .trim()
                .parse::<usize>()
                .map_err(|_| format!("{n}={v:?} is not a number"))?;
            return Ok(Some((n.to_string(), parsed)));
        }
    }
    Ok(None)
}

/// This process's placement, `None` when it is not one of the launcher's ranks.
pub fn place(
    kind: Kind,
    nodes: usize,
    per_node: Option<usize>,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<Placement>, String> {
    if nodes == 0 {
        return Err("NCCLSIM_NODES must be at least 1".into());
    }
    let Some((rank_name, rank)) = number(&var, kind.rank_vars())? else {
        return Ok(None);
    };
    let per = match per_node {
        Some(0) => return Err("NCCLSIM_RANKS_PER_NODE must be at least 1".into()),
        Some(p) => p,
        None => {
            let Some((size_name, size)) = number(&var, size_vars(kind))? else {
                return Err(format!(
                    "{rank_name} is set but no job size ({}); give the ranks per node \
                     (ncclsim run --ranks-per-node)",
                    size_vars(kind).join(", ")
                ));
            };
            if size == 0 || size % nodes != 0 {
                return Err(format!(
                    "{size_name}={size} ranks do not divide over {nodes} simulated nodes; \
                     give the ranks per node (ncclsim run --ranks-per-node)"
                ));
            }
            size / nodes
        }
    };
    let node = rank / per;
    if node >= nodes {
        return Err(format!(
            "{rank_name}={rank} with {per} ranks per node is past the last of {nodes} \
             simulated nodes"
        ));
    }
    let local = rank % per;
    let rewrites = local_vars(kind)
        .iter()
        .filter(|(n, _)| var(n).is_some())
        .map(|&(n, what)| {
            let v = match what {
                Local::Rank => local,
                Local::Size => per,
                Local::Node => node,
                Local::Nodes => nodes,
            };
            (n, v.to_string())
        })
        .collect();
    Ok(Some(Placement {
        node,
        local,
        per_node: per,
        nodes,
        rewrites,
    }))
}

/// The host name simulated node `node` shows: the real one with `-node<k>` after its first
/// label (`gpu7.example.org` -> `gpu7-node1.example.org`), so programs that cut the name at
/// the first dot (NCCL, nccl-tests) still see distinct names. At most `max` bytes: the label
/// is shortened to make room.
pub fn host_name(real: &str, node: usize, max: usize) -> String {
    let (first, rest) = match real.find('.') {
        Some(i) => real.split_at(i),
        None => (real, ""),
    };
    let suffix = format!("-node{node}");
    let mut first = first.to_string();
    while !first.is_empty() && first.len() + suffix.len() + rest.len() > max {
        first.pop();
    }
    let mut name = format!("{first}{suffix}{rest}");
    name.truncate(max);
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn openmpi_ranks_in_blocks_with_local_variables() {
        // mpirun -np 16 on one real host: local rank 0..15 there, 0..7 per simulated node.
        let p = place(
            Kind::Mpi,
            2,
            None,
            env(&[
                ("OMPI_COMM_WORLD_RANK", "11"),
                ("OMPI_COMM_WORLD_SIZE", "16"),
                ("OMPI_COMM_WORLD_LOCAL_RANK", "11"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "16"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!((p.node, p.local, p.per_node), (1, 3, 8));
        assert_eq!(
            p.rewrites,
            vec![
                ("OMPI_COMM_WORLD_LOCAL_RANK", "3".to_string()),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "8".to_string())
            ]
        );
    }

    #[test]
    fn mpich_and_slurm_variables() {
        let p = place(
            Kind::Mpi,
            4,
            None,
            env(&[("PMI_RANK", "5"), ("PMI_SIZE", "8")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!((p.node, p.local), (2, 1));
        let p = place(
            Kind::Slurm,
            2,
            Some(4),
            env(&[
                ("SLURM_PROCID", "6"),
                ("SLURM_NODEID", "0"),
                ("SLURM_LOCALID", "6"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!((p.node, p.local), (1, 2));
        assert!(p.rewrites.contains(&("SLURM_NODEID", "1".into())));
        assert!(p.rewrites.contains(&("SLURM_LOCALID", "2".into())));
    }

    #[test]
    fn launcher_processes_are_not_placed() {
        assert_eq!(place(Kind::Mpi, 2, None, env(&[])).unwrap(), None);
        // A Slurm step's SLURM_PROCID does not make mpirun's ranks Slurm ranks.
        assert_eq!(
            place(Kind::Mpi, 2, None, env(&[("SLURM_PROCID", "0")])).unwrap(),
            None
        );
    }

    #[test]
    fn bad_layouts_are_named() {
        let e = place(
            Kind::Mpi,
            2,
            None,
            env(&[
                ("OMPI_COMM_WORLD_RANK", "0"),
                ("OMPI_COMM_WORLD_SIZE", "15"),
            ]),
        )
        .unwrap_err();
        assert!(
            e.contains("OMPI_COMM_WORLD_SIZE=15") && e.contains("2 simulated nodes"),
            "{e}"
        );
        let e = place(Kind::Slurm, 2, Some(4), env(&[("SLURM_PROCID", "8")])).unwrap_err();
        assert!(e.contains("SLURM_PROCID=8"), "{e}");
        let e = place(Kind::Mpi, 2, None, env(&[("PMI_RANK", "x")])).unwrap_err();
        assert!(e.contains("PMI_RANK=\"x\""), "{e}");
        let e = place(Kind::Mpi, 2, None, env(&[("PMIX_RANK", "1")])).unwrap_err();
        assert!(e.contains("--ranks-per-node"), "{e}");
    }

    #[test]
    fn host_names_differ_per_node_before_the_first_dot() {
        assert_eq!(
            host_name("gpu7.example.org", 1, 64),
            "gpu7-node1.example.org"
        );
        assert_eq!(host_name("box", 0, 64), "box-node0");
        let long = "a".repeat(64);
        let n = host_name(&long, 12, 64);
        assert_eq!(n.len(), 64);
        assert!(n.ends_with("-node12"), "{n}");
    }
}
