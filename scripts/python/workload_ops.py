"""Records the ops of one training step of the workloads whose published throughput checks the
compute model (compute-model/data/measurements.csv), as ncclsim's runtime would price them.

Each model is built on torch's meta device (no memory, no arithmetic) and run forward, backward
and through its optimizer under a dispatch mode that sees every aten op the CUDA dispatch key
would, skipping those the runtime does not price (views, allocation); each op's FLOPs, bytes,
precision and GEMM shape come from ncclsim's own pricing code (`ncclsim.compute.timing.cost`),
so the op lists are what `ncclsim run --compute time` would put on the simulated GPU's stream.
Attention runs as the measured software ran it: FlashAttention for the LLM pretraining tables
(`_scaled_dot_product_flash_attention`), explicit matmul/softmax for timm on torch 1.12.

Output: compute-model/data/workloads/<name>.csv, one line per distinct op of a phase (`fwd`,
`bwd`, `opt`) with its count. Run with the project's torch venv:
    target/torch-venv/bin/python scripts/python/workload_ops.py [--only NAME]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from ncclsim.compute import kernels, timing  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from models import ResNet  # noqa: E402

META = torch.device("meta")
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "compute-model", "data", "workloads")


# ---------------------------------------------------------------- models

def attention(q, k, v, causal: bool, flash: bool):
    """q, k, v: [batch, heads, seq, head_dim]."""
    if flash:
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)[0]
    s = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    return s.softmax(-1) @ v


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Block(nn.Module):
    """A pre-norm decoder block: MPT (LayerNorm without bias, GELU MLP) or Llama (RMSNorm,
    grouped-query attention, SwiGLU MLP); no biases."""

    def __init__(self, c):
        super().__init__()
        d, self.h, self.kv = c["d"], c["heads"], c.get("kv_heads", c["heads"])
        self.hd = d // self.h
        self.llama = c["kind"] == "llama"
        norm = (lambda: RMSNorm(d)) if self.llama else (lambda: nn.LayerNorm(d, bias=False))
        self.n1, self.n2 = norm(), norm()
        self.qkv = nn.Linear(d, (self.h + 2 * self.kv) * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        f = c["ffn"]
        if self.llama:
            self.w13 = nn.Linear(d, 2 * f, bias=False)
        else:
            self.w1 = nn.Linear(d, f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.h * self.hd, self.kv * self.hd, self.kv * self.hd], -1)
        q = q.view(b, s, self.h, self.hd).transpose(1, 2)
        k = k.view(b, s, self.kv, self.hd).transpose(1, 2)
        v = v.view(b, s, self.kv, self.hd).transpose(1, 2)
        if self.kv != self.h:
            k = k.repeat_interleave(self.h // self.kv, 1)
            v = v.repeat_interleave(self.h // self.kv, 1)
        a = attention(q, k, v, True, True).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(a)
        y = self.n2(x)
        if self.llama:
            g, u = self.w13(y).chunk(2, -1)
            y = F.silu(g) * u
        else:
            y = F.gelu(self.w1(y))
        return x + self.w2(y)


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.emb = nn.Embedding(c["vocab"], c["d"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["d"]) if c["kind"] == "llama" else nn.LayerNorm(c["d"], bias=False)
        # MPT ties the output projection to the embedding; Llama has its own.
        self.head = None if c["kind"] == "mpt" else nn.Linear(c["d"], c["vocab"], bias=False)

    def forward(self, tokens):
        x = self.emb(tokens)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        logits = F.linear(x, self.emb.weight) if self.head is None else self.head(x)
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())


class ResNetLoss(nn.Module):
    """A ResNet (`models.ResNet`) with its loss, as timm's training benchmark runs it."""

    def __init__(self, depths):
        super().__init__()
        self.net = ResNet(depths)

    def forward(self, x, labels):
        return F.cross_entropy(self.net(x).float(), labels)


class ViT(nn.Module):
    """ViT-B/16 (Dosovitskiy et al. 2021): 16x16 patches, 12 layers of width 768, 12 heads,
    MLP 3072, class token, as timm builds it."""

    def __init__(self, d=768, layers=12, heads=12, mlp=3072):
        super().__init__()
        self.h = heads
        self.patch = nn.Conv2d(3, d, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, 197, d))
        self.blocks = nn.ModuleList(
            nn.ModuleDict(dict(n1=nn.LayerNorm(d), qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d),
                               n2=nn.LayerNorm(d), fc1=nn.Linear(d, mlp), fc2=nn.Linear(mlp, d)))
            for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1000)

    def forward(self, x, labels):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        b, s, d = x.shape
        for m in self.blocks:
            q, k, v = m["qkv"](m["n1"](x)).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            a = attention(q, k, v, False, False).transpose(1, 2).reshape(b, s, d)
            x = x + m["proj"](a)
            x = x + m["fc2"](F.gelu(m["fc1"](m["n2"](x))))
        return F.cross_entropy(self.head(self.norm(x)[:, 0]).float(), labels)


# ---------------------------------------------------------------- workloads

# MPT configurations: llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml (d_model, n_heads,
# n_layers; expansion ratio 4, vocabulary 50368).
MPT = {"125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24), "1b": (2048, 16, 24),
       "3b": (2560, 20, 32), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48),
       "70b": (8192, 64, 80)}
# Llama: Meta's model cards / torchtitan's model args (dim, layers, heads, kv heads, ffn, vocab).
LLAMA = {"llama3-8b": (4096, 32, 32, 8, 14336, 128256), "llama3-70b": (8192, 80, 64, 8, 28672, 128256),
         "llama2-13b": (5120, 40, 40, 40, 13824, 32000), "llama2-70b": (8192, 80, 64, 8, 28672, 32000)}


def mpt(size):
    d, h, n = MPT[size]
    return {"kind": "mpt", "d": d, "heads": h, "layers": n, "ffn": 4 * d, "vocab": 50368}


def llama(name):
    d, n, h, kv, f, v = LLAMA[name]
    return {"kind": "llama", "d": d, "heads": h, "kv_heads": kv, "layers": n, "ffn": f, "vocab": v}


def workloads():
    """name -> (builder, inputs, dtype, optimizer shards)."""
    w = {}
    for size in MPT:
        for mb, seq in ((1, 2048), (2, 2048), (3, 2048), (4, 2048), (6, 2048), (8, 2048), (10, 2048),
                        (12, 2048), (14, 2048), (24, 2048), (32, 2048), (40, 2048), (56, 512)):
            w[f"mpt-{size}-mb{mb}-s{seq}"] = ("lm", mpt(size), mb, seq)
    for name, seq, mb in (("llama3-8b", 8192, 1), ("llama3-8b", 8192, 2), ("llama3-70b", 8192, 1), ("llama2-13b", 4096, 2),
                          ("llama2-70b", 4096, 1)):
        w[f"{name}-mb{mb}-s{seq}"] = ("lm", llama(name), mb, seq)
    for cl in (False, True):
        tag = "nhwc" if cl else "nchw"
        w[f"resnet50-b512-{tag}"] = ("resnet", (3, 4, 6, 3), 512, cl)
        w[f"resnet101-b256-{tag}"] = ("resnet", (3, 4, 23, 3), 256, cl)
        w[f"vit-b16-b192-{tag}"] = ("vit", None, 192, cl)
    # The batch sizes of NVIDIA's ResNet-50 v1.5 recipes: 256 for mixed precision (channels
    # last) and TF32, 112 for FP32 on 16 GB V100s; "-fp32" workloads keep the model in FP32.
    w["resnet50-b256-nhwc"] = ("resnet", (3, 4, 6, 3), 256, True)
    w["resnet50-b256-nchw-fp32"] = ("resnet", (3, 4, 6, 3), 256, False)
    w["resnet50-b112-nchw-fp32"] = ("resnet", (3, 4, 6, 3), 112, False)
    return w


# Which workloads the measurement rows need (the rest of the grid is not recorded).
NEEDED = {
    "mpt-1b-mb14-s2048", "mpt-7b-mb6-s2048", "mpt-13b-mb2-s2048", "mpt-30b-mb3-s2048", "mpt-70b-mb8-s2048",
    "mpt-760m-mb24-s2048", "mpt-3b-mb10-s2048", "mpt-1b-mb56-s512", "mpt-125m-mb40-s2048",
    "mpt-350m-mb32-s2048", "mpt-760m-mb24-s2048", "mpt-3b-mb6-s2048", "mpt-7b-mb12-s2048", "mpt-13b-mb4-s2048",
    "llama3-8b-mb1-s8192", "llama3-8b-mb2-s8192", "llama3-70b-mb1-s8192", "llama2-13b-mb2-s4096", "llama2-70b-mb1-s4096",
    "resnet50-b512-nchw", "resnet101-b256-nchw", "vit-b16-b192-nchw",
    "resnet50-b512-nhwc", "resnet101-b256-nhwc", "vit-b16-b192-nhwc",
    "resnet50-b256-nhwc", "resnet50-b256-nchw-fp32", "resnet50-b112-nchw-fp32",
}


# ---------------------------------------------------------------- recording

class Recorder(TorchDispatchMode):
    """Prices every op the runtime would (ops with a CUDA kernel, not views or allocations)."""

    def __init__(self):
        super().__init__()
        self.phase = "fwd"
        self.ops = Counter()
        self.priced = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.name()
        if name in kernels._CONVOLUTIONS:
            # The layout cuDNN gives the results (the meta kernels' is always NCHW), as
            # `--compute time` keeps it.
            out = kernels._conv_layout(name, list(args), out)
        info = self.priced.get(func)
        if info is None:
            # A forward convolution runs on the meta device as itself; on CUDA it decomposes
            # into cuDNN's convolution (priced the same way), so it is priced here.
            cuda = (torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA")
                    or name in ("aten::copy_", "aten::convolution"))
            info = timing.Priced(func, name) if cuda and name not in kernels.NATIVE and not kernels._is_view(func) else False
            self.priced[func] = info
        if info:
            flops, nbytes, unit, precision, _, gemm, _ = timing.cost(info, args, kwargs, out)
            self.ops[(self.phase, name, unit, precision, flops, nbytes, *gemm)] += 1
        return out


def record(name, spec):
    kind, cfg, batch, extra = spec
    torch.manual_seed(0)
    with torch.device(META):
        if kind == "lm":
            model = Decoder(cfg).to(torch.bfloat16)
            inputs = (torch.zeros(batch, extra, dtype=torch.long),)
        else:
            dtype = torch.float32 if name.endswith("-fp32") else torch.float16
            model = (ResNetLoss(cfg) if kind == "resnet" else ViT()).to(dtype)
            x = torch.zeros(batch, 3, 224, 224, dtype=dtype)
            if extra:
                model = model.to(memory_format=torch.channels_last)
                x = x.to(memory_format=torch.channels_last)
            inputs = (x, torch.zeros(batch, dtype=torch.long))
        params = sum(p.numel() for p in model.parameters())
        rec = Recorder()
        with rec:
            loss = model(*inputs)
            rec.phase = "bwd"
            loss.backward()
        # The optimizer step: AdamW (torch's default multi-tensor path) over one flat FP32 tensor
        # of 2^24 parameters; the evaluation scales it to the parameters a GPU holds.
        p = nn.Parameter(torch.zeros(1 << 24))
        p.grad = torch.zeros(1 << 24)
        opt = torch.optim.AdamW([p], lr=1e-4, foreach=True)
        with rec:
            rec.phase = "opt"
            opt.step()
    path = os.path.join(OUT, f"{name}.csv")
    with open(path, "w", newline="") as f:
        f.write(f"# {name}: {params} parameters; torch {torch.__version__}; "
                "written by scripts/python/workload_ops.py\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["phase", "op", "unit", "precision", "flops", "bytes", "batch", "m", "n", "k", "count"])
        for key, n in sorted(rec.ops.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][4], kv[0][5])):
            phase, op, unit, prec, flops, nbytes, *gemm = key
            w.writerow([phase, op, unit, prec, int(flops), int(nbytes), *gemm, n])
    return params, sum(rec.ops.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="record only this workload")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    for name, spec in workloads().items():
        if (a.only and name != a.only) or (not a.only and name not in NEEDED):
            continue
        params, ops = record(name, spec)
        print(f"{name}: {params / 1e6:.1f} M parameters, {ops} ops", flush=True)


if __name__ == "__main__":
    main()
