#!/usr/bin/env bash
# Runs a command (python, torchrun, ...) with ncclsim's CUDA and NCCL libraries in place of
# NVIDIA's, for a torch venv made by scripts/torch-venv.sh (torch without NVIDIA's wheels).
# A stop-gap for `ncclsim run`: builds the libraries, links them under their real names in
# target/ncclsim-libs/<profile>/, puts that directory and the venv's stub libraries on
# LD_LIBRARY_PATH and preloads ours (libnccl.so.2, libcuda.so.1, libnvidia-ml.so.1 and the
# libcudart torch links), so they win even if NVIDIA's wheels are installed.
#
# Usage: scripts/torch-run.sh COMMAND [ARGS...]
#   NCCLSIM_TORCH_VENV  the venv (default ~/.cache/ncclsim/torch-venv); its bin/ goes first on PATH
#   NCCLSIM_PROFILE     cargo profile of the libraries: release (default) or dev
#   NCCLSIM_STUBS       "noop": cuBLAS/cuBLASLt stubs that succeed doing nothing (so matmuls,
#                       DDP and FSDP steps run, with meaningless values); default: stubs fail
# Other settings (NCCLSIM_TOPO, NCCLSIM_NODE, NCCLSIM_TRACE, NCCL_DEBUG, ...) pass through.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${NCCLSIM_TORCH_VENV:-$HOME/.cache/ncclsim/torch-venv}"
profile="${NCCLSIM_PROFILE:-release}"
stubs="$venv/ncclsim-stubs${NCCLSIM_STUBS:+-$NCCLSIM_STUBS}"
if [ ! -d "$stubs" ]; then
    echo "torch-run: no stubs at $stubs; run scripts/torch-venv.sh $venv first" >&2
    exit 2
fi
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
(cd "$repo" && cargo build -q --profile "$profile" -p nccl-shim -p ncclsim-cuda -p fake-cudart \
    -p fake-cudart13 -p fake-cuda-driver -p fake-nvml)
target="$(cd "$repo" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
built="$target/$dir"
libs="$target/ncclsim-libs/$dir"
mkdir -p "$libs"
for pair in libncclsim_cuda.so:libncclsim_cuda.so libnccl.so:libnccl.so.2 \
    libcudart12.so:libcudart.so.12 libcudart13.so:libcudart.so.13 \
    libcuda_driver.so:libcuda.so.1 libnvidia_ml.so:libnvidia-ml.so.1; do
    ln -sfn "$built/${pair%%:*}" "$libs/${pair##*:}"
done
export LD_LIBRARY_PATH="$libs:$stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# torch's DT_RPATH lists NVIDIA's wheel directories, searched before LD_LIBRARY_PATH: if those
# wheels are installed too, only preloading makes ours win. Preload the runtime of torch's CUDA
# major only (one libcudart per process), with the driver, NVML and NCCL.
torch_lib="$("$venv/bin/python" -c 'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "lib"))')"
cudart="$(readelf -d "$torch_lib/libc10_cuda.so" | grep -o 'libcudart\.so\.[0-9]*' | head -1)"
preload="$libs/libnccl.so.2:$libs/libcuda.so.1:$libs/libnvidia-ml.so.1${cudart:+:$libs/$cudart}"
export LD_PRELOAD="$preload${LD_PRELOAD:+:$LD_PRELOAD}"
export PATH="$venv/bin:$PATH"
exec "$@"
