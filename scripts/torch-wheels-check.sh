#!/usr/bin/env bash
# torch installed the ordinary way, with NVIDIA's wheels (cuBLAS, cuDNN, NCCL, the CUDA runtime:
# about 5 GB in the venv), under `ncclsim run` on 2 simulated DGX A100 nodes: ncclsim's preloaded
# libraries win over the wheels' (torch's RPATH names the wheels), and ops compute on the
# simulated GPUs (scripts/torch/ordinary_install.py). Not part of CI, which tests the --no-deps
# install (scripts/torch-e2e.sh) to keep its download at ~540 MB.
#
# Usage: scripts/torch-wheels-check.sh [VENV]   (default target/torch-full-venv; made if missing)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$repo/target/torch-full-venv}"
version="${TORCH_VERSION:-2.15.0}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip --disable-pip-version-check -q install "torch==$version" numpy
cd "$repo"
cargo build --release -q
out=$(PATH="$venv/bin:$PATH" target/release/ncclsim run --topo topologies/dgx-a100.xml --nodes 2 \
    -- torchrun --nproc_per_node 1 scripts/torch/ordinary_install.py 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep "PASS"
[ "$(echo "$out" | grep -c "PASS")" = 2 ] || { echo "torch-wheels-check: FAIL"; exit 1; }
echo "torch-wheels-check: PASS"
