"""Memory traffic `timing.cost` gives ops: the bytes of the tensor arguments they read, of those
they write in place, and of their new results, and cuDNN's NHWC transposes of half-precision convolutions in NCHW
(`_nchw_transposes`); expected values counted by hand."""

import pytest
import torch
import torch.nn.functional as F

from ncclsim.compute import timing

aten = torch.ops.aten
CL = torch.channels_last


def nbytes(op, name, args, result, **kwargs):
    return timing.cost(timing.Priced(op, name), args, kwargs, result)[1]


def test_arguments_and_new_results():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    assert nbytes(aten.mm.default, "aten::mm", (a, b), a @ b) == (12 + 20 + 15) * 4
    # An in-place op reads its first argument and writes it back: x read, y read, x written.
    x, y = torch.randn(6), torch.randn(6)
    assert nbytes(aten.add_.Tensor, "aten::add_.Tensor", (x, y), x) == 3 * 6 * 4
    # An out= tensor is only written: x and y read, out written.
    out = torch.empty(6)
    assert nbytes(aten.add.out, "aten::add.out", (x, y), out, out=out) == 3 * 6 * 4
    # A copy reads its source and writes its destination; a fill only writes.
    assert nbytes(aten.copy_.default, "aten::copy_", (x, y), x) == 2 * 6 * 4
    assert nbytes(aten.fill_.Scalar, "aten::fill_.Scalar", (x, 1.0), x) == 6 * 4
    # A foreach op returning nothing writes each tensor of its first list after reading it.
    xs, ys = [torch.randn(6), torch.randn(2)], [torch.randn(6), torch.randn(2)]
    assert nbytes(aten._foreach_add_.List, "aten::_foreach_add_.List", (xs, ys), None) == 3 * 8 * 4


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_tensor_bytes():
    # A view counts its elements, not its storage.
    assert timing._nbytes(torch.zeros(4, 6, dtype=torch.float64)[:, ::2]) == 4 * 3 * 8
    # Sparse tensors count their stored values.
    coo = torch.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [1.0, 2.0, 3.0], (2, 3), check_invariants=True)
    assert timing._nbytes(coo) == 3 * 4
    csr = torch.tensor([[0.0, 1.0], [2.0, 0.0]], dtype=torch.float16).to_sparse_csr()
    assert timing._nbytes(csr) == 2 * 2


def test_tensors_are_found_in_nested_arguments():
    a, b, c = torch.zeros(1), torch.zeros(2), torch.zeros(3)
    found: list = []
    timing._tensors([a, [b, (c, 1.0)], "x"], found)
    assert [t is e for t, e in zip(found, (a, b, c))] == [True] * 3 and len(found) == 3


def conv_case(dtype, x_format=torch.contiguous_format, w_format=torch.contiguous_format):
    x = torch.randn(2, 4, 8, 8).to(dtype).contiguous(memory_format=x_format)
    w = torch.randn(6, 4, 3, 3).to(dtype).contiguous(memory_format=w_format)
    bias = torch.zeros(6, dtype=dtype)
    y = F.conv2d(x.float(), w.float(), bias.float(), padding=1).to(dtype)
    return (x, w, bias, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), y


def test_nchw_half_convolution_pays_a_read_and_a_write_of_each_4d_tensor():
    args, y = conv_case(torch.float16)
    x, w, bias = args[:3]
    ins, outs = [x, w, bias], [y]
    four_d = (x.numel() + w.numel() + y.numel()) * 2  # bytes of the 4-D tensors (the bias is 1-D)
    assert timing._nchw_transposes("convolution", args, ins, outs) == 2 * four_d
    # Through cost: the plain traffic plus the transposes.
    plain = four_d + bias.numel() * 2
    assert nbytes(aten.convolution.default, "aten::convolution", args, y) == plain + 2 * four_d
    # The same convolution in float32: twice the plain bytes, and no transposes.
    args32, y32 = conv_case(torch.float32)
    assert nbytes(aten.convolution.default, "aten::convolution", args32, y32) == 2 * plain


def test_channels_last_input_or_weight_pays_no_transposes():
    for formats in ((CL, torch.contiguous_format), (torch.contiguous_format, CL)):
        args, y = conv_case(torch.bfloat16, *formats)
        assert timing._nchw_transposes("convolution", args, list(args[:3]), [y]) == 0


def test_convolution_backward_looks_at_its_input_and_weight():
    x = torch.randn(2, 4, 8, 8, dtype=torch.float16)
    w = torch.randn(6, 4, 3, 3, dtype=torch.float16)
    g = torch.randn(2, 6, 8, 8, dtype=torch.float16)
    gx, gw = torch.empty_like(x), torch.empty_like(w)
    args = (g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
    every = (g.numel() + x.numel() + w.numel() + gx.numel() + gw.numel()) * 2
    assert timing._nchw_transposes("convolution_backward", args, [g, x, w], [gx, gw]) == 2 * every
    cl = (g, x.contiguous(memory_format=CL)) + args[2:]
    assert timing._nchw_transposes("convolution_backward", cl, [g, cl[1], w], [gx, gw]) == 0


def test_a_tensor_met_twice_is_transposed_once():
    x = torch.randn(1, 2, 4, 4, dtype=torch.float16)
    assert timing._nchw_transposes("convolution", (x, x), [x, x], [x]) == 2 * x.numel() * 2
