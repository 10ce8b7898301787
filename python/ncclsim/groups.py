"""A folded job's process groups, told to the fake CUDA core before their communicators exist.

In a job run with `ncclsim run --fold` (`NCCLSIM_FOLD` set), libnccl.so.2 creates a
communicator with virtual members only when it knows every member's job rank: it knows the
world's, and asks the core for the others (`job_group_get`). This module records each torch
process group's global ranks there (`job_group_add`) as torch makes the group, on every rank
(torch's SPMD contract: every rank makes every group, members or not):

- `torch.distributed.distributed_c10d._new_process_group_helper(group_size, group_rank,
  global_ranks_in_group, ...)`: the one function `init_process_group`, `new_group`,
  `new_subgroups` and DeviceMesh's `new_group` path all make groups through in torch 2.15 (the
  version the suite runs; the global ranks are read by their parameter's name, not position,
  so an added or moved parameter does not matter);
- `split_group(parent_pg, split_ranks, ...)`, DeviceMesh's other path (torch 2.6 and later),
  whose lists are ranks of the parent group, mapped to global ranks here.

The hooks only record, then call torch's own function; a torch without either function is
left as it is (its groups' communicators are then refused by libnccl.so.2, naming them).
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import sys

from .compute import core as _core


def _record(ranks) -> None:
    ranks = [int(r) for r in ranks]
    c = _core.core()
    if c is None or not ranks:
        return
    arr = (ctypes.c_uint64 * len(ranks))(*ranks)
    if c.job_group_add(arr, len(ranks)) != 0:
        print(f"ncclsim: recording process group {ranks}: {c.last_error()}", flush=True)


def _wrap_helper(helper):
    sig = inspect.signature(helper)

    @functools.wraps(helper)
    def wrapped(*args, **kwargs):
        try:
            ranks = sig.bind_partial(*args, **kwargs).arguments.get("global_ranks_in_group")
            if ranks:
                _record(ranks)
        except TypeError:
            pass
        return helper(*args, **kwargs)

    wrapped._ncclsim_groups = True
    return wrapped


def _wrap_split(split, c10d):
    sig = inspect.signature(split)

    @functools.wraps(split)
    def wrapped(*args, **kwargs):
        try:
            bound = sig.bind_partial(*args, **kwargs).arguments
            parent = bound.get("parent_pg") or c10d._get_default_group()
            members = c10d.get_process_group_ranks(parent)
            for group in bound.get("split_ranks") or []:
                _record([members[r] for r in group])
        except (TypeError, IndexError, ValueError, RuntimeError):
            pass
        return split(*args, **kwargs)

    wrapped._ncclsim_groups = True
    return wrapped


def install() -> None:
    """Hooks torch's group making (once)."""
    try:
        from torch.distributed import distributed_c10d as c10d
    except ImportError:
        return
    helper = getattr(c10d, "_new_process_group_helper", None)
    if helper is not None and not getattr(helper, "_ncclsim_groups", False):
        c10d._new_process_group_helper = _wrap_helper(helper)
    split = getattr(c10d, "split_group", None)
    if split is not None and not getattr(split, "_ncclsim_groups", False):
        wrapped = _wrap_split(split, c10d)
        c10d.split_group = wrapped
        import torch.distributed as dist

        if getattr(dist, "split_group", None) is split:
            dist.split_group = wrapped
        mesh = sys.modules.get("torch.distributed.device_mesh")
        if mesh is not None and getattr(mesh, "split_group", None) is split:
            mesh.split_group = wrapped
