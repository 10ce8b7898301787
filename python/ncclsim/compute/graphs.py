"""Torch ops inside CUDA graphs (`torch.cuda.graph`, `make_graphed_callables`, frameworks'
CUDA-graph modes).

While a stream captures, an op is not computed: its results get their shapes (torch's meta
kernels) in memory of the graph's pool, and the op is put into the graph through the core's
compute door (`launch_compute`) with a work function that computes it, so each replay of the
graph computes it again, in stream order, over whatever its inputs hold then, into the same
result tensors, and takes its modelled time there, beside the NCCL calls and copies captured
with it. An op that writes its arguments and has no meta kernel cannot learn its result's shape
without computing, so it is refused while capturing, naming the op. Random ops draw from the
CPU generator at each replay (their values are not CUDA's Philox values anyway).
"""

from __future__ import annotations

import ctypes
import itertools
import threading

import torch

from .alias import host_view

_WORK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_lock = threading.Lock()
_ids = itertools.count(1)
# Work of captured ops by id (the `data` the core passes back), until the core releases it
# with the graph.
_captured: dict[int, object] = {}
_failed: list = []


def _run_captured(data) -> None:
    with _lock:
        work = _captured.get(data or 0)
    if work is None:
        return
    try:
        work()
    except Exception as e:  # noqa: BLE001 - a C callback cannot raise; say it, once
        if not _failed:
            _failed.append(True)
            print(f"ncclsim: a captured op failed at a CUDA graph replay ({type(e).__name__}: {e}); "
                  "its results are not computed", flush=True)


def _release_captured(data) -> None:
    with _lock:
        _captured.pop(data or 0, None)


# Kept alive with the module: the core calls them at replays and when graphs go.
_RUN = _WORK(_run_captured)
_RELEASE = _WORK(_release_captured)
RUN_FN = ctypes.cast(_RUN, ctypes.c_void_p).value
RELEASE_FN = ctypes.cast(_RELEASE, ctypes.c_void_p).value

def _never() -> bool:
    return False


# Whether the current stream captures a graph: torch's own query, called as it is (every op
# asks), or never in a torch without CUDA.
capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or _never


def hold(work) -> int:
    """Registers `work` for the replays of the graph being captured; gives its id."""
    with _lock:
        i = next(_ids)
        _captured[i] = work
    return i


def frozen(x):
    """`x` (a tensor, or lists, tuples and dicts of them) with each CUDA tensor replaced by an
    alias of the device memory it has now, which a captured op's work reads and writes at each
    replay, as a real graph's kernels keep the addresses they were captured with: a program may
    free or re-allocate the tensor's storage after the capture (FSDP resizes its unsharded
    parameters' storage to 0 once used), and the graph's memory pool keeps the memory."""
    if isinstance(x, torch.Tensor):
        st = x.untyped_storage() if x.is_cuda else None
        if st is None or st.nbytes() == 0 or x.is_conj() or x.is_neg():
            return x
        alias = torch._C._construct_storage_from_data_pointer(st.data_ptr(), x.device, st.nbytes())
        return torch.empty(0, dtype=x.dtype, device=x.device).set_(
            alias, x.storage_offset(), x.size(), x.stride())
    if isinstance(x, (list, tuple)):
        return type(x)(frozen(e) for e in x)
    if isinstance(x, dict):
        return {k: frozen(v) for k, v in x.items()}
    return x


def hold_together(work_ids: list) -> int:
    """Registers one work that runs the held works `work_ids` in order (the ops of one fused
    kernel, captured as one graph node); they go with it. Gives its id."""
    with _lock:
        members = [w for w in (_captured.pop(i, None) for i in work_ids) if w is not None]

    def run() -> None:
        for w in members:
            w()

    return hold(run)


def drop(work_id: int) -> None:
    """Forgets work the core never took (what its release would do)."""
    _release_captured(work_id)


def fill(computed, results) -> None:
    """Copies what an op computed on the CPU (`computed`, its kernels' result) into the CUDA
    tensors the capture gave as its results; results that are the op's own arguments were
    written in place already (`computed` is then the argument's CPU view)."""
    if isinstance(results, torch.Tensor):
        if isinstance(computed, torch.Tensor) and results.is_cuda and results.numel():
            dst = host_view(results)
            if dst.data_ptr() != computed.data_ptr() or dst.stride() != computed.stride():
                dst.copy_(computed)
    elif isinstance(results, (list, tuple)) and isinstance(computed, (list, tuple)):
        for c, r in zip(computed, results):
            fill(c, r)
