//! torchrun's workers in a folded job (`NCCLSIM_MESH`, `NCCLSIM_FOLD`): `ncclsim run` starts
//! torchrun only on the nodes that hold a real rank and tells it their number, so its agents
//! number their workers over the started nodes. Before a worker's `main` runs, its variables
//! are put back in the full job's numbering (node `NCCLSIM_NODE`, `LOCAL_RANK` within it), and a
//! worker whose rank is virtual ends at once with status 0: torchrun counts it as done.

use run_env::Fold;

/// What a worker of `node` with local rank `local` of `local_world` sees in the full job: the
/// variables to set, and whether the rank runs.
pub fn worker(
    fold: &Fold,
    node: usize,
    local: usize,
    local_world: usize,
) -> (Vec<(&'static str, String)>, bool) {
    let world = fold.ranks();
    let rank = node * local_world + local;
    let groups = world / local_world.max(1);
    let vars = vec![
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", world.to_string()),
        ("GROUP_RANK", node.to_string()),
        ("GROUP_WORLD_SIZE", groups.to_string()),
        ("ROLE_RANK", rank.to_string()),
        ("ROLE_WORLD_SIZE", world.to_string()),
    ];
    (vars, rank < world && fold.is_real(rank))
}

/// Rewrites this process's variables when it is a torchrun worker of a folded job; ends it
/// when its rank is virtual.
pub fn place_worker(fold: &Fold, node: Option<u32>) {
    if std::env::var_os("TORCHELASTIC_RUN_ID").is_none() {
        return;
    }
    let num = |k: &str| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
    };
    let (Some(local), Some(local_world), Some(node)) =
        (num("LOCAL_RANK"), num("LOCAL_WORLD_SIZE"), node)
    else {
        return;
    };
    let (vars, real) = worker(fold, node as usize, local, local_world);
    if !real {
        // SAFETY: ending the process before it has done anything.
        unsafe { libc::_exit(0) };
    }
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use run_env::Mesh;

    #[test]
    fn workers_take_the_full_jobs_ranks_and_virtual_ones_end() {
        // FSDP x TP=4 on 2 nodes of 8: dp=4, tp=4; node 0 holds dp 0 and 1.
        let f = Fold::new(Mesh::parse("dp=4,tp=4").unwrap(), &["dp"]).unwrap();
        let (vars, real) = worker(&f, 0, 3, 8);
        assert!(real);
        assert!(vars.contains(&("RANK", "3".into())));
        assert!(vars.contains(&("WORLD_SIZE", "16".into())));
        assert!(vars.contains(&("GROUP_WORLD_SIZE", "2".into())));
        assert!(!worker(&f, 0, 4, 8).1);
        assert!(!worker(&f, 1, 0, 8).1);
    }
}
