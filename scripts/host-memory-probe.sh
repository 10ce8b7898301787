#!/usr/bin/env bash
# Device memory the host cannot back, under a real memory limit: a process in a memory cgroup
# of LIMIT MiB (cgroup v2, else v1; needs root) allocates and writes TOUCH MiB of device memory
# through ncclsim's libcudart.so.12 (Python's ctypes, no torch). Without commitment the first
# touch past the limit brings the OOM killer (exit 137); with it, the write fails with
# cudaErrorMemoryAllocation (2) and the process carries on. Then the same through torch's
# compute layer (`NCCLSIM_COMPUTE=run`), when a torch venv is given: torch.ones of TOUCH MiB
# must raise torch.OutOfMemoryError, while torch.empty of the same size (never touched) works.
#
# Usage: scripts/host-memory-probe.sh [LIMIT_MIB [TOUCH_MIB]]   (defaults 512 and 1024)
#   NCCLSIM_LIB_DIR      the built libraries (default target/release)
#   NCCLSIM_TORCH_VENV   a venv with torch for the second part (default target/torch-venv;
#                        skipped, saying so, when missing)
# Not run in CI: it needs root and a writable cgroup file system.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
limit_mib="${1:-512}"
touch_mib="${2:-1024}"
lib="${NCCLSIM_LIB_DIR:-$repo/target/release}"
venv="${NCCLSIM_TORCH_VENV:-$repo/target/torch-venv}"
[ -e "$lib/libcudart12.so" ] || { echo "no $lib/libcudart12.so: cargo build --release" >&2; exit 2; }

# A cgroup of our own, removed at exit.
name="ncclsim-host-memory-$$"
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cg="/sys/fs/cgroup/$name"
    mkdir "$cg"
    echo $((limit_mib << 20)) > "$cg/memory.max"
    echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
elif [ -d /sys/fs/cgroup/memory ]; then
    cg="/sys/fs/cgroup/memory/$name"
    mkdir "$cg"
    echo $((limit_mib << 20)) > "$cg/memory.limit_in_bytes"
else
    echo "no memory cgroup controller to use" >&2
    exit 2
fi
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
echo "cgroup $cg: $limit_mib MiB; touching $touch_mib MiB of device memory"

# Runs "$@" inside the cgroup; prints its output and exit status.
in_cgroup() {
    local rc=0
    bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@" || rc=$?
    echo "exit status $rc"
}

probe='import ctypes, sys
rt = ctypes.CDLL(sys.argv[1])
n = int(sys.argv[2]) << 20
p = ctypes.c_void_p()
print("cudaMalloc", rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)), flush=True)
print("cudaMemset", rt.cudaMemset(p, 1, ctypes.c_size_t(n)), flush=True)
print("cudaMemset of 64 MiB", rt.cudaMemset(p, 2, ctypes.c_size_t(64 << 20)), flush=True)
print("cudaFree", rt.cudaFree(p), flush=True)'
echo "== cudaMalloc + cudaMemset through libcudart.so.12"
in_cgroup env -u NCCLSIM_HOST_MEMORY python3 -c "$probe" "$lib/libcudart12.so" "$touch_mib"

if [ ! -x "$venv/bin/python" ]; then
    echo "== torch: skipped (no venv at $venv)"
    exit 0
fi
torch_probe='import sys, torch
n = int(sys.argv[1]) << 20
e = torch.empty(n, dtype=torch.uint8, device="cuda")
print("torch.empty: ok", flush=True)
del e
try:
    torch.ones(n, dtype=torch.uint8, device="cuda")
    print("torch.ones: no error", flush=True)
except torch.OutOfMemoryError as err:
    print("torch.ones: torch.OutOfMemoryError:", err, flush=True)
x = torch.ones(64 << 20, dtype=torch.uint8, device="cuda")
print("torch.ones of 64 MiB after it: last bytes", x[-4:].tolist(), flush=True)'
echo "== torch.empty and torch.ones under ncclsim run (--compute run)"
in_cgroup env -u NCCLSIM_HOST_MEMORY PATH="$venv/bin:$PATH" "$lib/ncclsim" run \
    --lib-path "$venv/ncclsim-stubs" -- python -c "$torch_probe" "$touch_mib"
