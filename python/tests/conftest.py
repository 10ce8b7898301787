"""Unit tests of the Python package's pure parts (what needs neither a GPU nor ncclsim's
libraries), each checked against plain CPU torch or hand arithmetic.

scripts/torch-e2e.sh runs them with the suite's venv, whose torch (installed without NVIDIA's
wheels) imports on stubs of every NVIDIA library (`ncclsim.stubs --all`) and finds no CUDA
device.
"""

import sys
from pathlib import Path

import pytest
import torch

# The package from this tree (python/), not an installed copy.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def pytest_configure(config):
    # torch's autograd engine asks for CUDA devices; on the stubs it is told there are none.
    config.addinivalue_line("filterwarnings", "ignore:CUDA initialization:UserWarning")


@pytest.fixture
def tf32_flags():
    """Lets a test set torch's TF32 switches; puts them back afterwards."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
