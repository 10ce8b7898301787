"""A job run all-real and again folded (`ncclsim run --fold dp`) must end the same:
data-parallel training over the world (parameters broadcast from rank 0, gradients averaged
with all_reduce in one flat bucket, as DDP does, AdamW), 3 steps, data uniform across
data-parallel replicas (each rank's batches depend only on its position in its node,
LOCAL_RANK). Every rank writes its final parameters to OUT/rank<R>.pt; check_fold.py compares
the two runs. Then the same over a 2-D DeviceMesh (dp, tp): a tensor-parallel MLP whose
partial outputs are all-reduced over the TP groups and whose gradients are averaged over the
DP groups, torch's own sub-groups, each DP group with one real member when folded. The program
sees the full job either way: WORLD_SIZE, its rank, the groups' sizes, and an
all_gather_into_tensor of every rank's LOCAL_RANK are checked here. Then DDP itself, FSDP2
as HSDP over the same mesh (replicated over dp, sharded over the node's ranks), and FSDP2 x
TP=4 over a 3-D mesh (dp, shard, tp), 3 AdamW steps each; then a batch of sends and
receives over the nodes.

Usage: torchrun ... fold.py OUT
"""

import os
import sys

import torch
import torch.distributed as dist

out = sys.argv[1]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
dev = torch.device("cuda", local)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
assert dist.get_world_size() == world and dist.get_rank() == rank, (world, rank)
per = int(os.environ["LOCAL_WORLD_SIZE"])
seen = torch.zeros(world, dtype=torch.int64, device=dev)
dist.all_gather_into_tensor(seen, torch.tensor([local], device=dev))
assert seen.tolist() == [r % per for r in range(world)], seen.tolist()

losses = []
# Each step's time on the GPU (CUDA events) and the peak memory, which must not change either.
times = []


class Step:
    def __enter__(self):
        self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        self.start.record()

    def __exit__(self, *exc):
        self.end.record()
        self.end.synchronize()
        times.append(self.start.elapsed_time(self.end))


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)
    ).to(dev)


def batches(seed):
    """3 batches (x, y) on the GPU from a CPU generator seeded with `seed`."""
    data = torch.Generator().manual_seed(seed)
    for _ in range(3):
        x = torch.randn(8, 32, generator=data).to(dev)
        y = torch.randn(8, 4, generator=data).to(dev)
        yield x, y


def flat(tensors):
    """This rank's values (its shards, for DTensors) as one CPU vector."""
    parts = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    return torch.cat([t.detach().reshape(-1).cpu() for t in parts])


def train(model, seed, after_backward=None):
    """3 AdamW steps on `batches(seed)`, each timed; gives the parameters."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for x, y in batches(seed):
        with Step():
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            if after_backward is not None:
                after_backward(model)
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    return flat(model.parameters())


def average_gradients(model):
    """The gradients averaged over the world in one flat bucket, as DDP does."""
    grads = [p.grad for p in model.parameters()]
    bucket = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(bucket, op=dist.ReduceOp.AVG)
    at = 0
    for g in grads:
        g.copy_(bucket[at : at + g.numel()].view_as(g))
        at += g.numel()


torch.manual_seed(rank)
net = mlp()
for p in net.parameters():
    dist.broadcast(p.data, 0)
params = train(net, 1000 + local, average_gradients)

# A DeviceMesh (dp, tp) with TP inside the node: a tensor-parallel MLP (column shards of the
# first layer, row shards of the second, the partial outputs all-reduced over the TP group),
# gradients averaged over the DP group, 3 AdamW steps. Its groups are torch's own sub-groups
# (split from the world, or made with new_group), whose virtual members libnccl.so.2 learns
# from the groups torch made.
from torch.distributed.device_mesh import init_device_mesh

mesh = init_device_mesh("cuda", (world // per, per), mesh_dim_names=("dp", "tp"))
tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
assert dist.get_world_size(tp) == per and dist.get_world_size(dp) == world // per
torch.manual_seed(100 + local)
w1 = torch.nn.Parameter(torch.randn(32, 16, device=dev) / 8)
w2 = torch.nn.Parameter(torch.randn(16, 4, device=dev) / 8)
opt = torch.optim.AdamW([w1, w2], lr=1e-2)
for x, y in batches(2000):
    with Step():
        part = torch.nn.functional.gelu(x @ w1) @ w2
        full = part.clone()
        dist.all_reduce(full, group=tp)
        # The gradient of the all-reduced output flows to every shard's partial output.
        loss = torch.nn.functional.mse_loss(full, y)
        (g,) = torch.autograd.grad(loss, full)
        part.backward(g)
        for p in (w1, w2):
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=dp)
        opt.step()
        opt.zero_grad()
    losses.append(loss.item())
params = torch.cat([params, flat([w1, w2])])

# DDP itself (its parameter check all-gathers into a list: one broadcast per rank, in place),
# then FSDP2 on the same 2-D mesh as HSDP (replicated over dp, sharded within the node).
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

listed = [torch.zeros(2, device=dev) for _ in range(world)]
dist.all_gather(listed, torch.full((2,), float(local), device=dev))
assert [int(t[0].item()) for t in listed] == [r % per for r in range(world)]


torch.manual_seed(7)
params = torch.cat([params, train(DDP(mlp(), device_ids=[local]), 3000 + local)])
torch.manual_seed(8)
net = mlp()
fully_shard(net[0], mesh=mesh)
fully_shard(net, mesh=mesh)
params = torch.cat([params, train(net, 3000 + local)])

# FSDP2 x TP=4 over a 3-D DeviceMesh (dp, shard, tp), as torchtitan lays out HSDP with tensor
# parallelism: column- and row-parallel linear layers (DTensors) over tp, then HSDP over (dp,
# shard), replicated over the folded dimension.
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

tp_size = min(4, per)
mesh3 = init_device_mesh("cuda", (world // per, per // tp_size, tp_size),
                         mesh_dim_names=("dp", "shard", "tp"))
assert mesh3["tp"].size() == tp_size and mesh3["dp", "shard"].size() == world // tp_size
torch.manual_seed(9)
net = mlp()
parallelize_module(net, mesh3["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
fully_shard(net, mesh=mesh3["dp", "shard"])
params = torch.cat([params, train(net, 4000 + local // tp_size)])
# Sends and receives in one batch (batch_isend_irecv): a ring over the nodes shifted by one
# position, whose peers are virtual when folded.
sent = torch.arange(64, dtype=torch.float32, device=dev) * (local + 1)
got = torch.zeros_like(sent)
ring = [dist.P2POp(dist.isend, sent, (rank + per + 1) % world),
        dist.P2POp(dist.irecv, got, (rank - per - 1) % world)]
for w in dist.batch_isend_irecv(ring):
    w.wait()
assert got[1].item() == (rank - per - 1) % world % per + 1, got[1].item()
params = torch.cat([params, got.cpu()])
peak = torch.cuda.max_memory_allocated(dev)
torch.save({"params": params, "losses": losses, "world": world, "times": times, "peak": peak},
           f"{out}/rank{rank}.pt")
dist.destroy_process_group()
print(f"rank {rank}: done, losses {['%.6f' % l for l in losses]}", flush=True)
