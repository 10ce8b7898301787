"""torch's `torch.backends` entry point: turns compute on under `ncclsim run`.

Outside a simulated process (no `NCCLSIM_COMPUTE` and no fake CUDA core settings in the
environment) it does nothing, so an installed package never changes a torch that runs on real
GPUs. `NCCLSIM_COMPUTE=off` leaves kernels as the fake CUDA core treats them (counted, not run).
"""

import os


def load() -> None:
    """Called by `import torch` (torch's `_import_device_backends`)."""
    if os.environ.get("NCCLSIM_FOLD"):
        from . import groups

        groups.install()
    mode = os.environ.get("NCCLSIM_COMPUTE")
    if mode is None:
        return
    if mode == "off":
        return
    from . import compute

    compute.install(mode)
