"""ncclsim's Python package, loaded into the Python processes `ncclsim run` starts.

`ncclsim run` puts this package's directory first on `PYTHONPATH`. The directory also holds a
`dist-info` whose entry point in torch's `torch.backends` group names `ncclsim._autoload.load`:
`import torch` calls it once torch has finished importing (torch's out-of-tree backend
autoload), so the user's script needs no change and non-torch programs never load it.

`ncclsim.compute` makes aten ops on CUDA tensors compute on the CPU over the device bytes
(device memory of the simulated GPUs is host memory of the process).
"""

__version__ = "0.1.0"
