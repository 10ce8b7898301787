"""CPU tensors over the bytes of CUDA tensors.

A simulated GPU's memory is host memory of this process (the fake CUDA core maps each device's
arena, and every `cuMemMap`ped range, into the address space), so a CUDA tensor's storage is
readable and writable at its `data_ptr()`. `host_view(t)` is a CPU tensor with `t`'s dtype,
sizes, strides and storage offset over exactly those bytes: CPU kernels that read or write it
read or write the device tensor.
"""

from __future__ import annotations

import ctypes

import torch

from . import core

# (storage address, storage bytes, dtype) -> 1-D CPU tensor of that dtype over the storage. A
# storage freed and another made at the same address with the same size is the same memory, so
# a stale entry is still right; the map is cleared when it grows large.
_views: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}
_LIMIT = 16384


def commit(ptr: int, nbytes: int) -> None:
    """Has the fake CUDA core back `nbytes` of device memory at `ptr` with host memory before
    CPU kernels touch them (the first touch of memory the host cannot back would otherwise
    bring the kernel's OOM killer; the vtable's `commit_memory`): torch.OutOfMemoryError when
    the host cannot. Nothing outside ncclsim's libraries."""
    c = core.core()
    if c is None or nbytes == 0:
        return
    if c.commit_memory(ptr, nbytes) != 0:
        raise torch.OutOfMemoryError(f"CUDA out of memory: {c.last_error()}")


def _storage_view(ptr: int, nbytes: int, dtype: torch.dtype) -> torch.Tensor:
    key = (ptr, nbytes, dtype)
    v = _views.get(key)
    if v is None:
        if len(_views) >= _LIMIT:
            _views.clear()
        count = nbytes // dtype.itemsize
        if count == 0 or ptr == 0:
            v = torch.empty(0, dtype=dtype)
        else:
            buf = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
            v = torch.frombuffer(buf, dtype=dtype, count=count)
        _views[key] = v
    return v


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor aliasing the CUDA tensor `t` (same dtype, sizes, strides, offset)."""
    st = t.untyped_storage()
    if st.nbytes() == 0 or t.numel() == 0:
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)
    commit(st.data_ptr(), st.nbytes())
    v = _storage_view(st.data_ptr(), st.nbytes(), t.dtype).as_strided(t.size(), t.stride(), t.storage_offset())
    if t.is_conj():
        v = v.conj()
    if t.is_neg():
        v = v._neg_view()
    return v


def is_dense(r: torch.Tensor) -> bool:
    """Whether `r` covers its storage exactly once from offset 0 (so its strides can be
    reproduced by `empty_strided`)."""
    if r.is_contiguous():
        return True
    if r.storage_offset() != 0:
        return False
    if any(s == 0 for s in r.stride()) and r.numel() > 1:
        return False
    return r.untyped_storage().nbytes() == r.numel() * r.element_size()
