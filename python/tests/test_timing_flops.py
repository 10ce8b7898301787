"""FLOPs and GEMM shapes `timing.cost` gives ops, against torch's FLOP counter run on the CPU
(`FlopCounterMode`) and hand counts: 2 m n k per m x k by k x n product."""

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ncclsim.compute import timing

aten = torch.ops.aten


def priced(op) -> timing.Priced:
    """`Priced` of an overload, named as the dispatcher names it (`aten::add.Tensor`)."""
    name = op._schema.name if op._overloadname == "default" else f"{op._schema.name}.{op._overloadname}"
    return timing.Priced(op, name)


def counted(fn):
    """torch's FLOP count of what `fn` runs on the CPU, and what it returns."""
    with FlopCounterMode(display=False) as mode:
        result = fn()
    return mode.get_total_flops(), result


def cost(op, args, result, **kwargs):
    flops, _, unit, _, _, gemm, _ = timing.cost(priced(op), args, kwargs, result)
    return flops, unit, gemm


def test_mm_addmm_bmm_baddbmm():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    ba, bb = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    cases = [
        (aten.mm.default, (a, b), 2 * 3 * 5 * 4, (1, 3, 5, 4)),
        (aten.addmm.default, (torch.randn(5), a, b), 2 * 3 * 5 * 4, (1, 3, 5, 4)),
        (aten.bmm.default, (ba, bb), 2 * 2 * 3 * 5 * 4, (2, 3, 5, 4)),
        (aten.baddbmm.default, (torch.randn(2, 3, 5), ba, bb), 2 * 2 * 3 * 5 * 4, (2, 3, 5, 4)),
    ]
    for op, args, hand, shape in cases:
        torch_count, result = counted(lambda: op(*args))
        assert torch_count == hand, op
        assert cost(op, args, result) == (hand, timing._TENSOR, shape), op


def test_grouped_convolution_is_an_implicit_gemm_per_group():
    # 2 images of 4 channels, 9 x 9; 6 filters of 2 channels x 3 x 3 in 2 groups; stride 2,
    # padding 1: 5 x 5 outputs.
    x, w = torch.randn(2, 4, 9, 9), torch.randn(6, 2, 3, 3)
    args = (x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 2)
    torch_count, y = counted(lambda: aten.convolution(*args))
    assert y.shape == (2, 6, 5, 5)
    hand = 2 * 2 * 6 * 5 * 5 * 2 * 3 * 3  # 2 N C_out H_out W_out (C_in / groups) k_h k_w
    assert torch_count == hand
    # Per group: m = output pixels (N H_out W_out), n = C_out / groups, k = C_in / groups k_h k_w.
    assert cost(aten.convolution.default, args, y) == (hand, timing._TENSOR, (2, 2 * 5 * 5, 3, 2 * 3 * 3))


def test_cudnn_convolution_takes_its_own_argument_order():
    x, w = torch.randn(2, 4, 9, 9), torch.randn(6, 2, 3, 3)
    y = F.conv2d(x, w, stride=2, padding=1, groups=2)
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, benchmark,
    # deterministic, allow_tf32)
    args = (x, w, [1, 1], [2, 2], [1, 1], 2, False, False, True)
    hand = 2 * 2 * 6 * 5 * 5 * 2 * 3 * 3
    assert cost(aten.cudnn_convolution.default, args, y) == (hand, timing._TENSOR, (2, 50, 3, 18))


def test_convolution_backward_counts_both_gradients():
    x, w = torch.randn(2, 4, 9, 9), torch.randn(6, 4, 3, 3)
    g = torch.randn(2, 6, 5, 5)
    args = (g, x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
    torch_count, grads = counted(lambda: aten.convolution_backward(*args))
    forward = 2 * 2 * 6 * 5 * 5 * 4 * 3 * 3
    # The input's gradient and the weight's are each a convolution as large as the forward one.
    assert torch_count == 2 * forward
    flops, unit, gemm = cost(aten.convolution_backward.default, args, grads)
    assert (flops, unit, gemm) == (2 * forward, timing._TENSOR, (0, 0, 0, 0))


def test_attention_counts_its_two_products():
    # batch 2, 3 heads, 5 queries and 7 keys of 8 dimensions: Q K^T and P V, 2 b h s_q s_k d each.
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    hand = 2 * (2 * 2 * 3 * 5 * 7 * 8)
    torch_count, out = counted(lambda: F.scaled_dot_product_attention(q, k, v))
    assert torch_count == hand
    result = (out, torch.empty(2, 3, 5), torch.empty(()), torch.empty(()))
    op = aten._scaled_dot_product_efficient_attention.default
    assert cost(op, (q, k, v, None, True), result) == (hand, timing._TENSOR, (0, 0, 0, 0))


def test_other_ops_count_one_operation_per_output_element():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    assert cost(aten.add.Tensor, (a, b), a + b) == (12, timing._VECTOR, (0, 0, 0, 0))
    assert cost(aten.sum.default, (a,), a.sum()) == (1, timing._VECTOR, (0, 0, 0, 0))
    # Without results (in-place foreach ops return nothing): one per input element.
    foreach = aten._foreach_add_.Scalar
    assert cost(foreach, ([a, torch.randn(5)], 1.0), None) == (17, timing._VECTOR, (0, 0, 0, 0))


def test_priced_names():
    add = priced(aten.add.Tensor)
    assert (add.name, add.base, add.formula) == ("aten::add.Tensor", "add", None)
    assert priced(aten.mm.default).by_shape and priced(aten.mm.out).by_shape
    assert not priced(aten.convolution.default).by_shape  # torch's formula counts it
