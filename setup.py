"""Builds the Rust workspace for the Python package.

`pip install .` runs `cargo build --release` for the command and the shared objects `ncclsim
run` preloads, and puts them in the package (`ncclsim/_native/`): the `ncclsim` console script
(`ncclsim._command`) runs the binary from there, and the binary finds its libraries beside
itself. Needs cargo at build time only. `CARGO_TARGET_DIR` is honoured (default: `target/` of
the source tree, so an existing release build is reused); `NCCLSIM_CARGO_PROFILE` picks another
cargo profile (default `release`).
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent

# cargo packages built for the wheel, and the files they produce that go in it (the files must
# match `LIBS` in cli/src/run.rs, which checks this list).
CARGO_PACKAGES = [
    "cli",
    "ncclsim-launch",
    "nccl-shim",
    "ncclsim-cuda",
    "fake-cudart",
    "fake-cudart13",
    "fake-cuda-driver",
    "fake-nvml",
    "fake-cublas",
    "fake-cublas13",
    "fake-cublaslt",
    "fake-cublaslt13",
]
NATIVE_FILES = [
    "ncclsim",
    "nvidia-smi",
    "libncclsim_launch.so",
    "libncclsim_cuda.so",
    "libnccl.so",
    "libcudart13.so",
    "libcudart12.so",
    "libcuda_driver.so",
    "libcublas13.so",
    "libcublas12.so",
    "libcublaslt13.so",
    "libcublaslt12.so",
    "libnvidia_ml.so",
]


class BuildWithCargo(build_py):
    """Python files as usual, then the cargo build copied into `ncclsim/_native`."""

    def run(self):
        super().run()
        cargo = shutil.which(os.environ.get("CARGO", "cargo"))
        if cargo is None:
            raise SystemExit(
                "ncclsim: building needs Rust's cargo on PATH (https://rustup.rs); "
                "it is not needed once installed"
            )
        profile = os.environ.get("NCCLSIM_CARGO_PROFILE", "release")
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        cmd = [cargo, "build", "--profile", profile, "--manifest-path", str(ROOT / "Cargo.toml")]
        for p in CARGO_PACKAGES:
            cmd += ["-p", p]
        subprocess.run(cmd, check=True, env={**os.environ, "CARGO_TARGET_DIR": str(target)})
        built = target / ("debug" if profile == "dev" else profile)
        dest = Path(self.build_lib) / "ncclsim" / "_native"
        dest.mkdir(parents=True, exist_ok=True)
        for name in NATIVE_FILES:
            src = built / name
            if not src.is_file():
                raise SystemExit(f"ncclsim: cargo built no {src}")
            shutil.copy2(src, dest / name)


class NativeDistribution(Distribution):
    """The wheel holds native code: tagged for this platform, not `py3-none-any`."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithCargo}, distclass=NativeDistribution)
