"""The units and precision `timing.cost` prices ops in: tensor cores for ops with a torch FLOP
formula, in the operands' precision; float32 matrix products in TF32 only when
`torch.backends.cuda.matmul.allow_tf32`, float32 convolutions when
`torch.backends.cudnn.allow_tf32`; the vector units in float64 or float32 for the rest."""

import pytest
import torch

from ncclsim.compute import timing

aten = torch.ops.aten
MM = timing.Priced(aten.mm.default, "aten::mm")
CONV = timing.Priced(aten.convolution.default, "aten::convolution")
ADD = timing.Priced(aten.add.Tensor, "aten::add.Tensor")


def unit_and_precision(info, dtype):
    if info is CONV:
        x, w = torch.ones(1, 2, 4, 4, dtype=dtype), torch.ones(3, 2, 3, 3, dtype=dtype)
        args = (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        result = torch.ones(1, 3, 2, 2, dtype=dtype)
    elif info is MM:
        args = (torch.ones(2, 3, dtype=dtype), torch.ones(3, 4, dtype=dtype))
        result = torch.ones(2, 4, dtype=dtype)
    else:
        args, result = (torch.ones(5, dtype=dtype), torch.ones(5, dtype=dtype)), torch.ones(5, dtype=dtype)
    _, _, unit, precision, _, _, _ = timing.cost(info, args, {}, result)
    return ("tensor" if unit == timing._TENSOR else "vector"), timing._NAMES[precision]


@pytest.mark.parametrize("matmul_tf32", [False, True])
@pytest.mark.parametrize("cudnn_tf32", [False, True])
def test_float32_is_tf32_by_each_backends_switch(tf32_flags, matmul_tf32, cudnn_tf32):
    torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    torch.backends.cudnn.allow_tf32 = cudnn_tf32
    assert unit_and_precision(MM, torch.float32) == ("tensor", "tf32" if matmul_tf32 else "f32")
    assert unit_and_precision(CONV, torch.float32) == ("tensor", "tf32" if cudnn_tf32 else "f32")
    assert unit_and_precision(ADD, torch.float32) == ("vector", "f32")


@pytest.mark.parametrize("dtype, name", [
    (torch.float64, "f64"), (torch.float16, "f16"), (torch.bfloat16, "bf16"),
    (torch.float8_e4m3fn, "f8"), (torch.float8_e5m2, "f8"),
])
def test_other_types_keep_their_precision_whatever_the_switches(tf32_flags, dtype, name):
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        assert timing._precision(dtype, "mm") == timing._NAMES.index(name)
        assert timing._precision(dtype, "convolution") == timing._NAMES.index(name)


def test_vector_ops_run_in_float64_or_float32():
    assert unit_and_precision(ADD, torch.float64) == ("vector", "f64")
    assert unit_and_precision(ADD, torch.float16) == ("vector", "f32")
    assert unit_and_precision(MM, torch.float16) == ("tensor", "f16")


def test_precision_is_the_first_floating_arguments():
    info = timing.Priced(aten.addmm.default, "aten::addmm")
    bias = torch.ones(4, dtype=torch.bfloat16)
    a, b = torch.ones(2, 3, dtype=torch.bfloat16), torch.ones(3, 4, dtype=torch.bfloat16)
    _, _, _, precision, first, _, _ = timing.cost(info, (bias, a, b), {}, a @ b)
    assert timing._NAMES[precision] == "bf16" and first is bias
    # Integer arguments before it do not count (an index tensor, say).
    info = timing.Priced(aten.mm.default, "aten::mm")
    _, _, _, precision, first, _, _ = timing.cost(info, (torch.ones(2, dtype=torch.int64), a, b), {}, a @ b)
    assert timing._NAMES[precision] == "bf16" and first is a


def test_pricing_without_the_core_does_nothing():
    # Outside ncclsim's libraries `price` finds no core: the op takes no time and nothing fails.
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    before = timing.total_ns
    assert timing.price(MM, (a, b), {}, a @ b, None) is None
    assert timing.total_ns == before
