"""`ncclsim run --compute time --kernel-times scripts/torch/kernel_times.csv`: torch ops take the
durations a kernel-time table lists for them, by name and occurrence.

The table (the columns `ncclsim trace kernels --format csv` writes, nsys's GPU trace columns)
lists `aten::cumsum` at 1 s, which puts the stream far ahead of the host so the ops after it
run back to back, and two occurrences of `aten::mm`, 1 ms and 3 ms. Checks, by
`torch.cuda.Event` pairs on the current stream: three matrix products take 1, 3 and 1 ms (the
third cycles back to the first occurrence); an `aten::add.Tensor`, which the table does not
list, takes the compute model's time, neither 1 nor 3 ms and more than nothing.
Prints `kernel-times: PASS n checks`; exits non-zero on the first failure.
"""

import os
import sys

import torch

checks = 0


def check(what, ok):
    global checks
    if not ok:
        print(f"kernel-times: FAIL {what}", flush=True)
        sys.exit(1)
    checks += 1


check("NCCLSIM_KERNEL_TIMES is set", os.environ.get("NCCLSIM_KERNEL_TIMES", "").endswith("kernel_times.csv"))
dev = torch.device("cuda", 0)
a = torch.ones(256, 256, device=dev)
torch.cumsum(a, 0)
marks = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
marks[0].record()
for i in range(3):
    a @ a
    marks[i + 1].record()
a + a
marks[4].record()
torch.cuda.synchronize()
ms = [marks[i].elapsed_time(marks[i + 1]) for i in range(4)]
print(f"kernel-times: mm {ms[0]:.6f} {ms[1]:.6f} {ms[2]:.6f} ms, add {ms[3]:.6f} ms", flush=True)
check(f"first aten::mm took {ms[0]} ms, want 1", ms[0] == 1.0)
check(f"second aten::mm took {ms[1]} ms, want 3", ms[1] == 3.0)
check(f"third aten::mm took {ms[2]} ms, want 1 (cycling)", ms[2] == 1.0)
check(f"aten::add took {ms[3]} ms, want the model's time", 0 < ms[3] < 1.0)
print(f"kernel-times: PASS {checks} checks", flush=True)
