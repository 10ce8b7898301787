"""Scaled dot-product attention's fused CUDA kernels (flash, memory-efficient and cuDNN's),
computed on the CPU by their definition.

`torch.nn.functional.scaled_dot_product_attention` picks a fused kernel for CUDA tensors inside
C++ (not through an op the dispatcher lets us replace), so the fused ops themselves get CPU
equivalents: forward S = scale * Q K^T (+ bias, causal mask top-left aligned), P = softmax(S),
optional dropout, O = P V; log-sum-exp of S per query row; backward by the closed form
(dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = scale dS K, dK = scale dS^T Q).
Reduced-precision inputs are computed in float32 and cast back. Dropout masks come from a seed
drawn from the device's generator (`rng`) and kept in the op's `philox_seed` output, so the
backward regenerates the same mask.
"""

from __future__ import annotations

import math

import torch

from . import rng


def _scores(q, k, bias, is_causal, scale):
    s = scale if scale is not None else 1.0 / math.sqrt(q.size(-1))
    if k.size(-3) != q.size(-3):  # grouped-query attention: repeat the key/value heads
        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)
    S = torch.matmul(q.float(), k.float().transpose(-2, -1)) * s
    if bias is not None and bias.numel():
        if bias.dtype == torch.bool:
            S = S.masked_fill(~bias, float("-inf"))
        else:
            S = S + bias.float()
    if is_causal:
        L, Sk = S.size(-2), S.size(-1)
        keep = torch.ones(L, Sk, dtype=torch.bool, device=S.device).tril()
        S = S.masked_fill(~keep, float("-inf"))
    return S, s


def _mask(shape, p, seed):
    g = torch.Generator()
    g.manual_seed(int(seed))
    return torch.empty(shape).bernoulli_(1.0 - p, generator=g) / (1.0 - p)


def _draw_seed() -> int:
    g = rng.cpu_generator(None, torch.device("cuda", torch.cuda.current_device()))
    return int(torch.randint(0, 2**62, (1,), generator=g))


def _repeat_kv(v, q):
    if v.size(-3) != q.size(-3):
        return v.repeat_interleave(q.size(-3) // v.size(-3), dim=-3)
    return v


def _forward(q, k, v, bias, dropout_p, is_causal, scale):
    S, _ = _scores(q, k, bias, is_causal, scale)
    lse = torch.logsumexp(S, dim=-1)
    P = torch.softmax(S, dim=-1).nan_to_num(0.0)
    seed = _draw_seed() if dropout_p > 0 else 0
    Pd = P * _mask(P.shape, dropout_p, seed) if dropout_p > 0 else P
    out = torch.matmul(Pd, _repeat_kv(v, q).float()).to(q.dtype)
    return out, lse, seed


def _backward(dout, q, k, v, bias, dropout_p, is_causal, scale, seed):
    S, s = _scores(q, k, bias, is_causal, scale)
    P = torch.softmax(S, dim=-1).nan_to_num(0.0)
    M = _mask(P.shape, dropout_p, seed) if dropout_p > 0 else None
    Pd = P * M if M is not None else P
    kk, vv = _repeat_kv(k, q).float(), _repeat_kv(v, q).float()
    do = dout.float()
    dv = torch.matmul(Pd.transpose(-2, -1), do)
    dPd = torch.matmul(do, vv.transpose(-2, -1))
    dP = dPd * M if M is not None else dPd
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    dq = torch.matmul(dS, kk) * s
    dk = torch.matmul(dS.transpose(-2, -1), q.float()) * s
    if k.size(-3) != q.size(-3):  # fold the repeated heads back
        g = q.size(-3) // k.size(-3)
        dk = dk.unflatten(-3, (k.size(-3), g)).sum(-3)
        dv = dv.unflatten(-3, (v.size(-3), g)).sum(-3)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dS


def _seed_of(philox_seed, dropout_p) -> int:
    """The dropout seed a forward kept (read only when there is dropout: shaped-only runs
    under `--compute time` hold no value)."""
    return int(philox_seed.item()) if dropout_p > 0 else 0


def _seed_tensors(seed):
    return torch.tensor(seed, dtype=torch.int64), torch.tensor(0, dtype=torch.int64)


def efficient_forward(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None):
    out, lse, seed = _forward(q, k, v, attn_bias, dropout_p, is_causal, scale)
    return (out, lse, *_seed_tensors(seed))


def efficient_backward(
    grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask,
    is_causal=False, *, scale=None,
):
    dq, dk, dv, dS = _backward(grad_out, q, k, v, attn_bias, dropout_p, is_causal, scale, _seed_of(philox_seed, dropout_p))
    if attn_bias is not None and attn_bias.numel() and grad_input_mask[3]:
        dbias = dS
        while dbias.dim() > attn_bias.dim():
            dbias = dbias.sum(0)
        for i, n in enumerate(attn_bias.shape):
            if n == 1 and dbias.size(i) != 1:
                dbias = dbias.sum(i, keepdim=True)
        dbias = dbias.to(attn_bias.dtype)
    else:
        dbias = torch.empty(0, dtype=q.dtype)
    return dq, dk, dv, dbias


def flash_forward(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    out, lse, seed = _forward(q, k, v, None, dropout_p, is_causal, scale)
    seed_t, offset_t = _seed_tensors(seed)
    empty = torch.empty(0, dtype=torch.int32)
    return out, lse, empty, empty, q.size(-2), k.size(-2), seed_t, offset_t, torch.empty(0, dtype=q.dtype)


def flash_backward(
    grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
    philox_seed, philox_offset, *, scale=None,
):
    dq, dk, dv, _ = _backward(grad_out, q, k, v, None, dropout_p, is_causal, scale, _seed_of(philox_seed, dropout_p))
    return dq, dk, dv


def cudnn_forward(
    q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, return_debug_mask=False,
    *, scale=None,
):
    out, lse, seed = _forward(q, k, v, attn_bias, dropout_p, is_causal, scale)
    seed_t, offset_t = _seed_tensors(seed)
    empty = torch.empty(0, dtype=torch.int32)
    # cuDNN's log-sum-exp has a trailing dimension of 1 (torch's meta kernel says so too).
    return (out, lse.unsqueeze(-1), empty, empty, q.size(-2), k.size(-2), seed_t, offset_t,
            torch.empty(0, dtype=q.dtype))


def cudnn_backward(
    grad_out, q, k, v, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k,
    max_q, max_k, dropout_p, is_causal, *, scale=None,
):
    dq, dk, dv, _ = _backward(grad_out, q, k, v, attn_bias, dropout_p, is_causal, scale, _seed_of(philox_seed, dropout_p))
    return dq, dk, dv


REPLACEMENTS = {
    "aten::_scaled_dot_product_cudnn_attention": cudnn_forward,
    "aten::_scaled_dot_product_cudnn_attention_backward": cudnn_backward,
    "aten::_scaled_dot_product_efficient_attention": efficient_forward,
    "aten::_scaled_dot_product_efficient_attention_backward": efficient_backward,
    "aten::_scaled_dot_product_flash_attention": flash_forward,
    "aten::_scaled_dot_product_flash_attention_backward": flash_backward,
}
