"""A training step captured in a CUDA graph and replayed, under torchrun and `ncclsim run`.

Each rank trains the same small model (Linear, ReLU, Linear; SGD with momentum) on its own
batches, gradients averaged by all_reduce, twice from the same start:
1. eagerly, 6 steps;
2. as torch documents whole-network capture: 3 warm-up steps on a side stream, one step
   (forward, backward, the gradients' all_reduce, the optimizer step) captured with
   `torch.cuda.graph`, then 3 replays with new batches copied into the static inputs.
Both must end with the parameters of the same training done in plain CPU torch (every rank's
batches known to every rank, gradients averaged by hand), and with each other's. The replay's
step time (CUDA events) must equal the eager step's on the real host clock: the same kernels and
the same all_reduce, placed on the virtual timeline by the core at each replay. On the virtual
host clock (`ncclsim run`'s default) the eager step also pays the host's time to launch each op,
longer than this small step's kernels, which a replay does not: the replay must be faster, as
CUDA graphs are on a GPU. Then `make_graphed_callables` on a
small module: its graphed forward and backward give the eager module's outputs and gradients.
Every rank prints `rank R: PASS`.
"""

import copy
import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
failures = []


def check(ok: bool, what: str) -> None:
    if not ok:
        failures.append(what)
        print(f"rank {rank}: FAIL {what}", flush=True)


def batch(step: int, r: int):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


torch.manual_seed(0)
cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
STEPS = 6


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def average_grads(model) -> None:
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad.div_(world)


# The reference: plain CPU torch, each step's gradient the mean over every rank's batch.
ref = copy.deepcopy(cpu_model)
ref_opt = sgd(ref)
for step in range(STEPS):
    grads = [torch.zeros_like(p) for p in ref.parameters()]
    for r in range(world):
        ref.zero_grad(set_to_none=True)
        x, y = batch(step, r)
        torch.nn.functional.mse_loss(ref(x), y).backward()
        for g, p in zip(grads, ref.parameters()):
            g += p.grad / world
    for g, p in zip(grads, ref.parameters()):
        p.grad = g
    ref_opt.step()

# 1. Eager on the simulated GPU, timing the last step.
eager = copy.deepcopy(cpu_model).to(dev)
opt = sgd(eager)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for step in range(STEPS):
    x, y = (t.to(dev) for t in batch(step, rank))
    if step == STEPS - 1:
        torch.cuda.synchronize()
        start.record()
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.mse_loss(eager(x), y).backward()
    average_grads(eager)
    opt.step()
end.record()
torch.cuda.synchronize()
eager_ms = start.elapsed_time(end)

# 2. Warm-up, capture, replays.
model = copy.deepcopy(cpu_model).to(dev)
opt = sgd(model)
static_x, static_y = torch.zeros(8, 16, device=dev), torch.zeros(8, 4, device=dev)


def train_step() -> None:
    loss = torch.nn.functional.mse_loss(model(static_x), static_y)
    loss.backward()
    average_grads(model)
    opt.step()


side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for step in range(3):
        x, y = batch(step, rank)
        static_x.copy_(x)
        static_y.copy_(y)
        opt.zero_grad(set_to_none=True)
        train_step()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    train_step()
for step in range(3, STEPS):
    x, y = batch(step, rank)
    static_x.copy_(x)
    static_y.copy_(y)
    if step == STEPS - 1:
        torch.cuda.synchronize()
        start.record()
    graph.replay()
end.record()
torch.cuda.synchronize()
replay_ms = start.elapsed_time(end)

for name, m in (("eager", eager), ("graphed", model)):
    for (pn, p), q in zip(m.named_parameters(), ref.parameters()):
        diff = (p.detach().cpu() - q.detach()).abs().max().item()
        check(diff < 1e-5, f"{name} {pn}: max difference {diff} from the CPU")
for (pn, p), q in zip(model.named_parameters(), eager.parameters()):
    check(torch.equal(p.detach().cpu(), q.detach().cpu()), f"graphed {pn} equals eager")
print(f"rank {rank}: step time eager {eager_ms * 1e3:.3f} us, replay {replay_ms * 1e3:.3f} us", flush=True)
if os.environ.get("NCCLSIM_CLOCK") == "virtual":
    # The host's time per op passes before each eager kernel is queued, and this small step's
    # kernels are shorter than their launches; a replay launches the whole graph at once.
    check(replay_ms < 0.9 * eager_ms, f"replay {replay_ms} ms is not faster than eager {eager_ms} ms "
          "on the virtual clock")
else:
    check(abs(replay_ms - eager_ms) <= 1e-3 * eager_ms, f"replay {replay_ms} ms vs eager {eager_ms} ms")

# 3. make_graphed_callables: forward and backward of a module as graphs.
torch.manual_seed(1)
cpu_mod = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh())
plain = copy.deepcopy(cpu_mod).to(dev)
graphed = torch.cuda.make_graphed_callables(
    copy.deepcopy(cpu_mod).to(dev), (torch.randn(4, 16, device=dev, requires_grad=True),))
for i in range(3):
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(50 + i))
    a, b = x.to(dev).requires_grad_(), x.to(dev).requires_grad_()
    out_a, out_b = plain(a), graphed(b)
    out_a.sum().backward()
    out_b.sum().backward()
    check(torch.allclose(out_a.cpu(), out_b.cpu(), atol=1e-6), f"graphed forward {i}")
    check(torch.allclose(a.grad.cpu(), b.grad.cpu(), atol=1e-6), f"graphed input gradient {i}")
    want = cpu_mod(x)
    check(torch.allclose(out_b.cpu(), want.detach(), atol=1e-5), f"graphed forward {i} vs the CPU")

dist.destroy_process_group()
if failures:
    raise SystemExit(1)
print(f"rank {rank}: PASS", flush=True)
