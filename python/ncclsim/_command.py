"""The `ncclsim` console script of a pip installation: runs the command built into the package.

The binary and the libraries `ncclsim run` preloads are in `_native/` beside this file; the
binary finds the libraries next to itself.
"""

import os
import sys
from pathlib import Path


def main() -> None:
    exe = Path(__file__).resolve().parent / "_native" / "ncclsim"
    if not os.access(exe, os.X_OK):
        sys.exit(
            f"ncclsim: the command is not in this installation ({exe} is missing); "
            "reinstall the package with pip"
        )
    os.execv(exe, ["ncclsim", *sys.argv[1:]])
