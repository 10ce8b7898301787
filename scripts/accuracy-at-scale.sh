#!/usr/bin/env bash
# Published multi-node training runs, predicted by running the job itself under `ncclsim run`:
# `scripts/torch/llama_fsdp.py` shaped as each published run (model, sequence, local batch,
# activation checkpointing), on the published GPU count with `--fold dp` (8 processes stand for
# the job; the job's communicators are planned and priced over every node) and
# `--compute time`. The predicted throughput is the script's own: tokens per step over the
# step time torch.cuda.Event measures (the step the program runs last).
#
# The measured values are torchtitan's own performance tables (the rows of
# compute-model/data/measurements.csv named in each line; nothing in the compute or
# communication model is fitted to them or to any step-time measurement). Prints ACCURACY.md's
# "Training runs at scale" table.
#
# Usage: scripts/accuracy-at-scale.sh [VENV]   (VENV: a venv made by scripts/torch-venv.sh,
# default target/torch-venv; the release build of ncclsim is used, `cargo build --release`)
# About 10 minutes on a 2-core box.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-target/torch-venv}
[ -x "$venv/bin/torchrun" ] || bash scripts/torch-venv.sh "$venv"
export PATH="$PWD/$venv/bin:$PATH"
ncclsim=target/release/ncclsim
[ -x "$ncclsim" ] || cargo build --release -q -p cli
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# torchtitan's A100 runs: 80 GB boards, eight 200 Gb/s NICs per node (an Azure NDm A100 v4
# node's layout, completed with the 80 GB A100).
"$ncclsim" topo dump topologies/vendor/azure/ndv4-topo.xml --gpu A100-SXM4 --nic-speed 200G \
    > "$work/a100-80gb.xml" 2> /dev/null

# row | board | topology | nodes | model seq local-batch steps tp checkpointing attention | measured
# tokens/s per GPU. The attention is FlashAttention-2, what torch of 2024 ran on both boards.
runs=(
  "67|A100-SXM4-80GB|$work/a100-80gb.xml|8|8b 8192 1 3 1 op flash|2973"
  "68|A100-SXM4-80GB|$work/a100-80gb.xml|8|70b 8192 1 2 1 full flash|331"
  "69|A100-SXM4-80GB|$work/a100-80gb.xml|8|llama2-13b 4096 2 2 1 none flash|2162"
  "70|A100-SXM4-80GB|$work/a100-80gb.xml|8|llama2-70b 4096 1 2 1 op flash|355"
  "90|H100-SXM5|topologies/dgx-h100.xml|16|8b 8192 2 2 1 op flash|5605"
)

echo "| row | GPUs | board | model, seq, local batch, checkpointing | measured | predicted | error | step (predicted) | peak memory per GPU |"
echo "|---|---|---|---|---|---|---|---|---|"
for r in "${runs[@]}"; do
    IFS='|' read -r row board topo nodes args measured <<< "$r"
    read -r model seq batch _ _ ac _ <<< "$args"
    # shellcheck disable=SC2086
    out=$("$ncclsim" run --topo "$topo" --nodes "$nodes" --fold dp --compute time \
        --env NCCLSIM_HOST_MEMORY=1G -- torchrun --nproc_per_node 8 \
        scripts/torch/llama_fsdp.py $args 2>&1) || { echo "row $row failed:"; echo "$out"; exit 1; }
    last=$(grep '^step ' <<< "$out" | tail -1)
    ms=$(sed -E 's/^step [0-9]+: ([0-9.]+) ms.*/\1/' <<< "$last")
    peak=$(sed -E 's/.*peak ([0-9.]+) GiB.*/\1/' <<< "$last")
    line=$(python3 - "$row" "$((nodes * 8))" "$board" "$model" "$seq" "$batch" "$ac" "$measured" "$ms" "$peak" "$work/errors" <<'EOF'
import sys
row, gpus, board, model, seq, batch, ac, measured, ms, peak = sys.argv[1:11]
predicted = int(batch) * int(seq) / (float(ms) / 1e3)
err = (predicted / float(measured) - 1) * 100
ac = {"op": "selective per op", "full": "full", "none": "none"}[ac]
print(f"| {row} | {gpus} | {board} | {model}, {seq}, {batch}, {ac} | {float(measured):,.0f} | "
      f"{predicted:,.0f} | {err:+.1f}% | {float(ms):,.1f} ms | {peak} GiB |")
with open(sys.argv[11], "a") as f:
    f.write(f"{abs(err)}\n")
EOF
    )
    echo "$line"
done
python3 - "$work/errors" <<'EOF'
import statistics, sys
e = [float(x) for x in open(sys.argv[1])]
print(f"| **median** | | | {len(e)} runs | | | {statistics.median(e):.1f}% | | |")
EOF
