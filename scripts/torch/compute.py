"""Training on the simulated GPUs computes what the CPU computes.

Run under torchrun on ncclsim (`ncclsim run --nodes 2 -- torchrun --nproc_per_node 2 ...`).
Every model is built on the CPU from a fixed seed, so each rank and the reference start from
the same weights; each rank trains on its own batches (made from a per-rank seed); the
reference trains one CPU copy in this process on all ranks' batches, averaging the gradients
as DDP does. Checks, each against plain CPU torch:
- DDP over the world, 4 steps of SGD (momentum) and 4 of AdamW: parameters equal (rtol 1e-4);
- FSDP2 (`fully_shard`) over the world, 3 steps of SGD (momentum) and 3 of AdamW: parameters
  equal (rtol 1e-4);
- ResNet-18 (convolutions, batch norm, pooling) under DDP, one step: loss and gradients equal;
- GPT-2 from a transformers config (2 layers) under DDP, 8 AdamW steps on a fixed batch: the
  loss falls at every step and by a tenth overall, and the first step's loss equals the CPU's;
- bf16 autocast of a linear stack: within bf16 tolerance of the float32 CPU result;
- `torch.compile` (ncclsim's backend in place of inductor: Dynamo, AOT autograd, the graphs run op by op): forward and
  backward equal the CPU's;
- device memory: 256 MiB allocated and never written costs no host memory; written, it does;
- compute takes the compute model's time: CUDA events around a bf16 GEMM read its modelled time
  (a rate below the A100's 312 TFLOP/s peak; `kernel_speed.py` holds the rates of large GEMMs
  against published runs), and around a forward and backward the sum of the modelled times of
  its ops, with the stream kept ahead of the host so the events read the kernels. The GEMM is
  small and the stream is kept busy with a memory-bound op: the CPU computes every op here, and
  a CPU without bfloat16 instructions multiplies bf16 matrices at about 1 GFLOP/s.
Prints `rank R: PASS n checks`; exits non-zero on the first failure.
"""

import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
dev = torch.device("cuda", local)
checks = 0


def log(msg):
    if rank == 0:
        print(msg, flush=True)


def fail(msg):
    print(f"rank {rank}: FAIL {msg}", flush=True)
    sys.exit(1)


def close(name, got, want, rtol=1e-4, atol=1e-5):
    global checks
    got = got.detach().float().cpu()
    want = want.detach().float()
    if got.shape != want.shape or not torch.allclose(got, want, rtol=rtol, atol=atol):
        diff = (got - want).abs().max().item() if got.shape == want.shape else "shape"
        fail(f"{name}: max difference {diff}")
    checks += 1


def batches(r, steps, shape, classes):
    g = torch.Generator().manual_seed(1000 + r)
    return [(torch.randn(shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g))
            for _ in range(steps)]


def reference_step(model, opt, data_per_rank, loss_fn):
    """One CPU step over every rank's batch, gradients averaged as DDP averages them."""
    opt.zero_grad()
    grads = None
    losses = []
    for x, y in data_per_rank:
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        losses.append(loss.detach())
        g = [p.grad.clone() for p in model.parameters()]
        grads = g if grads is None else [a + b for a, b in zip(grads, g)]
    for p, g in zip(model.parameters(), grads):
        p.grad = g / len(data_per_rank)
    opt.step()
    return torch.stack(losses).mean()


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Dropout(0.0),
                         nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def train_ddp(make_opt, name, steps=4):
    from torch.nn.parallel import DistributedDataParallel as DDP

    ref = mlp()
    ref_opt = make_opt(ref.parameters())
    model = DDP(copy.deepcopy(ref).to(dev), device_ids=[local])
    opt = make_opt(model.parameters())
    data = [batches(r, steps, (16, 32), 10) for r in range(world)]
    for s in range(steps):
        x, y = data[rank][s]
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        reference_step(ref, ref_opt, [d[s] for d in data], F.cross_entropy)
    for (n, p), q in zip(model.module.named_parameters(), ref.parameters()):
        close(f"DDP {name} {n}", p, q)
    log(f"ok DDP {name}: {steps} steps, parameters equal the CPU's")


def train_fsdp(make_opt, name, steps=3):
    from torch.distributed.fsdp import fully_shard

    ref = mlp()
    ref_opt = make_opt(ref.parameters())
    model = copy.deepcopy(ref).to(dev)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = make_opt(model.parameters())
    data = [batches(r, steps, (16, 32), 10) for r in range(world)]
    for s in range(steps):
        x, y = data[rank][s]
        opt.zero_grad()
        F.cross_entropy(model(x.to(dev)), y.to(dev)).backward()
        opt.step()
        reference_step(ref, ref_opt, [d[s] for d in data], F.cross_entropy)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        close(f"FSDP2 {name} {n}", p.full_tensor(), q)
    log(f"ok FSDP2 {name}: {steps} steps, parameters equal the CPU's")


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2016): a 7x7 stem, four stages of two basic blocks, global pooling."""

    def __init__(self, classes=10, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for i, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
            stride = 1 if i == 0 else 2
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet():
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    ref = ResNet18()
    model = DDP(copy.deepcopy(ref).to(dev), device_ids=[local])
    data = [batches(r, 1, (4, 3, 64, 64), 10)[0] for r in range(world)]
    x, y = data[rank]
    out = model(x.to(dev))
    loss = F.cross_entropy(out, y.to(dev))
    loss.backward()
    ref_out = ref(x)
    close("ResNet-18 logits", out, ref_out, rtol=1e-3, atol=1e-4)
    ref.zero_grad()
    losses = []
    grads = None
    for xr, yr in data:
        ref.zero_grad()
        lr_ = F.cross_entropy(ref(xr), yr)
        lr_.backward()
        losses.append(lr_)
        g = [p.grad.clone() for p in ref.parameters()]
        grads = g if grads is None else [a + b for a, b in zip(grads, g)]
    close("ResNet-18 loss", loss, losses[rank], rtol=1e-4)
    for (n, p), g in zip(model.module.named_parameters(), grads):
        close(f"ResNet-18 grad {n}", p.grad, g / world, rtol=1e-3, atol=1e-5)
    # Running statistics of batch norm follow this rank's batch.
    close("ResNet-18 running mean", model.module.stem[1].running_mean, ref_running(ref, x), rtol=1e-4)
    log(f"ok ResNet-18 DDP step: logits, loss, {len(grads)} gradients and batch-norm statistics equal the CPU's")


def ref_running(ref, x):
    torch.manual_seed(0)
    fresh = ResNet18()
    fresh(x)
    return fresh.stem[1].running_mean


def gpt2():
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        fail("GPT-2: transformers is not installed")
    from torch.nn.parallel import DistributedDataParallel as DDP

    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=256, n_positions=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    ref = GPT2LMHeadModel(cfg)
    model = DDP(copy.deepcopy(ref).to(dev), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(2000 + rank)
    ids = torch.randint(0, 256, (4, 32), generator=g)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        loss = model(ids.to(dev), labels=ids.to(dev)).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    close("GPT-2 first loss", torch.tensor(losses[0]), ref(ids, labels=ids).loss, rtol=1e-4)
    if not (all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.9 * losses[0]):
        fail(f"GPT-2 loss did not fall: {losses}")
    log(f"ok GPT-2 (2 layers) DDP: loss {losses[0]:.4f} -> {losses[-1]:.4f} in 8 steps")


def autocast():
    global checks
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32))
    x = torch.randn(16, 64)
    want = net(x)
    cnet = copy.deepcopy(net).to(dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = cnet(x.to(dev))
    if got.dtype != torch.bfloat16:
        fail(f"autocast: output dtype {got.dtype}")
    # bf16 keeps 8 bits of mantissa: a relative error of a few 2^-8 after two layers.
    close("bf16 autocast", got, want, rtol=3e-2, atol=3e-2)
    log("ok bf16 autocast within bf16 tolerance of float32 on the CPU")


def compiled():
    global checks
    import warnings

    torch.manual_seed(0)
    net = mlp()
    x = torch.randn(8, 32)
    want = net(x)
    want.sum().backward()
    gnet = copy.deepcopy(net).to(dev)
    gnet.zero_grad()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fast = torch.compile(gnet)
        got = fast(x.to(dev))
    if not any("inductor" in str(w.message) for w in seen):
        fail("torch.compile: no warning about the backend that replaces inductor")
    got.sum().backward()
    close("torch.compile forward", got, want)
    for (n, p), q in zip(gnet.named_parameters(), net.parameters()):
        close(f"torch.compile gradient {n}", p.grad, q.grad)
    log("ok torch.compile (ncclsim's backend): forward and backward equal the CPU's")


def shmem():
    for line in open("/proc/self/status"):
        if line.startswith("RssShmem:"):
            return int(line.split()[1]) << 10
    fail("no RssShmem in /proc/self/status")


def memory():
    global checks
    torch.cuda.synchronize()
    before = shmem()
    t = torch.empty(64 << 20, device=dev)  # 256 MiB of float32
    torch.cuda.synchronize()
    untouched = shmem() - before
    t.fill_(1.0)
    torch.cuda.synchronize()
    written = shmem() - before
    if untouched > (16 << 20) or written < (256 << 20):
        fail(f"device memory: {untouched >> 20} MiB resident before writing, {written >> 20} MiB after")
    checks += 1
    del t
    log(f"ok device memory: 256 MiB costs {untouched >> 20} MiB of host memory until written, "
        f"{written >> 20} MiB after")


def modelled_time():
    global checks
    from ncclsim.compute import timing

    n = 1024
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    # 256 MiB read and written: modelled at about 0.4 ms on an A100, a few tens of ms on the CPU.
    busy = torch.zeros(64 << 20, device=dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    # The stream is kept ahead of the host, as in any back-to-back benchmark, so the events
    # read the kernel and not its launch (under the virtual clock the host's time per op
    # passes before each kernel is queued, which an idle stream would show).
    busy.add_(1)
    before = timing.total_ns
    start.record()
    a @ a
    end.record()
    end.synchronize()
    gemm_ms = start.elapsed_time(end)
    # The event pair reads exactly the modelled time, at a rate an A100 can have: above zero
    # and below its datasheet peak.
    tflops = 2 * n**3 / (gemm_ms * 1e-3) / 1e12
    want = "a rate below the A100's 312 TFLOP/s peak"
    if not 0 < tflops < 312 or abs((timing.total_ns - before) / 1e6 - gemm_ms) > 1e-5:
        fail(f"bf16 GEMM took {gemm_ms} ms of virtual time ({tflops:.0f} TFLOP/s), model "
             f"{(timing.total_ns - before) / 1e6}, want {want}")
    checks += 1
    net = mlp().to(dev)
    x = torch.randn(64, 32, device=dev)
    torch.cuda.synchronize()
    for _ in range(2):  # ahead of the host's launches of the step's ops
        busy.add_(1)
    before = timing.total_ns
    start.record()
    net(x).sum().backward()
    end.record()
    end.synchronize()
    step_ms = start.elapsed_time(end)
    model_ms = (timing.total_ns - before) / 1e6
    if abs(step_ms - model_ms) > 1e-5 or step_ms <= 0:
        fail(f"forward and backward: events read {step_ms} ms, the model's ops sum to {model_ms} ms")
    checks += 1
    log(f"ok modelled compute time: bf16 GEMM {gemm_ms:.4f} ms ({tflops:.0f} TFLOP/s), "
        f"MLP forward+backward {step_ms:.4f} ms = the sum of its ops' modelled times")
    del busy


torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
train_ddp(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), "SGD")
train_ddp(lambda p: torch.optim.AdamW(p, lr=1e-2), "AdamW")
train_fsdp(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), "SGD")
train_fsdp(lambda p: torch.optim.AdamW(p, lr=1e-2), "AdamW")
resnet()
autocast()
compiled()
memory()
modelled_time()
gpt2()
dist.barrier()
print(f"rank {rank}: PASS {checks} checks", flush=True)
dist.destroy_process_group()
