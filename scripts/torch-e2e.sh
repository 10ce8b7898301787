#!/usr/bin/env bash
# End-to-end suite: unmodified torch.distributed (NCCL backend, torchrun) on ncclsim's libraries
# through `ncclsim run`, as 2 simulated DGX A100 nodes x 8 processes (16 ranks: the world, TP
# groups {0-7} {8-15} and DP groups {0,8} {1,9} ...), after the Python package's unit tests:
#   U. python/tests (pytest, installed into the venv if missing): the pure parts of the Python
#      package against plain CPU torch, with the venv's torch on stubs of every NVIDIA library,
#      ncclsim's own included (`ncclsim.stubs --all`): no GPU and none of ncclsim's libraries.
#   0. NVIDIA's CUDA runtime wheel installed into the venv (torch's RPATH finds it first):
#      `ncclsim run`'s preloaded libraries must still be the ones torch uses.
#   1. scripts/torch/collectives.py: every collective torch offers, in several dtypes, on the
#      world and on the TP and DP groups, every result checked on the CPU by every rank; the
#      world's INFO lines (NCCL_DEBUG=INFO) must equal `ncclsim plan`'s.
#   1b. collectives.py on 2 simulated GB200 NVL72 trays x 4 processes: the world is one
#      multi-node NVLink node (`nNodes 1 localRanks 8 ... MNNVL 1`, INFO lines equal to
#      `ncclsim plan`'s), and two nodes with NCCL_MNNVL_ENABLE=0; pynvml reads every GPU's
#      fabric info (one cluster UUID for both trays, clique 0x7ffe, state completed).
#   2f. scripts/torch/fold.py all-real (16 and 32 ranks on 2 and 4 nodes) and with `--fold dp`
#      (8 real ranks):
#      data-parallel training over the world, a (dp, tp) DeviceMesh job with a tensor-
#      parallel MLP, DDP, FSDP2 as HSDP on that mesh, and FSDP2 x TP=4 (DTensor column/row
#      parallel layers) on a (dp, shard, tp) mesh, 3 AdamW steps each, data uniform across
#      replicas, then a batch of sends and receives over the nodes (virtual peers folded);
#      every real rank's parameters and losses bit-identical between the runs, and every step's
#      time on the GPU and the peak memory equal (check_fold.py).
#   2g. scripts/torch/llama_fsdp.py at toy size on 128 simulated H100 (`--fold dp --compute
#      time`, 8 processes, each allowed 1 GiB of host memory): FSDP2, then FSDP x TP=8, 2 steps.
#   2. scripts/torch/ddp_fsdp.py: DDP over the world and FSDP2 over the DP groups, 3 steps each
#      (computed on the simulated GPUs); their traces must show all-reduces,
#      all-gathers and reduce-scatters; then `ncclsim trace summarize` and the same trace
#      repriced on DGX H100 nodes.
#   3. scripts/torch/bench.py: all_reduce, broadcast, all_gather, reduce_scatter at 1-64 MB on
#      the world and a TP group timed with torch.cuda.Event must equal `ncclsim predict`; a
#      pipeline send across nodes and inside a node, and a peer copy, in the topology's order.
#   3b. scripts/torch/host_clock.py under `--clock virtual` (1 PCIe node x 4): all_reduce timed
#      with time.perf_counter around torch.cuda.synchronize must equal `ncclsim predict`;
#      torch's NCCL watchdog (5 s timeout) must not fire over a real 6 s sleep with work
#      outstanding, and its timed waits must not spin.
#   4. scripts/torch/memory.py with the default allocator and with expandable segments:
#      torch.OutOfMemoryError past the device, copies that read back, a tensor shared with
#      another process; then collectives.py on expandable segments (2 nodes x 2).
#   4c. scripts/torch/cublas.py with `--compute off`: torch's own cuBLAS/cuBLASLt calls (mm,
#      addmm, bmm, baddbmm, linear in four dtypes, mv) on ncclsim's libcublas and libcublasLt
#      (fake-cuda/cublas, preloaded by `ncclsim run`, so they win over the stubs), each result
#      checked against the CPU.
#   5. collectives.py again on 1 node x 2 with NCCLSIM_TEST_PERTURB=1 (the runtime flips a bit
#      of rank 1's results): must fail, proving the checks check. The switch exists only in a
#      libnccl.so.2 built with nccl-shim's `fault-injection` feature, built for this stage in
#      target/fault-injection and run beside the other release libraries.
#   5b. ... and compute.py with NCCLSIM_TEST_COMPUTE_PERTURB=1 (wrong matrix products) must fail
#      too: the Python package obeys that switch only beside such a libnccl.so.2.
#      scripts/torch/kernel_speed.py: square matmuls and a 1 GiB add_ under `--compute time`
#      on DGX A100, DGX H100 and 8x RTX 4090 read published matmul rates (checks.csv) and 80% of
#      the datasheet bandwidth; 1,000 tiny ops under `--clock virtual` take the host's 10 us each;
#      scripts/torch/step_bounds.py (GPT-2 small, DDP on 2 H100, `--clock virtual`) at batch 1
#      and 16: `trace summarize --steps` finds launch-bound idle time at batch 1, a quarter of
#      that share or less at 16, where kernels bound the step;
#      scripts/torch/step_marks.py: `trace summarize --steps` splits a DDP job with two
#      optimizers at its 5 optimizer steps, and the same job under torch.profiler at its 5
#      `prof.step()` calls, the final barrier outside;
#      scripts/torch/compiled_step.py (2 transformer blocks on an H100, `--compute time`): the
#      step under torch.compile (FlexAttention, layer norm and GELU written as pointwise ops),
#      priced as inductor's kernels, within 10% of the same step with hand-fused kernels in eager
#      mode, and faster than the same compiled graphs priced op by op.
#   5c. scripts/torch/cuda_graphs.py on 1 node x 2: a training step with its all_reduce captured
#      with torch.cuda.graph and replayed 3 times ends with the eager run's and the CPU's
#      parameters and, on the virtual clock, is faster than the eager step, which pays the
#      host's launch of each op; make_graphed_callables likewise; scripts/torch/
#      compiled_graph.py: a torch.compile'd FlexAttention captured and replayed computes what
#      the compiled call computes, and a buffer freed inside the capture (FSDP's pattern) is
#      read at replay as the capture left it.
#   6. NCCL's own Python bindings (nccl4py, in a venv of their own): an all-reduce of device
#      buffers made by host copies, checked, on 4 processes.
#   7. monitors: scripts/env-check/env_check.sh (nvidia-smi, -L, topo -m, nvlink --status, the
#      driver version, pynvml, CUDA/cuDNN versions, a torch + NCCL all_reduce on 8 GPUs, a
#      peer-copy matrix) must pass every line; then beside a 2-process training job, in other
#      processes of the same run: nvidia-smi must report each rank's GPU busy and using
#      torch.cuda.memory_reserved plus one context (scripts/env-check/train_probe.py), and the
#      monitor (scripts/env-check/monitor.sh), `nvitop --once` and `gpustat` show all 8 GPUs.
#   8. PyTorch's own distributed tests (scripts/torch/pytorch_tests.py): the test class the
#      torch wheel ships and PyTorch's CI runs for the NCCL backend (DistributedTest's 285 tests:
#      collectives, subgroups, DDP, SyncBatchNorm, profiling, monitored barriers), 2 processes
#      per test on one DGX A100; every test passes, is skipped by its own decorators, or fails
#      as the script's EXPECTED list says with the reason; the tests listed as torch's own
#      (they hold only for torch's previous NCCL backend) must pass with TORCH_DIST_USE_NCCL2=0;
#      test_nccl_high_priority_stream passes with the virtual clock 20 min behind the real one.
#
# Usage: scripts/torch-e2e.sh
#   NCCLSIM_TORCH_VENV   the venv (default target/torch-venv in the repository); made with
#                        scripts/torch-venv.sh when missing (downloads torch once, ~540 MB)
#   NCCLSIM_E2E_PER_NODE processes per simulated node (default 8)
#   NCCLSIM_E2E_LOGS     where logs, traces, dumps and reports go (default target/torch-e2e)
# Prints each stage's wall time and the machine's peak memory in use during the stage.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
venv="${NCCLSIM_TORCH_VENV:-$repo/target/torch-venv}"
per_node="${NCCLSIM_E2E_PER_NODE:-8}"
logs="${NCCLSIM_E2E_LOGS:-$repo/target/torch-e2e}"
topo=topologies/dgx-a100.xml
exec 3>&1  # stage timings go to the terminal even when a stage's output goes to its log
fail() { echo "torch-e2e: FAIL: $*; logs in $logs" >&2; exit 1; }

[ -d "$venv/ncclsim-stubs" ] || scripts/torch-venv.sh "$venv"
torch_lib=$("$venv/bin/python" -c 'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "lib"))')

echo "== U. unit tests of the Python package (python/tests), torch without GPU libraries"
"$venv/bin/python" -c "import pytest" 2>/dev/null \
    || "$venv/bin/python" -m pip --disable-pip-version-check -q install pytest
unit_stubs="$repo/target/torch-unit-stubs"
rm -rf "$unit_stubs"
"$venv/bin/python" scripts/torch-stubs.py --all "$torch_lib" "$unit_stubs" > /dev/null
LD_LIBRARY_PATH="$unit_stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests \
    || { echo "torch-e2e: FAIL: the Python package's unit tests" >&2; exit 1; }

cargo build --release -q
ncclsim="$repo/target/release/ncclsim"
# Stage 5's libnccl.so.2, with the test-only switches (in a target directory of its own, so the
# release libraries above stay without them).
faults_target="$repo/target/fault-injection"
CARGO_TARGET_DIR="$faults_target" cargo build --release -q -p nccl-shim --features fault-injection
rm -rf "$logs"
faults_libs="$logs/fault-injection-libs"
mkdir -p "$logs/debug" "$logs/tmp" "$faults_libs"
# Every other release library beside it, whatever `ncclsim run` preloads.
for lib in "$repo"/target/release/lib*.so; do
    [ "$(basename "$lib")" = libnccl.so ] || ln -s "$lib" "$faults_libs/$(basename "$lib")"
done
ln -s "$faults_target/release/libnccl.so" "$faults_libs/libnccl.so"
# torchrun leaves a torchelastic_* directory in the temporary directory per run: keep them with
# the logs, not in /tmp.
export TMPDIR="$logs/tmp"
export PATH="$venv/bin:$PATH"
# Every stage runs on `ncclsim run`'s default host clock (virtual) unless it says why not.
# The venv's torch was installed without NVIDIA's wheels: its stub libraries stand in for them.
run=("$ncclsim" run --topo "$topo" --nodes 2 --lib-path "$venv/ncclsim-stubs")
world=$((2 * per_node))

# Peak memory in use on the machine while a command runs (MemTotal - MemAvailable, sampled).
measured() {
    local name=$1; shift
    local base start peak=0 now rc=0
    base=$(awk '/MemTotal/{t=$2} /MemAvailable/{a=$2} END{print t-a}' /proc/meminfo)
    start=$SECONDS
    "$@" & local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        now=$(awk '/MemTotal/{t=$2} /MemAvailable/{a=$2} END{print t-a}' /proc/meminfo)
        [ "$now" -gt "$peak" ] && peak=$now
        sleep 0.5
    done
    wait "$pid" || rc=$?
    echo "[$name: $((SECONDS - start)) s wall, peak memory in use +$(((peak - base) / 1024)) MiB]" >&3
    return $rc
}
passes() { grep -oh "rank [0-9]*: PASS" "$@" | sort -u | wc -l; }

echo "== 0. NVIDIA's CUDA runtime wheel beside torch (found first through torch's RPATH): ours win"
# torch's CUDA major: the libcudart.so.N its CUDA library links (importing torch needs one).
major=$(readelf -d "$torch_lib/libc10_cuda.so" | grep -o 'libcudart\.so\.[0-9]*' | head -1 | cut -d. -f3)
if [ "$major" -ge 13 ]; then wheel="nvidia-cuda-runtime>=$major,<$((major + 1))"; else wheel="nvidia-cuda-runtime-cu$major"; fi
python -m pip --disable-pip-version-check -q install --no-deps "$wheel"
probe='import torch
ok = torch.cuda.is_available()
ours = [l.split()[-1] for l in open("/proc/self/maps") if "libcudart.so" in l and "nvidia" in l]
print("cuda available:", ok, "| NVIDIA libcudart mapped:", sorted(set(ours)) or "no")
x = torch.arange(8.0)
assert ok and not ours and torch.equal(x.to("cuda").cpu(), x)'
"$ncclsim" run --lib-path "$venv/ncclsim-stubs" -- python -c "$probe" 2>&1 | grep -v Warn \
    || fail "with NVIDIA's runtime wheel installed, torch did not run on ncclsim's libraries"

echo "== 1. collectives, 2 simulated nodes x $per_node processes"
measured collectives "${run[@]}" --trace "$logs/trace-collectives" \
    --env NCCL_DEBUG=INFO --env "NCCL_DEBUG_FILE=$logs/debug/%h.%p.log" \
    --env "NCCL_GRAPH_DUMP_FILE=$logs/graphs.xml" \
    -- torchrun --nproc_per_node "$per_node" scripts/torch/collectives.py \
    > "$logs/collectives.log" 2>&1 || fail "collectives run exited $?"
grep "^ok " "$logs/collectives.log" | sort -u
[ "$(passes "$logs/collectives.log")" = "$world" ] || fail "collectives: not every rank passed"
rank0=$(grep -l " rank 0 nRanks $world nNodes 2 " "$logs"/debug/*.log | head -1)
[ -n "$rank0" ] || fail "no debug file with the world's rank 0 on 2 nodes"
grep -q "ncclCommSplit comm" "$rank0" || fail "new_group did not split the world"
python3 scripts/torch/check_outputs.py info "$ncclsim" "$topo" 2 "$rank0"
[ -s "$logs/graphs.xml" ] || fail "no NCCL_GRAPH_DUMP_FILE"

echo "== 1b. collectives on 2 simulated GB200 NVL72 trays x 4 processes: one NVLink domain"
tray=topologies/gb200-nvl72-tray.xml
for mnnvl in auto 0; do
    d="$logs/debug-mnnvl-$mnnvl"
    mkdir -p "$d"
    extra=(--env NCCL_DEBUG=INFO --env "NCCL_DEBUG_FILE=$d/%h.%p.log")
    [ "$mnnvl" = auto ] || extra+=(--env "NCCL_MNNVL_ENABLE=$mnnvl")
    measured "mnnvl-$mnnvl" "$ncclsim" run --topo "$tray" --nodes 2 \
        --lib-path "$venv/ncclsim-stubs" "${extra[@]}" \
        -- torchrun --nproc_per_node 4 scripts/torch/collectives.py \
        > "$logs/mnnvl-$mnnvl.log" 2>&1 || fail "collectives on GB200 trays (MNNVL $mnnvl) exited $?"
    [ "$(passes "$logs/mnnvl-$mnnvl.log")" = 8 ] || fail "GB200 trays (MNNVL $mnnvl): not every rank passed"
    if [ "$mnnvl" = auto ]; then line=" rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 1"
    else line=" rank 0 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 0"; fi
    rank0=$(grep -l "$line" "$d"/*.log | head -1)
    [ -n "$rank0" ] || fail "GB200 trays (MNNVL $mnnvl): no rank 0 with '$line'"
    echo "MNNVL $mnnvl:$line"
    if [ "$mnnvl" = auto ]; then
        python3 scripts/torch/check_outputs.py info "$ncclsim" "$tray" 2 "$rank0"
    else
        NCCL_MNNVL_ENABLE=0 python3 scripts/torch/check_outputs.py info "$ncclsim" "$tray" 2 "$rank0"
    fi
done
# Both nodes write to one log: each process writes its lines in one write(2), so they do not
# interleave (an unbuffered print writes each field on its own).
fabric='import os, pynvml
pynvml.nvmlInit()
lines = []
for i in range(pynvml.nvmlDeviceGetCount()):
    f = pynvml.c_nvmlGpuFabricInfoV_t()
    f.version = pynvml.nvmlGpuFabricInfo_v2
    pynvml.nvmlDeviceGetGpuFabricInfoV(pynvml.nvmlDeviceGetHandleByIndex(i), pynvml.byref(f))
    lines.append(f"fabric {bytes(f.clusterUuid).hex()} {hex(f.cliqueId)} {f.state} {f.status} {hex(f.healthMask)}\n")
os.write(1, "".join(lines).encode())'
"$ncclsim" run --topo "$tray" --nodes 2 --lib-path "$venv/ncclsim-stubs" -- python -c "$fabric" \
    > "$logs/mnnvl-fabric.log" 2>&1 || fail "pynvml's fabric info on GB200 trays"
[ "$(grep -c "^fabric " "$logs/mnnvl-fabric.log")" = 8 ] || fail "fabric info: not 8 GPUs"
[ "$(grep "^fabric " "$logs/mnnvl-fabric.log" | sort -u | wc -l)" = 1 ] || fail "fabric info: trays differ"
grep -q "^fabric [0-9a-f]* 0x7ffe 3 0 0xaa$" "$logs/mnnvl-fabric.log" || fail "fabric info: $(head -1 "$logs/mnnvl-fabric.log")"
grep "^fabric " "$logs/mnnvl-fabric.log" | sort -u | sed 's/^/pynvml: 8 GPUs, /'

echo "== 2f. A folded job: the same training all-real and --fold dp (8 ranks), on 2 and 4 nodes"
for nodes in 2 4; do
    job=$((nodes * per_node))
    all="$logs/fold-all-$nodes" folded="$logs/fold-folded-$nodes"
    rm -rf "$all" "$folded"
    mkdir -p "$all" "$folded"
    measured "fold-all-$job" "$ncclsim" run --topo "$topo" --nodes "$nodes" \
        --lib-path "$venv/ncclsim-stubs" \
        -- torchrun --nproc_per_node "$per_node" scripts/torch/fold.py "$all" \
        > "$all.log" 2>&1 || fail "all-real run of fold.py ($job ranks) exited $?"
    measured "fold-folded-$job" "$ncclsim" run --topo "$topo" --nodes "$nodes" --fold dp \
        --lib-path "$venv/ncclsim-stubs" \
        -- torchrun --nproc_per_node "$per_node" scripts/torch/fold.py "$folded" \
        > "$folded.log" 2>&1 || fail "folded run of fold.py ($job ranks) exited $?"
    LD_LIBRARY_PATH="$unit_stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$venv/bin/python" scripts/torch/check_fold.py "$all" "$folded" \
        "$per_node" "$job" || fail "the folded run of $job ranks differs from the all-real run"
done

echo "== 2g. Folded at scale under --compute time: a Llama-shaped FSDP2 job on 128 simulated GPUs, and FSDP x TP=8"
for tp in 1 8; do
    measured "fold-llama-tp$tp" "$ncclsim" run --topo topologies/dgx-h100.xml --nodes 16 --fold dp \
        --compute time --env NCCLSIM_HOST_MEMORY=1G --lib-path "$venv/ncclsim-stubs" \
        -- torchrun --nproc_per_node 8 scripts/torch/llama_fsdp.py tiny 512 2 2 "$tp" \
        > "$logs/fold-llama-tp$tp.log" 2>&1 || { grep -v "^W" "$logs/fold-llama-tp$tp.log" | tail -20; fail "folded llama (tp $tp) exited $?"; }
    grep "^llama:" "$logs/fold-llama-tp$tp.log" | grep -q "on 128 GPUs (tp $tp).*PASS" \
        || fail "folded llama (tp $tp): no PASS on 128 GPUs"
    grep "^llama:" "$logs/fold-llama-tp$tp.log"
done

echo "== 2. DDP over the world, FSDP2 over the DP groups, 3 steps each"
measured ddp-fsdp "$ncclsim" run --topo "$topo" --nodes 2 --lib-path "$venv/ncclsim-stubs" \
    --trace "$logs/trace-train" \
    -- torchrun --nproc_per_node "$per_node" scripts/torch/ddp_fsdp.py \
    > "$logs/ddp-fsdp.log" 2>&1 || fail "DDP/FSDP2 run exited $?"
grep "step .* done" "$logs/ddp-fsdp.log"
[ "$(passes "$logs/ddp-fsdp.log")" = "$world" ] || fail "DDP/FSDP2: not every rank finished"
for op in AllReduce AllGather ReduceScatter; do
    n=$(cat "$logs"/trace-train/*.json | grep -o "\"name\":\"$op\"" | wc -l)
    echo "traced $op calls (all ranks): $n"
    [ "$n" -gt 0 ] || fail "DDP/FSDP2: no $op in the traces"
done
"$ncclsim" trace summarize "$logs/trace-train" | tee "$logs/summary.txt"
"$ncclsim" trace reprice "$logs/trace-train" --topo topologies/dgx-h100.xml --nodes 2 \
    | tee "$logs/reprice-h100.txt"

echo "== 3. communication benchmarks timed with torch.cuda.Event vs ncclsim predict"
measured bench "${run[@]}" --trace "$logs/trace-bench" \
    -- torchrun --nproc_per_node "$per_node" scripts/torch/bench.py \
    > "$logs/bench.log" 2>&1 || fail "bench run exited $?"
[ "$(passes "$logs/bench.log")" = "$world" ] || fail "bench: not every rank finished"
python3 scripts/torch/check_outputs.py bench "$ncclsim" "$topo" 2 "$logs/bench.log"
# Repriced on the hardware it ran on, every call (pipeline sends included) keeps its time.
"$ncclsim" trace reprice "$logs/trace-bench" --topo "$topo" > "$logs/reprice-same.txt"
awk '$NF ~ /^[0-9.]+$/ && $NF != "1.000" { bad = 1; print "changed: " $0 } END { exit bad }' \
    "$logs/reprice-same.txt" || fail "repricing on the same hardware changed a call's time"
grep "SendRecv\|^total" "$logs/reprice-same.txt"

echo "== 3b. all_reduce timed with time.perf_counter under --clock virtual vs ncclsim predict"
measured host-clock "$ncclsim" run --topo topologies/pcie-4xa100.xml --clock virtual \
    --lib-path "$venv/ncclsim-stubs" -- torchrun --nproc_per_node 4 scripts/torch/host_clock.py \
    > "$logs/host-clock.log" 2>&1 || { grep -v "^W" "$logs/host-clock.log" | tail -20; fail "host-clock run exited $?"; }
grep "slept" "$logs/host-clock.log"
[ "$(passes "$logs/host-clock.log")" = 4 ] || fail "host-clock: not every rank passed"
python3 scripts/torch/check_outputs.py host-clock "$ncclsim" topologies/pcie-4xa100.xml 1 "$logs/host-clock.log"

echo "== 4. memory: torch.OutOfMemoryError past the 40 GB device, copies, sharing (both allocators)"
for conf in "" "expandable_segments:True"; do
    PYTORCH_CUDA_ALLOC_CONF="$conf" "$ncclsim" run --topo "$topo" --lib-path "$venv/ncclsim-stubs" \
        -- python scripts/torch/memory.py > "$logs/memory${conf:+-expandable}.log" 2>&1 \
        || fail "memory checks (PYTORCH_CUDA_ALLOC_CONF=$conf) exited $?"
    grep "memory: PASS" "$logs/memory${conf:+-expandable}.log" | sed "s/^/[${conf:-default allocator}] /"
done

echo "== 4b. collectives on expandable segments (memory the driver's cuMem* API maps), 2 nodes x 2"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$ncclsim" run --topo "$topo" --nodes 2 \
    --lib-path "$venv/ncclsim-stubs" -- torchrun --nproc_per_node 2 scripts/torch/collectives.py \
    > "$logs/collectives-expandable.log" 2>&1 || fail "collectives on expandable segments exited $?"
[ "$(passes "$logs/collectives-expandable.log")" = 4 ] || fail "expandable segments: not every rank passed"
grep -h "PASS" "$logs/collectives-expandable.log" | sort

echo "== 4c. torch's cuBLAS and cuBLASLt calls on ncclsim's libraries (--compute off)"
"$ncclsim" run --topo "$topo" --compute off --lib-path "$venv/ncclsim-stubs" \
    -- python scripts/torch/cublas.py > "$logs/cublas.log" 2>&1 || fail "cuBLAS checks exited $?"
grep "cublas: PASS" "$logs/cublas.log" || fail "cuBLAS checks did not pass"

echo "== 5. 1 node x 2 processes, rank 1's results perturbed (NCCLSIM_TEST_PERTURB=1): must fail"
if "$ncclsim" run --topo "$topo" --lib-path "$venv/ncclsim-stubs" --lib-dir "$faults_libs" \
    --env NCCLSIM_TEST_PERTURB=1 -- torchrun --nproc_per_node 2 scripts/torch/collectives.py \
    > "$logs/perturbed.log" 2>&1; then
    fail "the perturbed run passed: the checks do not check"
fi
grep -m1 "rank 1: FAIL" "$logs/perturbed.log" || fail "the perturbed run failed, but not on rank 1's check"

echo "== 5b. training computed on the simulated GPUs equals the CPU's, 2 nodes x 2"
measured compute "${run[@]}" --trace "$logs/trace-compute" -- torchrun --nproc_per_node 2 \
    scripts/torch/compute.py > "$logs/compute.log" 2>&1 || fail "compute checks exited $?"
grep "^ok " "$logs/compute.log" | sort -u
[ "$(passes "$logs/compute.log")" = 4 ] || fail "compute: not every rank passed"
# The kernel list (nsys's GPU trace columns) has the training's GEMMs and its NCCL kernels.
"$ncclsim" trace kernels "$logs/trace-compute" > "$logs/kernels.csv"
head -1 "$logs/kernels.csv"
# Per step: compute, the communication it does not hide, idle time (GPT-2's DDP steps).
"$ncclsim" trace summarize "$logs/trace-compute" --steps > "$logs/steps-compute.txt"
head -4 "$logs/steps-compute.txt"
grep -q "compute_us" "$logs/steps-compute.txt" || fail "summarize --steps: no compute columns"
for k in '"aten::addmm"' '"aten::mm"' ncclDevKernel_AllReduce; do
    n=$(grep -c "$k" "$logs/kernels.csv" || true)
    echo "kernel list: $n rows of $k"
    [ "$n" -gt 0 ] || fail "trace kernels: no $k"
done
# Steps where the program's framework ends them: its optimizer's steps (two optimizers a step,
# and a CPU model's that marks nothing), or torch.profiler's step().
for m in optimizer profiler; do
    "$ncclsim" run --topo "$topo" --trace "$logs/trace-marks-$m" --lib-path "$venv/ncclsim-stubs" \
        -- torchrun --nproc_per_node 2 scripts/torch/step_marks.py "$m" > "$logs/step-marks-$m.log" 2>&1 \
        || { grep -v "^W" "$logs/step-marks-$m.log" | tail -20; fail "step_marks.py $m"; }
    "$ncclsim" trace summarize "$logs/trace-marks-$m" --steps --format json > "$logs/step-marks-$m.json"
    python3 - "$m" "$logs/step-marks-$m.json" <<'PY' || fail "steps by $m marks"
import json, sys
mode, doc = sys.argv[1], json.load(open(sys.argv[2]))
steps = [s for s in doc["steps"] if s["step"] is not None]
outside = [s for s in doc["steps"] if s["step"] is None]
print(f"step marks: {mode}: {len(steps)} steps by {doc['source']}, calls per process "
      f"{[s['calls_per_process'] for s in steps]}, outside {[s['calls_per_process'] for s in outside]}")
assert doc["source"] == {"optimizer": "optimizer", "profiler": "torch_profiler"}[mode], doc["source"]
assert [s["step"] for s in steps] == list(range(5)), steps
assert all(s["calls_per_process"] >= 1 for s in steps), steps
assert [s["calls_per_process"] for s in outside] == [1.0], outside  # the final barrier
PY
done
# The switch acts only beside a libnccl.so.2 with fault injection (stage 5's libraries).
if "${run[@]}" --lib-dir "$faults_libs" --env NCCLSIM_TEST_COMPUTE_PERTURB=1 -- torchrun \
    --nproc_per_node 2 scripts/torch/compute.py > "$logs/compute-perturbed.log" 2>&1; then
    fail "the run with wrong matrix products passed: the compute checks do not check"
fi
grep -m1 "FAIL" "$logs/compute-perturbed.log"
# A training step with an all_reduce captured in a CUDA graph and replayed, and
# make_graphed_callables: the same parameters as eager and as the CPU, the same step time.
"$ncclsim" run --topo "$topo" --lib-path "$venv/ncclsim-stubs" -- torchrun --nproc_per_node 2 \
    scripts/torch/cuda_graphs.py > "$logs/cuda-graphs.log" 2>&1 \
    || { grep -v "^W" "$logs/cuda-graphs.log" | tail -20; fail "CUDA graph checks exited $?"; }
grep "step time" "$logs/cuda-graphs.log"
[ "$(passes "$logs/cuda-graphs.log")" = 2 ] || fail "cuda_graphs: not every rank passed"
# A compiled FlexAttention captured and replayed computes what the compiled call computes.
"$ncclsim" run --topo "$topo" --lib-path "$venv/ncclsim-stubs" -- python \
    scripts/torch/compiled_graph.py > "$logs/compiled-graph.log" 2>&1 \
    || { cat "$logs/compiled-graph.log"; fail "compiled graph replay"; }
grep "compiled-graph:" "$logs/compiled-graph.log"
"$ncclsim" run --topo "$topo" --compute time --lib-path "$venv/ncclsim-stubs" \
    -- python scripts/torch/compute_time.py > "$logs/compute-time.log" 2>&1 \
    || fail "--compute time checks exited $?"
grep "compute-time:" "$logs/compute-time.log"
# A torch.compile'd transformer step (FlexAttention, pointwise chains) is priced as its compiled
# kernels: within 10% of the same step with the fused kernels written by hand.
"$ncclsim" run --topo topologies/dgx-h100.xml --compute time --clock real \
    --lib-path "$venv/ncclsim-stubs" -- python scripts/torch/compiled_step.py \
    > "$logs/compiled-step.log" 2>&1 || { cat "$logs/compiled-step.log"; fail "compiled step"; }
grep "compiled-step:" "$logs/compiled-step.log"
# The first benchmarks on a new GPU read the kernel model's own speed: square matmuls and a 1 GiB
# add against published runs and datasheets on three boards; tiny ops launch-bound under the
# virtual clock (and not without it: the check checks).
for t in dgx-a100 dgx-h100 pcie-8x4090; do
    "$ncclsim" run --topo "topologies/$t.xml" --compute time --lib-path "$venv/ncclsim-stubs" \
        -- python scripts/torch/kernel_speed.py speed > "$logs/kernel-speed-$t.log" 2>&1 \
        || { cat "$logs/kernel-speed-$t.log"; fail "kernel speed on $t"; }
    grep "^ok \|^   " "$logs/kernel-speed-$t.log"
done
"$ncclsim" run --topo topologies/dgx-h100.xml --compute time --clock virtual \
    --lib-path "$venv/ncclsim-stubs" -- python scripts/torch/kernel_speed.py launch \
    > "$logs/kernel-launch.log" 2>&1 || { cat "$logs/kernel-launch.log"; fail "launch-bound ops"; }
grep "^ok " "$logs/kernel-launch.log"
if "$ncclsim" run --topo topologies/dgx-h100.xml --compute time --clock real --lib-path "$venv/ncclsim-stubs" \
    -- python scripts/torch/kernel_speed.py launch > "$logs/kernel-launch-wall.log" 2>&1; then
    fail "tiny ops read launch-bound without the virtual clock: the launch check does not check"
fi
# A GPT-2-shaped DDP step under the virtual clock, split by `trace summarize --steps`: at batch 1
# part of the step waits for the host's launches, at batch 16 none does and kernels bound it.
for b in 1 16; do
    "$ncclsim" run --topo topologies/dgx-h100.xml --compute time --clock virtual \
        --trace "$logs/trace-bounds-$b" --lib-path "$venv/ncclsim-stubs" \
        -- torchrun --nproc_per_node 2 scripts/torch/step_bounds.py "$b" 2 \
        > "$logs/step-bounds-$b.log" 2>&1 || { tail -20 "$logs/step-bounds-$b.log"; fail "step_bounds.py $b"; }
    "$ncclsim" trace summarize "$logs/trace-bounds-$b" --steps --format json > "$logs/step-bounds-$b.json"
done
python3 - "$logs/step-bounds-1.json" "$logs/step-bounds-16.json" <<'PY' || fail "step bounds"
import json, sys
def last(path):
    s = [x for x in json.load(open(path))["steps"] if x["step"] is not None][-1]
    window = s["compute_us_per_process"] + s["exposed_comm_us_per_process"] + s["idle_us_per_process"]
    return s, s["launch_bound_us_per_process"] / window
(small, share1), (large, share16) = last(sys.argv[1]), last(sys.argv[2])
for b, s, share in ((1, small, share1), (16, large, share16)):
    print(f"step bounds: batch {b}: kernels {s['compute_us_per_process']:.0f} us "
          f"({s['memory_bound_us_per_process']:.0f} memory-bound), launch-bound idle "
          f"{s['launch_bound_us_per_process']:.0f} us ({100 * share:.1f}%), communication "
          f"{s['hidden_comm_us_per_process'] + s['exposed_comm_us_per_process']:.0f} us, bound: {s['bound']}")
assert share1 > 0.03 and share16 < share1 / 4, (share1, share16)
assert large["bound"] in ("compute", "memory"), large["bound"]
assert small["hidden_comm_us_per_process"] + small["exposed_comm_us_per_process"] > 0
PY
# Measured times override the model: ops listed in a kernel-time table take the listed times.
"$ncclsim" run --topo "$topo" --compute time --lib-path "$venv/ncclsim-stubs" \
    --kernel-times scripts/torch/kernel_times.csv \
    -- python scripts/torch/kernel_times.py > "$logs/kernel-times.log" 2>&1 \
    || { tail -20 "$logs/kernel-times.log"; fail "--kernel-times checks failed"; }
grep "kernel-times:" "$logs/kernel-times.log"
# A 2-stage 1F1B pipeline: its step time is the 1F1B recurrence over the modelled stage times.
# On the real host clock: the recurrence is of the streams' kernels and transfers; on the
# virtual clock each separately timed piece also starts with its host's launches, which the
# pipelined step hides behind earlier work.
"$ncclsim" run --topo "$topo" --nodes 2 --compute time --clock real --lib-path "$venv/ncclsim-stubs" \
    -- torchrun --nproc_per_node 1 scripts/torch/pipeline.py > "$logs/pipeline.log" 2>&1 \
    || { grep -v "^W" "$logs/pipeline.log" | tail -20; fail "pipeline check exited $?"; }
grep "^pipeline:" "$logs/pipeline.log"
[ "$(passes "$logs/pipeline.log")" = 2 ] || fail "pipeline: not every stage passed"

echo "== 5c. torch's OpInfo database: every operator's samples on the simulated GPU vs the CPU"
for dtype in float32 bfloat16 int64; do
    "$ncclsim" run --topo "$topo" --lib-path "$venv/ncclsim-stubs" \
        -- python scripts/torch/opinfo_sweep.py --dtype "$dtype" --max-samples 6 \
        > "$logs/opinfo-$dtype.log" 2>&1 || { tail -20 "$logs/opinfo-$dtype.log"; fail "OpInfo sweep ($dtype)"; }
    grep "opinfo-sweep" "$logs/opinfo-$dtype.log"
done
echo "== 6. NCCL's Python bindings (nccl4py from PyPI, own venv), 4 processes on 2 nodes"
n4="${NCCLSIM_NCCL4PY_VENV:-$repo/target/nccl4py-venv}"
if [ ! -x "$n4/bin/python" ]; then
    python3 -m venv "$n4"
    "$n4/bin/python" -m pip --disable-pip-version-check -q install 'nccl4py==0.6.0' \
        'cuda-core==1.2.2' 'cuda-bindings==13.5.0' numpy
fi
rm -f "$logs/nccl4py.id"
PATH="$n4/bin:$PATH" "$ncclsim" run --topo "$topo" --nodes 2 --procs-per-node 2 \
    -- python scripts/python/nccl4py_allreduce.py "$logs/nccl4py.id" > "$logs/nccl4py.log" 2>&1 \
    || fail "nccl4py run exited $?"
grep "PASS" "$logs/nccl4py.log" | sort
[ "$(passes "$logs/nccl4py.log")" = 4 ] || fail "nccl4py: not every rank passed"
echo "== 7. monitors: the environment check, then nvidia-smi, nvitop and gpustat beside training"
[ -x "$venv/bin/nvitop" ] || scripts/torch-venv.sh "$venv"
"$ncclsim" run --topo "$topo" --lib-path "$venv/ncclsim-stubs" -- scripts/env-check/env_check.sh \
    > "$logs/env-check.log" 2>&1 || { cat "$logs/env-check.log"; fail "environment check"; }
grep "^PASS\|^FAIL\|env-check:" "$logs/env-check.log"
mkdir -p "$logs/probe"
monitors='d=$1
torchrun --nproc_per_node 2 scripts/env-check/train_probe.py train "$d" > "$d/train.log" 2>&1 &
t=$!
python scripts/env-check/train_probe.py check "$d" 2 \
    && scripts/env-check/monitor.sh 2 > "$d/monitor.log" \
    && nvitop --once > "$d/nvitop.log" 2>&1 \
    && gpustat --no-color > "$d/gpustat.log" 2>&1
rc=$?
touch "$d/done"
wait $t && exit $rc'
# On the real host clock: the monitors sample the GPUs at wall-clock intervals while the
# training beside them runs, as they do on a machine.
"$ncclsim" run --topo "$topo" --clock real --lib-path "$venv/ncclsim-stubs" -- sh -c "$monitors" sh "$logs/probe" \
    > "$logs/monitors.log" 2>&1 || { cat "$logs/monitors.log"; fail "monitors beside training"; }
grep "GPU .*: memory.used\|train-probe" "$logs/monitors.log"
python3 - "$logs/probe" <<'PY' || fail "monitor rows"
import sys
d = sys.argv[1]
rows = [l.split(", ") for l in open(f"{d}/monitor.log") if not l.startswith("#")]
assert len(rows) == 16, rows  # 2 samples x 8 GPUs
for i, name, util, used, total, temp, power in rows:
    assert name == "NVIDIA A100-SXM4-40GB" and int(total) == 40960, (i, name, total)
    assert 0 <= int(util) <= 100 and 0 <= int(used) <= int(total), (i, util, used)
    assert 25 <= int(temp) <= 95 and 0 < float(power) <= 400, (i, temp, power)
busy = {r[0] for r in rows if int(r[2]) > 0}
assert busy == {"0", "1"}, busy  # the two training ranks' GPUs
print(f"monitor: {len(rows)} rows, GPUs busy: {sorted(busy)}")
nvitop = open(f"{d}/nvitop.log").read()
assert nvitop.count("A100-SXM4-40GB") == 8, nvitop
assert "ERROR" not in nvitop and "Traceback" not in nvitop, nvitop  # every NVML call it makes answers
gpustat = open(f"{d}/gpustat.log").read().splitlines()
gpus = [l for l in gpustat if l.startswith("[")]
assert len(gpus) == 8 and all("A100-SXM4-40GB" in l for l in gpus), gpustat
print("nvitop --once: 8 GPUs; gpustat: 8 GPUs")
PY
echo "== 8. PyTorch's own distributed tests (DistributedTest from the torch wheel), 2 processes each"
"$ncclsim" run --topo "$topo" --clock virtual --lib-path "$venv/ncclsim-stubs" \
    -- python scripts/torch/pytorch_tests.py --report "$logs/pytorch-tests.json" \
    > "$logs/pytorch-tests.log" 2>&1 || { grep -A30 "^pytorch-tests" "$logs/pytorch-tests.log"; fail "PyTorch's tests"; }
grep -A40 "^pytorch-tests:" "$logs/pytorch-tests.log"
TORCH_DIST_USE_NCCL2=0 "$ncclsim" run --topo "$topo" --clock virtual --lib-path "$venv/ncclsim-stubs" \
    -- python scripts/torch/pytorch_tests.py --only torch > "$logs/pytorch-tests-legacy.log" 2>&1 \
    || { grep -A30 "^pytorch-tests" "$logs/pytorch-tests-legacy.log"; fail "PyTorch's tests on torch's previous NCCL backend"; }
grep "^pytorch-tests:" "$logs/pytorch-tests-legacy.log"
# A C++ timed wait whose deadline reaches the kernel through syscall(2) lasts what it asks even
# when the virtual clock trails the real one by more than the wait (here by 20 min, as late in
# a long job): torch's previous backend waits 600 s for its abort at exit so.
epoch=$(python3 -c 'import time; print(*(time.clock_gettime_ns(c) - 1200 * 10**9 for c in (time.CLOCK_REALTIME, time.CLOCK_MONOTONIC)), sep=",")')
"$ncclsim" run --topo "$topo" --env "NCCLSIM_CLOCK_EPOCH=$epoch" --lib-path "$venv/ncclsim-stubs" \
    -- python scripts/torch/pytorch_tests.py --only test_nccl_high_priority_stream > "$logs/pytorch-tests-lag.log" 2>&1 \
    || { grep -B5 -A30 "timed out\|^pytorch-tests" "$logs/pytorch-tests-lag.log" | tail -40; fail "a timed wait 20 min behind the real clock"; }
grep "^pytorch-tests:" "$logs/pytorch-tests-lag.log"
echo "torch-e2e: PASS (logs in $logs)"
