//! Communicators with virtual members (a folded job: `NCCLSIM_MESH`, `NCCLSIM_FOLD`).
//!
//! A virtual rank runs no process: it does what its representative does and holds its data
//! (`run_env::Fold`). A communicator is created by its real members only; they meet through the
//! root and the hub as a communicator of the real members (the *inner* communicator, which the
//! data path runs on), while the program sees the full one: its rank and size, every call's
//! argument checks, its plan (planned over every member on the full cluster) and each call's
//! predicted time. A virtual member is ready when its representative is, so an operation's
//! meeting of the real members is the full communicator's.
//!
//! Data: each collective gives every real rank what the full communicator gives it when every
//! virtual member holds its representative's buffers. Reductions gather the real members'
//! inputs through the inner communicator and reduce all members' inputs in member order, each
//! virtual member's being its representative's, so the result has the bits of the all-real run
//! (the data path's one reduction order). Copies take a virtual member's slot from its
//! representative. Sends and receives between real members run as they are; one with a virtual
//! peer runs with its representative ([`inner_p2p`]).
//!
//! Membership: a communicator with as many ranks as the job is the job's world (its ranks are
//! the job's ranks); any other takes its members from the groups of the job the program
//! recorded with the fake CUDA core (`job_group_add`; ncclsim's Python package records every
//! torch process group), for `ncclCommInitRank` by its size and this process's place in it,
//! for `ncclCommSplit` by the real members that chose a color. A communicator no recorded group
//! describes is refused, naming its size and rank.

use crate::clock::SimTime;
use crate::error::{NcclError, Result};
use crate::ops::Coll;
use crate::types::{Collective, DataType, Reduction};
use run_env::Fold;

/// A communicator's members in a folded job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folding {
    /// Each member's rank in the job.
    pub global: Vec<usize>,
    /// Each member's representative (a member: itself when real).
    pub rep: Vec<usize>,
    /// The real members, ascending: member `real[i]` is rank i of the inner communicator.
    pub real: Vec<usize>,
    /// Each member's representative's rank in the inner communicator.
    pub inner: Vec<usize>,
}

impl Folding {
    /// The folding of a communicator whose members have job ranks `global`; `None` when every
    /// member is real. A virtual member whose representative is not a member is an error: the
    /// fold does not fit this program.
    pub fn of(fold: &Fold, global: &[usize], name: &str) -> Result<Option<Folding>> {
        if global.iter().all(|&g| g < fold.ranks() && fold.is_real(g)) {
            return Ok(None);
        }
        let mut rep = Vec::with_capacity(global.len());
        for (m, &g) in global.iter().enumerate() {
            if g >= fold.ranks() {
                return Err(NcclError::invalid_usage(format!(
                    "communicator {name}: member {m} is job rank {g}, but the job's mesh {} has {} ranks",
                    fold.mesh(),
                    fold.ranks()
                )));
            }
            let p = fold.representative(g);
            let at = global.iter().position(|&x| x == p).ok_or_else(|| {
                NcclError::invalid_usage(format!(
                    "communicator {name}: its member {m} (job rank {g}) is virtual under --fold {fold}, \
                     and its representative, job rank {p}, is not a member: this communicator does \
                     not fold (fold other dimensions, or run it unfolded)"
                ))
            })?;
            rep.push(at);
        }
        let real: Vec<usize> = (0..global.len()).filter(|&m| rep[m] == m).collect();
        let inner = rep
            .iter()
            .map(|p| real.binary_search(p).unwrap_or(0))
            .collect();
        Ok(Some(Folding {
            global: global.to_vec(),
            rep,
            real,
            inner,
        }))
    }
}

/// The job ranks of the members of a communicator of `nranks` where this process is member
/// `rank`: in a folded job, the world when it has the job's size, else the one group of the
/// job recorded in the core (`job_group_add`: the Python package records every torch process
/// group) of that size with this process's job rank at `rank` (several that fold alike count as
/// one); `None` when the job is not folded.
pub fn members_of(nranks: usize, rank: usize) -> Result<Option<(&'static Fold, Vec<usize>)>> {
    let env = fake_cuda_client::run_env().map_err(|e| NcclError::invalid_usage(e.to_string()))?;
    let Some(fold) = env.fold.as_ref() else {
        return Ok(None);
    };
    if nranks == fold.ranks() {
        return Ok(Some((fold, (0..nranks).collect())));
    }
    let me = env.job_rank.ok_or_else(|| {
        NcclError::invalid_usage(
            "a folded job's process needs its job rank (RANK) to find its communicators' members",
        )
    })?;
    let groups = crate::cuda::job_groups()?;
    let fits: Vec<&Vec<usize>> = groups
        .iter()
        .filter(|g| g.len() == nranks && g.get(rank) == Some(&me))
        .collect();
    let shape = |g: &[usize]| Folding::of(fold, g, "group").map(|f| f.map(|f| (f.real, f.rep)));
    match fits.as_slice() {
        [] => Err(NcclError::invalid_usage(format!(
            "a communicator of {nranks} ranks with job rank {me} as its rank {rank}, in a job of {} \
             ranks folded over {fold}: no group of the job recorded with the fake CUDA core \
             (job_group_add; torch's process groups are recorded by ncclsim's Python package) \
             has that shape, so its members are not known",
            fold.ranks()
        ))),
        [one, rest @ ..] => {
            let first = shape(one)?;
            for g in rest {
                if shape(g)? != first {
                    return Err(NcclError::invalid_usage(format!(
                        "a communicator of {nranks} ranks with job rank {me} as its rank {rank}: \
                         the groups {one:?} and {g:?} of the job both fit and fold differently"
                    )));
                }
            }
            Ok(Some((fold, one.to_vec())))
        }
    }
}

/// The child of a folded communicator's split that holds job rank `me`, whose real members
/// (job ranks) chose the same color: the one group of the job recorded in the core that holds
/// `me`, lies within the parent (`parent`: its members' job ranks) and has exactly those real
/// members. Its members come in the group's order (torch's groups are sorted by rank, as
/// torch's split keys sort them).
pub fn split_child(fold: &Fold, parent: &[usize], me: usize, real: &[usize]) -> Result<Vec<usize>> {
    let groups = crate::cuda::job_groups()?;
    let fits: Vec<&Vec<usize>> = groups
        .iter()
        .filter(|g| g.contains(&me) && g.iter().all(|r| parent.contains(r)))
        .filter(|g| {
            let mut mine: Vec<usize> = g.iter().copied().filter(|&r| fold.is_real(r)).collect();
            mine.sort_unstable();
            mine == real
        })
        .collect();
    match fits.as_slice() {
        [one] => Ok(one.to_vec()),
        [] => Err(NcclError::invalid_usage(format!(
            "ncclCommSplit of a communicator with virtual members (a job folded over {fold}): \
             no group of the job recorded with the fake CUDA core holds job rank {me} with the \
             real members {real:?} of its color, so the child's virtual members are not known"
        ))),
        many => Err(NcclError::invalid_usage(format!(
            "ncclCommSplit of a communicator with virtual members: {} recorded groups hold job \
             rank {me} with the real members {real:?}: {many:?}",
            many.len()
        ))),
    }
}

/// A group's collectives as this member (`me`) runs them: a broadcast or scatter whose root
/// is virtual with `me` as its representative sends what `me` sends as the root of the same
/// call in the group (same kind, count and type), when the group has one. SPMD programs make
/// such groups, one call per root, each root sending its own buffer (torch's all_gather into a
/// list of tensors: one in-place broadcast per rank, each non-root passing its output slot);
/// the virtual root would send its own buffer, which its representative's root call names,
/// not the slot the representative passes as a non-root.
pub fn virtual_roots_send(f: &Folding, me: usize, colls: &mut [Coll]) {
    let own: Vec<Coll> = colls.iter().copied().filter(|c| c.root == me).collect();
    for c in colls.iter_mut() {
        let rooted = matches!(c.kind, Collective::Broadcast | Collective::Scatter);
        if !rooted || c.root == me || f.rep[c.root] != me {
            continue;
        }
        if let Some(o) = own
            .iter()
            .find(|o| o.kind == c.kind && o.count == c.count && o.dtype == c.dtype)
        {
            c.send = o.send;
        }
    }
}

/// A send/receive batch of the full communicator as the inner one runs it: each peer becomes
/// its representative's inner rank. A virtual peer `v` does what its representative `p` does,
/// shifted along the folded dimensions: what `v` sends to this member is what `p` sends to the
/// member shifted back by as much, whose own representative is this member's (a real member's
/// send to a virtual `q` reaches `q`'s representative as the receive from the virtual rank
/// shifted by as much from the sender). So a send to a virtual peer goes to that peer's
/// representative and a receive from one comes from its representative; each ordered pair of
/// inner ranks matches its sends and receives in the order they are posted, as NCCL does
/// between two peers. A virtual peer whose representative is this member (`me`) makes the pair
/// this member with itself, whose sends and receives can only meet in one batch: a batch where
/// they do not pair up is refused, since it would wait forever (a program that orders its
/// send and receive by replica, even replicas sending first, does not fold).
pub fn inner_p2p(f: &Folding, me: usize, ops: &[crate::ops::P2p]) -> Result<Vec<crate::ops::P2p>> {
    let own = f.inner[me];
    let inner: Vec<crate::ops::P2p> = ops
        .iter()
        .map(|op| crate::ops::P2p {
            peer: f.inner[op.peer],
            ..*op
        })
        .collect();
    let to_self = |send: bool| {
        inner
            .iter()
            .filter(|o| o.peer == own && o.send == send)
            .count()
    };
    let (sends, recvs) = (to_self(true), to_self(false));
    let unpaired = ops
        .iter()
        .zip(&inner)
        .find(|(o, i)| i.peer == own && f.rep[o.peer] != o.peer)
        .map(|(o, _)| o)
        .filter(|_| sends != recvs);
    if let Some(op) = unpaired {
        return Err(NcclError::invalid_usage(format!(
            "{} with peer {} (job rank {}), a virtual rank of the job's fold whose representative \
             is this rank: the virtual rank does what this rank does, so this rank's matching \
             {} must be in the same group (ncclGroupStart/ncclGroupEnd); this batch has {sends} \
             sends to and {recvs} receives from such peers (a program that orders its send and \
             receive by replica does not fold)",
            if op.send { "ncclSend" } else { "ncclRecv" },
            op.peer,
            f.global[op.peer],
            if op.send { "receive" } else { "send" },
        )));
    }
    Ok(inner)
}

/// A device buffer of this rank's for one operation, freed when dropped.
struct Scratch(usize);

impl Scratch {
    fn new(dev: i32, bytes: usize) -> Result<Scratch> {
        Ok(Scratch(crate::cuda::malloc(dev, bytes.max(1))?))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = crate::cuda::free(self.0);
    }
}

/// Runs `coll` of the full communicator (member `me` of `f`) on the inner communicator
/// `host`; gives when it starts.
pub fn run_collective(
    host: &crate::host::HostGroup,
    f: &Folding,
    me: usize,
    coll: &Coll,
    ready: SimTime,
) -> Result<SimTime> {
    use Collective::*;
    let n = f.global.len();
    let es = coll.dtype.size();
    let c = coll.count;
    let reps = host.nranks;
    let inner_root = f.inner[coll.root.min(n - 1)];
    match coll.kind {
        Broadcast => {
            let inner = Coll {
                root: inner_root,
                ..*coll
            };
            crate::exec::run_collective(host, &inner, ready)
        }
        AllReduce | Reduce | ReduceScatter | AllGather | AlltoAll | Gather => {
            // Every real member's send buffer, gathered.
            let each = match coll.kind {
                ReduceScatter | AlltoAll => c * n * es,
                _ => c * es,
            };
            let all = Scratch::new(host.cuda_dev, each * reps)?;
            let start = gather(host, coll.send, each, all.0, ready)?;
            let scalars = scalars(host, f, coll, ready)?;
            let block = |i: usize| all.0 + f.inner[i] * each;
            let out = coll.recv;
            // Reduce and Gather give a result to their root only.
            let gets = !matches!(coll.kind, Reduce | Gather) || coll.root == me;
            match coll.kind {
                AllReduce | Reduce if gets => {
                    reduce(coll, &scalars, (0..n).map(block), 0, out, c * es)
                }
                ReduceScatter => {
                    reduce(coll, &scalars, (0..n).map(block), me * c * es, out, c * es)
                }
                AllGather | Gather if gets => {
                    (0..n).for_each(|i| copy(block(i), out + i * c * es, c * es))
                }
                AlltoAll => {
                    (0..n).for_each(|j| copy(block(j) + me * c * es, out + j * c * es, c * es))
                }
                _ => {}
            }
            Ok(start)
        }
        Scatter => {
            // The root's send buffer (a virtual root's is its representative's), broadcast,
            // then this member's block of it.
            let bytes = c * n * es;
            let all = Scratch::new(host.cuda_dev, bytes)?;
            let inner = Coll {
                kind: Broadcast,
                dtype: DataType::Uint8,
                count: bytes,
                root: inner_root,
                recv: all.0,
                ..*coll
            };
            let start = crate::exec::run_collective(host, &inner, ready)?;
            copy(all.0 + me * c * es, coll.recv, c * es);
            Ok(start)
        }
        SendRecv => Err(NcclError::internal("a send/receive is not a collective")),
    }
}

/// Gathers `each` bytes at `send` of every inner rank into `out` (inner rank order).
fn gather(
    host: &crate::host::HostGroup,
    send: usize,
    each: usize,
    out: usize,
    ready: SimTime,
) -> Result<SimTime> {
    let inner = Coll {
        kind: Collective::AllGather,
        dtype: DataType::Uint8,
        red: Reduction::Op(crate::types::RedOp::Sum),
        op: 0,
        root: 0,
        count: each,
        send,
        recv: out,
    };
    crate::exec::run_collective(host, &inner, ready)
}

/// Each member's PreMulSum scalar (its representative's), gathered when the reduction has
/// one; empty otherwise.
fn scalars(
    host: &crate::host::HostGroup,
    f: &Folding,
    coll: &Coll,
    ready: SimTime,
) -> Result<Vec<u64>> {
    // ncclAvg's scalar (1/nranks) is every member's: the reduction's own applies.
    let avg = matches!(
        crate::types::RedOp::try_from(coll.op),
        Ok(crate::types::RedOp::Avg)
    );
    if avg
        || !matches!(coll.red, Reduction::PreMulSum { .. })
        || !matches!(
            coll.kind,
            Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter
        )
    {
        return Ok(Vec::new());
    }
    let mine = Scratch::new(host.cuda_dev, 8)?;
    let all = Scratch::new(host.cuda_dev, 8 * host.nranks)?;
    let bits = crate::exec::own_scalar(coll).to_le_bytes();
    // SAFETY: `mine` is this rank's own fresh 8-byte device buffer, host memory here.
    unsafe { std::ptr::copy_nonoverlapping(bits.as_ptr(), mine.0 as *mut u8, 8) };
    gather(host, mine.0, 8, all.0, ready)?;
    Ok(f.inner
        .iter()
        .map(|&i| {
            let mut b = [0u8; 8];
            // SAFETY: `all` holds 8 bytes per inner rank, written by the gather just finished.
            unsafe {
                std::ptr::copy_nonoverlapping((all.0 + 8 * i) as *const u8, b.as_mut_ptr(), 8)
            };
            u64::from_le_bytes(b)
        })
        .collect())
}

fn reduce(
    coll: &Coll,
    scalars: &[u64],
    inputs: impl Iterator<Item = usize>,
    in_off: usize,
    out: usize,
    len: usize,
) {
    let inputs: Vec<usize> = inputs.collect();
    let a = crate::exec::Arith {
        dtype: coll.dtype,
        red: coll.red,
        scalars,
    };
    // SAFETY: every input is a block of this rank's gathered scratch, `len` bytes from
    // `in_off` inside it, written by the gather that has finished; `out` is this rank's result
    // buffer of `len` bytes (checked at enqueue), which nothing else touches while the
    // operation runs.
    unsafe { crate::exec::reduce_range(a, &inputs, in_off, &[out], 0, len) };
}

fn copy(src: usize, dst: usize, len: usize) {
    // SAFETY: `src` is inside this rank's gathered scratch and `dst` inside its result buffer
    // (checked at enqueue to hold the call's result), distinct allocations.
    unsafe { crate::exec::copy(src, dst, len) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use run_env::Mesh;

    #[test]
    fn members_fold_onto_their_representatives() {
        let fold = Fold::new(Mesh::parse("dp=2,local=4").unwrap(), &["dp"]).unwrap();
        let world: Vec<usize> = (0..8).collect();
        let f = Folding::of(&fold, &world, "world").unwrap().unwrap();
        assert_eq!(f.real, vec![0, 1, 2, 3]);
        assert_eq!(f.rep, vec![0, 1, 2, 3, 0, 1, 2, 3]);
        assert_eq!(f.inner, vec![0, 1, 2, 3, 0, 1, 2, 3]);
        // A data-parallel group {1, 5}: one real member.
        let g = Folding::of(&fold, &[1, 5], "dp").unwrap().unwrap();
        assert_eq!((g.real.clone(), g.inner.clone()), (vec![0], vec![0, 0]));
        // A group of real ranks only does not fold.
        assert_eq!(Folding::of(&fold, &[0, 1], "tp").unwrap(), None);
        // Rank 5 without its representative 1.
        let e = Folding::of(&fold, &[0, 5], "odd").unwrap_err();
        assert!(e.to_string().contains("job rank 1, is not a member"), "{e}");
    }

    #[test]
    fn virtual_peers_become_their_representatives() {
        use crate::ops::P2p;
        let fold = Fold::new(Mesh::parse("dp=2,local=4").unwrap(), &["dp"]).unwrap();
        let world: Vec<usize> = (0..8).collect();
        let f = Folding::of(&fold, &world, "world").unwrap().unwrap();
        let op = |send, peer| P2p {
            send,
            peer,
            bytes: 4,
            buf: 0,
        };
        // Member 1: a ring over the nodes shifted by one position (send to 6, receive from 4)
        // and a real neighbour (2).
        let ops = [op(true, 6), op(false, 4), op(true, 2)];
        let peers: Vec<usize> = inner_p2p(&f, 1, &ops)
            .unwrap()
            .iter()
            .map(|o| o.peer)
            .collect();
        assert_eq!(peers, vec![2, 0, 2]);
        // A send to its own replica (5, represented by 1) with the receive in the same batch
        // pairs with itself; alone it would wait forever and is refused.
        assert!(inner_p2p(&f, 1, &[op(true, 5), op(false, 5)]).is_ok());
        let e = inner_p2p(&f, 1, &[op(true, 5)]).unwrap_err().to_string();
        assert!(
            e.contains("ncclSend with peer 5") && e.contains("same group"),
            "{e}"
        );
    }
}
