"""torch.distributed collectives over NCCL, every result checked on the CPU.

Run under torchrun (any number of processes and nodes; nodes are torchrun's --nnodes, each a
simulated node with its own NCCLSIM_NODE). Every input is made on the device (`arange`,
`remainder`, `add`, dtype conversions, `cat`, `empty`: ops that ncclsim's Python package computes
on the simulated GPU), every result is copied out (`.cpu()`) and compared with what the ranks'
inputs imply, built on the CPU by plain torch. Prints one line per check on rank 0
and `rank R: PASS n checks` on every rank; exits non-zero on the first wrong value.
"""

import os
import sys

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
per_node = int(os.environ["LOCAL_WORLD_SIZE"])
dev = torch.device("cuda", local)
checks = 0


def log(msg):
    if rank == 0:
        print(msg, flush=True)


def data(r, n, dtype, shift=0, device="cpu"):
    """Rank r's input: small integers, exact in every dtype used (made on `device`)."""
    return (torch.arange(n, dtype=torch.int64, device=device) % 7 + 3 * r + shift).to(dtype)


def small(r, n, dtype, device="cpu"):
    """Rank r's input for 16-bit float sums: every partial sum of up to 64 ranks stays an
    integer at most 256, exact in bfloat16 and float16 whatever order the ranks are added in."""
    return (torch.arange(n, dtype=torch.int64, device=device) % 3 + r % 2).to(dtype)


def check(name, got, want):
    global checks
    got = got.cpu()
    if not torch.equal(got, want):
        print(f"rank {rank}: FAIL {name}: got {got.tolist()} want {want.tolist()}", flush=True)
        sys.exit(1)
    checks += 1
    log(f"ok {name} {tuple(want.shape)} {want.dtype}")


torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
n = 10

for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.float16):
    make = small if dtype in (torch.bfloat16, torch.float16) else data
    x = make(rank, n, dtype, device=dev)
    dist.all_reduce(x)
    check("all_reduce sum", x, sum(make(r, n, torch.int64) for r in range(world)).to(dtype))

# Factories on the device: full, ones, randn (seeded per rank, compared with its own copy).
x = torch.full((n,), rank + 1.0, device=dev)
dist.all_reduce(x)
check("all_reduce of torch.full", x, torch.full((n,), world * (world + 1) / 2))
x = torch.ones(n, dtype=torch.int32, device=dev) * (rank + 2)
dist.all_reduce(x, op=dist.ReduceOp.MIN)
check("all_reduce min of torch.ones * (rank + 2)", x, torch.full((n,), 2, dtype=torch.int32))
torch.cuda.manual_seed(1234)
x = torch.randn(n, device=dev)
mine = x.cpu()
dist.broadcast(x, src=0)
check("broadcast of torch.randn (same seed on every rank: equal to this rank's own draw)", x, mine)

# A large buffer: 48 MiB, more than one 20 MiB segment of the expandable-segments allocator.
big = 12 << 20
x = data(rank, big, torch.float32, device=dev)
dist.all_reduce(x)
got = x.cpu()
# sum over r of data(r, i) = world * (i % 7) + 3 * (0 + 1 + ... + world - 1), built in place
want = torch.arange(big, dtype=torch.int32).remainder_(7).mul_(world).add_(3 * world * (world - 1) // 2)
want = want.to(torch.float32)
if not torch.equal(got, want):
    bad = (got != want).nonzero()[0].item()
    print(f"rank {rank}: FAIL all_reduce 48 MiB: element {bad} is {got[bad].item()}, "
          f"want {want[bad].item()}", flush=True)
    sys.exit(1)
checks += 1
log(f"ok all_reduce 48 MiB {tuple(want.shape)} {want.dtype}")
del x, got, want

x = data(rank, n, torch.int32, device=dev)
dist.all_reduce(x, op=dist.ReduceOp.MAX)
check("all_reduce max", x, data(world - 1, n, torch.int32))

x = data(rank, n, torch.float32, shift=world, device=dev)
dist.all_reduce(x, op=dist.ReduceOp.AVG)
want = sum(data(r, n, torch.float64, shift=world) for r in range(world)) / world
check("all_reduce avg", x, want.to(torch.float32))

x = data(rank, n, torch.float32, device=dev)
dist.all_reduce(x, op=dist._make_nccl_premul_sum(2.0))
check("all_reduce premul_sum 2.0", x, 2 * sum(data(r, n, torch.float32) for r in range(world)))

root = world - 1
x = data(rank, n, torch.float32, device=dev)
dist.broadcast(x, src=root)
check(f"broadcast from {root}", x, data(root, n, torch.float32))

out = torch.empty(world * n, dtype=torch.float32, device=dev)
dist.all_gather_into_tensor(out, data(rank, n, torch.float32, device=dev))
check("all_gather_into_tensor", out, torch.cat([data(r, n, torch.float32) for r in range(world)]))

outs = [torch.empty(n, dtype=torch.int64, device=dev) for _ in range(world)]
dist.all_gather(outs, data(rank, n, torch.int64, device=dev))
check("all_gather list", torch.stack([o.cpu() for o in outs]),
      torch.stack([data(r, n, torch.int64) for r in range(world)]))

out = torch.empty(n, dtype=torch.float32, device=dev)
dist.reduce_scatter_tensor(out, data(rank, world * n, torch.float32, device=dev))
full = sum(data(r, world * n, torch.float32) for r in range(world))
check("reduce_scatter_tensor", out, full[rank * n:(rank + 1) * n])

# all_to_all_single: rank r sends block j (n values) to rank j.
src = torch.cat([data(rank, n, torch.float32, shift=100 * j, device=dev) for j in range(world)])
out = torch.empty(world * n, dtype=torch.float32, device=dev)
dist.all_to_all_single(out, src)
check("all_to_all_single", out,
      torch.cat([data(j, n, torch.float32, shift=100 * rank) for j in range(world)]))

# Uneven all_to_all_single: rank r sends (r + j) % 3 + 1 values to rank j.
def split(a, b):
    return (a + b) % 3 + 1


src = torch.cat([data(rank, split(rank, j), torch.float32, shift=100 * j) for j in range(world)])
out = torch.empty(sum(split(j, rank) for j in range(world)), dtype=torch.float32).to(dev)
dist.all_to_all_single(out, src.to(dev),
                       output_split_sizes=[split(j, rank) for j in range(world)],
                       input_split_sizes=[split(rank, j) for j in range(world)])
check("all_to_all_single uneven", out,
      torch.cat([data(j, split(j, rank), torch.float32, shift=100 * rank) for j in range(world)]))

# Gather to and scatter from a root that is not rank 0.
root = 1 % world
x = data(rank, n, torch.float32, device=dev)
outs = [torch.empty(n, dtype=torch.float32, device=dev) for _ in range(world)] if rank == root else None
dist.gather(x, outs, dst=root)
if rank == root:
    check(f"gather to {root}", torch.stack([o.cpu() for o in outs]),
          torch.stack([data(r, n, torch.float32) for r in range(world)]))
ins = [data(root, n, torch.float32, shift=10 * r, device=dev) for r in range(world)] if rank == root else None
out = torch.empty(n, dtype=torch.float32, device=dev)
dist.scatter(out, ins, src=root)
check(f"scatter from {root}", out, data(root, n, torch.float32, shift=10 * rank))

# Point to point around a ring.
nxt, prv = (rank + 1) % world, (rank - 1) % world
recv = torch.empty(n, dtype=torch.float32, device=dev)
reqs = dist.batch_isend_irecv([
    dist.P2POp(dist.isend, data(rank, n, torch.float32, device=dev), nxt),
    dist.P2POp(dist.irecv, recv, prv),
])
for r in reqs:
    r.wait()
check("batch_isend_irecv ring", recv, data(prv, n, torch.float32))

# Groups: ranks of a node ("tp") and same local rank across nodes ("dp"); new_group splits the
# world communicator (ncclCommSplit) on every rank.
nodes = world // per_node
tp_groups = [dist.new_group(list(range(k * per_node, (k + 1) * per_node))) for k in range(nodes)]
dp_groups = [dist.new_group(list(range(i, world, per_node))) for i in range(per_node)]
tp_ranks = list(range((rank // per_node) * per_node, (rank // per_node + 1) * per_node))
dp_ranks = list(range(local, world, per_node))
for name, group, members in (("tp", tp_groups[rank // per_node], tp_ranks),
                             ("dp", dp_groups[local], dp_ranks)):
    x = data(rank, n, torch.float32, device=dev)
    dist.all_reduce(x, group=group)
    check(f"{name} all_reduce {members}", x, sum(data(r, n, torch.float32) for r in members))
    out = torch.empty(len(members) * n, dtype=torch.float32, device=dev)
    dist.all_gather_into_tensor(out, data(rank, n, torch.float32, device=dev), group=group)
    check(f"{name} all_gather_into_tensor", out,
          torch.cat([data(r, n, torch.float32) for r in members]))
    x = data(rank, n, torch.float32, device=dev)
    dist.broadcast(x, src=members[-1], group=group)
    check(f"{name} broadcast from {members[-1]}", x, data(members[-1], n, torch.float32))

dist.barrier()
x = data(rank, n, torch.float32, device=dev)
dist.all_reduce(x)
check("all_reduce after barrier", x, sum(data(r, n, torch.float32) for r in range(world)))
dist.destroy_process_group()
print(f"rank {rank}: PASS {checks} checks", flush=True)
