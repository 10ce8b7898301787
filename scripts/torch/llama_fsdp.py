"""A Llama-3.1-shaped transformer trained with FSDP2 (`fully_shard` per block and at the root,
bf16 parameters, fp32 gradient reduction, AdamW, activation checkpointing per block as
torchtitan's options make it), for `ncclsim run --compute time`: its step
time and peak memory per GPU at the job's full size, read the way training scripts read them
(CUDA events around each step, `torch.cuda.max_memory_allocated`).

Usage: torchrun ... llama_fsdp.py [8b|70b|llama2-13b|llama2-70b|tiny] [SEQ] [LOCAL_BATCH] [STEPS]
    [TP] [full|op|none] [default|flash|cudnn]

The last argument is the activation checkpointing (default full): `full` recomputes each block
in the backward (torchtitan's `mode = "full"`); `op` is torchtitan's selective per-op policy
(`mode = "selective"`, `selective_ac_option = "op"`): within a block, the outputs of the
attention kernels, of `max` and of FSDP's reduce-scatters are saved, and of the matrix products
every other one (the first, third, ...), the rest recomputed; `none` saves everything.
The attention kernel is torch's choice (`default`) or the one named: `flash` is
FlashAttention-2 (what torch chose on H100 before cuDNN's attention came first), `cudnn`
cuDNN's fused attention.

With TP > 1 the job is FSDP over dp x tensor parallelism over tp (a (dp, tp) DeviceMesh, tp
inside the node): each block's attention and feed-forward projections column- then
row-parallel as torchtitan and Megatron shard them (`parallelize_module`), FSDP over dp.

The model is built on the meta device and made on the GPU shard by shard (`to_empty`), so no
rank ever holds the whole model. Parameters are not initialised: under `--compute time` no op
computes values, only their time. Prints one line per step and `llama: ... PASS` at the end on
rank 0.
"""

import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

SHAPES = {
    # dim, layers, heads, kv heads, ffn, vocab (Llama 3.1's published configurations)
    "8b": (4096, 32, 32, 8, 14336, 128256),
    "70b": (8192, 80, 64, 8, 28672, 128256),
    # Llama 2's (the same architecture, 32,000-token vocabulary, 13B without grouped queries).
    "llama2-13b": (5120, 40, 40, 40, 13824, 32000),
    "llama2-70b": (8192, 80, 64, 8, 28672, 32000),
    # The same architecture at toy size, for the test suite.
    "tiny": (256, 2, 8, 8, 512, 1024),
}
name = sys.argv[1] if len(sys.argv) > 1 else "8b"
seq = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 2
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
tp = int(sys.argv[5]) if len(sys.argv) > 5 else 1
ac = sys.argv[6] if len(sys.argv) > 6 else "full"
if ac not in ("full", "op", "none"):
    sys.exit(f"llama_fsdp.py: activation checkpointing {ac!r}: not full, op or none")
attention = sys.argv[7] if len(sys.argv) > 7 else "default"
BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
if attention != "default" and attention not in BACKENDS:
    sys.exit(f"llama_fsdp.py: attention {attention!r}: not default, flash or cudnn")
dim, layers, heads, kv, ffn, vocab = SHAPES[name]

rank = int(os.environ["RANK"])
local = int(os.environ["LOCAL_RANK"])
dev = torch.device("cuda", local)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
world = dist.get_world_size()


def attention_backend():
    if attention == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, BACKENDS[attention]))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        hd = dim // heads
        self.attn_norm = nn.RMSNorm(dim)
        self.wq = nn.Linear(dim, heads * hd, bias=False)
        self.wk = nn.Linear(dim, kv * hd, bias=False)
        self.wv = nn.Linear(dim, kv * hd, bias=False)
        self.wo = nn.Linear(heads * hd, dim, bias=False)
        self.ffn_norm = nn.RMSNorm(dim)
        self.w1 = nn.Linear(dim, ffn, bias=False)
        self.w3 = nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        hd = dim // heads
        # This rank's heads: a tp-th of them when the projections are column-parallel.
        nh, nkv = heads // tp, kv // tp
        h = self.attn_norm(x)
        q = self.wq(h).view(b, s, nh, hd).transpose(1, 2)
        k = self.wk(h).view(b, s, nkv, hd).transpose(1, 2)
        v = self.wv(h).view(b, s, nkv, hd).transpose(1, 2)
        with attention_backend():
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, nh * hd))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


aten = torch.ops.aten
# What torchtitan's per-op policy saves (torchtitan/models/llama3/infra/parallelize.py,
# `_save_list`, late 2024), the matrix products every other one.
SAVED = {
    aten.mm.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    aten.max.default,
}


def per_op_policy():
    """The policy of one block's checkpoint, with its own count of matrix products (torch asks
    the policy in the forward only; the recomputation takes the saved outputs by position)."""
    mm = [0]

    def policy(ctx, func, *args, **kwargs):
        if func == aten.mm.default:
            mm[0] += 1
            if mm[0] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in SAVED else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def run_block(blk, x):
    if ac == "none":
        return blk(x)
    if ac == "op":
        return checkpoint(blk, x, use_reentrant=False, context_fn=per_op_policy)
    return checkpoint(blk, x, use_reentrant=False)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, t):
        x = self.tok(t)
        for blk in self.blocks:
            x = run_block(blk, x)
        return self.out(self.norm(x))


with torch.device("meta"):
    model = Model()
params = sum(p.numel() for p in model.parameters())
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
dp_mesh = None
if tp > 1:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cuda", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    dp_mesh = mesh["dp"]
    plan = {name: ColwiseParallel() for name in ("wq", "wk", "wv", "w1", "w3")}
    plan.update({name: RowwiseParallel() for name in ("wo", "w2")})
    for blk in model.blocks:
        parallelize_module(blk, mesh["tp"], plan)
for blk in model.blocks:
    fully_shard(blk, mesh=dp_mesh, mp_policy=mp)
fully_shard(model, mesh=dp_mesh, mp_policy=mp)
model.to_empty(device=dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
tokens = torch.zeros(batch, seq, dtype=torch.long, device=dev)
times = []
for step in range(steps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    wall = time.perf_counter()
    start.record()
    logits = model(tokens)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    end.record()
    torch.cuda.synchronize()
    wall = time.perf_counter() - wall
    times.append(start.elapsed_time(end))
    if rank == 0:
        # A TP group's ranks share their replica's tokens.
        tps = batch * seq / tp / (times[-1] / 1e3)
        mem = torch.cuda.max_memory_allocated(dev) / 2**30
        print(f"step {step}: {times[-1]:.1f} ms predicted, {tps:,.0f} tokens/s per GPU, "
              f"peak {mem:.2f} GiB per GPU, {wall:.1f} s wall", flush=True)
if rank == 0:
    print(f"llama: {name} ({params / 1e9:.2f}B parameters) on {world} GPUs (tp {tp}), seq {seq}, "
          f"local batch {batch}, activation checkpointing {ac}, attention {attention}: "
          f"{min(times):.1f} ms per step; "
          "PASS", flush=True)
dist.destroy_process_group()
