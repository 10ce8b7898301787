#!/usr/bin/env bash
# Two machines joining one job, each through its own `ncclsim run`: two network namespaces
# joined by a veth pair (10.231.250.1 and .2) stand for the machines, each runs
# `ncclsim run --env NCCLSIM_NODE=K -- torchrun --nnodes 2 --node_rank K --rdzv-backend c10d
# --rdzv-endpoint 10.231.250.1:PORT` with 2 workers, and every worker's all-reduce is checked
# against the sum computed on the CPU (scripts/torch/pip_check.py). Machine 0 hosts the
# rendezvous store (`--rdzv-conf is_host=true`: torchrun cannot tell from the host name, which
# both namespaces share) and each agent names its own address (`--local-addr`). Each machine has its own
# NCCL_HOSTID (the namespaces share the kernel's host name and boot id), so the runtime moves
# data between them over TCP on the veth, as between real hosts.
#
# Usage: scripts/two-host-check.sh [PYTHON_VENV]
#   PYTHON_VENV  a venv with torch (default target/torch-venv); NCCLSIM the ncclsim command
#                (default: `ncclsim` on PATH, else target/release/ncclsim)
# Needs root (`ip netns`). Deletes the namespaces at exit.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$repo/target/torch-venv}"
ncclsim="${NCCLSIM:-$(command -v ncclsim || echo "$repo/target/release/ncclsim")}"
ns=(ncclsim-m0-$$ ncclsim-m1-$$)
veth=(ncm0$$ ncm1$$)
work="$(mktemp -d)"
cleanup() {
    for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
ip netns add "${ns[0]}"
ip netns add "${ns[1]}"
ip link add "${veth[0]}" netns "${ns[0]}" type veth peer name "${veth[1]}" netns "${ns[1]}"
for k in 0 1; do
    ip -n "${ns[$k]}" addr add "10.231.250.$((k + 1))/24" dev "${veth[$k]}"
    ip -n "${ns[$k]}" link set "${veth[$k]}" up
    ip -n "${ns[$k]}" link set lo up
done
port=29517
start=$(date +%s)
pids=()
for k in 0 1; do
    ip netns exec "${ns[$k]}" env PATH="$venv/bin:$PATH" "$ncclsim" run \
        --topo "$repo/topologies/dgx-a100.xml" --env NCCLSIM_NODE=$k \
        --env NCCL_HOSTID=machine-$k --env NCCL_SOCKET_IFNAME=ncm --env NCCL_DEBUG=INFO \
        --env NCCLSIM_TIMEOUT=300 \
        -- torchrun --nnodes 2 --node_rank $k --nproc_per_node 2 --rdzv-backend c10d \
        --rdzv-endpoint 10.231.250.1:$port --local-addr 10.231.250.$((k + 1)) \
        --rdzv-conf is_host=$([ $k = 0 ] && echo true || echo false) \
        "$repo/scripts/torch/pip_check.py" > "$work/m$k.log" 2>&1 &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$work/m0.log" "$work/m1.log" | grep -E '^ok rank|nRanks 4' | sort || true
ok=$(cat "$work/m0.log" "$work/m1.log" | grep -c '^ok rank .* of 4 .* sum 10$' || true)
nodes=$(cat "$work/m0.log" "$work/m1.log" | grep -c 'nRanks 4 nNodes 2' || true)
echo "ranks ok: $ok of 4; INFO lines with nRanks 4 nNodes 2: $nodes; $(( $(date +%s) - start ))s"
if [ "$rc" -ne 0 ] || [ "$ok" -ne 4 ] || [ "$nodes" -lt 4 ]; then
    tail -n 30 "$work/m0.log" "$work/m1.log"
    exit 1
fi
