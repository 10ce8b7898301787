"""A job run all-real and again folded (`ncclsim run --fold dp`) must end the same:
data-parallel training over the world (parameters broadcast from rank 0, gradients averaged
with all_reduce in one flat bucket, as DDP does, AdamW), 3 steps, data uniform across
data-parallel replicas (each rank's batches depend only on its position in its node,
LOCAL_RANK). Every rank writes its final parameters to OUT/rank<R>.pt; check_fold.py compares
the two runs. The program sees the full job either way: WORLD_SIZE, its rank, and an
all_gather_into_tensor of every rank's LOCAL_RANK are checked here.

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
for step in range(3):
    x = torch.randn(8, 32, generator=data).to(dev)
    y = torch.randn(8, 4, generator=data).to(dev)
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
torch.save({"params": params, "losses": losses, "world": world}, f"{out}/rank{rank}.pt")
dist.destroy_process_group()
print(f"rank {rank}: done, losses {['%.6f' % l for l in losses]}", flush=True)
