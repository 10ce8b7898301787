"""all_reduce timed with the host clock, as most benchmark scripts time it, under torchrun and
`ncclsim run --clock virtual`.

1. For each size, a warm-up call and torch.cuda.synchronize(), then time.perf_counter() around
   ITERS calls and torch.cuda.synchronize(): rank 0 prints `host-clock all_reduce SIZE time_us T`
   (scripts/torch-e2e.sh compares T with `ncclsim predict`). The values are checked too.
2. torch's NCCL watchdog, with a process-group timeout of 5 s, while the rank sleeps 6 s of real
   time (time.sleep, measured on CLOCK_TAI, which stays real) with an all_reduce outstanding: the
   watchdog does not fire, the sleep lasts its real 6 s, and the watchdog's timed waits wait in
   real time rather than spin (the rank's CPU time over the sleep stays small). Sleeping is host
   time passing, so the rank's virtual clock moves by the 6 s it slept (the all_reduce, done
   long before, adds nothing).
Every rank prints `rank R: PASS`.
"""

import datetime
import os
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
dev = torch.device("cuda", local)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=5))
ITERS = 10


def check(cond, msg):
    if not cond:
        raise SystemExit(f"rank {rank}: FAIL: {msg}")


for size in (8, 64 << 10, 1 << 20, 16 << 20):
    buf = torch.ones(size // 4, dtype=torch.float32, device=dev)
    dist.all_reduce(buf)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(ITERS):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    us = (time.perf_counter() - start) * 1e6 / ITERS
    want = float(world) ** (ITERS + 1)
    check(torch.equal(buf.cpu(), torch.full((size // 4,), want)), f"all_reduce of {size} B")
    if rank == 0:
        print(f"host-clock all_reduce {size} time_us {us:.3f}", flush=True)
    del buf

buf = torch.ones(1 << 20, dtype=torch.float32, device=dev)
tai, cpu, virtual = time.clock_gettime(time.CLOCK_TAI), time.process_time(), time.perf_counter()
dist.all_reduce(buf)
time.sleep(6)
slept = time.clock_gettime(time.CLOCK_TAI) - tai
cpu = time.process_time() - cpu
torch.cuda.synchronize()
moved = time.perf_counter() - virtual
check(torch.equal(buf.cpu(), torch.full((1 << 20,), float(world))), "all_reduce after the sleep")
print(f"rank {rank}: slept {slept:.2f} s real, {cpu:.2f} s CPU, host clock moved {moved * 1e6:.1f} us",
      flush=True)
check(5.9 < slept < 30, f"time.sleep(6) took {slept:.2f} s of real time")
check(cpu < 1.5, f"{cpu:.2f} s of CPU time while sleeping: a timed wait spins")
check(6.0 <= moved < 6.01, f"the host clock moved {moved} s over a 6 s sleep beside one 4 MiB all_reduce")
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: PASS", flush=True)
