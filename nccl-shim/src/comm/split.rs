//! `ncclCommSplit` (and `ncclCommShrink`): children of a communicator, by color and key, and
//! those of a communicator with virtual members (a folded job), whose members come from the
//! job's recorded groups.

use super::*;

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
    let pairs = exchange_colors(parent, color, key)?;
    let child = Child {
        color,
        key,
        number: child,
        config,
        abort,
        handle,
        api,
    };
    if let Some(pf) = &parent.fold {
        return split_folded(parent, pf, &pairs, child);
    }
    // Child members of my color, ordered by key then parent rank.
    let mut group: Vec<usize> = (0..parent.nranks)
        .filter(|&r| pairs[r].0 == color && color != -1)
        .collect();
    group.sort_by_key(|&r| (pairs[r].1, r));
    let members: Vec<Member> = group.iter().map(|&r| parent.members[r].clone()).collect();
    let mine = (color != -1).then_some((group, members, None));
    form_child(parent, parent.rank, mine, child)
}

/// What a split's caller asked for its child.
struct Child {
    color: i32,
    key: i32,
    /// The parent's child count with this one.
    number: u32,
    config: CommConfig,
    abort: Arc<AtomicBool>,
    handle: usize,
    api: &'static str,
}

/// Every hub member's (color, key), by hub rank.
fn exchange_colors(parent: &Comm, color: i32, key: i32) -> Result<Vec<(i32, i32)>> {
    let mut e = Enc::default();
    e.i64(color as i64).i64(key as i64);
    let all = parent
        .hub
        .lock()
        .map_err(|_| NcclError::internal("hub lock poisoned"))?
        .allgather(&e.0)?;
    all.iter()
        .map(|b| {
            let mut d = Dec::new(b);
            Ok((d.i64()? as i32, d.i64()? as i32))
        })
        .collect()
}

/// Forms this hub member's child: `mine` is its hub ranks in the child's order, their
/// members and the child's folding (`None` for `NCCL_SPLIT_NOCOLOR`); `me` is this member's
/// hub rank. The child's first member opens its hub listener and tells everyone (a second
/// exchange, which every hub member joins).
fn form_child(
    parent: &Comm,
    me: usize,
    mine: Option<(Vec<usize>, Vec<Member>, Option<crate::fold::Folding>)>,
    c: Child,
) -> Result<Option<Comm>> {
    let new_rank = mine
        .as_ref()
        .and_then(|(order, _, _)| order.iter().position(|&r| r == me));
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
    let (Some((order, members, folding)), Some(new_rank)) = (mine, new_rank) else {
        crate::error::info(&format!(
            "Rank {} has color with NCCL_SPLIT_NOCOLOR, not creating a new communicator",
            parent.rank
        ));
        return Ok(None);
    };
    let mut d = Dec::new(&addrs[order[0]]);
    let root_addr = SocketAddrV4::new(Ipv4Addr::from(d.u64()? as u32), d.u64()? as u16);
    let magic = child_magic(parent.magic, c.number, c.color);
    let hub = Hub::form(
        listener,
        root_addr,
        magic,
        (new_rank, order.len()),
        local_processes(&members, new_rank),
        &c.abort,
    )?;
    let comm = assemble(
        Joining {
            rank: new_rank,
            nranks: order.len(),
            cuda_dev: parent.cuda_dev,
            config: c.config,
            abort: c.abort,
            handle: c.handle,
            api: c.api,
        },
        members,
        magic,
        hub,
        folding,
    )?;
    comm.log_init_complete(
        c.api,
        format_args!(
            "parent {:#x} childCount {} color {} key {}",
            parent.handle, c.number, c.color, c.key
        ),
    );
    Ok(Some(comm))
}

/// `split` of a communicator with virtual members: its real members exchanged their colors
/// over the parent's hub (the real members'), and each color's child takes its virtual members
/// from the job's recorded groups (`fold::split_child`); the child's real members then meet as
/// a child of the parent's real members does.
fn split_folded(
    parent: &Comm,
    pf: &crate::fold::Folding,
    pairs: &[(i32, i32)],
    c: Child,
) -> Result<Option<Comm>> {
    let me = pf.inner[parent.rank];
    if c.color == -1 {
        return form_child(parent, me, None, c);
    }
    let env = fake_cuda_client::run_env().map_err(|e| NcclError::invalid_usage(e.to_string()))?;
    let fold = env
        .fold
        .as_ref()
        .ok_or_else(|| NcclError::internal("a folded communicator outside a folded job"))?;
    let mut real: Vec<usize> = (0..pairs.len())
        .filter(|&i| pairs[i].0 == c.color)
        .map(|i| pf.global[pf.real[i]])
        .collect();
    real.sort_unstable();
    let global = crate::fold::split_child(fold, &pf.global, pf.global[parent.rank], &real)?;
    // The child's real members as the parent's hub ranks, in the child's order.
    let order: Vec<usize> = global
        .iter()
        .filter(|&&g| fold.is_real(g))
        .map(|g| {
            let m = pf.global.iter().position(|x| x == g).unwrap_or(0);
            pf.inner[m]
        })
        .collect();
    let members: Vec<Member> = order
        .iter()
        .map(|&i| parent.members[pf.real[i]].clone())
        .collect();
    let folding = crate::fold::Folding::of(fold, &global, "split child")?;
    form_child(parent, me, Some((order, members, folding)), c)
}

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
