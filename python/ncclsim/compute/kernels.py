"""The CUDA kernels of aten ops, replaced by CPU kernels over the device bytes.

Every aten operator overload that has a kernel for torch's `CUDA` dispatch key gets a Python
kernel for that key (`torch.library.Library("aten", "IMPL")`), except:
- view and metadata ops (the schema returns an alias it does not write: `view`, `as_strided`,
  ...; and `set_`, `resize_`, `empty*`, `record_stream`, `_local_scalar_dense`), whose CUDA
  kernels do no device work or only copy through the fake CUDA runtime;
- `copy_`, which keeps torch's kernel where that kernel is a plain memcpy (same dtype, both
  contiguous: the copy then goes through the fake CUDA core and takes its modelled time) and
  converts on the CPU otherwise.

Registering at the CUDA key keeps everything above it as torch has it: autograd (whose
backward runs on torch's device threads, which call these kernels too), autocast, functional
collectives, DTensor and torch_dispatch modes see ordinary CUDA tensors. The kernel replaces
each CUDA tensor argument by a CPU tensor over the same bytes (`alias.host_view`), each CUDA
device argument by the CPU, each CUDA generator by a CPU generator (`rng`), calls the same
overload (or, for ops torch implements only for CUDA, the CPU equivalent in `cuda_only`), and
returns the written CUDA arguments for in-place and `out=` ops, or new CUDA tensors holding the
CPU results.

Stream order: the fake CUDA core runs stream work when it is enqueued (copies, NCCL operations,
host functions), so when an op is called everything queued before it on any stream has run,
and anything queued after it sees its result.

Modes: `run` computes; `time` computes nothing (results have the right shapes, strides and
dtypes, their values are undefined and their memory is not touched), using torch's meta
kernels, except for ops whose output shape depends on the data, which are computed.
"""

from __future__ import annotations

import mmap
import os
import warnings

import torch

from . import cuda_only, graphs, rng, timing
from .alias import host_view, is_dense

_CPU = torch.device("cpu")

# CUDA kernels kept as torch has them: no device compute, or a copy through the CUDA runtime.
NATIVE = {
    "aten::empty.memory_format",
    "aten::empty_strided",
    "aten::_empty_affine_quantized",
    "aten::_empty_per_channel_affine_quantized",
    "aten::resize_",
    "aten::set_",
    "aten::set_.source_Storage",
    "aten::set_.source_Storage_storage_offset",
    "aten::set_.source_Tensor",
    "aten::set_.source_Tensor_storage_offset",
    "aten::record_stream",
    "aten::_local_scalar_dense",
    "aten::is_pinned",
    "aten::_pin_memory",
    "aten::is_set_to",
}


class _Call:
    """One call's conversions: the device of its results and the CUDA tensor behind each CPU
    view it made (by the view's id)."""

    __slots__ = ("device", "originals", "views", "meta")

    def __init__(self, meta: bool) -> None:
        self.device: torch.device | None = None
        self.originals: dict[int, torch.Tensor] = {}
        self.views: list[torch.Tensor] = []  # keeps the views alive, so their ids stay unique
        self.meta = meta

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        if self.device is None:
            self.device = t.device
        if not self.meta:
            v = host_view(t)
        else:
            v = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")
        self.originals[id(v)] = t
        self.views.append(v)
        return v

    def convert(self, x):
        if isinstance(x, torch.Tensor):
            return self.tensor(x) if x.is_cuda else x
        if isinstance(x, (list, tuple)):
            if any(isinstance(e, (torch.Tensor, torch.device, list, tuple)) for e in x):
                return [self.convert(e) for e in x]
            return x
        if isinstance(x, torch.device) and x.type == "cuda":
            if self.device is None:
                self.device = x if x.index is not None else torch.device("cuda", torch.cuda.current_device())
            return torch.device("meta") if self.meta else _CPU
        return x

    def result_device(self) -> torch.device:
        if self.device is None:
            return torch.device("cuda", torch.cuda.current_device())
        if self.device.index is None:
            return torch.device("cuda", torch.cuda.current_device())
        return self.device

    def back(self, r, compute: bool):
        """A result as the CUDA op returns it."""
        if isinstance(r, torch.Tensor):
            o = self.originals.get(id(r))
            if o is not None:
                return o
            if r.is_cuda:
                return r
            if r.layout != torch.strided:  # sparse and other layouts: torch's own copy
                return r.to(self.result_device())
            if r.is_conj() or r.is_neg():
                r = r.resolve_conj().resolve_neg()
            if not is_dense(r):
                r = r.contiguous()
            out = torch.empty_strided(r.size(), r.stride(), dtype=r.dtype, device=self.result_device())
            if compute and r.numel():
                host_view(out).copy_(r)
            return out
        if isinstance(r, (list, tuple)):
            return tuple(self.back(e, compute) for e in r) if isinstance(r, tuple) else [self.back(e, compute) for e in r]
        return r


class _Op:
    """What a kernel needs to know of its overload's schema."""

    def __init__(self, name: str, op, fn) -> None:
        self.name = name
        self.priced = timing.Priced(op, name)
        self.fn = fn
        schema = op._schema
        self.gen_index = None
        self.gen_name = None
        self.outs: list[str] = []
        # FFTs keep the CPU's refusal of 16-bit types: their complex halves have no float32
        # round trip that matches what the GPU returns.
        self.fft = name.startswith(("aten::_fft", "aten::stft", "aten::istft"))
        # Whether the op writes any argument (in place or out=).
        self.writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
        # For an op whose results are only the arguments it writes (or nothing): each return's
        # argument (position, name); None otherwise. Under `--compute time` such an op without
        # a meta kernel need not run to give its results (`_skipped`).
        self.written_returns = _written_returns(schema) if self.writes else None
        # torch hands a Python number to a Python kernel where the schema has a Tensor and the
        # caller passed a number (a "wrapped number"): see `_unwrap_numbers`.
        self.tensor_pos = [i for i, a in enumerate(schema.arguments) if str(a.type) == "Tensor" and not a.kwarg_only]
        self.packet = op._overloadpacket if fn is op else None
        for i, a in enumerate(schema.arguments):
            if a.name == "generator" and "Generator" in str(a.type):
                self.gen_index = None if a.kwarg_only else i
                self.gen_name = a.name
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write and "Tensor" in str(a.type):
                if str(a.type) in ("Tensor", "Tensor?"):
                    self.outs.append(a.name)


def _written_returns(schema):
    """(position, name) of the written argument each return aliases, or None when a return is
    not such an alias."""
    out = []
    for r in schema.returns:
        if r.alias_info is None or not r.alias_info.is_write:
            return None
        for i, a in enumerate(schema.arguments):
            if a.alias_info is not None and a.alias_info.before_set == r.alias_info.before_set:
                out.append((None if a.kwarg_only else i, a.name))
                break
        else:
            return None
    return out


# Under `--compute time`, ops without a meta kernel whose tensor arguments hold more bytes
# than this are not computed when their results are only the arguments they write (the
# copies of FSDP's all-gather inputs, `_foreach_copy_`): their values are undefined anyway
# and computing them would commit host memory for device memory. Smaller ones are computed,
# as values the host made (copied in) may flow through them.
SKIPPED_ABOVE = 64 << 10


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(e) for e in x)
    return 0


def _skipped(info: "_Op", args: tuple, kwargs: dict):
    """The results of an op left uncomputed under `--compute time` (see SKIPPED_ABOVE), or
    None when it must run."""
    if info.written_returns is None:
        return None
    if _tensor_bytes(list(args) + list(kwargs.values())) <= SKIPPED_ABOVE:
        return None
    got = [args[i] if i is not None and i < len(args) else kwargs.get(n)
           for i, n in info.written_returns]
    if not got:
        return _NOTHING
    return got[0] if len(got) == 1 else tuple(got)


_NOTHING = object()


def _generator(info: _Op, call: _Call, args: list, kwargs: dict) -> None:
    """Replaces the op's CUDA generator (or its default) by a CPU generator."""
    if info.gen_index is not None and info.gen_index < len(args):
        g = args[info.gen_index]
        args[info.gen_index] = rng.cpu_generator(g, call.result_device())
    else:
        g = kwargs.get(info.gen_name)
        kwargs[info.gen_name] = rng.cpu_generator(g, call.result_device())


_NUMBER = {int, float, bool, complex}
# Zero-dimensional CPU tensors for numbers met at Tensor positions, by (type, value, default
# dtype); such arguments are never written, so one tensor serves every call.
_scalars: dict[tuple, torch.Tensor] = {}


def _scalar(v) -> torch.Tensor:
    default = torch.get_default_dtype()
    key = (type(v), v, default)
    t = _scalars.get(key)
    if t is None:
        if len(_scalars) >= 4096:
            _scalars.clear()
        if type(v) is bool:
            t = torch.tensor(v)
        elif type(v) is int:
            t = torch.tensor(v, dtype=torch.int64)
        elif type(v) is float:
            t = torch.tensor(v, dtype=default)
        else:
            t = torch.tensor(v, dtype=torch.complex128 if default == torch.float64 else torch.complex64)
        _scalars[key] = t
    return t


def _unwrap_numbers(info: "_Op", cargs: list):
    """The function to call for arguments where Python numbers stand at Tensor positions.

    A wrapped number takes part in type promotion below every tensor, zero-dimensional ones
    included. A zero-dimensional tensor of the number's default dtype promotes the same way
    whenever some other tensor argument has dimensions, so the number becomes one; otherwise
    the overload packet resolves the call as torch's argument parser does (the Scalar
    overload)."""
    n = len(cargs)
    found = [i for i in info.tensor_pos if i < n and type(cargs[i]) in _NUMBER]
    if not found:
        return info.fn
    if not any(isinstance(a, torch.Tensor) and a.dim() > 0 for a in cargs):
        return info.packet
    for i in found:
        cargs[i] = _scalar(cargs[i])
    return info.fn


def _not_resizable(e: RuntimeError) -> bool:
    return "not resizable" in str(e)


def _prepare(info: _Op, args: tuple, kwargs: dict, meta: bool):
    """One call's CPU (or meta) arguments and the function to call them with."""
    call = _Call(meta)
    convert = call.convert
    cargs = [convert(a) for a in args]
    ckwargs = {k: convert(v) for k, v in kwargs.items()} if kwargs else {}
    if info.gen_name is not None and not meta:
        _generator(info, call, cargs, ckwargs)
    fn = _unwrap_numbers(info, cargs) if info.packet is not None else info.fn
    return call, fn, cargs, ckwargs


def _run(info: _Op, args: tuple, kwargs: dict, meta: bool):
    call, fn, cargs, ckwargs = _prepare(info, args, kwargs, meta)
    if info.outs:
        return _run_outs(info, fn, call, kwargs, cargs, ckwargs, meta)
    try:
        r = fn(*cargs, **ckwargs)
        if meta and info.name in _CONVOLUTIONS:
            r = _conv_layout(info.name, cargs, r)
        return call.back(r, not meta)
    except RuntimeError as e:
        if meta or info.writes or info.fft or not _no_half_kernel(e):
            raise
        return call.back(_in_float32(fn, cargs, ckwargs), True)


_HALF = (torch.float16, torch.bfloat16)

# The convolutions as the dispatcher names their default overloads (`timing.CONVOLUTIONS`).
_CONVOLUTIONS = frozenset(f"aten::{name}" for name in timing.CONVOLUTIONS)


def _channels_last(t) -> bool:
    return (isinstance(t, torch.Tensor) and t.dim() == 4 and not t.is_contiguous()
            and t.is_contiguous(memory_format=torch.channels_last))


def _conv_layout(name: str, cargs: list, r):
    """A convolution's shaped-only results in the layout cuDNN gives them: channels-last when
    its input or weight is (torch's `cudnn_conv_suggest_memory_format`); the meta kernels
    return NCHW whatever the inputs, which would make every later convolution of a
    channels-last model look like an NCHW one."""
    first = 1 if name == "aten::convolution_backward" else 0
    if not any(_channels_last(a) for a in cargs[first:first + 2]):
        return r

    def keep(x):
        if isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point():
            return x.contiguous(memory_format=torch.channels_last)
        return x

    return tuple(keep(x) for x in r) if isinstance(r, tuple) else keep(r)


def _no_half_kernel(e: RuntimeError) -> bool:
    """Whether the CPU refused an op for its 16-bit float type (torch's CUDA build has the
    kernel; its CPU build does not, e.g. FFTs or some pooling in bfloat16)."""
    text = str(e)
    return ("BFloat16" in text or "Half" in text) and ("not implemented" in text or "nsupported" in text
                                                       or "support" in text)


def _in_float32(fn, cargs: list, ckwargs: dict):
    """A functional op on 16-bit float inputs computed in float32, its floating results cast
    back to the inputs' type."""
    half = None

    def up(x):
        nonlocal half
        if isinstance(x, torch.Tensor) and x.dtype in _HALF:
            half = x.dtype
            return x.float()
        if isinstance(x, list):
            return [up(e) for e in x]
        return x

    r = fn(*[up(a) for a in cargs], **{k: up(v) for k, v in ckwargs.items()})

    def down(x):
        if isinstance(x, torch.Tensor) and x.dtype == torch.float32 and half is not None:
            return x.to(half)
        if isinstance(x, (list, tuple)):
            return type(x)(down(e) for e in x) if isinstance(x, list) else tuple(down(e) for e in x)
        return x

    return down(r)


def _run_outs(info: _Op, fn, call: _Call, kwargs: dict, cargs: list, ckwargs: dict, meta: bool):
    """`_run` for ops with `out=` tensors: outputs that must change shape are computed into
    fresh CPU tensors, then the CUDA outputs are resized (by torch's CUDA `resize_`) and filled."""
    fresh: list[tuple[torch.Tensor, torch.Tensor]] = []

    def freshen(all_outs: bool) -> None:
        for name in info.outs:
            o = kwargs.get(name)
            if isinstance(o, torch.Tensor) and o.is_cuda and (all_outs or o.numel() == 0):
                f = torch.empty(0, dtype=o.dtype, device="meta" if meta else "cpu")
                call.originals[id(f)] = o
                call.views.append(f)
                ckwargs[name] = f
                fresh.append((o, f))

    freshen(False)
    try:
        r = fn(*cargs, **ckwargs)
    except RuntimeError as e:
        if not _not_resizable(e):
            raise
        fresh.clear()
        freshen(True)
        r = fn(*cargs, **ckwargs)
    for name in info.outs:
        o = kwargs.get(name)
        v = ckwargs.get(name)
        if isinstance(o, torch.Tensor) and o.is_cuda and all(v is not f for _, f in fresh):
            if v.size() != o.size() or v.stride() != o.stride():
                fresh.append((o, v.clone()))
    for o, f in fresh:
        o.resize_(f.size())
        if not meta and f.numel():
            host_view(o).copy_(f)
    return call.back(r, not meta)


# Fault injection for the test suite (it must fail when a result is wrong): with
# `NCCLSIM_TEST_COMPUTE_PERTURB=1`, matrix products come out with their first element off by one
# half. The switch works only in a process whose libnccl.so.2 is a build with the runtime's own
# test switches (nccl-shim's `fault-injection` feature, or a debug build: scripts/torch-e2e.sh
# runs its perturbed stage on such a build), so setting the variable alone never makes a user's
# results wrong. Such a build reads `NCCLSIM_TEST_PERTURB`, so its file holds that name; a
# release build does not.
_PERTURBED = {"aten::mm", "aten::addmm", "aten::bmm"}
_FAULT_INJECTION_MARK = b"NCCLSIM_TEST_PERTURB"
_perturbing: list = []  # [whether perturbation is on], once decided


def _fault_injection_build(maps: str = "/proc/self/maps") -> bool:
    """Whether a libnccl mapped in this process (per `maps`) is a build with test switches."""
    try:
        with open(maps) as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return False
    for path in sorted(paths):
        name = os.path.basename(path)
        if name != "libnccl.so" and not name.startswith("libnccl.so."):
            continue
        try:
            with open(path, "rb") as lib, mmap.mmap(lib.fileno(), 0, access=mmap.ACCESS_READ) as data:
                if data.find(_FAULT_INJECTION_MARK) >= 0:
                    return True
        except (OSError, ValueError):  # unreadable, or empty (ValueError from mmap)
            continue
    return False


def _perturb_on() -> bool:
    """Whether the test switch `NCCLSIM_TEST_COMPUTE_PERTURB=1` is set and may act (decided once
    per process; set but refused, it says so once)."""
    if not _perturbing:
        wanted = os.environ.get("NCCLSIM_TEST_COMPUTE_PERTURB") == "1"
        on = wanted and _fault_injection_build()
        if wanted and not on:
            print("ncclsim: NCCLSIM_TEST_COMPUTE_PERTURB=1 ignored: it is a test switch of builds "
                  "whose libnccl.so.2 has fault injection", flush=True)
        _perturbing.append(on)
    return _perturbing[0]


def _perturb(r):
    if isinstance(r, torch.Tensor) and r.numel() and r.is_floating_point():
        host_view(r).view(-1)[0] += 0.5 if r.is_contiguous() else 0.0
    return r


def _kernel(info: _Op, mode: str):
    meta = mode == "time"
    perturb = info.name in _PERTURBED and _perturb_on()

    capturing = graphs.capturing  # looked up once: every op asks

    def kernel(*args, **kwargs):
        if capturing():
            return _capture(info, args, kwargs, meta)
        r = None
        # Whether `r` is the op's result already (an op returning nothing gives None).
        done = False
        if meta:
            try:
                r = _run(info, args, kwargs, True)
                done = True
            except torch.OutOfMemoryError:
                # The device is full: the OOM of the real GPU, not a reason to compute.
                raise
            except (NotImplementedError, RuntimeError):
                # No meta kernel, or a data-dependent shape: compute it, unless its results
                # are the large arguments it writes.
                r = _skipped(info, args, kwargs)
                done = r is not None
                if r is _NOTHING:
                    r = None
        if not done:
            r = _run(info, args, kwargs, False)
            if perturb:
                r = _perturb(r)
        timing.price(info.priced, args, kwargs, r, _device_of(args))
        return r

    kernel.__name__ = f"ncclsim_{info.name}"
    return kernel


def _compute(info: _Op, args: tuple, kwargs: dict):
    """Computes an op on the CPU over its CUDA arguments' memory: the kernels' own result (CPU
    tensors, or the arguments it wrote), not yet copied to any CUDA result."""
    call, fn, cargs, ckwargs = _prepare(info, args, kwargs, False)
    if info.outs:
        return _run_outs(info, fn, call, kwargs, cargs, ckwargs, False)
    r = fn(*cargs, **ckwargs)
    call.views.clear()
    return r


def _capture(info: _Op, args: tuple, kwargs: dict, meta: bool):
    """An op while its stream captures a CUDA graph (`graphs`): its results shaped, not
    computed, and the op put into the graph to compute into them at each replay."""
    try:
        r = _run(info, args, kwargs, True)
    except torch.OutOfMemoryError:
        raise
    except (NotImplementedError, RuntimeError):
        if info.writes:
            raise RuntimeError(
                f"ncclsim: {info.name} writes its arguments and has no meta kernel to shape its "
                "results, so it cannot be captured into a CUDA graph on the simulated GPU "
                "(run it outside the capture)"
            ) from None
        # Computing it now only fills its own new results; each replay computes it again.
        r = _run(info, args, kwargs, False)
    fargs, fkwargs, fr = graphs.frozen((args, kwargs, r))

    def work():
        if not meta:
            graphs.fill(_compute(info, fargs, fkwargs), fr)

    timing.price(info.priced, args, kwargs, r, _device_of(args), work=graphs.hold(work))
    return r


def _device_of(args: tuple) -> torch.device | None:
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_cuda:
            return a.device
        if isinstance(a, (list, tuple)):
            for e in a:
                if isinstance(e, torch.Tensor) and e.is_cuda:
                    return e.device
    return None


def _copy_kernel(mode: str):
    native = torch.library.get_kernel("aten::copy_", "CUDA")
    priced = timing.Priced(torch.ops.aten.copy_.default, "aten::copy_")

    def copy_(keyset, self, src, non_blocking=False):
        fused_capture = timing.fusing() and graphs.capturing()
        if fused_capture and src.dim() == 0 and not src.is_cuda and self.is_cuda:
            # A compiled kernel's own constant (FlexAttention's dense implementation, which
            # runs in place of its compiled kernel, makes its -inf with `torch.tensor(...,
            # device=)`): a fill, where a copy from pageable host memory cannot be captured.
            return self.fill_(src.item())
        if (
            self.dtype == src.dtype
            and self.size() == src.size()
            and self.is_contiguous()
            and src.is_contiguous()
            and self.is_conj() == src.is_conj()
            and self.is_neg() == src.is_neg()
            # A fused kernel's copy, captured, goes with the kernel's node (`timing.Fused`), in
            # order with its other ops; a native copy would be a node of its own before them.
            and not fused_capture
        ):
            return native.call_boxed(keyset, self, src, non_blocking)
        def work(dst=self, src=src):
            if mode != "time":
                dst = host_view(dst) if dst.is_cuda else dst
                dst.copy_(host_view(src) if src.is_cuda else src)

        device = self.device if self.is_cuda else src.device
        if graphs.capturing():
            fdst, fsrc = graphs.frozen((self, src))
            timing.price(priced, (self, src), {}, self, device,
                         work=graphs.hold(lambda: work(fdst, fsrc)))
            return self
        work()
        timing.price(priced, (self, src), {}, self, device)
        return self

    return copy_


def _unsupported(name: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"ncclsim: {name} is implemented by torch only for NVIDIA GPUs and has no CPU "
            "equivalent in ncclsim, so it cannot compute on the simulated GPU"
        )

    return fn


def _overload(name: str):
    base, _, overload = name[len("aten::"):].partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _is_view(op) -> bool:
    rets = [r for r in op._schema.returns if r.alias_info is not None]
    return bool(rets) and not any(r.alias_info.is_write for r in rets)


def _chunk_cat_mixed_dtype(tensors, dim, num_chunks, *, out):
    """FSDP's reduce-scatter copy-in (`fsdp::chunk_cat_mixed_dtype`, whose CUDA kernel is torch's
    own, `torch/csrc/distributed/fsdp/ChunkCat.cu`): `aten::_chunk_cat` of the gradients cast
    to the output's dtype, so a group of bfloat16 weights and float32 norms is copied in too."""
    tensors = [t if t.dtype == out.dtype else t.to(out.dtype) for t in tensors]
    torch._chunk_cat(tensors, dim, num_chunks, out=out)


def register(mode: str) -> list:
    """Registers the kernels; returns the libraries that hold them (keep them alive)."""
    fsdp = torch.library.Library("fsdp", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it replaces torch's CUDA kernel
        fsdp.impl("chunk_cat_mixed_dtype", _chunk_cat_mixed_dtype, "CUDA")
    return [_register_aten(mode), fsdp]


def _register_aten(mode: str) -> torch.library.Library:
    lib = torch.library.Library("aten", "IMPL")
    names = [
        n
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(n, "CUDA")
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # copy_ has no CUDA kernel of its own (its composite kernel calls a CUDA routine
        # directly), so it is registered whether listed or not.
        lib.impl("copy_", _copy_kernel(mode), "CUDA", with_keyset=True)
        for name in names:
            if name in NATIVE or name == "aten::copy_":
                continue
            op = _overload(name)
            if _is_view(op):
                continue
            fn = cuda_only.REPLACEMENTS.get(name)
            if fn is None:
                if torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "CPU"):
                    fn = op
                else:
                    fn = _unsupported(name)
            lib.impl(name[len("aten::"):], _kernel(_Op(name, op, fn), mode), "CUDA")
    return lib
