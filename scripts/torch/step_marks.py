"""Training steps as the program's framework marks them, for `ncclsim run --trace DIR --
torchrun ... step_marks.py MODE`: `ncclsim trace summarize DIR --steps` finds exactly the
program's steps.

MODE `optimizer`: a DDP model and a head trained with two optimizers (AdamW and SGD, both
stepping every iteration, as a model in parts is) for STEPS iterations, beside a CPU model whose
optimizer steps too (it marks nothing), then a barrier after the last step.
MODE `profiler`: the same loop inside `torch.profiler.profile`, calling `prof.step()` at the end
of each iteration (then the profiler's steps alone mark the steps).

Prints `step-marks: MODE: STEPS steps` on rank 0; the shell stage reads the trace.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 5
mode = sys.argv[1]
local = int(os.environ["LOCAL_RANK"])
dev = torch.device("cuda", local)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)

torch.manual_seed(0)
body = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)).to(dev), device_ids=[local])
head = nn.Linear(16, 4).to(dev)
opt = torch.optim.AdamW(body.parameters(), lr=1e-3)
opt_head = torch.optim.SGD(head.parameters(), lr=1e-2)
cpu = nn.Linear(4, 4)
cpu_opt = torch.optim.SGD(cpu.parameters(), lr=0.1)


def iteration():
    x = torch.randn(16, 32, device=dev)
    head(body(x)).square().mean().backward()
    opt.step()
    opt_head.step()
    opt.zero_grad()
    opt_head.zero_grad()
    cpu(torch.randn(2, 4)).sum().backward()
    cpu_opt.step()


if mode == "optimizer":
    for _ in range(STEPS):
        iteration()
elif mode == "profiler":
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            iteration()
            prof.step()
else:
    sys.exit(f"step_marks.py: mode {mode!r}: not optimizer or profiler")
dist.barrier()
torch.cuda.synchronize()
if dist.get_rank() == 0:
    print(f"step-marks: {mode}: {STEPS} steps", flush=True)
dist.destroy_process_group()
