#!/usr/bin/env bash
# Exit stress: RUNS short torch jobs (2 processes under torchrun, a GPT-like model under DDP,
# two AdamW steps inside torch.profiler, a daemon thread still running torch ops when the
# program ends, as a metrics or prefetch thread does, and no destroy_process_group, so the
# process group and its watchdog threads are torn down at interpreter exit) under
# `ncclsim run --report --trace`. Each run must exit 0, print no "terminate called" (a C++
# std::terminate, SIGABRT) and leave a complete report for each of its 3 processes (torchrun's
# agent and the 2 ranks). Prints one line per run and a summary; exits 1 if any run failed.
# Too slow for CI (about 25 s a run on 2 cores).
#
# Usage: scripts/stress-exit.sh [RUNS [PARALLEL]]   (defaults 200 and 1)
#   NCCLSIM_TORCH_VENV   the venv with torch (default target/torch-venv)
#   NCCLSIM_STRESS_DIR   where runs go (default target/stress-exit; failed runs are kept)
#   NCCLSIM_STRESS_SCRIPT a script of your own to run instead of the built-in one
#   NCCLSIM_BIN          the ncclsim binary (default target/release/ncclsim; its directory's
#                        libraries are the ones run)
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
runs="${1:-200}"
parallel="${2:-1}"
venv="${NCCLSIM_TORCH_VENV:-$repo/target/torch-venv}"
out="${NCCLSIM_STRESS_DIR:-$repo/target/stress-exit}"
ncclsim="${NCCLSIM_BIN:-$repo/target/release/ncclsim}"
[ -x "$ncclsim" ] || { echo "no $ncclsim: cargo build --release" >&2; exit 2; }
[ -x "$venv/bin/python" ] || { echo "no venv at $venv (scripts/torch-venv.sh)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"
script="${NCCLSIM_STRESS_SCRIPT:-$out/gpt_profile.py}"
if [ -z "${NCCLSIM_STRESS_SCRIPT:-}" ]; then
    cat > "$script" <<'EOF'
import os
import threading
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
dev = torch.device("cuda", local)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)


class Block(torch.nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def metrics():
    # Still inside a torch op (GIL released) when the interpreter finalizes.
    m = torch.randn(256, 256)
    while True:
        m = (m @ m).tanh()


threading.Thread(target=metrics, daemon=True).start()
model = torch.nn.Sequential(torch.nn.Embedding(128, 64), Block(), Block(), torch.nn.Linear(64, 128))
net = DDP(model.to(dev), device_ids=[local])
opt = torch.optim.AdamW(net.parameters())
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(2):
        t = torch.randint(0, 128, (4, 16), device=dev)
        loss = torch.nn.functional.cross_entropy(net(t).view(-1, 128), t.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
if rank == 0:
    prof.key_averages().table(row_limit=5)
x = torch.ones(1024, device=dev)
dist.all_reduce(x)
print(f"rank {rank}: done {x[0].item():.0f}", flush=True)
EOF
fi

one() {
    local i=$1 d="$out/run-$1" rc=0 why=""
    mkdir -p "$d"
    PATH="$venv/bin:$PATH" TMPDIR="$d" "$ncclsim" run --lib-path "$venv/ncclsim-stubs" \
        --report "$d/report.%h.%p.json" --trace "$d/trace" \
        -- torchrun --nproc_per_node 2 "$script" > "$d/log" 2>&1 || rc=$?
    local reports
    reports=$(for f in "$d"/report.*.json; do
        [ -f "$f" ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$f" 2>/dev/null && echo ok
    done | wc -l)
    [ "$rc" = 0 ] || why="$why exit $rc"
    grep -q "terminate called" "$d/log" && why="$why terminate"
    # The two ranks write to one log, so their lines can share a line: count the ranks.
    [ "$(grep -o 'rank [01]: done 2' "$d/log" | sort -u | wc -l)" = 2 ] || why="$why ranks-not-done"
    [ "$reports" = 3 ] || why="$why reports=$reports"
    if [ -z "$why" ]; then
        echo "run $i: ok"
        rm -rf "$d"
    else
        echo "run $i: FAIL$why (kept in $d)"
    fi
}

start=$SECONDS
for ((i = 1; i <= runs; i += parallel)); do
    for ((j = i; j < i + parallel && j <= runs; j++)); do one "$j" & done
    wait
done | tee "$out/summary"
failed=$(grep -c FAIL "$out/summary")
aborts=$(grep -c terminate "$out/summary")
echo "stress-exit: $runs runs in $((SECONDS - start)) s: $failed failed ($aborts with std::terminate)"
[ "$failed" = 0 ]
