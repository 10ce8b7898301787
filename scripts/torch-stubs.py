#!/usr/bin/env python3
"""Stub NVIDIA libraries for a torch installed without its NVIDIA wheels: runs the generator of
the Python package (python/ncclsim/stubs.py, which `ncclsim run` also runs on its own).

Usage: torch-stubs.py [--succeed LIBS] TORCH_LIB_DIR OUT_DIR
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from ncclsim.stubs import main  # noqa: E402

main()
