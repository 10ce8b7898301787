"""Compute on the simulated GPUs: aten ops on CUDA tensors run torch's CPU kernels over the
device bytes (`kernels`), with reproducible per-device random streams (`rng`) and CPU
equivalents of the ops torch implements only for NVIDIA GPUs (`cuda_only`).

`install(mode)` is called once per process by the `torch.backends` entry point
(`ncclsim._autoload`); `mode` is `run` (compute) or `time` (shapes only, values undefined).
"""

from __future__ import annotations

import os

_installed: str | None = None
_library = None


def install(mode: str = "run") -> None:
    """Registers the CPU kernels for torch's CUDA dispatch key (idempotent)."""
    global _installed, _library
    if mode not in ("run", "time"):
        raise ValueError(f"NCCLSIM_COMPUTE={mode!r}: expected run, time or off")
    if _installed is not None:
        if _installed != mode:
            raise RuntimeError(f"ncclsim compute is already installed in mode {_installed!r}")
        return
    import torch

    from . import kernels

    from . import rnn

    _library = kernels.register(mode)
    rnn.install()
    _installed = mode
    _compile_eagerly(torch)
    # cuDNN's stand-in reports the version this torch was built against (it reads this
    # variable), so torch.backends.cudnn.version() and its compatibility check pass.
    try:
        major, minor, patch = torch._C._cudnn.getCompileVersion()
        os.environ.setdefault("NCCLSIM_CUDNN_VERSION", str(major * 10000 + minor * 100 + patch))
    except (AttributeError, RuntimeError):
        pass


def mode() -> str | None:
    """The installed mode, or None."""
    return _installed


def _compile_eagerly(torch) -> None:
    """`torch.compile` with its default backend (inductor) generates Triton kernels for CUDA
    tensors, which cannot run here; it compiles with ncclsim's backend instead (`fusion`:
    Dynamo traces and guards, AOT autograd makes the forward and backward graphs, which run op
    by op on the kernels above, priced as inductor's fused kernels), saying so once."""
    original = torch.compile
    warned = []

    def compile(model=None, *args, backend="inductor", mode=None, options=None, **kwargs):
        if backend == "inductor":
            if not warned:
                warned.append(True)
                import warnings

                warnings.warn(
                    "ncclsim: torch.compile's inductor backend needs Triton kernels for CUDA "
                    "tensors, which the simulated GPUs cannot run; compiling with ncclsim's "
                    "backend instead (the graphs run op by op and are priced as inductor's "
                    "fused kernels; mode and options are ignored)",
                    stacklevel=2,
                )
            from . import fusion

            backend, mode, options = fusion.backend(), None, None
        return original(model, *args, backend=backend, mode=mode, options=options, **kwargs)

    compile.__doc__ = original.__doc__
    compile.__wrapped__ = original
    torch.compile = compile
