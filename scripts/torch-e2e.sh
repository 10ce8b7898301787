#!/usr/bin/env bash
# End-to-end check of unmodified torch.distributed (NCCL backend, torchrun) on ncclsim's
# libraries: scripts/torch/collectives.py on 1 node x 2 processes, then on 2 simulated nodes x 2
# processes (two torchrun launchers, NCCLSIM_NODE=0 and 1, one rendezvous). Every collective's
# result is checked on the CPU by every rank; the 2-node run must also report nNodes 2. Then
# DDP and FSDP2 steps (scripts/torch/ddp_fsdp.py) must complete and trace their all-reduces,
# all-gathers and reduce-scatters. Last, the 1-node run again with NCCLSIM_TEST_PERTURB=1 (the
# runtime flips a bit of rank 1's results) must fail, proving the checks check.
#
# Usage: scripts/torch-e2e.sh        (after scripts/torch-venv.sh; same NCCLSIM_TORCH_VENV)
# NCCLSIM_E2E_PER_NODE=8 makes the 2-node run 2 x 8 processes (16 ranks: world, 2 TP and 8 DP
# communicators; about 30 s and 3 GB on 2 cores) instead of 2 x 2.
# Logs go to $NCCLSIM_E2E_LOGS (default a new temporary directory), kept on failure.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
run="$repo/scripts/torch-run.sh"
script="$repo/scripts/torch/collectives.py"
logs="${NCCLSIM_E2E_LOGS:-$(mktemp -d -t ncclsim-torch-e2e.XXXXXX)}"
mkdir -p "$logs"
fail() { echo "torch-e2e: FAIL: $*; logs in $logs" >&2; exit 1; }
port() { echo $((20000 + RANDOM % 20000)); }
# Ranks that passed (torchrun's workers share its stdout, so lines may run together).
passes() { grep -oh "rank [0-9]*: PASS" "$@" | sort -u | wc -l; }

echo "== 1 node x 2 processes"
start=$SECONDS
"$run" torchrun --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$(port)" "$script" \
    > "$logs/one-node.log" 2>&1 || fail "1-node run exited $?"
grep "^ok \|PASS" "$logs/one-node.log"
[ "$(passes "$logs/one-node.log")" = 2 ] || fail "1-node run: not every rank passed"
echo "($((SECONDS - start))s)"

per_node="${NCCLSIM_E2E_PER_NODE:-2}"
echo "== 2 simulated nodes x $per_node processes"
start=$SECONDS
p=$(port)
pids=()
for node in 0 1; do
    NCCLSIM_NODE=$node NCCL_DEBUG=INFO "$run" torchrun --nnodes 2 --node_rank $node \
        --nproc_per_node "$per_node" --master_addr 127.0.0.1 --master_port "$p" "$script" \
        > "$logs/node$node.log" 2>&1 &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "2-node run: a launcher exited non-zero"; done
grep -h "^ok \|PASS" "$logs/node0.log" "$logs/node1.log"
[ "$(passes "$logs/node0.log" "$logs/node1.log")" = $((2 * per_node)) ] || fail "2-node run: not every rank passed"
grep -q "nRanks $((2 * per_node)) nNodes 2" "$logs/node0.log" || fail "2-node run: the world communicator is not on 2 nodes"
grep -q "ncclCommSplit comm" "$logs/node0.log" || fail "2-node run: new_group did not split"
echo "($((SECONDS - start))s)"
echo "== DDP and FSDP2, 3 steps each, 1 node x 2 processes (cuBLAS stubs that do nothing)"
start=$SECONDS
rm -rf "$logs/trace"
NCCLSIM_STUBS=noop NCCLSIM_TRACE="$logs/trace" "$run" torchrun --nproc_per_node 2 \
    --master_addr 127.0.0.1 --master_port "$(port)" "$repo/scripts/torch/ddp_fsdp.py" \
    > "$logs/ddp-fsdp.log" 2>&1 || fail "DDP/FSDP2 run exited $?"
grep "step .* done" "$logs/ddp-fsdp.log"
[ "$(passes "$logs/ddp-fsdp.log")" = 2 ] || fail "DDP/FSDP2 run: not every rank finished"
for op in AllReduce AllGather ReduceScatter; do
    n=$(cat "$logs"/trace/*.json | grep -o "\"name\":\"$op\"" | wc -l)
    echo "traced $op calls (both ranks): $n"
    [ "$n" -gt 0 ] || fail "DDP/FSDP2 run: no $op in the traces"
done
echo "($((SECONDS - start))s)"

echo "== 1 node x 2 processes, rank 1's results perturbed (NCCLSIM_TEST_PERTURB=1): must fail"
if NCCLSIM_TEST_PERTURB=1 "$run" torchrun --nproc_per_node 2 --master_addr 127.0.0.1 \
    --master_port "$(port)" "$script" > "$logs/perturbed.log" 2>&1; then
    fail "the perturbed run passed: the checks do not check"
fi
grep -m1 "rank 1: FAIL" "$logs/perturbed.log" || fail "the perturbed run failed, but not on rank 1's check"
echo "torch-e2e: PASS (logs in $logs)"
