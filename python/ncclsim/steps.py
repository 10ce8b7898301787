"""The program's training steps, marked where its framework ends them, for the fake CUDA core
(`step_mark`): `ncclsim trace summarize --steps` then splits a run at the program's own steps
instead of guessing them from its call pattern.

A step ends where torch's own step counter (`torch.autograd.profiler.KinetoStepTracker`, which
the profiler and on-demand tracing read) advances:

- at the end of an optimizer's `step()` (`torch.optim.optimizer.register_optimizer_step_post_hook`,
  torch's global hook, which every subclass of `torch.optim.Optimizer` fires: torch's own,
  apex's and Transformer Engine's fused optimizers, and the ones Megatron-core, DeepSpeed and
  torchtitan wrap), for optimizers of parameters on the simulated GPUs (a CPU reference
  model's optimizer in the same program marks nothing);
- at `torch.profiler.profile.step()`. Once a program has started a profiler, its profiler's
  steps alone mark the steps (the program said where its steps are).

Several optimizers stepping in one training step (a model in parts, each with its own
optimizer, as torchtitan's pipeline stages and Megatron's chained optimizers have) end one
step: the step ends at the step of the optimizer that ended the step before, or at any
optimizer's second step since then (so a program that trains one model after another moves on
to the next one's optimizer after one step). The other optimizers' work in the step is counted
in the next one.
"""

from __future__ import annotations

import ctypes
import functools
import weakref

from . import _core_abi as abi
from .compute import core as _core


class _Steps:
    """Which optimizer ends a step, and the optimizers that stepped since the last mark."""

    def __init__(self) -> None:
        self.leader = None  # weak reference to the optimizer that ended the last step
        self.since: weakref.WeakSet = weakref.WeakSet()
        self.profiled = False
        self.on_gpu: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def optimizer_stepped(self, opt) -> bool:
        """Whether this step of `opt` ends a training step."""
        leader = self.leader() if self.leader is not None else None
        if leader is None or leader is opt or opt in self.since:
            self.leader = weakref.ref(opt)
            self.since = weakref.WeakSet()
            return True
        self.since.add(opt)
        return False

    def simulated(self, opt) -> bool:
        """Whether `opt` steps parameters on the simulated GPUs (asked once per optimizer)."""
        known = self.on_gpu.get(opt)
        if known is None:
            known = any(p.is_cuda for g in opt.param_groups for p in g["params"])
            self.on_gpu[opt] = known
        return known


_state = _Steps()


def _mark(by: int) -> None:
    c = _core.core()
    if c is None:
        return
    marks = ctypes.c_uint64()
    if c.step_mark(by, ctypes.byref(marks)) != 0:
        print(f"ncclsim: marking a training step: {c.last_error()}", flush=True)


def _optimizer_post_hook(optimizer, args, kwargs) -> None:
    if _state.profiled or not _state.simulated(optimizer):
        return
    if _state.optimizer_stepped(optimizer):
        _mark(abi.STEP_BY_OPTIMIZER)


def _wrap_profiler_step(step):
    @functools.wraps(step)
    def wrapped(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        _state.profiled = True
        _mark(abi.STEP_BY_PROFILER)
        return out

    wrapped._ncclsim_steps = True
    return wrapped


def _wrap_profiler_start(start):
    @functools.wraps(start)
    def wrapped(self, *args, **kwargs):
        _state.profiled = True
        return start(self, *args, **kwargs)

    wrapped._ncclsim_steps = True
    return wrapped


_installed: list = []


def install() -> None:
    """Hooks torch's optimizer and profiler steps (once)."""
    if _installed:
        return
    _installed.append(True)
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        register_optimizer_step_post_hook = None
    if register_optimizer_step_post_hook is not None:
        register_optimizer_step_post_hook(_optimizer_post_hook)
    try:
        import torch.profiler as profiler
    except ImportError:
        return
    for name, wrap in (("step", _wrap_profiler_step), ("start", _wrap_profiler_start)):
        f = getattr(profiler.profile, name, None)
        if f is not None and not getattr(f, "_ncclsim_steps", False):
            setattr(profiler.profile, name, wrap(f))
