"""The cost of computing torch ops on ncclsim's simulated GPUs, side by side with plain CPU torch
in the same process: per-op time for small tensors (the dispatch overhead dominates) and one
training step of GPT-2 (2 layers, from a transformers config) and of a ResNet-style CNN.

Run under `ncclsim run` (one process) on the real host clock, since it times the host's work
(on the default virtual clock the CPU's time reads 0):
    target/release/ncclsim run --clock real --lib-path VENV/ncclsim-stubs -- python scripts/python/bench_compute.py
Each figure is the median of 9 (training steps: 5) repetitions, CPU and ncclsim timed
alternately; the ratio is CUDA (ncclsim) over CPU.
"""

import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

if os.environ.get("NCCLSIM_CLOCK", "real") != "real":
    sys.exit(f"bench_compute.py times the host's work: NCCLSIM_CLOCK is "
             f"{os.environ['NCCLSIM_CLOCK']!r}; run it with `ncclsim run --clock real`")
torch.set_num_threads(1)
dev = torch.device("cuda", 0)


def timed_pair(cpu_fn, gpu_fn, iters, reps=9):
    """Medians of (cpu, gpu) seconds per call, the two timed alternately so load on the
    machine falls on both alike."""
    cpu_fn()
    gpu_fn()
    a, b = [], []
    for _ in range(reps):
        for fn, out in ((cpu_fn, a), (gpu_fn, b)):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            out.append((time.perf_counter() - t0) / iters)
    return statistics.median(a), statistics.median(b)


def row(name, cpu, cuda, unit=1e6, suffix="us"):
    print(f"{name:34s} {cpu * unit:12.1f} {cuda * unit:12.1f} {suffix}   x{cuda / cpu:6.2f}   "
          f"overhead {(cuda - cpu) * unit:9.1f} {suffix}", flush=True)


print(f"{'op (small tensors)':34s} {'plain CPU':>12s} {'ncclsim':>12s}")
for name, make, op in [
    ("add_ (1024 floats)", lambda d: torch.ones(1024, device=d), lambda x: x.add_(1.0)),
    ("mul (1024 floats)", lambda d: torch.ones(1024, device=d), lambda x: x * 2.0),
    ("relu (1024 floats)", lambda d: torch.ones(1024, device=d), lambda x: torch.relu(x)),
    ("sum (1024 floats)", lambda d: torch.ones(1024, device=d), lambda x: x.sum()),
    ("matmul 64x64", lambda d: torch.ones(64, 64, device=d), lambda x: x @ x),
    ("index_select (1024 of 4096)", lambda d: torch.ones(4096, device=d),
     lambda x: x.index_select(0, torch.arange(1024, device=x.device))),
]:
    xc, xg = make("cpu"), make(dev)
    row(name, *timed_pair(lambda: op(xc), lambda: op(xg), 1000))


def step_fn(model, opt, batch):
    def step():
        opt.zero_grad()
        loss = batch(model)
        loss.backward()
        opt.step()
    return step


def gpt2(d):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=1024, n_positions=128)
    m = GPT2LMHeadModel(cfg).to(d)
    ids = torch.randint(0, 1024, (8, 128), device=d)
    return m, torch.optim.AdamW(m.parameters(), lr=1e-3), lambda mm: mm(ids, labels=ids).loss


def cnn(d):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(d)
    x = torch.randn(16, 3, 64, 64, device=d)
    y = torch.randint(0, 10, (16,), device=d)
    return m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), lambda mm: F.cross_entropy(mm(x), y)


print(f"{'training step':34s} {'plain CPU':>12s} {'ncclsim':>12s}")
for name, make in [("GPT-2 2 layers, 8x128 tokens", gpt2), ("CNN 16x3x64x64", cnn)]:
    mc, oc, bc = make("cpu")
    mg, og, bg = make(dev)
    row(name, *timed_pair(step_fn(mc, oc, bc), step_fn(mg, og, bg), 2, reps=5), 1e3, "ms")
