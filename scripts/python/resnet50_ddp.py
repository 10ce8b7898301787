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
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.c1 = nn.Conv2d(cin, width, 1, bias=False)
        self.b1 = nn.BatchNorm2d(width)
        self.c2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.b2 = nn.BatchNorm2d(width)
        self.c3 = nn.Conv2d(width, cout, 1, bias=False)
        self.b3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)))
        y = self.b3(self.c3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=64)
p.add_argument("--amp", default="bf16", choices=["bf16", "fp16", "off"])
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
model = DDP(ResNet50().to(dev).to(memory_format=torch.channels_last), device_ids=[dev.index])
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
