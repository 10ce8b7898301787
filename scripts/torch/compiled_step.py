"""A `torch.compile`d transformer step priced as its compiled kernels, for `ncclsim run
--compute time --clock real -- python compiled_step.py`.

Two forms of the same model (2 blocks, d_model 1024, 16 heads, sequence 2048, batch 4, bf16):
- compiled: attention through FlexAttention with a causal block mask, layer norm and the tanh
  GELU written out as pointwise and reduction ops, the whole step under `torch.compile`, which
  ncclsim runs op by op and prices as inductor's kernels (one fused kernel per run of pointwise
  and reduction ops, FlexAttention as one attention kernel);
- by hand: the same step in eager mode with the fused kernels written by hand
  (`scaled_dot_product_attention(is_causal=True)` on the FlashAttention backend, `F.layer_norm`, `F.gelu(approximate="tanh")`).

Each step's modelled time is read with CUDA events (under `--compute time` the stream's time is
the model's). The compiled step must be within 10% of the hand-fused one, and the same model
compiled op by op (every op its own kernel, `torch.compile(backend="eager")`) must be slower
than both: the check checks that fusion is priced. Prints `compiled-step:` lines.
"""

import math
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

dev = torch.device("cuda", 0)
B, S, D, H, LAYERS = 4, 2048, 1024, 16, 2


def layer_norm(x, w, b, eps=1e-5):  # written out: a reduction and pointwise ops
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * w + b


def gelu(x):  # the tanh form, written out
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


class Block(nn.Module):
    def __init__(self, hand: bool):
        super().__init__()
        self.hand = hand
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def attend(self, x, mask):
        q, k, v = self.qkv(x).view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)
        if self.hand:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # FlexAttention's class of kernel
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            o = flex_attention(q, k, v, block_mask=mask)
        return self.proj(o.transpose(1, 2).reshape(B, S, D))

    def forward(self, x, mask):
        if self.hand:
            x = x + self.attend(F.layer_norm(x, (D,), self.ln1.weight, self.ln1.bias), mask)
            return x + self.out(F.gelu(self.fc(F.layer_norm(x, (D,), self.ln2.weight, self.ln2.bias)),
                                       approximate="tanh"))
        x = x + self.attend(layer_norm(x, self.ln1.weight, self.ln1.bias), mask)
        return x + self.out(gelu(self.fc(layer_norm(x, self.ln2.weight, self.ln2.bias))))


class Model(nn.Module):
    def __init__(self, hand: bool):
        super().__init__()
        self.blocks = nn.ModuleList(Block(hand) for _ in range(LAYERS))

    def forward(self, x, mask):
        for b in self.blocks:
            x = b(x, mask)
        return x


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def step_ms(model, mask, steps=3):
    x = torch.randn(B, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model(x, mask).float().square().mean().backward()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return min(times[1:])  # the first compiles


def main():
    torch.manual_seed(0)
    mask = create_block_mask(causal, None, None, S, S, device=dev)
    hand = step_ms(Model(True).to(dev), mask)
    compiled = step_ms(torch.compile(Model(False).to(dev)), mask)
    one_by_one = step_ms(torch.compile(Model(False).to(dev), backend="eager"), mask)
    ratio = compiled / hand
    print(f"compiled-step: by hand (fused kernels in eager mode) {hand:.3f} ms, compiled "
          f"{compiled:.3f} ms ({ratio:.3f} of it), compiled op by op {one_by_one:.3f} ms", flush=True)
    ok = abs(ratio - 1.0) <= 0.10 and one_by_one > max(hand, compiled)
    print(f"compiled-step: {'ok' if ok else 'FAIL'}", flush=True)
    sys.exit(0 if ok else 1)


main()
