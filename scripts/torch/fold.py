"""A job run all-real and again folded (`ncclsim run --fold dp`) must end the same:
data-parallel training over the world (parameters broadcast from rank 0, gradients averaged
with all_reduce in one flat bucket, as DDP does, AdamW), 3 steps, data uniform across
data-parallel replicas (each rank's batches depend only on its position in its node,
LOCAL_RANK). Every rank writes its final parameters to OUT/rank<R>.pt; check_fold.py compares
the two runs. Then the same over a 2-D DeviceMesh (dp, tp): a tensor-parallel MLP whose
partial outputs are all-reduced over the TP groups and whose gradients are averaged over the
DP groups, torch's own sub-groups, each DP group with one real member when folded. The program
sees the full job either way: WORLD_SIZE, its rank, the groups' sizes, and an
all_gather_into_tensor of every rank's LOCAL_RANK are checked here. Then DDP itself and FSDP2
as HSDP over the same mesh (replicated over dp, sharded over the node's ranks), 3 AdamW steps
each.

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

torch.manual_seed(rank)
net = torch.nn.Sequential(
    torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)
).to(dev)
for p in net.parameters():
    dist.broadcast(p.data, 0)
opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
data = torch.Generator().manual_seed(1000 + local)
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


for step in range(3):
    x = torch.randn(8, 32, generator=data).to(dev)
    y = torch.randn(8, 4, generator=data).to(dev)
    with Step():
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        grads = [p.grad for p in net.parameters()]
        bucket = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(bucket, op=dist.ReduceOp.AVG)
        at = 0
        for g in grads:
            g.copy_(bucket[at : at + g.numel()].view_as(g))
            at += g.numel()
        opt.step()
        opt.zero_grad()
    losses.append(loss.item())
params = torch.cat([p.detach().reshape(-1).cpu() for p in net.parameters()])

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
data = torch.Generator().manual_seed(2000)
for step in range(3):
    x = torch.randn(8, 32, generator=data).to(dev)
    y = torch.randn(8, 4, generator=data).to(dev)
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
params = torch.cat([params, w1.detach().reshape(-1).cpu(), w2.detach().reshape(-1).cpu()])

# DDP itself (its parameter check all-gathers into a list: one broadcast per rank, in place),
# then FSDP2 on the same 2-D mesh as HSDP (replicated over dp, sharded within the node).
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

listed = [torch.zeros(2, device=dev) for _ in range(world)]
dist.all_gather(listed, torch.full((2,), float(local), device=dev))
assert [int(t[0].item()) for t in listed] == [r % per for r in range(world)]


def train(model, what):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(3000 + local)
    for step in range(3):
        x = torch.randn(8, 32, generator=data).to(dev)
        y = torch.randn(8, 4, generator=data).to(dev)
        with Step():
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    local_params = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    return torch.cat([p.detach().reshape(-1).cpu() for p in local_params])


torch.manual_seed(7)
net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).to(dev)
params = torch.cat([params, train(DDP(net, device_ids=[local]), "ddp")])
torch.manual_seed(8)
net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).to(dev)
fully_shard(net[0], mesh=mesh)
fully_shard(net, mesh=mesh)
params = torch.cat([params, train(net, "hsdp")])
peak = torch.cuda.max_memory_allocated(dev)
torch.save({"params": params, "losses": losses, "world": world, "times": times, "peak": peak},
           f"{out}/rank{rank}.pt")
dist.destroy_process_group()
print(f"rank {rank}: done, losses {['%.6f' % l for l in losses]}", flush=True)
