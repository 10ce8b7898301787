"""DistributedDataParallel over the world, then FSDP2 (`fully_shard`) over the data-parallel
groups (same local rank on every node), 3 training steps each, under torchrun.

Kernels do not run on ncclsim's fake GPUs, so the numbers are meaningless; what is checked is
that the steps complete: DDP all-reduces its gradient buckets, FSDP2 all-gathers its parameter
shards and reduce-scatters their gradients (see NCCLSIM_TRACE). Needs the stubs whose cuBLAS
calls succeed (`NCCLSIM_STUBS=noop scripts/torch-run.sh ...`). Prints `rank R: PASS` at the end.
"""

import os

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


def model():
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)
    ).to(dev)


def steps(name, net):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(3):
        net(torch.randn(16, 64).to(dev)).sum().backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        if rank == 0:
            print(f"{name} step {step} done", flush=True)


steps("ddp", DDP(model(), device_ids=[local]))
# Data-parallel groups: {0, per_node, ...}, {1, per_node + 1, ...}, ... (new_group on every rank).
dp_groups = [dist.new_group(list(range(i, world, per_node))) for i in range(per_node)]
mesh = DeviceMesh.from_group(dp_groups[local], "cuda")
fsdp = model()
for layer in fsdp:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(fsdp, mesh=mesh)
steps("fsdp2", fsdp)
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: PASS", flush=True)
