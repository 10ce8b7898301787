#!/usr/bin/env bash
# Makes a Python venv with PyTorch from PyPI for running torch.distributed on ncclsim's libraries
# (and transformers, which the test suite's GPT-2 uses; nvidia-ml-py, nvitop and gpustat for
# its monitor checks),
# without NVIDIA's wheels: `pip install torch --no-deps`, the pure-Python packages torch needs at
# import, then stub NVIDIA libraries generated from what the installed torch imports
# (scripts/torch-stubs.py) in VENV/ncclsim-stubs (every function fails) and
# VENV/ncclsim-stubs-noop (cuBLAS and cuBLASLt succeed doing nothing).
#
# Usage: scripts/torch-venv.sh [VENV]
#   VENV            default $NCCLSIM_TORCH_VENV, else target/torch-venv in the repository
#   TORCH_VERSION   torch release (default 2.15.0: CUDA 13, libcudart.so.13)
#   PYTHON          interpreter for the venv (default python3)
# Downloads about 540 MB once (pip's cache keeps it). Re-running reuses an existing venv.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-${NCCLSIM_TORCH_VENV:-$repo/target/torch-venv}}"
version="${TORCH_VERSION:-2.15.0}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
if ! "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('torch').split('+')[0] == '$version'" 2>/dev/null; then
    # --no-deps: NVIDIA's CUDA, cuDNN, NCCL, NVSHMEM wheels (~2.5 GB) and triton are not needed.
    "${pip[@]}" install --no-deps "torch==$version"
fi
# What torch imports at start-up (its Requires-Dist minus NVIDIA's wheels and triton), and numpy.
"${pip[@]}" install filelock 'typing-extensions>=4.13.0' 'sympy>=1.13.3' 'networkx>=2.5.1' \
    jinja2 'fsspec>=0.8.5' 'setuptools>=77.0.3' numpy
# transformers, for the suite's GPT-2 built from a config (no weights are downloaded), and
# expecttest, which torch's OpInfo database (the suite's operator sweep) imports.
"${pip[@]}" install 'transformers>=4.40' expecttest
# NVML's Python bindings and the monitors users run on them (scripts/env-check and the suite's
# monitor stage run them on ncclsim's libnvidia-ml.so.1).
"${pip[@]}" install 'nvidia-ml-py>=12' 'nvitop==1.7.2' 'gpustat==1.1.1'

torch_lib="$("$venv/bin/python" -c 'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "lib"))')"
rm -rf "$venv/ncclsim-stubs" "$venv/ncclsim-stubs-noop"
"$venv/bin/python" "$repo/scripts/torch-stubs.py" "$torch_lib" "$venv/ncclsim-stubs"
# The same with cuBLAS/cuBLASLt succeeding and doing nothing, like our kernels (for DDP/FSDP
# experiments: `ncclsim run --lib-path VENV/ncclsim-stubs-noop ...`).
"$venv/bin/python" "$repo/scripts/torch-stubs.py" --succeed cublas,cublasLt "$torch_lib" \
    "$venv/ncclsim-stubs-noop" > /dev/null
echo "venv ready: $venv (torch $version, stubs in $venv/ncclsim-stubs and ncclsim-stubs-noop)"
