"""The time each op takes on the simulated GPU.

Every op the kernels compute (or, in `time` mode, only shape) is priced by the fake CUDA
core's compute model (`ncclsim_compute_launch` in libncclsim_cuda.so: a roofline over the
board's datasheet peaks, compute-model crate) and occupies the op's stream for that time, so
CUDA events, stream synchronisation and NCCL operations queued after it see it: overlap of
communication with compute and pipeline bubbles follow from the streams' timelines.

What is priced: floating-point operations from torch's own FLOP formulas
(`torch.utils.flop_counter`: matmuls, convolutions and their backward, attention) on the
tensor cores, in the precision torch runs them (float32 matmuls in TF32 when
`torch.backends.cuda.matmul.allow_tf32`, convolutions when `torch.backends.cudnn.allow_tf32`,
which is torch's default); every other op one operation per output element on the vector
units; memory traffic as the bytes of the op's tensor arguments plus those of its new results.
With `NCCLSIM_TRACE=DIR` every priced op is also a trace event (`trace`). `NCCLSIM_COMPUTE_TIME=0`
turns pricing off (ops then take no time).
"""

from __future__ import annotations

import ctypes
import os

import logging

import torch

# torch's FLOP counter warns at import that Triton (which it would count) is missing.
_log = logging.getLogger("torch.utils.flop_counter")
_level = _log.level
_log.setLevel(logging.ERROR)
try:
    from torch.utils.flop_counter import flop_registry
finally:
    _log.setLevel(_level)

from . import trace

_F64, _F32, _TF32, _F16, _BF16, _F8 = range(6)
_VECTOR, _TENSOR = 0, 1
_PRECISION = {
    torch.float64: _F64,
    torch.float32: _F32,
    torch.float16: _F16,
    torch.bfloat16: _BF16,
    torch.float8_e4m3fn: _F8,
    torch.float8_e5m2: _F8,
}
_CONVOLUTIONS = {"convolution", "_convolution", "cudnn_convolution", "convolution_backward",
                 "_slow_conv2d_forward", "cudnn_convolution_transpose"}

_NAMES = ["f64", "f32", "tf32", "f16", "bf16", "f8"]
_pid = os.getpid()
_launch = None
_enabled = os.environ.get("NCCLSIM_COMPUTE_TIME", "1") != "0"
# Modelled time of everything priced in this process, ns (tests compare it with CUDA events).
total_ns = 0


def _library():
    global _launch, _enabled
    if _launch is None:
        try:
            lib = ctypes.CDLL("libncclsim_cuda.so")
            f = lib.ncclsim_compute_launch
        except (OSError, AttributeError):
            _enabled = False  # not under ncclsim's libraries: nothing to price on
            return None
        u64 = ctypes.POINTER(ctypes.c_uint64)
        f.argtypes = [ctypes.c_uint64, ctypes.c_double, ctypes.c_double, ctypes.c_int, ctypes.c_int,
                      ctypes.c_char_p, u64, u64, ctypes.POINTER(ctypes.c_int64)]
        f.restype = ctypes.c_int
        _launch = f
    return _launch


def _tensors(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for e in x:
            _tensors(e, out)


def _nbytes(t: torch.Tensor) -> int:
    """Bytes of a tensor's data (a sparse tensor's stored values)."""
    if t.layout == torch.strided:
        return t.nbytes
    try:
        return t._nnz() * t.element_size()
    except (RuntimeError, AttributeError):
        return 0


def _precision(dtype, base: str) -> int:
    p = _PRECISION.get(dtype, _F32)
    if p == _F32:
        if base in _CONVOLUTIONS:
            return _TF32 if torch.backends.cudnn.allow_tf32 else _F32
        return _TF32 if torch.backends.cuda.matmul.allow_tf32 else _F32
    return p


_warned: list = []


def price(op, name: str, args: tuple, kwargs: dict, result, device: torch.device | None) -> None:
    """Puts one op's modelled time on its device's current stream. A failure to price never
    fails the op: it is reported once and the op takes no time."""
    if not _enabled:
        return
    try:
        _price(op, name, args, kwargs, result, device)
    except Exception as e:  # noqa: BLE001 - pricing must not break the program's computation
        if not _warned:
            _warned.append(True)
            print(f"ncclsim: could not price {name} ({type(e).__name__}: {e}); "
                  "ops that cannot be priced take no time", flush=True)


def _price(op, name: str, args: tuple, kwargs: dict, result, device: torch.device | None) -> None:
    global total_ns
    launch = _library()
    if launch is None:
        return
    ins: list = []
    _tensors(args, ins)
    _tensors(list(kwargs.values()), ins)
    outs: list = []
    _tensors(result, outs)
    seen = {id(t) for t in ins}
    nbytes = sum(_nbytes(t) for t in ins) + sum(_nbytes(t) for t in outs if id(t) not in seen)
    formula = flop_registry.get(op._overloadpacket)
    base = name[len("aten::"):].split(".")[0]
    if formula is not None:
        try:
            flops = float(formula(*args, out_val=result, **kwargs))
        except Exception:  # a formula that does not know this overload's arguments
            flops = float(sum(t.numel() for t in outs))
        first = next((t for t in ins if t.is_floating_point()), None)
        unit, precision = _TENSOR, _precision(first.dtype if first is not None else torch.float32, base)
    else:
        flops = float(sum(t.numel() for t in outs) or sum(t.numel() for t in ins))
        first = next((t for t in outs + ins if t.is_floating_point()), None)
        unit = _VECTOR
        precision = _F64 if first is not None and first.dtype == torch.float64 else _F32
    if device is None or device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    stream = torch.cuda.current_stream(device).cuda_stream
    start, ns, rng = ctypes.c_uint64(0), ctypes.c_uint64(0), ctypes.c_int64(-1)
    current = torch.cuda.current_device()
    if current != device.index:
        torch.cuda.set_device(device.index)
    try:
        status = launch(stream, flops, float(nbytes), unit, precision, name.encode(), ctypes.byref(start),
                        ctypes.byref(ns), ctypes.byref(rng))
    finally:
        if current != device.index:
            torch.cuda.set_device(current)
    if status != 0:
        return
    total_ns += ns.value
    if trace.enabled():
        trace.add({
            "name": name, "cat": "compute", "ph": "X", "pid": _pid, "tid": stream,
            "ts": start.value / 1e3, "dur": ns.value / 1e3,
            "args": {
                "device": device.index, "stream": stream, "flops": flops, "bytes": nbytes,
                "unit": "tensor" if unit == _TENSOR else "vector", "precision": _NAMES[precision],
                "shapes": [list(t.shape) for t in ins if isinstance(t, torch.Tensor)],
                "dtype": str(first.dtype).removeprefix("torch.") if first is not None else None,
                "range": rng.value if rng.value >= 0 else None,
            },
        })
