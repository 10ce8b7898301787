//! `ncclCommSplit` (and `ncclCommShrink`): children of a communicator, by color and key, and
//! those of a communicator with virtual members (a folded job), whose members come from the
//! job's recorded groups.

use super::*;

/// Mixes a parent's magic with a child number (children of one parent get distinct magics
/// that every member computes alike).
fn child_magic(parent: u64, child: u32, color: i32) -> u64 {
    fnv1a(
        &[
            parent.to_le_bytes(),
            (child as u64).to_le_bytes(),
            (color as i64).to_le_bytes(),
        ]
        .concat(),
    )
}

/// `ncclCommSplit` (and `ncclCommShrink`): collective over `parent`. Members with the same
/// `color` form a child, ordered by `key` with ties in parent-rank order; `NCCL_SPLIT_NOCOLOR`
/// (-1) takes part and gets no communicator.
pub fn split(
    parent: &Comm,
    color: i32,
    key: i32,
    config: CommConfig,
    abort: Arc<AtomicBool>,
    (handle, api): (usize, &'static str),
) -> Result<Option<Comm>> {
    if color < -1 {
        return Err(NcclError::invalid_argument(format!(
            "color {color} is negative (only NCCL_SPLIT_NOCOLOR = -1 is allowed)"
        )));
    }
    let child = parent.child_count.fetch_add(1, Ordering::Relaxed) + 1;
    if let Some(pf) = &parent.fold {
        return split_folded(
            parent,
            pf,
            (color, key, child),
            config,
            abort,
            (handle, api),
        );
    }
    let mut e = Enc::default();
    e.i64(color as i64).i64(key as i64);
    let all = parent
        .hub
        .lock()
        .map_err(|_| NcclError::internal("hub lock poisoned"))?
        .allgather(&e.0)?;
    let mut pairs = Vec::with_capacity(all.len());
    for b in &all {
        let mut d = Dec::new(b);
        pairs.push((d.i64()? as i32, d.i64()? as i32));
    }
    // Child members of my color, ordered by key then parent rank.
    let mut group: Vec<usize> = (0..parent.nranks)
        .filter(|&r| pairs[r].0 == color && color != -1)
        .collect();
    group.sort_by_key(|&r| (pairs[r].1, r));
    // The child's rank 0 opens its hub listener and tells everyone (second exchange).
    let new_rank = group.iter().position(|&r| r == parent.rank);
    let listener = if new_rank == Some(0) {
        Some(bootstrap::listen(None)?)
    } else {
        None
    };
    let mut e = Enc::default();
    if let Some(l) = &listener {
        let a = bootstrap::local_addr(l)?;
        e.u64(u32::from(*a.ip()) as u64).u64(a.port() as u64);
    }
    let addrs = parent
        .hub
        .lock()
        .map_err(|_| NcclError::internal("hub lock poisoned"))?
        .allgather(&e.0)?;
    let Some(new_rank) = new_rank else {
        crate::error::info(&format!(
            "Rank {} has color with NCCL_SPLIT_NOCOLOR, not creating a new communicator",
            parent.rank
        ));
        return Ok(None);
    };
    let mut d = Dec::new(&addrs[group[0]]);
    let root_addr = SocketAddrV4::new(Ipv4Addr::from(d.u64()? as u32), d.u64()? as u16);
    let magic = child_magic(parent.magic, child, color);
    let members: Vec<Member> = group.iter().map(|&r| parent.members[r].clone()).collect();
    let hub = Hub::form(
        listener,
        root_addr,
        magic,
        (new_rank, group.len()),
        local_processes(&members, new_rank),
        &abort,
    )?;
    let comm = assemble(
        Joining {
            rank: new_rank,
            nranks: group.len(),
            cuda_dev: parent.cuda_dev,
            config,
            abort,
            handle,
            api,
        },
        members,
        magic,
        hub,
        None,
    )?;
    comm.log_init_complete(
        api,
        format_args!(
            "parent {:#x} childCount {child} color {color} key {key}",
            parent.handle
        ),
    );
    Ok(Some(comm))
}

/// `split` of a communicator with virtual members: its real members exchange their colors
/// over the parent's hub (the real members'), and each color's child takes its virtual members
/// from the job's recorded groups (`fold::split_child`); the child's real members then meet as
/// a child of the parent's real members does.
fn split_folded(
    parent: &Comm,
    pf: &crate::fold::Folding,
    (color, key, child): (i32, i32, u32),
    config: CommConfig,
    abort: Arc<AtomicBool>,
    (handle, api): (usize, &'static str),
) -> Result<Option<Comm>> {
    let hub = || {
        parent
            .hub
            .lock()
            .map_err(|_| NcclError::internal("hub lock poisoned"))
    };
    let mut e = Enc::default();
    e.i64(color as i64).i64(key as i64);
    let all = hub()?.allgather(&e.0)?;
    let colors = all
        .iter()
        .map(|b| Dec::new(b).i64().map(|c| c as i32))
        .collect::<Result<Vec<i32>>>()?;
    // The child: its members' job ranks, and the parent's real members (inner ranks) in its
    // inner order.
    let mut plan: Option<(Vec<usize>, Vec<usize>)> = None;
    if color != -1 {
        let env =
            run_env::RunEnv::current().map_err(|e| NcclError::invalid_usage(e.to_string()))?;
        let fold = env
            .fold
            .as_ref()
            .ok_or_else(|| NcclError::internal("a folded communicator outside a folded job"))?;
        let mut real: Vec<usize> = (0..colors.len())
            .filter(|&i| colors[i] == color)
            .map(|i| pf.global[pf.real[i]])
            .collect();
        real.sort_unstable();
        let me = pf.global[parent.rank];
        let members = crate::fold::split_child(fold, &pf.global, me, &real)?;
        let inner: Vec<usize> = members
            .iter()
            .filter(|&&g| fold.is_real(g))
            .map(|g| {
                let m = pf.global.iter().position(|x| x == g).unwrap_or(0);
                pf.inner[m]
            })
            .collect();
        plan = Some((members, inner));
    }
    let new_rank = plan.as_ref().and_then(|(_, inner)| {
        let mine = pf.inner[parent.rank];
        inner.iter().position(|&i| i == mine)
    });
    let listener = if new_rank == Some(0) {
        Some(bootstrap::listen(None)?)
    } else {
        None
    };
    let mut e = Enc::default();
    if let Some(l) = &listener {
        let a = bootstrap::local_addr(l)?;
        e.u64(u32::from(*a.ip()) as u64).u64(a.port() as u64);
    }
    let addrs = hub()?.allgather(&e.0)?;
    let (Some((global, inner)), Some(new_rank)) = (plan, new_rank) else {
        crate::error::info(&format!(
            "Rank {} has color with NCCL_SPLIT_NOCOLOR, not creating a new communicator",
            parent.rank
        ));
        return Ok(None);
    };
    let mut d = Dec::new(&addrs[inner[0]]);
    let root_addr = SocketAddrV4::new(Ipv4Addr::from(d.u64()? as u32), d.u64()? as u16);
    let magic = child_magic(parent.magic, child, color);
    let members: Vec<Member> = inner
        .iter()
        .map(|&i| parent.members[pf.real[i]].clone())
        .collect();
    let hub = Hub::form(
        listener,
        root_addr,
        magic,
        (new_rank, inner.len()),
        local_processes(&members, new_rank),
        &abort,
    )?;
    let env = run_env::RunEnv::current().map_err(|e| NcclError::invalid_usage(e.to_string()))?;
    let folding = match env.fold.as_ref() {
        Some(fold) => crate::fold::Folding::of(fold, &global, "split child")?,
        None => None,
    };
    let comm = assemble(
        Joining {
            rank: new_rank,
            nranks: inner.len(),
            cuda_dev: parent.cuda_dev,
            config,
            abort,
            handle,
            api,
        },
        members,
        magic,
        hub,
        folding,
    )?;
    comm.log_init_complete(
        api,
        format_args!(
            "parent {:#x} childCount {child} color {color} key {key}",
            parent.handle
        ),
    );
    Ok(Some(comm))
}
