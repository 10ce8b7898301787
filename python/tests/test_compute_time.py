"""What `--compute time` leaves uncomputed, and cuDNN's fused attention: which ops' results are
only the arguments they write (from torch's own schemas), when such an op is skipped (by its
bytes), and the cuDNN attention forward and backward against torch's CPU attention and
autograd, on meta tensors as well (shapes only, as `--compute time` runs them)."""

import torch
import torch.nn.functional as F

from ncclsim.compute import attention, kernels

aten = torch.ops.aten


def test_written_returns_follow_the_schema():
    assert kernels._written_returns(aten._foreach_copy_.default._schema) == []
    assert kernels._written_returns(aten.copy_.default._schema) == [(0, "self")]
    # add.out returns its out= argument, which is keyword-only.
    assert kernels._written_returns(aten.add.out._schema) == [(None, "out")]
    # A new tensor is not an argument.
    assert kernels._written_returns(aten.add.Tensor._schema) is None


class _Info:
    def __init__(self, op):
        self.written_returns = kernels._written_returns(op._schema)


def test_only_large_write_only_ops_are_skipped():
    info = _Info(aten._foreach_copy_.default)
    small = ([torch.empty(16)], [torch.empty(16)])
    assert kernels._skipped(info, small, {}) is None
    big = ([torch.empty(1 << 15)], [torch.empty(1 << 15)])
    assert kernels._skipped(info, big, {}) is kernels._NOTHING
    x = torch.empty(1 << 15)
    assert kernels._skipped(_Info(aten.copy_.default), (x, x), {}) is x
    assert kernels._skipped(_Info(aten.add.Tensor), (x, x), {}) is None


def test_cudnn_attention_equals_torchs_attention_and_its_gradients():
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    k = torch.randn(2, 2, 16, 8, requires_grad=True)
    v = torch.randn(2, 2, 16, 8, requires_grad=True)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    g = torch.randn_like(want)
    want.backward(g)
    with torch.no_grad():
        r = attention.cudnn_forward(q, k, v, None, True, 0.0, True)
        out, lse = r[0], r[1]
        assert lse.shape == (2, 4, 16, 1)
        assert torch.allclose(out, want, atol=1e-5)
        dq, dk, dv = attention.cudnn_backward(
            g, q, k, v, out, lse, r[6], r[7], None, r[2], r[3], r[4], r[5], 0.0, True
        )
    assert torch.allclose(dq, q.grad, atol=1e-5)
    assert torch.allclose(dk, k.grad, atol=1e-5)
    assert torch.allclose(dv, v.grad, atol=1e-5)


def test_cudnn_attention_shapes_on_meta_tensors():
    q = torch.empty(2, 8, 64, 16, device="meta", dtype=torch.bfloat16)
    k = torch.empty(2, 2, 64, 16, device="meta", dtype=torch.bfloat16)
    r = attention.cudnn_forward(q, k, k, None, True, 0.0, True)
    want = aten._scaled_dot_product_cudnn_attention(q, q, q, None, True, 0.0, True)
    assert r[0].shape == want[0].shape and r[1].shape == want[1].shape
    dq, dk, dv = attention.cudnn_backward(
        r[0], q, k, k, r[0], r[1], r[6], r[7], None, r[2], r[3], r[4], r[5], 0.0, True
    )
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, k.shape)
