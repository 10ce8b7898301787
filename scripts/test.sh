#!/usr/bin/env bash
# All tests: the workspace's cargo tests, then the PyTorch suite (scripts/torch-e2e.sh: the
# Python package's unit tests, python/tests with pytest, then the end-to-end stages, 16 torchrun
# processes on 2 simulated DGX A100 nodes through `ncclsim run`), which makes its own venv with
# torch from PyPI on first use (about 540 MB, target/torch-venv; set NCCLSIM_TORCH_VENV to reuse
# one elsewhere). NCCLSIM_SKIP_TORCH=1 runs the cargo tests only. OpenMPI is installed from
# Debian's packages first when missing (benches/install-openmpi.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMPI for the mpirun launcher tests (cli/tests/launch_cli.rs), which then must not skip.
benches/install-openmpi.sh
NCCLSIM_REQUIRE_MPI=1 cargo test --workspace
if [ "${NCCLSIM_SKIP_TORCH:-0}" = 1 ]; then
    echo "test.sh: NCCLSIM_SKIP_TORCH=1: PyTorch suite skipped"
    exit 0
fi
scripts/torch-e2e.sh
