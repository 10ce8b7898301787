"""A training job and a monitor beside it, in separate processes of one `ncclsim run`.

usage:
  train_probe.py train DIR    (under torchrun) each rank trains a small MLP with DDP (NCCL
                              all-reduces of the gradients) on its own GPU and,
                              after each step, publishes torch.cuda.memory_reserved() and its
                              pid in DIR/rank<N>; it stops when DIR/done exists (at most 120 s)
  train_probe.py check DIR N  waits for N ranks, then checks what nvidia-smi (another process)
                              reports: each rank's GPU uses memory_reserved plus one CUDA
                              context (400 MiB) and is busy, and the processes table lists the
                              ranks' pids with the same figures
"""
import os
import subprocess
import sys
import time

CONTEXT_MIB = 400


def train(d):
    import torch

    import torch.distributed as dist

    rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(rank)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)
    ).cuda()
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 512, device="cuda")
    start = time.time()
    step = 0
    while True:
        # Every rank stops after the same step (DDP's all-reduces must pair up).
        stop = os.path.exists(os.path.join(d, "done")) or time.time() - start > 120
        flag = torch.tensor([float(stop)], device="cuda")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            break
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        step += 1
        if step >= 3:
            tmp = os.path.join(d, f".rank{rank}")
            with open(tmp, "w") as f:
                f.write(f"{torch.cuda.memory_reserved()} {os.getpid()} {step}\n")
            os.replace(tmp, os.path.join(d, f"rank{rank}"))
    print(f"rank {rank}: trained {step} steps, reserved {torch.cuda.memory_reserved() >> 20} MiB")
    dist.destroy_process_group()


def published(d, n):
    out = {}
    for r in range(n):
        try:
            reserved, pid, _ = open(os.path.join(d, f"rank{r}")).read().split()
            out[r] = (int(reserved), int(pid))
        except (OSError, ValueError):
            return None
    return out


def smi(*args):
    return subprocess.run(
        ["nvidia-smi", *args, "--format=csv,noheader,nounits"],
        check=True, capture_output=True, text=True,
    ).stdout


def check(d, n):
    deadline = time.time() + 300
    while published(d, n) is None:
        assert time.time() < deadline, "the ranks did not start training"
        time.sleep(0.2)
    for attempt in range(20):
        before = published(d, n)
        rows = smi("--query-gpu=index,memory.used,utilization.gpu")
        apps = smi("--query-compute-apps=pid,used_memory")
        if published(d, n) == before:
            break
        time.sleep(0.1)  # a rank's reservation changed during the query: ask again
    print(rows + apps, end="")
    gpus = {int(i): (int(m), int(u)) for i, m, u in (l.split(", ") for l in rows.splitlines())}
    procs = {(int(p), int(m)) for p, m in (l.split(", ") for l in apps.splitlines())}
    for r, (reserved, pid) in before.items():
        want = reserved // (1 << 20) + CONTEXT_MIB
        used, util = gpus[r]
        print(f"GPU {r}: memory.used {used} MiB = memory_reserved {reserved >> 20} MiB + "
              f"context {CONTEXT_MIB} MiB: {used == want}; utilization {util}%")
        assert used == want, (r, used, want)
        assert util > 0, (r, util)
        assert (pid, want) in procs, (pid, want, procs)
    for i, (used, util) in gpus.items():
        if i not in before:
            assert (used, util) == (0, 0), (i, used, util)
    print("train-probe: PASS")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "train":
        train(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
