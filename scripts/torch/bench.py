"""Communication benchmarks as people run them on real clusters, under torchrun.

1. A quick NCCL test: all_reduce, broadcast, all_gather and reduce_scatter of float32 at 1, 4, 16
   and 64 MB (nccl-tests' sizes: the whole buffer; for all_gather the output, for reduce_scatter
   the input), on the world and on each node's tensor-parallel group, each timed with
   torch.cuda.Event around ITERS back-to-back calls after a warm-up call, printing time, algbw
   and busbw as nccl-tests does.
2. Pipeline-parallel send/recv of 64 MB between stages: rank 0 -> the first rank of the next
   node (over the network) and rank 0 -> rank 1 (inside a node).
3. A peer copy `tensor.to("cuda:1")` of 64 MB on rank 0.

On ncclsim's fake GPUs the events measure virtual time, so every number is the simulation's
prediction for the simulated hardware (scripts/torch-e2e.sh compares part 1 with `ncclsim
predict`). Rank 0 prints one `bench ...` line per measurement; every rank prints `rank R: PASS`.
"""

import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
per_node = int(os.environ["LOCAL_WORLD_SIZE"])
dev = torch.device("cuda", local)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
ITERS = 4
MB = 1 << 20


def timed(fn):
    """Microseconds per call of fn, ITERS calls after a warm-up call (which also aligns the
    ranks' streams: every rank leaves a collective at the same virtual time)."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / ITERS


def report(comm, op, size, us, factor):
    algbw = size / us / 1e3
    if rank == 0:
        print(f"bench {comm} {op} {size} time_us {us:.3f} algbw {algbw:.3f} "
              f"busbw {algbw * factor:.3f}", flush=True)


def quick_test(name, group, n):
    for size in (1 * MB, 4 * MB, 16 * MB, 64 * MB):
        count = size // 4
        buf = torch.ones(count, dtype=torch.float32).to(dev)
        us = timed(lambda: dist.all_reduce(buf, group=group))
        report(name, "all_reduce", size, us, 2 * (n - 1) / n)
        us = timed(lambda: dist.broadcast(buf, src=dist.get_global_rank(group, 0)
                                          if group is not None else 0, group=group))
        report(name, "broadcast", size, us, 1.0)
        shard = torch.ones(count // n, dtype=torch.float32).to(dev)
        us = timed(lambda: dist.all_gather_into_tensor(buf, shard, group=group))
        report(name, "all_gather", size, us, (n - 1) / n)
        us = timed(lambda: dist.reduce_scatter_tensor(shard, buf, group=group))
        report(name, "reduce_scatter", size, us, (n - 1) / n)
        del buf, shard


quick_test("world", None, world)
tp = [dist.new_group(list(range(k * per_node, (k + 1) * per_node)))
      for k in range(world // per_node)]
quick_test("tp", tp[rank // per_node], per_node)

# Pipeline stages: rank 0 sends 64 MB to a peer, which receives it; the others wait. The
# transfer is a batch_isend_irecv, as pipeline schedules issue it: the requests' wait() makes
# the current stream wait for the transfer, so the events time it.
size = 64 * MB


def p2p(op, peer, buf):
    for req in dist.batch_isend_irecv([dist.P2POp(op, buf, peer)]):
        req.wait()


for label, peer in (("pp_network", per_node if world > per_node else None),
                    ("pp_nvlink", 1 if per_node > 1 else None)):
    if peer is None:
        continue
    buf = torch.ones(size // 4, dtype=torch.float32).to(dev)
    if rank == 0:
        us = timed(lambda: p2p(dist.isend, peer, buf))
        report(label, "send", size, us, 1.0)
    elif rank == peer:
        timed(lambda: p2p(dist.irecv, 0, buf))
    dist.barrier()

if rank == 0 and torch.cuda.device_count() > 1:
    x = torch.ones(size // 4, dtype=torch.float32).to(dev)
    us = timed(lambda: x.to("cuda:1"))
    report("peer_copy", "cuda0_to_cuda1", size, us, 1.0)

dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: PASS", flush=True)
