#!/usr/bin/env bash
# The pip path as a user takes it: a fresh venv with torch from PyPI, `pip install` of this
# repository, then, from a directory outside the repository with no cargo on PATH,
# `ncclsim plan` and a 2-node torchrun job (16 ranks, each all-reduce checked against the sum
# computed on the CPU) on the installed command. torch is installed without NVIDIA's wheels,
# so the job also checks that `ncclsim run` makes the stand-ins torch's import needs by itself.
#
# Usage: scripts/pip-install-check.sh [WORKDIR]
#   WORKDIR        where the venv and the job go (default target/pip-check; made afresh)
#   TORCH_VERSION  torch release (default 2.15.0)
#   PYTHON         interpreter for the venv (default python3)
# `pip install` runs `cargo build --release` (target/ of the repository, so an existing release
# build is reused; a build from nothing takes several minutes). Prints each step's time.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$repo/target/pip-check}"
version="${TORCH_VERSION:-2.15.0}"
python="${PYTHON:-python3}"
stamp() { echo "[$(( $(date +%s) - start ))s] $*"; }
start=$(date +%s)

rm -rf "$work"
mkdir -p "$work/job"
"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip -q --disable-pip-version-check)
# torch the way scripts/torch-venv.sh installs it: no NVIDIA wheels, its import-time needs.
"${pip[@]}" install --no-deps "torch==$version"
"${pip[@]}" install filelock 'typing-extensions>=4.13.0' 'sympy>=1.13.3' 'networkx>=2.5.1' \
    jinja2 'fsspec>=0.8.5' 'setuptools>=77.0.3' numpy
stamp "venv with torch $version"
"${pip[@]}" install "$repo"
stamp "pip install $repo"

# From here on: no repository, no cargo, a fresh cache (stand-ins are made on first use).
cp "$repo/topologies/dgx-a100.xml" "$repo/scripts/torch/pip_check.py" "$work/job/"
cd "$work/job"
export PATH="$work/venv/bin:/usr/local/bin:/usr/bin:/bin"
export XDG_CACHE_HOME="$work/cache"
unset NCCLSIM_LIB_DIR LD_PRELOAD LD_LIBRARY_PATH PYTHONPATH
if command -v cargo >/dev/null; then
    echo "cargo is still on PATH ($(command -v cargo))" >&2
    exit 1
fi
echo "ncclsim is $(command -v ncclsim)"
ncclsim plan --topo dgx-a100.xml --nodes 2 --split tp=8,dp=2 > plan.txt
head -3 plan.txt
stamp "ncclsim plan"
ncclsim run --topo dgx-a100.xml --nodes 2 --env NCCL_DEBUG=INFO \
    -- torchrun --nproc_per_node 8 pip_check.py > run.log 2>&1 || {
    tail -40 run.log
    exit 1
}
stamp "ncclsim run --nodes 2 -- torchrun --nproc_per_node 8"
ok=$(grep -c '^ok rank .* of 16 .* sum 136$' run.log || true)
nodes=$(grep -c 'nRanks 16 nNodes 2' run.log || true)
grep -m1 'making stand-ins' run.log || true
echo "ranks ok: $ok of 16; INFO lines with nRanks 16 nNodes 2: $nodes"
if [ "$ok" -ne 16 ] || [ "$nodes" -lt 16 ]; then
    tail -n 40 run.log
    exit 1
fi
stamp "done"
