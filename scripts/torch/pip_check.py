"""One rank of the pip installation check (scripts/pip-install-check.sh): an all-reduce of
`torch.full` on the simulated GPUs, compared with the sum computed here on the CPU."""

import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.full((4096,), float(rank + 1), device="cuda")
dist.all_reduce(x)
want = torch.full((4096,), float(world * (world + 1) // 2))
assert torch.equal(x.cpu(), want), f"rank {rank}: {x[:4].tolist()} != {want[:4].tolist()}"
# One write per line, so that the lines of processes sharing the output stay whole.
sys.stdout.write(f"ok rank {rank} of {world} group {os.environ['GROUP_RANK']} sum {x[0].item():g}\n")
sys.stdout.flush()
dist.destroy_process_group()
