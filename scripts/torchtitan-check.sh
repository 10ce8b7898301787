#!/usr/bin/env bash
# torchtitan's llama3 debug model under `ncclsim run`, its defaults kept (CUDA graphs on,
# FlexAttention compiled, selective activation checkpointing, the spmd_types backend,
# sequence parallelism): FSDP2 x TP2 on 4 simulated H100s for 4 steps, then the same with
# `--training.disable_cuda_graphs`, then once more with every parameter read whole
# (`DTensor.full_tensor()`) before the first step (scripts/python/torchtitan_full_tensor.py);
# the three runs' losses and gradient norms must be equal.
# Sequence 256 and local batch 2 keep it to a minute or two on 2 cores.
#
# Not part of scripts/test.sh: torchtitan 0.3.0 imports Triton (1 GB) at start-up. It installs
# into target/torchtitan-venv, a venv over the suite's torch venv (scripts/torch-venv.sh, run
# first): torchtitan and the packages of torch's stack without their dependencies (torch's CUDA
# wheels are not wanted), the others as pip resolves them. The tokenizer and dataset it needs
# are made by scripts/python/torchtitan_assets.py.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/target/torch-venv
tt=$root/target/torchtitan-venv
[ -x "$venv/bin/python" ] || { echo "torchtitan-check: run scripts/torch-venv.sh first" >&2; exit 1; }
cargo build --release --workspace -q
if [ ! -x "$tt/bin/python" ]; then
    python3 -m venv "$tt"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$site" > "$("$tt/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch-venv.pth"
    "$tt/bin/pip" install -q --no-deps torchtitan==0.3.0 torchdata torch_checkpointing \
        spmd_types==0.2.3 triton==3.9.0
    "$tt/bin/pip" install -q 'datasets<4.8.0,>=3.6.0' safetensors tyro einops pillow tensorboard
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$tt/bin/python" scripts/python/torchtitan_assets.py "$work"
launch=(-m torchtitan.train)
run() {
    (cd "$work" && PATH="$tt/bin:$venv/bin:$PATH" "$root/target/release/ncclsim" run \
        --topo "$root/topologies/dgx-h100.xml" --lib-path "$venv/ncclsim-stubs" -- \
        python -m torch.distributed.run --nproc_per_node 4 "${launch[@]}" \
        --module llama3 --config llama3_debugmodel --parallelism.tensor_parallel_degree 2 \
        --training.steps 4 --training.seq_len 256 --training.local_batch_size 2 \
        --debug.seed 0 "$@")
}
steps() {  # the step lines' loss and grad_norm, once per step
    sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -o 'step: *[0-9]* *loss: *[0-9.a-z]* *grad_norm: *[0-9.a-z]*' | sort -u
}
run > "$work/graphs-on.log" 2>&1 || { tail -30 "$work/graphs-on.log"; echo "torchtitan-check: the run with CUDA graphs failed" >&2; exit 1; }
run --training.disable_cuda_graphs > "$work/graphs-off.log" 2>&1 || { tail -30 "$work/graphs-off.log"; echo "torchtitan-check: the run without CUDA graphs failed" >&2; exit 1; }
launch=("$root/scripts/python/torchtitan_full_tensor.py")
run > "$work/full-tensor.log" 2>&1 || { tail -30 "$work/full-tensor.log"; echo "torchtitan-check: the run reading full_tensor() first failed" >&2; exit 1; }
echo "CUDA graphs on:"; steps "$work/graphs-on.log"
echo "CUDA graphs off:"; steps "$work/graphs-off.log"
echo "every parameter read with full_tensor() first:"; steps "$work/full-tensor.log"
[ "$(steps "$work/graphs-on.log" | wc -l)" = 4 ] || { echo "torchtitan-check: not 4 steps" >&2; exit 1; }
grep -q "Recorded CUDA graph" "$work/graphs-on.log" || { echo "torchtitan-check: no CUDA graph recorded" >&2; exit 1; }
if [ "$(steps "$work/graphs-on.log")" != "$(steps "$work/graphs-off.log")" ]; then
    echo "torchtitan-check: FAIL: the losses differ" >&2; exit 1
fi
grep -q "torchtitan_full_tensor: [1-9][0-9]* parameters read whole" "$work/full-tensor.log" \
    || { echo "torchtitan-check: the parameters were not read whole" >&2; exit 1; }
if [ "$(steps "$work/graphs-on.log")" != "$(steps "$work/full-tensor.log")" ]; then
    echo "torchtitan-check: FAIL: reading full_tensor() first changed the training" >&2; exit 1
fi
echo "torchtitan-check: ok (4 steps, CUDA graphs on equal to off and to reading full_tensor() first)"
