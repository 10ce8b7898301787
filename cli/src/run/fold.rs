//! `--mesh` and `--fold`: the job's rank layout and the ranks that run.
//!
//! With `--fold DIM`, every rank whose `DIM` coordinate is not 0 is virtual: it is not started,
//! and the libraries make the others see it (its communicators' members, its data, its time)
//! as a copy of its representative (`run_env::Fold`). The job's own layout is what the program
//! sees: `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and the node of every started rank are the full
//! job's. Only nodes that hold a real rank are started; torchrun, which rendezvouses with every
//! node's agent, is told the number of started nodes (`PET_NNODES`, `PET_NODE_RANK`) and its
//! workers' ranks are put back in the full job's numbering before their `main` runs
//! (`libncclsim_launch.so`), where a worker of a virtual rank ends at once with status 0.
//! torch's communicators get one root (`TORCH_NCCL_RANKS_PER_ROOT` = the job's ranks), rank 0,
//! which is real: by default torch makes one unique id per 128 ranks, by ranks that may be
//! virtual.

use super::launcher::Launcher;
use super::RunArgs;
use run_env::{Fold, Mesh};

/// torchrun's `--nproc-per-node` (`--nproc_per_node`, with `=` or as the next word), when it
/// is a number.
pub fn torchrun_nproc(command: &[String]) -> Option<usize> {
    let flags = ["--nproc-per-node", "--nproc_per_node"];
    for (i, a) in command.iter().enumerate() {
        for f in flags {
            if a == f {
                return command.get(i + 1)?.parse().ok();
            }
            if let Some(v) = a.strip_prefix(f).and_then(|v| v.strip_prefix('=')) {
                return v.parse().ok();
            }
        }
    }
    None
}

/// The fold `--mesh`/`--fold` ask for over `nodes` nodes of `per` ranks, checked against the
/// job's size; `None` without `--fold`.
pub fn job_fold(
    args: &RunArgs,
    kind: Launcher,
    nodes: usize,
    per: Option<usize>,
) -> Result<Option<Fold>, String> {
    if args.fold.is_empty() {
        if args.mesh.is_some() {
            return Err("--mesh names the dimensions --fold folds: give --fold too".into());
        }
        return Ok(None);
    }
    if kind.spreads_ranks() {
        return Err(format!(
            "--fold: the {} launcher starts every rank itself and its program's own calls span \
             them all; fold torchrun or plain launches",
            kind.name()
        ));
    }
    let per = per.ok_or_else(|| {
        "--fold: give torchrun's --nproc-per-node as a number, so that the job's ranks per \
         node are known"
            .to_string()
    })?;
    let mesh = match &args.mesh {
        Some(m) => Mesh::parse(m).map_err(|e| format!("--mesh {m}: {e}"))?,
        None => Mesh::new(vec![("dp".into(), nodes), ("local".into(), per)])
            .map_err(|e| format!("--fold: {e}"))?,
    };
    let ranks = nodes * per;
    if mesh.size() != ranks {
        return Err(format!(
            "--mesh {mesh}: {} ranks, but the job has {ranks} (--nodes {nodes} x {per} per node)",
            mesh.size()
        ));
    }
    let names: Vec<&str> = args.fold.iter().map(|s| s.trim()).collect();
    Fold::new(mesh, &names).map(Some)
}

/// The job's fold from the command line, with its ranks per node: `None` without `--fold`.
pub fn of_args(args: &RunArgs, kind: Launcher) -> Result<Option<(Fold, usize)>, String> {
    if args.fold.is_empty() && args.mesh.is_none() {
        return Ok(None);
    }
    let nodes = super::checked_count("nodes", args.nodes, topo::cluster::MAX_NODES as i64)?;
    let per = match kind {
        Launcher::Torchrun => torchrun_nproc(&args.command),
        _ => Some(super::checked_count(
            "procs-per-node",
            args.procs_per_node,
            4096,
        )?),
    };
    Ok(job_fold(args, kind, nodes, per)?.map(|f| (f, per.unwrap_or(1))))
}

/// The nodes (of `per` ranks each) that hold at least one real rank, ascending.
pub fn real_nodes(fold: &Fold, per: usize) -> Vec<usize> {
    let mut nodes: Vec<usize> = fold.real_ranks().iter().map(|r| r / per).collect();
    nodes.dedup();
    nodes
}

/// What `--dry-run` prints of the fold: the mesh, the real ranks and their nodes.
pub fn describe(fold: &Fold, per: usize) -> Vec<String> {
    let real = fold.real_ranks();
    let mut out = vec![format!(
        "# mesh {} folded over {}: {} of {} ranks run, each standing for {}",
        fold.mesh(),
        fold,
        real.len(),
        fold.ranks(),
        fold.multiplicity()
    )];
    for node in real_nodes(fold, per) {
        let on: Vec<String> = real
            .iter()
            .filter(|&&r| r / per == node)
            .map(|r| r.to_string())
            .collect();
        out.push(format!("# real node {node}: ranks {}", on.join(",")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn torchruns_process_count_in_both_spellings() {
        assert_eq!(
            torchrun_nproc(&words("torchrun --nproc_per_node 8 t.py")),
            Some(8)
        );
        assert_eq!(
            torchrun_nproc(&words("torchrun --nproc-per-node=4 t.py")),
            Some(4)
        );
        assert_eq!(
            torchrun_nproc(&words("torchrun --nproc-per-node gpu t.py")),
            None
        );
        assert_eq!(torchrun_nproc(&words("torchrun t.py")), None);
    }

    #[test]
    fn a_tp_inside_node_job_runs_the_first_replica_of_each_node_position() {
        let f = Fold::new(Mesh::parse("pp=4,dp=4,tp=8").unwrap(), &["dp"]).unwrap();
        // 128 ranks on 16 nodes of 8: pipeline stage s's first replica is node 4s.
        assert_eq!(real_nodes(&f, 8), vec![0, 4, 8, 12]);
        let d = describe(&f, 8);
        assert!(
            d[0].contains("32 of 128 ranks run, each standing for 4"),
            "{}",
            d[0]
        );
        assert_eq!(d[2], "# real node 4: ranks 32,33,34,35,36,37,38,39");
    }
}
