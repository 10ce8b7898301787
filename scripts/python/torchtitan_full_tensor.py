"""torchtitan's training entry point, with every parameter of the model read whole
(`DTensor.full_tensor()`: an all-gather over the FSDP and TP dimensions) before the first step,
as a program inspecting or checkpointing its model does. The training that follows must be the
plain run's: same losses and gradient norms (`scripts/torchtitan-check.sh`).

Usage: python -m torch.distributed.run ... torchtitan_full_tensor.py TORCHTITAN-ARGS...
"""

import torch
import torchtitan.trainer
from torch.distributed.tensor import DTensor

_train = torchtitan.trainer.Trainer.train


def _read_whole_then_train(self, *args, **kwargs):
    read = 0
    with torch.no_grad():
        for part in self.model_parts:
            for p in part.parameters():
                if isinstance(p, DTensor):
                    whole = p.full_tensor()
                    if tuple(whole.shape) != tuple(p.shape):
                        raise SystemExit(f"full_tensor(): {tuple(whole.shape)}, want {tuple(p.shape)}")
                    read += 1
    print(f"torchtitan_full_tensor: {read} parameters read whole", flush=True)
    return _train(self, *args, **kwargs)


torchtitan.trainer.Trainer.train = _read_whole_then_train

from torchtitan.train import main  # noqa: E402

main()
