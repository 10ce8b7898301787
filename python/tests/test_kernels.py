"""The pure parts of `kernels`: the convolutions' names, the layout of shaped-only convolution
results (against CPU torch's, which follows the same rule as cuDNN's: channels-last when the
input or the weight is), numbers at Tensor positions (against torch's own argument parsing),
16-bit fallbacks, and the gate of the compute fault switch."""

import pytest
import torch

from ncclsim.compute import kernels, timing

aten = torch.ops.aten
CL, NCHW = torch.channels_last, torch.contiguous_format


def test_convolution_names_are_aten_ops():
    for name in timing.CONVOLUTIONS:
        assert hasattr(torch.ops.aten, name), name
    assert kernels._CONVOLUTIONS == {f"aten::{n}" for n in timing.CONVOLUTIONS}
    for name in kernels._CONVOLUTIONS:
        assert kernels._overload(name)._schema.name == name


def layout(t):
    channels_last = t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=CL)
    return "channels-last" if channels_last else "nchw"


@pytest.mark.parametrize("x_format, w_format", [(NCHW, NCHW), (CL, NCHW), (NCHW, CL), (CL, CL)])
def test_shaped_only_convolutions_take_the_layout_torch_gives(x_format, w_format):
    x = torch.randn(2, 4, 8, 8).contiguous(memory_format=x_format)
    w = torch.randn(6, 4, 3, 3).contiguous(memory_format=w_format)
    conv = (None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    want = aten.convolution(x, w, *conv)
    meta = [x.to("meta"), w.to("meta"), *conv]
    got = kernels._conv_layout("aten::convolution", meta, aten.convolution(*meta))
    assert layout(got) == layout(want) and got.stride() == want.stride()

    g = torch.randn(want.shape)
    back = ([6], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])
    want = aten.convolution_backward(g, x, w, *back)
    meta = [g.to("meta"), x.to("meta"), w.to("meta"), *back]
    got = kernels._conv_layout("aten::convolution_backward", meta, aten.convolution_backward(*meta))
    assert [t.stride() for t in got] == [t.stride() for t in want]


def test_numbers_at_tensor_positions_promote_as_torch_promotes_them():
    op = aten.add.Tensor
    info = kernels._Op("aten::add.Tensor", op, op)
    for tensor, number in [
        (torch.ones(3, dtype=torch.float16), 2.5), (torch.arange(3), 2.5), (torch.arange(3), 2),
        (torch.tensor(2), 2.5), (torch.ones(2, dtype=torch.bool), True),
    ]:
        args = [tensor, number]
        fn = kernels._unwrap_numbers(info, args)
        got, want = fn(*args), torch.add(tensor, number)
        assert got.dtype == want.dtype and torch.equal(got, want), (tensor.dtype, number)


def test_scalars_take_torchs_default_types():
    saved = torch.get_default_dtype()
    try:
        for default in (torch.float32, torch.float64):
            torch.set_default_dtype(default)
            for v in (True, 3, 2.5, 1j):
                assert kernels._scalar(v).dtype == torch.tensor(v).dtype, (default, v)
    finally:
        torch.set_default_dtype(saved)


def test_16_bit_refusals_compute_in_float32():
    def refuse(f):
        try:
            f()
        except RuntimeError as e:
            return e
        raise AssertionError("expected a refusal")

    assert kernels._no_half_kernel(refuse(lambda: torch.fft.fft(torch.ones(4, dtype=torch.bfloat16))))
    assert not kernels._no_half_kernel(refuse(lambda: torch.ones(2, 3) @ torch.ones(2, 3)))
    a, b = torch.randn(3, 4).to(torch.bfloat16), torch.randn(4, 2).to(torch.bfloat16)
    got = kernels._in_float32(lambda x, y, n: (x @ y, n), [a, b, torch.arange(3)], {})
    assert got[0].dtype == torch.bfloat16 and torch.equal(got[0], (a.float() @ b.float()).to(torch.bfloat16))
    assert torch.equal(got[1], torch.arange(3))


def maps_file(tmp_path, *libraries):
    lines = [f"7f0000000000-7f0000001000 r-xp 00000000 08:01 1234 {p}\n" for p in libraries]
    lines.append("7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n")
    path = tmp_path / "maps"
    path.write_text("".join(lines))
    return str(path)


def library(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(b"\x7fELF" + text + b"\0")
    return path


def test_the_fault_switch_needs_a_libnccl_with_fault_injection(tmp_path):
    faults = library(tmp_path, "libnccl.so", b"... NCCLSIM_TEST_PERTURB ...")
    release = library(tmp_path, "libnccl.so.2", b"a release build")
    core = library(tmp_path, "libncclsim_cuda.so", b"NCCLSIM_TEST_PERTURB")
    assert kernels._fault_injection_build(maps_file(tmp_path, release, faults))
    assert not kernels._fault_injection_build(maps_file(tmp_path, release))
    assert not kernels._fault_injection_build(maps_file(tmp_path, core))  # another library
    assert not kernels._fault_injection_build(maps_file(tmp_path, tmp_path / "libnccl.so.9"))  # gone
    assert not kernels._fault_injection_build(str(tmp_path / "no-maps"))


@pytest.mark.parametrize("value, build, on", [
    ("1", False, False), ("1", True, True), (None, True, False), ("0", True, False),
])
def test_the_fault_switch_acts_only_when_set_and_allowed(monkeypatch, capsys, value, build, on):
    monkeypatch.setattr(kernels, "_perturbing", [])
    monkeypatch.setattr(kernels, "_fault_injection_build", lambda: build)
    if value is None:
        monkeypatch.delenv("NCCLSIM_TEST_COMPUTE_PERTURB", raising=False)
    else:
        monkeypatch.setenv("NCCLSIM_TEST_COMPUTE_PERTURB", value)
    assert kernels._perturb_on() is on
    assert ("ignored" in capsys.readouterr().out) == (value == "1" and not build)
