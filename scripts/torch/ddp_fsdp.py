"""DistributedDataParallel over the world, then FSDP2 (`fully_shard`) over the data-parallel
groups (same local rank on every node), 3 training steps each, under torchrun, computed on the
simulated GPUs.

Checked on every rank: each step's loss is finite and the step changes the parameters (or, with
FSDP2, this rank's shards of them); after every DDP step the parameters equal rank 0's (DDP
starts from rank 0's and every rank applies the same averaged gradients). The suite finds DDP's
all-reduces and FSDP2's all-gathers and reduce-scatters in the traces (NCCLSIM_TRACE). Prints
`rank R: PASS` at the end; a failed check exits non-zero with `rank R: FAIL ...`.
"""

import math
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from torch.distributed.device_mesh import DeviceMesh

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
per_node = int(os.environ["LOCAL_WORLD_SIZE"])
dev = torch.device("cuda", local)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)


def check(ok, what):
    if not ok:
        print(f"rank {rank}: FAIL {what}", flush=True)
        sys.exit(1)


def model():
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)
    ).to(dev)


def flat(net):
    """This rank's parameters (its shards, for FSDP2's DTensors) as one CPU vector."""
    parts = [p.to_local() if hasattr(p, "to_local") else p for p in net.parameters()]
    return torch.cat([p.detach().reshape(-1).cpu() for p in parts])


def steps(name, net, same_on_every_rank):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(3):
        before = flat(net)
        loss = net(torch.randn(16, 64).to(dev)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        after = flat(net)
        value = loss.item()
        check(math.isfinite(value), f"{name} step {step}: loss {value}")
        check(bool(torch.isfinite(after).all()), f"{name} step {step}: parameters not finite")
        check(not torch.equal(after, before), f"{name} step {step}: the parameters did not change")
        if same_on_every_rank:
            first = after.to(dev)
            dist.broadcast(first, 0)
            check(torch.equal(first.cpu(), after), f"{name} step {step}: parameters differ from rank 0's")
        if rank == 0:
            print(f"{name} step {step} done", flush=True)


steps("ddp", DDP(model(), device_ids=[local]), same_on_every_rank=True)
# Data-parallel groups: {0, per_node, ...}, {1, per_node + 1, ...}, ... (new_group on every rank).
dp_groups = [dist.new_group(list(range(i, world, per_node))) for i in range(per_node)]
mesh = DeviceMesh.from_group(dp_groups[local], "cuda")
fsdp = model()
for layer in fsdp:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(fsdp, mesh=mesh)
steps("fsdp2", fsdp, same_on_every_rank=False)
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: PASS", flush=True)
