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

# (storage address, storage bytes) -> uint8 CPU tensor over them. A storage freed and another
# made at the same address with the same size is the same memory, so a stale entry is still
# right; the map is cleared when it grows large.
_bytes: dict[tuple[int, int], torch.Tensor] = {}
_LIMIT = 16384


def storage_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 CPU tensor over all of a CUDA storage's bytes."""
    ptr = storage.data_ptr()
    n = storage.nbytes()
    key = (ptr, n)
    b = _bytes.get(key)
    if b is None:
        if len(_bytes) >= _LIMIT:
            _bytes.clear()
        if n == 0 or ptr == 0:
            b = torch.empty(0, dtype=torch.uint8)
        else:
            b = torch.frombuffer((ctypes.c_char * n).from_address(ptr), dtype=torch.uint8)
        _bytes[key] = b
    return b


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor aliasing the CUDA tensor `t` (same dtype, sizes, strides, offset)."""
    b = storage_bytes(t.untyped_storage())
    item = t.element_size()
    whole = b.numel() - b.numel() % item
    typed = (b[:whole] if whole != b.numel() else b).view(t.dtype)
    v = typed.as_strided(t.size(), t.stride(), t.storage_offset())
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
