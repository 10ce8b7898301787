"""CPU equivalents of aten ops that torch implements only for NVIDIA GPUs.

Each function takes the op's arguments with CUDA tensors already replaced by CPU views (see
`kernels`) and returns CPU results, computed the way the GPU library defines the op:
- cuDNN convolutions (`cudnn_convolution[_transpose|_relu|_add_relu]`, `_conv_depthwise2d`,
  `conv_depthwise3d`) are `aten::convolution`; their backward is `convolution_backward`, which
  has a CPU kernel.
- cuDNN batch norm returns (output, saved mean, saved inverse std, reserve space) like
  `native_batch_norm` plus an empty reserve; its backward is `native_batch_norm_backward`.
- SyncBatchNorm's kernels (`batch_norm_stats`, `batch_norm_gather_stats_with_counts`,
  `batch_norm_elemt`, `batch_norm_backward_reduce`, `batch_norm_backward_elemt`) by their
  formulas (statistics in float32 for reduced-precision inputs, as the CUDA kernels do).
- Scaled dot-product attention's fused kernels: `attention`; recurrent networks: `rnn`. `_fused_sdp_choice` (asked by
  code that calls the op rather than SDPA) answers the math backend.
- `mm`/`bmm`/`addmm`/`baddbmm` with an `out_dtype`: accumulated in float32, then cast.
- `_fused_dropout` and `_masked_scale`: the mask from the op's (CPU) generator.
- `_fused_rms_norm_backward`: the closed form of RMSNorm's gradient.
- `_softmax`/`_log_softmax` with `half_to_float` (a float16 input, a float32 result: what
  autocast's `softmax(x, dtype=torch.float32)` calls) and their backward from a float32
  gradient to a float16 input: computed in float32, as the CUDA kernels accumulate; torch's CPU
  kernels refuse the conversion.
- cuDNN's grid sampler is `grid_sampler_2d` (bilinear, zero padding, corners aligned); the CTC
  loss is told cuDNN and MIOpen are unavailable, so it takes torch's native path.
"""

from __future__ import annotations

import torch

from . import attention, rnn

aten = torch.ops.aten


def _channel(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-channel vector shaped to broadcast over dim 1 of `like`."""
    return t.reshape([1, -1] + [1] * (like.dim() - 2))


def _reduce_dims(x: torch.Tensor) -> list[int]:
    return [0] + list(range(2, x.dim()))


def _acc(x: torch.Tensor) -> torch.Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def cudnn_convolution(x, w, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32):
    return aten.convolution(x, w, None, stride, padding, dilation, False, [0] * len(padding), groups)


def cudnn_convolution_transpose(
    x, w, padding, output_padding, stride, dilation, groups, benchmark, deterministic, allow_tf32
):
    return aten.convolution(x, w, None, stride, padding, dilation, True, output_padding, groups)


def cudnn_convolution_relu(x, w, bias, stride, padding, dilation, groups):
    return torch.relu(aten.convolution(x, w, bias, stride, padding, dilation, False, [0] * len(padding), groups))


def cudnn_convolution_add_relu(x, w, z, alpha, bias, stride, padding, dilation, groups):
    y = aten.convolution(x, w, bias, stride, padding, dilation, False, [0] * len(padding), groups)
    return torch.relu(y + (1 if alpha is None else alpha) * z)


def conv_depthwise(x, w, kernel_size, bias, stride, padding, dilation):
    return aten.convolution(x, w, bias, stride, padding, dilation, False, [0] * len(padding), x.size(1))


def cudnn_batch_norm(x, weight, bias, running_mean, running_var, training, factor, eps):
    out, mean, invstd = aten.native_batch_norm(x, weight, bias, running_mean, running_var, training, factor, eps)
    return out, mean, invstd, torch.empty(0, dtype=torch.uint8, device=x.device)


def cudnn_batch_norm_backward(x, grad_out, weight, running_mean, running_var, save_mean, save_var, eps, reserve):
    training = save_mean is not None and save_mean.numel() > 0
    return aten.native_batch_norm_backward(
        grad_out, x, weight, running_mean, running_var, save_mean, save_var, training, eps, [True, True, True]
    )


def batch_norm_stats(x, eps):
    a = _acc(x)
    dims = _reduce_dims(x)
    mean = a.mean(dims)
    var = a.var(dims, unbiased=False)
    return mean, torch.rsqrt(var + eps)


def batch_norm_gather_stats_with_counts(x, mean, invstd, running_mean, running_var, momentum, eps, counts):
    counts = counts.to(mean.dtype).reshape(-1, 1)
    n = counts.sum()
    var_each = 1.0 / (invstd * invstd) - eps
    g_mean = (counts * mean).sum(0) / n
    g_var = (counts * (var_each + (mean - g_mean) ** 2)).sum(0) / n
    if running_mean is not None:
        running_mean.mul_(1 - momentum).add_(momentum * g_mean.to(running_mean.dtype))
    if running_var is not None:
        unbiased = g_var * n / (n - 1)
        running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
    return g_mean, torch.rsqrt(g_var + eps)


def batch_norm_elemt(x, weight, bias, mean, invstd, eps):
    y = (_acc(x) - _channel(mean, x)) * _channel(invstd, x)
    if weight is not None:
        y = y * _channel(weight, x)
    if bias is not None:
        y = y + _channel(bias, x)
    return y.to(x.dtype)


def batch_norm_backward_reduce(grad_out, x, mean, invstd, weight, input_g, weight_g, bias_g):
    dims = _reduce_dims(x)
    dy = _acc(grad_out)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (_acc(x) - _channel(mean, x))).sum(dims)
    grad_weight = sum_dy_xmu * invstd
    wdt = weight.dtype if weight is not None else mean.dtype
    return sum_dy, sum_dy_xmu, grad_weight.to(wdt), sum_dy.to(wdt)


def batch_norm_backward_elemt(grad_out, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    n = count.sum().to(torch.float32)
    dy = _acc(grad_out)
    m = _channel(mean, x)
    inv = _channel(invstd, x)
    dx = dy - _channel(sum_dy, x) / n - (_acc(x) - m) * inv * inv * _channel(sum_dy_xmu, x) / n
    dx = dx * inv
    if weight is not None:
        dx = dx * _channel(weight, x)
    return dx.to(x.dtype)


def cudnn_grid_sampler(x, grid):
    # cuDNN's sampler is bilinear with zero padding and corner-aligned coordinates
    # (torch routes only such calls to it).
    return aten.grid_sampler_2d(x, grid, 0, 0, True)


def cudnn_grid_sampler_backward(x, grid, grad_out):
    return aten.grid_sampler_2d_backward(grad_out, x, grid, 0, 0, True, [True, True])


def use_cudnn_ctc_loss(*args, **kwargs):
    # The CTC loss then takes torch's native path, which has a CPU kernel.
    return False


def fused_sdp_choice(*args, **kwargs):
    return int(torch.nn.attention.SDPBackend.MATH)


def _mm_dtype(f):
    def g(*args, **kwargs):
        *tensors, out_dtype = args
        return f(*[t.float() for t in tensors], **kwargs).to(out_dtype)

    return g


def _mm_dtype_out(f):
    def g(*args, out, **kwargs):
        *tensors, out_dtype = args
        r = f(*[t.float() for t in tensors], **kwargs).to(out_dtype)
        out.resize_(r.shape)
        return out.copy_(r)

    return g


def fused_dropout(x, p, generator=None):
    # `p` is the probability of keeping an element; the mask is uint8, as the CUDA kernel's
    # (and torch's decomposition of the op) is.
    mask = torch.empty(x.shape, dtype=torch.uint8).bernoulli_(p, generator=generator)
    return x * mask / p, mask


def masked_scale(x, mask, scale):
    return x * mask * scale


def fused_rms_norm_backward(grad_out, x, normalized_shape, rstd, weight, output_mask):
    k = len(normalized_shape)
    dims = list(range(x.dim() - k, x.dim()))
    xa, dy = _acc(x), _acc(grad_out)
    r = rstd.reshape(list(rstd.shape) + [1] * (x.dim() - rstd.dim())).to(xa.dtype)
    g = dy * weight.to(xa.dtype) if weight is not None else dy
    # Gradients `output_mask` leaves out are not computed (undefined, as the CUDA kernel's).
    dx = None
    if output_mask[0]:
        dx = (r * g - xa * r**3 * (g * xa).mean(dims, keepdim=True)).to(x.dtype)
    dw = None
    if weight is not None and output_mask[1]:
        lead = list(range(0, x.dim() - k))
        dw = (dy * xa * r).sum(lead).to(weight.dtype)
    return dx, dw


def _half_to_float(op):
    def forward(x, dim, half_to_float):
        if not half_to_float:
            return op(x, dim, False)
        if x.dtype != torch.float16:
            raise RuntimeError("conversion is supported for Half type only")
        return op(x.float(), dim, False)

    return forward


def _half_to_float_backward(op):
    def backward(grad, out, dim, input_dtype):
        if grad.dtype == input_dtype:
            return op(grad, out, dim, input_dtype)
        if input_dtype != torch.float16 or grad.dtype != torch.float32:
            raise RuntimeError("expected input and grad types to match, or input to be at::Half and grad to be at::Float")
        return op(grad, out, dim, grad.dtype).to(input_dtype)

    return backward


REPLACEMENTS = {
    "aten::cudnn_convolution": cudnn_convolution,
    "aten::cudnn_convolution_transpose": cudnn_convolution_transpose,
    "aten::cudnn_convolution_relu": cudnn_convolution_relu,
    "aten::cudnn_convolution_add_relu": cudnn_convolution_add_relu,
    "aten::_conv_depthwise2d": conv_depthwise,
    "aten::conv_depthwise3d": conv_depthwise,
    "aten::cudnn_batch_norm": cudnn_batch_norm,
    "aten::cudnn_batch_norm_backward": cudnn_batch_norm_backward,
    "aten::batch_norm_stats": batch_norm_stats,
    "aten::batch_norm_gather_stats_with_counts": batch_norm_gather_stats_with_counts,
    "aten::batch_norm_elemt": batch_norm_elemt,
    "aten::batch_norm_backward_reduce": batch_norm_backward_reduce,
    "aten::batch_norm_backward_elemt": batch_norm_backward_elemt,
    "aten::_fused_sdp_choice": fused_sdp_choice,
    "aten::cudnn_grid_sampler": cudnn_grid_sampler,
    "aten::cudnn_grid_sampler_backward": cudnn_grid_sampler_backward,
    "aten::_use_cudnn_ctc_loss": use_cudnn_ctc_loss,
    "aten::_use_cudnn_ctc_loss.Tensor": use_cudnn_ctc_loss,
    "aten::_use_miopen_ctc_loss": use_cudnn_ctc_loss,
    "aten::_use_miopen_ctc_loss.Tensor": use_cudnn_ctc_loss,
    "aten::mm.dtype": _mm_dtype(torch.mm),
    "aten::bmm.dtype": _mm_dtype(torch.bmm),
    "aten::addmm.dtype": _mm_dtype(torch.addmm),
    "aten::baddbmm.dtype": _mm_dtype(torch.baddbmm),
    "aten::mm.dtype_out": _mm_dtype_out(torch.mm),
    "aten::bmm.dtype_out": _mm_dtype_out(torch.bmm),
    "aten::addmm.dtype_out": _mm_dtype_out(torch.addmm),
    "aten::baddbmm.dtype_out": _mm_dtype_out(torch.baddbmm),
    "aten::_fused_dropout": fused_dropout,
    "aten::_masked_scale": masked_scale,
    "aten::_fused_rms_norm_backward": fused_rms_norm_backward,
    "aten::_softmax": _half_to_float(aten._softmax),
    "aten::_log_softmax": _half_to_float(aten._log_softmax),
    "aten::_softmax_backward_data": _half_to_float_backward(aten._softmax_backward_data),
    "aten::_log_softmax_backward_data": _half_to_float_backward(aten._log_softmax_backward_data),
    **attention.REPLACEMENTS,
    **rnn.REPLACEMENTS,
}
