"""A two-stage pipeline with the 1F1B schedule: its step time and bubble follow from the modelled
stage times.

Run under `ncclsim run --compute time` with torchrun, 2 processes (stage 0 and stage 1; one
node or two). Each stage is a stack of bf16 matmuls (forward: activation x weight per layer;
backward: the input gradient and the weight gradient per layer, written out by hand so the
op sequence is fixed); activations go forward and gradients backward with `batch_isend_irecv`,
paired as Megatron-LM pairs them (send-forward with receive-backward, and the reverse), over
M micro-batches.

The check: the step time that CUDA events read on stage 0 equals the makespan of the 1F1B
dependency recurrence evaluated on the modelled times measured separately on each rank (one
forward, one backward, one lone transfer, one paired exchange): every transfer starts when both
stages have reached it and lasts its modelled time, as NCCL's send/receive do. The bubble is
printed beside the textbook fraction (p - 1) / (m + p - 1), which it must not undercut.
Prints `rank R: PASS` and exits non-zero on a mismatch.
"""

import os
import sys

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
if world != 2:
    sys.exit("pipeline.py: run with 2 processes (2 stages)")
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
peer = 1 - rank
M, LAYERS, B, H = 6, 4, 64, 8192
dt = torch.bfloat16
weights = [torch.empty(H, H, device=dev, dtype=dt) for _ in range(LAYERS)]


def forward(x):
    for w in weights:
        x = x @ w
    return x


def backward(g, x):
    for w in reversed(weights):
        _ = x.t() @ g  # weight gradient
        g = g @ w.t()  # input gradient
    return g


def exchange(send=None, recv=None):
    """One batch of transfers with the peer; the current stream waits for it."""
    ops = []
    if send is not None:
        ops.append(dist.P2POp(dist.isend, send, peer))
    if recv is not None:
        ops.append(dist.P2POp(dist.irecv, recv, peer))
    for req in dist.batch_isend_irecv(ops):
        req.wait()


def timed(fn):
    """Virtual ms of fn on this rank, after the ranks are aligned by a barrier."""
    dist.barrier()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e)


x = torch.empty(B, H, device=dev, dtype=dt)
g = torch.empty(B, H, device=dev, dtype=dt)
buf = torch.empty(B, H, device=dev, dtype=dt)
tf = timed(lambda: forward(x))
tb = timed(lambda: backward(g, x))
# A lone transfer and a paired exchange, both stages ready together.
c1 = timed(lambda: exchange(send=x) if rank == 0 else exchange(recv=buf))
c2 = timed(lambda: exchange(send=x, recv=buf))


def one_f_one_b():
    if rank == 0:
        forward(x)
        exchange(send=x)  # send act 1 (the stream waits: the sender's side of the transfer)
        for _ in range(M - 1):
            forward(x)
            exchange(send=x, recv=buf)  # send act i+1, receive grad i
            backward(buf, x)
        exchange(recv=buf)  # grad M
        backward(buf, x)
    else:
        exchange(recv=buf)  # act 1
        for i in range(M):
            forward(buf)
            backward(g, buf)
            if i < M - 1:
                exchange(send=g, recv=buf)  # send grad i, receive act i+1
            else:
                exchange(send=g)


step = timed(one_f_one_b)

# Everyone's measured stage times, so each rank evaluates the same recurrence.
mine = torch.tensor([tf, tb, c1, c2], dtype=torch.float64)
both = [torch.zeros(4, dtype=torch.float64, device=dev) for _ in range(2)]
dist.all_gather(both, mine.to(dev))
(tf0, tb0, c10, c20), (tf1, tb1, _, _) = [t.cpu().tolist() for t in both]


def recurrence():
    """Stage 0's makespan: each stage's stream runs its ops in order; a transfer completes at
    max(both stages ready) + its time, and both streams wait for it."""
    t = [0.0, 0.0]

    def xfer(cost):
        done = max(t) + cost
        t[0] = t[1] = done

    t[0] += tf0
    xfer(c10)
    for i in range(M):
        t[1] += tf1 + tb1
        if i < M - 1:
            t[0] += tf0
            xfer(c20)
            t[0] += tb0
        else:
            xfer(c10)
            t[0] += tb0
    return t[0]


want = recurrence()
bubble = 1 - M * (tf0 + tb0) / step
textbook = (world - 1) / (M + world - 1)
print(f"rank {rank}: stage times forward {tf:.4f} ms backward {tb:.4f} ms, transfer {c1:.4f} / "
      f"{c2:.4f} ms; 1F1B step {step:.4f} ms", flush=True)
if rank == 0:
    print(f"pipeline: step {step:.4f} ms, 1F1B recurrence {want:.4f} ms; bubble {bubble:.4f} "
          f"(textbook (p-1)/(m+p-1) = {textbook:.4f})", flush=True)
    if abs(step - want) > 1e-3 * want:
        print(f"rank 0: FAIL the step took {step} ms, the recurrence gives {want} ms", flush=True)
        sys.exit(1)
    # Transfers on the critical path can only add to the textbook bubble.
    if not textbook - 1e-3 <= bubble < textbook + 0.1:
        print(f"rank 0: FAIL bubble {bubble} outside [{textbook}, {textbook + 0.1})", flush=True)
        sys.exit(1)
dist.barrier()
print(f"rank {rank}: PASS", flush=True)
dist.destroy_process_group()
