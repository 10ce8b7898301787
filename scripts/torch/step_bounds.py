"""A GPT-2-shaped transformer (12 layers, d_model 768, 12 heads, vocabulary 50,257, sequence
1,024: GPT-2 small) trained with DDP and AdamW in bf16 autocast, for
`ncclsim run --compute time --clock virtual --trace DIR`: each training step is one
`cudaProfilerStart`..`Stop` range (`torch.cuda.profiler`), so `ncclsim trace summarize DIR
--steps` splits exactly those steps into kernel time, launch-bound idle time and communication.

Usage: torchrun ... step_bounds.py BATCH [STEPS]

At batch 1 the step's kernels are shorter than the host's launches of them (launch-bound); as
the batch grows the kernels grow and the launches do not (compute-bound); the gradients'
all-reduce is the same at every batch. Prints one line per step on rank 0.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

batch = int(sys.argv[1])
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
layers, dim, heads, vocab, seq = 12, 768, 12, 50257, 1024

local = int(os.environ["LOCAL_RANK"])
dev = torch.device("cuda", local)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(dim, dim=-1)
        q, k, v = (z.view(b, t, heads, dim // heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, dim))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


model = DDP(GPT().to(dev), device_ids=[local])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
ids = torch.zeros(batch, seq, dtype=torch.long, device=dev)


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(ids)
    loss = F.cross_entropy(logits.float().view(-1, vocab), ids.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


step()  # warm-up: the optimizer's state, the allocator's caches
torch.cuda.synchronize()
for i in range(steps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.profiler.start()
    start.record()
    step()
    end.record()
    end.synchronize()
    torch.cuda.profiler.stop()
    if dist.get_rank() == 0:
        print(f"step-bounds: batch {batch} step {i}: {start.elapsed_time(end):.2f} ms", flush=True)
dist.destroy_process_group()
