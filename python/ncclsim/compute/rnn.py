"""Recurrent networks (`nn.LSTM`, `nn.GRU`, `nn.RNN` and their cells) on CUDA tensors.

torch computes them on CUDA through cuDNN (whose handle and descriptors are C calls, not ops the
dispatcher lets us replace) or through fused cell kernels torch has only for NVIDIA GPUs. The
functions `torch.nn` calls for them (`torch._VF.lstm`, `gru`, `rnn_tanh`, `rnn_relu` and the
`*_cell` functions) are wrapped: with CUDA tensors, the wrapper runs torch's CPU implementation
on CPU copies of the arguments made by differentiable `.to()` copies, and moves the results back
the same way, so autograd differentiates through the CPU computation and the gradients reach the
CUDA parameters. Between-layer dropout draws from torch's CPU generator (`torch.manual_seed`
seeds it). `_cudnn_rnn_flatten_weight` (called by `flatten_parameters`) returns a packed copy of
the weights; the weights stay separate tensors.
"""

from __future__ import annotations

import functools

import torch
from torch.utils._pytree import tree_map

_WRAPPED = ("lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell")


def _device_of(args):
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_cuda:
            return a.device
        if isinstance(a, (list, tuple)):
            d = _device_of(a)
            if d is not None:
                return d
    return None


def _on_cpu(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        dev = _device_of(args)
        if dev is None:
            return fn(*args, **kwargs)
        cpu = tree_map(lambda t: t.to("cpu") if isinstance(t, torch.Tensor) and t.is_cuda else t, (args, kwargs))
        out = fn(*cpu[0], **cpu[1])
        return tree_map(lambda t: t.to(dev) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, out)

    wrapper.__wrapped__ = fn
    return wrapper


def install() -> None:
    """Wraps torch's recurrent functions (once)."""
    vf = torch._VF
    for name in _WRAPPED:
        fn = getattr(vf, name, None)
        if fn is not None and not hasattr(fn, "__wrapped__"):
            setattr(vf, name, _on_cpu(fn))


def cudnn_rnn_flatten_weight(weight_arr, stride0, input_size, mode, hidden_size, proj_size, num_layers,
                             batch_first, bidirectional):
    return torch.cat([w.reshape(-1) for w in weight_arr]) if weight_arr else torch.empty(0)


REPLACEMENTS = {
    "aten::_cudnn_rnn_flatten_weight": cudnn_rnn_flatten_weight,
}
