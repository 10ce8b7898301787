#!/usr/bin/env bash
# Installs OpenMPI from Debian's packages: the anchor of the runtime benchmark
# (cargo bench -p benches --bench runtime). Needs root (or sudo).
set -euo pipefail
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    echo "OpenMPI already installed: $(mpirun --version | head -1)"
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -q
$SUDO apt-get install -y -q openmpi-bin libopenmpi-dev
