"""The other CPU equivalents of CUDA-only ops (`cuda_only`) against CPU torch: cuDNN's
convolutions, RMSNorm's backward (autograd of `F.rms_norm`), the grid sampler (`F.grid_sample`
and its autograd), fused dropout and masked scaling (torch's decomposition of `_fused_dropout`
for the mask's type)."""

import torch
import torch.nn.functional as F
from torch._decomp import decompositions

from ncclsim.compute import cuda_only

f64 = torch.float64


def close(a, b, tol=1e-10):
    return torch.allclose(a, b, rtol=tol, atol=tol)


def test_cudnn_convolutions():
    torch.manual_seed(0)
    x, w = torch.randn(2, 4, 7, 7, dtype=f64), torch.randn(6, 2, 3, 3, dtype=f64)
    bias = torch.randn(6, dtype=f64)
    want = F.conv2d(x, w, None, stride=2, padding=1, dilation=1, groups=2)
    got = cuda_only.cudnn_convolution(x, w, [1, 1], [2, 2], [1, 1], 2, False, False, True)
    assert close(got, want)
    wt = torch.randn(4, 3, 3, 3, dtype=f64)
    want = F.conv_transpose2d(x, wt, None, stride=2, padding=1, output_padding=1)
    got = cuda_only.cudnn_convolution_transpose(x, wt, [1, 1], [1, 1], [2, 2], [1, 1], 1, False, False, True)
    assert close(got, want)
    y = F.conv2d(x, w, bias, padding=1, groups=2)
    assert close(cuda_only.cudnn_convolution_relu(x, w, bias, [1, 1], [1, 1], [1, 1], 2), F.relu(y))
    z = torch.randn_like(y)
    got = cuda_only.cudnn_convolution_add_relu(x, w, z, 0.5, bias, [1, 1], [1, 1], [1, 1], 2)
    assert close(got, F.relu(y + 0.5 * z))
    wd = torch.randn(4, 1, 3, 3, dtype=f64)
    got = cuda_only.conv_depthwise(x, wd, [3, 3], None, [1, 1], [1, 1], [1, 1])
    assert close(got, F.conv2d(x, wd, None, padding=1, groups=4))


def rms_norm_grads(x, shape, weight, g, eps):
    """Autograd's gradients of CPU torch's RMSNorm, and its saved 1/rms (torch's own op)."""
    xr = x.detach().clone().requires_grad_()
    wr = weight.detach().clone().requires_grad_() if weight is not None else None
    F.rms_norm(xr, shape, wr, eps).backward(g)
    rstd = torch.ops.aten._fused_rms_norm(x, shape, weight, eps)[1]
    return xr.grad, (wr.grad if wr is not None else None), rstd


def test_fused_rms_norm_backward_is_autograds():
    torch.manual_seed(1)
    x, g = torch.randn(2, 3, 4, 5, dtype=f64), torch.randn(2, 3, 4, 5, dtype=f64)
    for shape in ([5], [4, 5]):
        for weight in (torch.randn(shape, dtype=f64), None):
            gx, gw, rstd = rms_norm_grads(x, shape, weight, g, 1e-6)
            dx, dw = cuda_only.fused_rms_norm_backward(g, x, shape, rstd, weight, [True, True])
            assert close(dx, gx), (shape, weight is None)
            assert (dw is None) if weight is None else close(dw, gw), shape
            # 1/rms given without its trailing ones (leading dimensions only).
            lead = rstd.reshape(x.shape[: x.dim() - len(shape)])
            dx, _ = cuda_only.fused_rms_norm_backward(g, x, shape, lead, weight, [True, True])
            assert close(dx, gx), shape


def test_fused_rms_norm_backward_computes_only_what_the_mask_asks():
    # As CUDA's kernel: a gradient the mask leaves out is undefined (DTensor's sharding rule
    # gives it no placement, and an input that needs no gradient gets none).
    x, g, w = torch.randn(4, 8, dtype=f64), torch.randn(4, 8, dtype=f64), torch.randn(8, dtype=f64)
    gx, gw, rstd = rms_norm_grads(x, [8], w, g, 1e-6)
    dx, dw = cuda_only.fused_rms_norm_backward(g, x, [8], rstd, w, [False, True])
    assert dx is None and close(dw, gw)
    dx, dw = cuda_only.fused_rms_norm_backward(g, x, [8], rstd, w, [True, False])
    assert close(dx, gx) and dw is None


def test_fused_rms_norm_backward_in_bfloat16():
    torch.manual_seed(2)
    x, g, w = torch.randn(4, 16), torch.randn(4, 16), torch.randn(16)
    gx, gw, rstd = rms_norm_grads(x, [16], w, g, 1e-6)
    bf = torch.bfloat16
    dx, dw = cuda_only.fused_rms_norm_backward(g.to(bf), x.to(bf), [16], rstd, w.to(bf), [True, True])
    assert dx.dtype == dw.dtype == bf
    assert torch.allclose(dx.float(), gx, rtol=5e-2, atol=5e-2)
    assert torch.allclose(dw.float(), gw, rtol=5e-2, atol=5e-2)


def test_cudnn_grid_sampler_and_its_backward():
    torch.manual_seed(3)
    x = torch.randn(2, 3, 5, 6, dtype=f64, requires_grad=True)
    grid = (torch.rand(2, 4, 7, 2, dtype=f64) * 2.4 - 1.2).requires_grad_()  # some points outside
    want = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    assert close(cuda_only.cudnn_grid_sampler(x.detach(), grid.detach()), want)
    g = torch.randn_like(want)
    want.backward(g)
    gx, ggrid = cuda_only.cudnn_grid_sampler_backward(x.detach(), grid.detach(), g)
    assert close(gx, x.grad) and close(ggrid, grid.grad)


def test_fused_dropout_keeps_with_probability_p_and_scales_by_1_over_p():
    x = torch.randn(200, 100)
    gen = torch.Generator().manual_seed(4)
    out, mask = cuda_only.fused_dropout(x, 0.75, gen)
    _, decomposed_mask = decompositions._fused_dropout_decomposition(x, 0.75)
    assert out.shape == mask.shape == x.shape and out.dtype == x.dtype
    assert mask.dtype == decomposed_mask.dtype
    assert set(mask.unique().tolist()) <= {0, 1}
    assert abs(mask.float().mean().item() - 0.75) < 0.02  # 20000 draws: about 6 standard deviations
    assert torch.equal(out, torch.where(mask.bool(), x / 0.75, torch.zeros(())))
    # The same generator state draws the same mask.
    assert torch.equal(cuda_only.fused_dropout(x, 0.75, torch.Generator().manual_seed(4))[1], mask)


def test_masked_scale():
    x = torch.tensor([1.0, -2.0, 3.0, 4.0])
    mask = torch.tensor([1, 0, 1, 0], dtype=torch.uint8)
    assert torch.equal(cuda_only.masked_scale(x, mask, 2.0), torch.tensor([2.0, 0.0, 6.0, 0.0]))


def test_softmax_half_to_float():
    # Reference: the same softmax and its autograd in float64 on the CPU (the CUDA kernels
    # accumulate a float16 input in float32 and return float32; the backward returns float16).
    torch.manual_seed(0)
    x = torch.randn(3, 5).half()
    g = torch.randn(3, 5)
    for name, fn in (("_softmax", torch.softmax), ("_log_softmax", torch.log_softmax)):
        forward = cuda_only.REPLACEMENTS[f"aten::{name}"]
        backward = cuda_only.REPLACEMENTS[f"aten::{name}_backward_data"]
        out = forward(x, -1, True)
        assert out.dtype == torch.float32
        ref = x.double().requires_grad_()
        want = fn(ref, -1)
        assert torch.allclose(out.double(), want, rtol=1e-6, atol=1e-6)
        want.backward(g.double())
        dx = backward(g, out, -1, torch.float16)
        assert dx.dtype == torch.float16
        assert torch.allclose(dx.double(), ref.grad, rtol=2e-3, atol=2e-3)
        # Without the conversion the op is torch's own.
        assert torch.equal(forward(x.float(), -1, False), fn(x.float(), -1))
    try:
        cuda_only.REPLACEMENTS["aten::_softmax"](x.bfloat16(), -1, True)
    except RuntimeError as e:
        assert "Half type only" in str(e)
    else:
        raise AssertionError("bfloat16 with half_to_float must be refused, as on CUDA")


def test_fsdp_chunk_cat_of_mixed_dtypes_casts_pads_and_interleaves():
    from ncclsim.compute import kernels

    # FSDP's reduce-scatter input: each gradient cut into `num_chunks` rows along dim 0
    # (padded to a multiple), row r of the output holding every gradient's chunk r in turn.
    a = torch.arange(6, dtype=torch.bfloat16).reshape(3, 2)
    b = torch.arange(10, 14, dtype=torch.float32)
    out = torch.full((2, 6), -1.0)
    kernels._chunk_cat_mixed_dtype([a, b], 0, 2, out=out)
    want = torch.tensor([[0.0, 1, 2, 3, 10, 11], [4, 5, 0, 0, 12, 13]])
    assert torch.equal(out, want), out
