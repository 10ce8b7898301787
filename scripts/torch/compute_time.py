"""`ncclsim run --compute time`: ops keep their shapes but compute nothing, and device memory
that nothing writes costs no host memory.

Run in one process under `ncclsim run --compute time`. Checks:
- a training step of a small CNN and an MLP runs, and every result has the shape, dtype and
  device the same ops give on the CPU;
- a channels-last convolution's output and input gradient are channels-last, as on the CPU;
- ops whose output shape depends on the data (`nonzero`, boolean indexing) are still computed,
  so on inputs copied in from the host their shapes are right (on inputs that other ops
  produced in this mode the values, and so those shapes, are undefined);
- 1 GiB made on the device by `torch.randn` and a 2048x2048x... matmul chain leave the
  process's shared memory (the device arenas) almost untouched, where computing would write
  every byte;
- an op whose result does not fit on the device fails with torch's out-of-memory error for the
  device, as on the GPU (not by computing the op and running out of host memory);
- what a program asks of undefined values neither fails nor hangs: torchtitan's RoPE bounds
  check (`torch._assert_async(torch.all(positions <= max))`) asserts nothing, and `.item()`,
  `bool()` and `torch.equal` answer with Python values (what the device memory holds: zero
  where nothing wrote it).
Prints `compute-time: PASS n checks`; exits non-zero on the first failure.
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

checks = 0


def fail(msg):
    print(f"compute-time: FAIL {msg}", flush=True)
    sys.exit(1)


def same_meta(name, got, want):
    global checks
    if got.shape != want.shape or got.dtype != want.dtype or got.device.type != "cuda":
        fail(f"{name}: got {tuple(got.shape)} {got.dtype} {got.device}, want {tuple(want.shape)} {want.dtype}")
    checks += 1


def shmem_bytes():
    """The process's resident shared memory (the memfd arenas of the simulated GPUs)."""
    for line in open("/proc/self/status"):
        if line.startswith("RssShmem:"):
            return int(line.split()[1]) * 1024
    fail("no RssShmem in /proc/self/status")


if os.environ.get("NCCLSIM_COMPUTE") != "time":
    fail(f"NCCLSIM_COMPUTE is {os.environ.get('NCCLSIM_COMPUTE')!r}, want 'time'")
dev = torch.device("cuda", 0)
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                    nn.Linear(8 * 16 * 16, 10))
x = torch.randn(4, 3, 16, 16)
y = torch.randint(0, 10, (4,))
want = net(x)
gnet = net.to(dev)
opt = torch.optim.AdamW(gnet.parameters())
out = gnet(x.to(dev))
same_meta("CNN logits", out, want)
F.cross_entropy(out, y.to(dev)).backward()
for n, p in gnet.named_parameters():
    same_meta(f"gradient of {n}", p.grad, p.detach().cpu())
opt.step()

# A channels-last convolution gives channels-last results (the layout torch gives on the CPU and
# cuDNN on a GPU), forward and backward, so the next convolution is priced as channels-last too.
conv = nn.Conv2d(8, 8, 3, padding=1).to(memory_format=torch.channels_last)
xc = torch.randn(2, 8, 12, 12).to(memory_format=torch.channels_last).requires_grad_()
want_c = conv(xc)
want_c.sum().backward()
gconv = conv.to(dev)
gx = xc.detach().to(dev).requires_grad_()
got_c = gconv(gx)
got_c.sum().backward()
cl = torch.channels_last
for name, got, ref in (("output", got_c, want_c), ("input gradient", gx.grad, xc.grad)):
    same_meta(f"channels-last convolution {name}", got, ref)
    if got.is_contiguous(memory_format=cl) != ref.is_contiguous(memory_format=cl):
        fail(f"channels-last convolution {name}: strides {got.stride()}, the CPU gives {ref.stride()}")
    checks += 1

# Data-dependent output shapes are computed for real.
v = torch.tensor([0.0, 1.0, 0.0, 2.0, 3.0], device=dev)
idx = torch.nonzero(v)
if idx.shape != (3, 1) or idx.view(-1).tolist() != [1, 3, 4]:
    fail(f"nonzero: {idx.cpu().tolist()}")
checks += 1
mask = torch.tensor([False, True, False, True, True], device=dev)
if v[mask].shape != (3,):
    fail("boolean indexing shape")
checks += 1

torch.cuda.synchronize()
before = shmem_bytes()
big = torch.randn(256 << 20, device=dev)  # 1 GiB of float32
a = torch.randn(2048, 2048, device=dev)
for _ in range(4):
    a = a @ a
torch.cuda.synchronize()
grown = shmem_bytes() - before
same_meta("1 GiB randn", big, torch.empty(256 << 20))
if grown > (64 << 20):
    fail(f"compute time touched {grown >> 20} MiB of device memory for 1 GiB of results")
checks += 1
print(f"compute-time: shared memory grew {grown >> 20} MiB for 1 GiB of randn and a 2048^2 matmul chain")

positions = torch.arange(2048, device=dev)  # its values are undefined here
torch._assert_async(torch.all(positions <= 2047))
torch._assert_async(torch.all(positions <= 2047), "positions out of range")
loss = F.cross_entropy(gnet(x.to(dev)), y.to(dev))
answers = (loss.item(), bool(torch.isnan(loss)), torch.isnan(loss).any().item(),
           torch.equal(positions, positions))
if [type(a) for a in answers] != [float, bool, bool, bool]:
    fail(f"host reads of undefined values: {answers}")
checks += 1

free, _ = torch.cuda.mem_get_info(dev)
half = torch.empty(int(free * 0.6) // 4, device=dev)
try:
    half + 1
    fail(f"an op's {free * 0.6 / 2**30:.1f} GiB result fit in {free / 2**30:.1f} GiB")
except torch.OutOfMemoryError as e:
    if "Tried to allocate" not in str(e) or "host memory" in str(e):
        fail(f"an op's result past the device: {str(e)[:200]}")
checks += 1
del half
print(f"compute-time: PASS {checks} checks", flush=True)
