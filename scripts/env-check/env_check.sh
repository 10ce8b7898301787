#!/usr/bin/env bash
# A multi-GPU environment check as training test suites run it before anything else: the driver
# and GPUs through nvidia-smi (the table, -L, topo -m, nvlink --status, the driver version),
# pynvml, CUDA and cuDNN versions through torch, a torch + NCCL all_reduce on every GPU, and a
# peer-copy bandwidth matrix. Each line prints PASS or FAIL with what it saw; the exit status is
# the number of failed lines.
#
# Usage (a Python with torch and nvidia-ml-py on PATH as `python`, torchrun beside it):
#   ncclsim run --topo topologies/dgx-a100.xml --lib-path VENV/ncclsim-stubs \
#       -- scripts/env-check/env_check.sh
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python}"
failed=0

# check NAME COMMAND...: runs COMMAND, prints PASS/FAIL and the first lines of its output.
check() {
    local name=$1 out rc
    shift
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then echo "PASS  $name"; else echo "FAIL  $name (exit $rc)"; failed=$((failed + 1)); fi
    printf '%s\n' "$out" | grep -v '^W[0-9]* \|^\*\*\*\*\|OMP_NUM_THREADS' | head -n "${SHOW_LINES:-14}" | sed 's/^/      /'
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
check "nvidia-smi" sh -c 'nvidia-smi | grep -q "Driver Version:" && nvidia-smi'
check "nvidia-smi -L: $gpus GPUs" sh -c "[ $gpus -gt 0 ] && nvidia-smi -L"
check "nvidia-smi topo -m" sh -c 'nvidia-smi topo -m | grep -q "^GPU0" && nvidia-smi topo -m'
check "nvidia-smi nvlink --status" sh -c \
    'nvidia-smi nvlink --status | grep -q "Link 0: " && nvidia-smi nvlink --status -i 0'
check "driver version" sh -c \
    'v=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1); echo "$v"; echo "$v" | grep -Eq "^[0-9]+\.[0-9]+"'
check "pynvml" "$python" "$here/env_check.py" pynvml
check "CUDA and cuDNN through torch" "$python" "$here/env_check.py" versions
check "torch + NCCL all_reduce on $gpus GPUs" \
    torchrun --nproc_per_node "$gpus" "$here/env_check.py" allreduce
check "peer-copy bandwidth matrix" "$python" "$here/env_check.py" peer
if [ $failed -eq 0 ]; then echo "env-check: all passed"; else echo "env-check: $failed failed"; fi
exit $failed
