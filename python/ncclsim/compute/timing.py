"""The time each op takes on the simulated GPU.

Every op the kernels compute (or, in `time` mode, only shape) is priced by the fake CUDA
core's compute model (the vtable's `launch_compute`, the door cuBLAS GEMMs take too: the
kernel-time table's measured time, else a roofline over the board's datasheet peaks and GEMM
waves, compute-model crate) and occupies the op's stream for that time, so
CUDA events, stream synchronisation and NCCL operations queued after it see it: overlap of
communication with compute and pipeline bubbles follow from the streams' timelines.

What is priced: floating-point operations from torch's own FLOP formulas
(`torch.utils.flop_counter`: matmuls, convolutions and their backward, attention) on the
tensor cores, in the precision torch runs them (float32 matmuls in TF32 when
`torch.backends.cuda.matmul.allow_tf32`, convolutions when `torch.backends.cudnn.allow_tf32`,
which is torch's default); every other op one operation per output element on the vector
units; memory traffic as the bytes of the op's tensor arguments read, of those it writes in place
(`add_` reads and writes its tensor, `copy_` and `out=` only write theirs) and of its new results.
A fused attention op is marked as its library's kernel (flash, memory-efficient, cuDNN), pass
and mask, which the model prices at that library's own speed. Every op is marked as issued by
the host: under `--clock virtual` the calling thread's clock moves by the host's time per op
(`compute_model::calibration::HOST_OP_NS`) before the kernel queues, so a stretch of kernels
shorter than their launches takes as long as the launches.
With `NCCLSIM_TRACE=DIR` every priced op is also a trace event, written by the core with the
launches of cuBLAS (`DIR/compute-<host>-<pid>.json`), to which the op adds its shapes and dtype. `NCCLSIM_COMPUTE_TIME=0`
turns pricing off (ops then take no time).
"""

from __future__ import annotations

import ctypes
import json
import threading

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

from .. import _core_abi as abi
from . import core, graphs

_F64, _F32, _TF32 = abi.PRECISION_F64, abi.PRECISION_F32, abi.PRECISION_TF32
_F16, _BF16, _F8 = abi.PRECISION_F16, abi.PRECISION_BF16, abi.PRECISION_F8
_VECTOR, _TENSOR = abi.UNIT_VECTOR, abi.UNIT_TENSOR
_PRECISION = {
    torch.float64: _F64,
    torch.float32: _F32,
    torch.float16: _F16,
    torch.bfloat16: _BF16,
    torch.float8_e4m3fn: _F8,
    torch.float8_e5m2: _F8,
}
# The convolutions (op names without `aten::` and overload): priced in the precision
# `torch.backends.cudnn.allow_tf32` gives float32 and, in half precision on NCHW operands,
# with cuDNN's layout transposes (`_nchw_transposes`); `kernels` gives their shaped-only
# results cuDNN's layout (`kernels._conv_layout`). `_slow_conv2d_forward` has no meta kernel,
# so `kernels` computes it and never reshapes it; `cudnn_convolution_transpose` has no FLOP
# formula in torch, so it is priced as a vector op and the precision rule never applies to it.
CONVOLUTIONS = frozenset({"convolution", "_convolution", "cudnn_convolution", "convolution_backward",
                          "_slow_conv2d_forward", "cudnn_convolution_transpose"})

_NAMES = ["f64", "f32", "tf32", "f16", "bf16", "f8"]
# The fused attention kernels (op names without `aten::`): the library code, whether it is the
# backward pass, and where its schema has `is_causal`. The core prices each at its library's own
# fraction of peak on the work it does (`compute_model::attention`).
_ATTENTION = {
    "_scaled_dot_product_flash_attention": (abi.ATTENTION_FLASH, False, 4),
    "_scaled_dot_product_flash_attention_backward": (abi.ATTENTION_FLASH, True, 11),
    "_scaled_dot_product_efficient_attention": (abi.ATTENTION_MEM_EFFICIENT, False, 6),
    "_scaled_dot_product_efficient_attention_backward": (abi.ATTENTION_MEM_EFFICIENT, True, 11),
    "_scaled_dot_product_cudnn_attention": (abi.ATTENTION_CUDNN, False, 6),
    "_scaled_dot_product_cudnn_attention_backward": (abi.ATTENTION_CUDNN, True, 14),
}


_NO_ATTENTION = (abi.ATTENTION_NONE, 0)


def attention(base: str, args: tuple, kwargs: dict) -> tuple:
    """(library code, flags) of a fused attention op (`CKernelCost.attention` and the
    backward and causal bits of its `flags`); (ATTENTION_NONE, 0) for every other op."""
    entry = _ATTENTION.get(base)
    if entry is None:
        return abi.ATTENTION_NONE, 0
    code, backward, at = entry
    causal = kwargs.get("is_causal", args[at] if len(args) > at else False)
    flags = (abi.COST_BACKWARD if backward else 0) | (abi.COST_CAUSAL if causal is True else 0)
    return code, flags


# The run environment (the core's `run_settings`; outside ncclsim's libraries, the defaults):
# whether ops take modelled time (`NCCLSIM_COMPUTE_TIME`), and whether a trace directory is set,
# so that ops describe themselves.
_settings = core.settings()
_enabled = _settings.priced if _settings is not None else True
_tracing = _settings.trace if _settings is not None else False
# Modelled time of everything priced in this process, ns (tests compare it with CUDA events).
total_ns = 0


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


def _nchw_transposes(base: str, args: tuple, ins: list, outs: list) -> int:
    """Memory traffic cuDNN adds to a half-precision convolution run in NCHW layout.

    torch runs a convolution channels-last when its input or its weight is channels-last
    (`cudnn_conv_suggest_memory_format`), NCHW otherwise. cuDNN's tensor-core kernels work on
    NHWC data, so in NCHW each operand is transposed to NHWC before the kernel and each result
    back after it, a read and a write of each (NVIDIA's channels-last guidance; the reason
    `channels_last` speeds ResNet-50 training up by about a third): each 4-D operand and
    result counts twice its bytes more.
    """
    first = 1 if base == "convolution_backward" else 0
    operands = [a for a in args[first:first + 2] if isinstance(a, torch.Tensor)]
    if any(a.dim() == 4 and a.is_contiguous(memory_format=torch.channels_last) and not a.is_contiguous()
           for a in operands):
        return 0
    extra = 0
    seen: list = []
    for t in ins + outs:
        if t.dim() == 4 and t.is_floating_point() and not any(t is o for o in seen):
            extra += 2 * _nbytes(t)
        seen.append(t)
    return extra


def _precision(dtype, base: str) -> int:
    p = _PRECISION.get(dtype, _F32)
    if p == _F32:
        if base in CONVOLUTIONS:
            return _TF32 if torch.backends.cudnn.allow_tf32 else _F32
        return _TF32 if torch.backends.cuda.matmul.allow_tf32 else _F32
    return p


_warned: list = []


# The matrix products whose FLOPs come from their GEMM shape directly (torch's formulas give the
# same counts, through a slower generic wrapper); every other formula is torch's.
_GEMMS = ("mm", "addmm", "bmm", "baddbmm")
# In-place ops that overwrite their argument without reading it.
_WRITE_ONLY = frozenset({
    "copy_", "fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_", "exponential_",
    "geometric_", "log_normal_", "cauchy_", "_foreach_copy_", "_foreach_zero_", "set_",
})


class Priced:
    """What pricing needs of one op, worked out once per overload."""

    __slots__ = ("name", "name_b", "base", "formula", "by_shape", "written", "write_only")

    def __init__(self, op, name: str) -> None:
        self.name = name
        self.name_b = name.encode()
        self.base = name[len("aten::"):].split(".")[0]
        self.formula = flop_registry.get(op._overloadpacket)
        overload = name.split(".", 1)[1] if "." in name else "default"
        self.by_shape = self.formula is not None and self.base in _GEMMS and overload in ("default", "out")
        # The arguments the op writes (its schema's `Tensor(a!)`), as (position, name); and
        # whether it only writes them (an `out=` overload, a fill or a copy into them) rather
        # than reading and writing them (`add_`, `_foreach_mul_`).
        arguments = getattr(getattr(op, "_schema", None), "arguments", [])
        self.written = [(i, a.name) for i, a in enumerate(arguments)
                        if a.alias_info is not None and a.alias_info.is_write]
        self.write_only = overload.startswith("out") or self.base in _WRITE_ONLY


class _Out(threading.local):
    """Per-thread arguments of the launch call (threads may price at once)."""

    def __init__(self) -> None:
        self.cost = core.KernelCost()
        self.times = core.LaunchTimes()
        self.ref = ctypes.byref(self.times)


_out = _Out()
# Absent from torch builds without CUDA, where nothing is priced (`core.core()` finds no core).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_get_device = getattr(torch._C, "_cuda_getDevice", None)


class _Fusing(threading.local):
    """Per thread, `acc`: the `Fused` the thread's ops add to, if any (a class default, so
    reading it on every op costs an attribute lookup, not a missing-attribute fallback)."""

    acc = None


_fusing = _Fusing()


class Fused:
    """While entered, the ops the calling thread prices add their FLOPs (and their device)
    here instead of taking time of their own; their values are computed as always (captured
    into a CUDA graph, their works are kept here). The caller then prices the one kernel they
    fuse into (`price_fused`, `price_flex`), which a graph captures with their works."""

    def __init__(self) -> None:
        self.flops = 0.0
        self.device: torch.device | None = None
        self.works: list[int] = []  # captured ops' works (`graphs.hold`), to run as one node

    def __enter__(self) -> "Fused":
        self.outer = _fusing.acc
        _fusing.acc = self
        return self

    def __exit__(self, *exc) -> None:
        _fusing.acc = self.outer


def fusing() -> bool:
    """Whether the calling thread's ops are those of one fused kernel (`Fused`)."""
    return _fusing.acc is not None


def nbytes_of(x) -> int:
    """Bytes of the tensors in `x` (a tensor, a list or tuple of them, or anything else: 0)."""
    ts: list = []
    _tensors(x, ts)
    return sum(_nbytes(t) for t in ts)


def price_fused(name: str, flops: float, nbytes: int, fused: Fused) -> None:
    """Prices one kernel a compiler fused the ops of `fused` into (`fusion`): a vector kernel
    of `flops` and `nbytes`, issued once by the host."""
    _launch_once(name, flops, nbytes, _VECTOR, _F32, abi.ATTENTION_NONE, 0, fused)


def _block_density(block_mask, lq: int, lk: int) -> float:
    """The fraction of (query block, key block) pairs FlexAttention's kernel computes: a pair
    is skipped only when its mask hides all of it. From the block mask's `mask_mod` evaluated
    on the CPU at 8 x 8 points of each pair (the block counts in device memory are not read:
    under `--compute time` they hold no values); 1 when it cannot be evaluated."""
    try:
        qb, kb, mask_mod = int(block_mask[-3]), int(block_mask[-2]), block_mask[-1]
        nq, nk = -(-lq // qb), -(-lk // kb)

        def points(n, b, length):
            starts = torch.arange(n) * b
            offs = torch.linspace(0, b - 1, 8).round().long()
            return (starts[:, None] + offs[None, :]).clamp(max=length - 1)

        q = points(nq, qb, lq).reshape(-1)
        k = points(nk, kb, lk).reshape(-1)
        zero = torch.zeros((), dtype=torch.long)
        m = mask_mod(zero, zero, q[:, None], k[None, :])
        m = torch.as_tensor(m, dtype=torch.bool).expand(q.numel(), k.numel())
        pairs = m.reshape(nq, 8, nk, 8).any(dim=3).any(dim=1)
        return float(pairs.float().mean())
    except Exception:  # noqa: BLE001 - a mask this cannot evaluate is priced dense
        return 1.0


def price_flex(backward: bool, args: tuple, result, fused: Fused) -> None:
    """Prices FlexAttention (its forward or backward higher-order op) as one fused attention
    kernel: torch's attention FLOP count for its shapes (`torch.utils.flop_counter`'s
    scaled-dot-product formulas, forward or backward) times the block mask's density, priced as
    FlashAttention; bytes, its tensors."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    q, k, v = args[0], args[1], args[2]
    lq, lk = q.shape[-2], k.shape[-2]
    out_shape = (*q.shape[:-1], v.shape[-1])
    if backward:
        flops = float(sdpa_backward_flop_count(out_shape, q.shape, k.shape, v.shape))
    else:
        flops = float(sdpa_flop_count(q.shape, k.shape, v.shape))
    block_mask = args[9] if backward else args[4]
    flops *= _block_density(block_mask, lq, lk)
    nbytes = nbytes_of(list(args[:6] if backward else args[:3])) + nbytes_of(result)
    flags = abi.COST_BACKWARD if backward else 0
    name = "flex_attention_backward" if backward else "flex_attention"
    _launch_once(name, flops, nbytes, _TENSOR, _precision(q.dtype, name), abi.ATTENTION_FLASH,
                 flags, fused, q.device)


def _launch_once(name: str, flops: float, nbytes: int, unit: int, precision: int, attention: int,
                 flags: int, fused: Fused, device: torch.device | None = None) -> None:
    """Launches the one kernel the host issues for the ops of `fused`, which computed their
    values already (captured into a CUDA graph, the kernel's node computes them at each
    replay); a failure is reported once and the kernel takes no time."""
    c = core.core()
    if c is None:
        return
    # Captured, the node computes the ops' values at each replay (none when they computed
    # nothing here, e.g. results activation checkpointing had kept).
    work = graphs.hold_together(fused.works) if fused.works or graphs.capturing() else None
    if not _enabled and work is None:
        return
    k = _out.cost
    if not _enabled:  # captured with pricing off: the node computes, taking no time
        flops, nbytes = 0.0, 0
    core.pack_cost(k, 0, float(flops), float(nbytes), unit, precision, 0, 0, 0, 0, attention,
                   flags | abi.COST_HOST_OP)
    try:
        status = _launch(c, k, name.encode(), None, device or fused.device, work)
    except Exception as e:  # noqa: BLE001 - pricing must not break the program's computation
        if work is not None:
            graphs.drop(work)  # never reached the core, which would release it
        status, name = -1, f"{name} ({type(e).__name__}: {e})"
    if status != 0 and not _warned:
        _warned.append(True)
        print(f"ncclsim: could not price {name} (status {status}); kernels that cannot be "
              "priced take no time", flush=True)


def price(info: Priced, args: tuple, kwargs: dict, result, device: torch.device | None,
          work: int | None = None) -> None:
    """Puts one op's modelled time on its device's current stream. A failure to price never
    fails the op: it is reported once and the op takes no time. `work` is the id of a captured
    op's work (`graphs.hold`): the op goes into the graph being captured, to compute and take
    its time at each replay (taking no time with pricing off)."""
    if not _enabled and work is None:
        return
    acc = _fusing.acc
    if acc is not None:
        try:
            acc.flops += cost(info, args, kwargs, result)[0]
        except Exception:  # noqa: BLE001 - an op whose cost is unknown adds none
            pass
        acc.device = acc.device or device
        if work is not None:
            acc.works.append(work)
        return
    try:
        status = _price(info, args, kwargs, result, device, work)
    except Exception as e:  # noqa: BLE001 - pricing must not break the program's computation
        if work is not None:
            graphs.drop(work)  # never reached the core, which would release it
        if not _warned:
            _warned.append(True)
            print(f"ncclsim: could not price {info.name} ({type(e).__name__}: {e}); "
                  "ops that cannot be priced take no time", flush=True)
        return
    if status == abi.STATUS_CAPTURE_VIOLATION:
        raise RuntimeError(
            f"ncclsim: {info.name} ran on a stream that captures a CUDA graph but is not the "
            "current stream of its device; the simulated GPUs capture ops on the current stream"
        )


# Where each forward convolution's schema has its group count.
_GROUPS_ARG = {"convolution": 8, "_convolution": 8, "cudnn_convolution": 5}


def _gemm_shape(base: str, args: tuple, result) -> tuple:
    """(batch, m, n, k) of a matrix product or a forward convolution (as the implicit GEMM
    cuDNN runs: m = output pixels, n = output channels, k = input channels x kernel, a batch per
    group); (0, 0, 0, 0) for every other op."""
    try:
        if base == "mm":
            a, b = args[0], args[1]
            return (1, a.shape[0], b.shape[1], a.shape[1])
        if base == "addmm":
            a, b = args[1], args[2]
            return (1, a.shape[0], b.shape[1], a.shape[1])
        if base in ("bmm", "baddbmm"):
            a, b = (args[0], args[1]) if base == "bmm" else (args[1], args[2])
            return (a.shape[0], a.shape[1], b.shape[2], a.shape[2])
        if base in _GROUPS_ARG and isinstance(result, torch.Tensor):
            w = args[1]
            groups = args[_GROUPS_ARG[base]] if len(args) > _GROUPS_ARG[base] else 1
            if result.dim() < 3 or w.dim() != result.dim():
                return (0, 0, 0, 0)
            pixels = result.numel() // result.shape[1]
            return (groups, pixels, result.shape[1] // groups, w[0].numel())
    except (AttributeError, IndexError, TypeError):
        pass
    return (0, 0, 0, 0)


def cost(info: Priced, args: tuple, kwargs: dict, result) -> tuple:
    """What one op costs, from its shapes: (flops, bytes, unit, precision, first floating input
    or output or None, (batch, m, n, k) of a GEMM or zeros)."""
    ins: list = []
    _tensors(args, ins)
    if kwargs:
        _tensors(list(kwargs.values()), ins)
    outs: list = []
    _tensors(result, outs)
    # Traffic: every argument read, every argument the op writes written (read too unless the
    # op only writes it), every new result written.
    written: list = []
    for i, n in info.written:
        _tensors(args[i] if i < len(args) else kwargs.get(n), written)
    nbytes = 0
    for t in ins:
        if not (info.write_only and any(t is w for w in written)):
            nbytes += _nbytes(t)
    for t in written:
        nbytes += _nbytes(t)
    for t in outs:
        if not any(t is i for i in ins):
            nbytes += _nbytes(t)
    gemm = (0, 0, 0, 0)
    if info.formula is not None:
        gemm = _gemm_shape(info.base, args, result)
        if info.by_shape and gemm[0]:
            flops = 2.0 * gemm[0] * gemm[1] * gemm[2] * gemm[3]
        else:
            try:
                flops = float(info.formula(*args, out_val=result, **kwargs))
            except Exception:  # a formula that does not know this overload's arguments
                flops = float(sum(t.numel() for t in outs))
        first = next((t for t in ins if t.is_floating_point()), None)
        unit, precision = _TENSOR, _precision(first.dtype if first is not None else torch.float32, info.base)
        if info.base in CONVOLUTIONS and precision in (_F16, _BF16):
            nbytes += _nchw_transposes(info.base, args, ins, outs)
    else:
        flops = float(sum(t.numel() for t in outs) or sum(t.numel() for t in ins))
        first = next((t for t in outs + ins if t.is_floating_point()), None)
        unit = _VECTOR
        precision = _F64 if first is not None and first.dtype == torch.float64 else _F32
    return flops, nbytes, unit, precision, first, gemm, ins


def _price(info: Priced, args: tuple, kwargs: dict, result, device: torch.device | None,
           work: int | None) -> int:
    """Prices one op; returns the core's status (0, or why it refused)."""
    c = core.core()
    if c is None:
        return 0
    flops, nbytes, unit, precision, first, gemm, ins = cost(info, args, kwargs, result)
    batch, m, n, kk = gemm
    code, flags = attention(info.base, args, kwargs) if info.base in _ATTENTION else _NO_ATTENTION
    if not _enabled:  # captured work with pricing off: it takes no time
        flops, nbytes, batch = 0.0, 0, 0
    k = _out.cost
    # Issued eagerly by the host: under the virtual clock, the host's time per op passes.
    core.pack_cost(k, 0, flops, float(nbytes), unit, precision, batch, m, n, kk, code,
                   flags | abi.COST_HOST_OP)
    # The core writes the trace event (NCCLSIM_TRACE); the op's shapes and dtype are what only
    # torch knows.
    detail = json.dumps({
        "shapes": [list(t.shape) for t in ins],
        "dtype": str(first.dtype).removeprefix("torch.") if first is not None else None,
    }).encode() if _tracing else None
    return _launch(c, k, info.name_b, detail, device, work)


def _launch(c, k, name_b: bytes, detail: bytes | None, device: torch.device | None,
            work: int | None) -> int:
    """Launches the kernel of cost `k` on `device`'s current stream (the current device's if
    None) through the core's compute door; returns the core's status (0, or why it refused)
    and, on success, adds the kernel's time to `total_ns`."""
    global total_ns
    current = _get_device()
    index = device.index if device is not None and device.index is not None else current
    stream = _raw_stream(index)
    out = _out
    if current != index:
        torch.cuda.set_device(index)
    try:
        # Eager ops give no work function: the kernels compute them themselves (so they are
        # refused while their stream captures a graph). A captured op's work computes it.
        if work is None:
            status = c.launch_compute(stream, k, name_b, detail, None, None, None, out.ref)
        else:
            status = c.launch_compute(stream, k, name_b, detail, graphs.RUN_FN, work,
                                      graphs.RELEASE_FN, out.ref)
    finally:
        if current != index:
            torch.cuda.set_device(current)
    if status != 0:
        return status
    total_ns += out.times.duration_ns
    return 0
