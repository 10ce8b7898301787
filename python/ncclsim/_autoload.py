"""torch's `torch.backends` entry point: turns compute on under `ncclsim run`.

It asks the fake CUDA core for the run environment (`run_settings`: one parser for every
library); outside a simulated process (no core to load, or no `NCCLSIM_COMPUTE`) it does
nothing, so an installed package never changes a torch that runs on real GPUs.
`NCCLSIM_COMPUTE=off` leaves kernels as the fake CUDA core treats them (counted, not run).
Under ncclsim it also marks the program's training steps for the core (`steps`).
"""


def load() -> None:
    """Called by `import torch` (torch's `_import_device_backends`)."""
    from .compute import core

    settings = core.settings()
    if settings is None:
        return
    if settings.folded:
        from . import groups

        groups.install()
    from . import steps

    steps.install()
    mode = settings.mode()
    if mode is None or mode == "off":
        return
    from . import compute

    compute.install(mode)
