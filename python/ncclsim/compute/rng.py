"""Random numbers for CUDA tensors: reproducible, one stream per device.

torch's CUDA generators (Philox: a seed and an offset) live on the host, so
`torch.cuda.manual_seed`, `manual_seed_all`, `get_rng_state`/`set_rng_state` and
`torch.manual_seed` work on them unchanged. Each random op on device `d` draws from a CPU
generator seeded from the CUDA generator's (seed, offset) and then advances that offset, as a
CUDA kernel would. So the same seed gives the same numbers, each device has its own stream
(each device's generator has its own state), and saving and restoring the state replays the
draws. The numbers are torch's CPU generator's (Mersenne Twister), not CUDA's Philox values.
"""

from __future__ import annotations

import threading

import torch

# One CPU generator per thread, reseeded for every op (ops on different threads may run at once).
_local = threading.local()
# Offset step per random op: torch's CUDA generator accepts offsets in multiples of 4.
_STEP = 4


def _mix(seed: int, offset: int) -> int:
    """A 63-bit seed from the CUDA generator's (seed, offset) (splitmix64's finalizer)."""
    x = (seed * 0x9E3779B97F4A7C15 + offset + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 31)) & 0x7FFFFFFFFFFFFFFF


def cpu_generator(cuda_gen: torch.Generator | None, device: torch.device) -> torch.Generator:
    """The CPU generator for one random op on `device`, drawing from `cuda_gen` (None: the
    device's default generator), whose offset moves on."""
    if cuda_gen is None:
        index = device.index if device.index is not None else torch.cuda.current_device()
        cuda_gen = torch.cuda.default_generators[index]
    seed = cuda_gen.initial_seed()
    offset = cuda_gen.get_offset()
    cuda_gen.set_offset(offset + _STEP)
    g = getattr(_local, "gen", None)
    if g is None:
        g = _local.gen = torch.Generator()
    g.manual_seed(_mix(seed, offset))
    return g
