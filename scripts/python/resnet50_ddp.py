"""ResNet-50 (He et al. 2016: bottleneck blocks 3-4-6-3, 25.6 M parameters) trained with DDP
under torchrun, timed with CUDA events: the predicted images/s of the simulated GPUs.

Run under `ncclsim run --compute time` (the step's ops are priced, not computed, so 8 ranks fit
on a small machine), e.g.
    ncclsim run --compute time --topo topologies/dgx-a100.xml --lib-path VENV/ncclsim-stubs \\
        -- torchrun --nproc_per_node 8 scripts/python/resnet50_ddp.py [--batch 64] [--amp bf16]
Prints, on rank 0, the virtual time per step and the images/s of all ranks together.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from models import ResNet


p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=64)
p.add_argument("--amp", default="bf16", choices=["bf16", "fp16", "off"])
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
model = DDP(ResNet().to(dev).to(memory_format=torch.channels_last), device_ids=[dev.index])
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(args.batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (args.batch,), device=dev)
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


step()  # warm-up: DDP's first step builds its buckets
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
wall = time.perf_counter()
start.record()
for _ in range(args.steps):
    step()
end.record()
end.synchronize()
ms = start.elapsed_time(end) / args.steps
wall = (time.perf_counter() - wall) / args.steps
if rank == 0:
    print(f"resnet50: {world} GPUs ({torch.cuda.get_device_name(dev)}), batch {args.batch} per GPU, "
          f"amp {args.amp}: {ms:.2f} ms per step (virtual), {world * args.batch / ms * 1e3:.0f} images/s; "
          f"{wall:.2f} s of wall time per simulated step", flush=True)
dist.destroy_process_group()
