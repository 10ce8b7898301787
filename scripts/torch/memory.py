"""PyTorch's caching allocator on the fake CUDA libraries: out-of-memory is
torch.OutOfMemoryError, data survives host-to-device copies (also with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which maps memory with the driver's cuMem*
API), and a CUDA tensor passed to another process is the same memory. Prints one line per
check and "memory: PASS <n> checks" at the end; exits 1 on the first failure."""
import os
import sys

import torch
import torch.multiprocessing as mp

checks = 0


def check(ok, what):
    global checks
    if not ok:
        print(f"memory: FAIL {what}", flush=True)
        sys.exit(1)
    checks += 1
    print(f"ok {what}", flush=True)


def oom(fn):
    try:
        fn()
    except torch.OutOfMemoryError:
        return True
    return False


def child(q, done):
    t = q.get()
    done.put(bool(torch.equal(t.cpu(), torch.arange(1 << 20, dtype=torch.float32) * 3)))
    t[:4].copy_(torch.full((4,), 9.0))
    torch.cuda.synchronize()
    done.put(True)


def main():
    expandable = "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    total = torch.cuda.mem_get_info(0)[1]
    check(total == 40 << 30, f"a 40 GiB device ({torch.cuda.get_device_name(0)})")
    check(oom(lambda: torch.empty(41 << 30, device="cuda")), "torch.empty(41 << 30) is OOM")
    check(oom(lambda: torch.empty(41 << 30, dtype=torch.uint8, device="cuda")), "41 GiB of uint8 is OOM")
    x = torch.arange(50 << 20, dtype=torch.int32)
    y = x.cuda()
    check(torch.equal(y.cpu(), x), "a 200 MiB host-to-device copy reads back")
    z = torch.empty_like(y)
    z.copy_(y)
    check(torch.equal(z.cpu(), x), "a device-to-device copy reads back")
    segs = torch.cuda.memory_snapshot()
    check(all(s.get("is_expandable", False) == expandable for s in segs),
          f"segments expandable = {expandable}")
    keep = torch.empty(39 << 30, dtype=torch.uint8, device="cuda")
    check(oom(lambda: torch.empty(2 << 30, dtype=torch.uint8, device="cuda")),
          "39 GiB held, 2 GiB more is OOM")
    del keep
    torch.cuda.empty_cache()
    check(torch.cuda.mem_get_info(0)[0] > 39 << 30, "memory returns after empty_cache")

    mp.set_start_method("spawn")
    q, done = mp.Queue(), mp.Queue()
    t = (torch.arange(1 << 20, dtype=torch.float32) * 3).cuda()
    p = mp.Process(target=child, args=(q, done))
    p.start()
    q.put(t)
    check(done.get(timeout=300), "another process reads the tensor")
    check(done.get(timeout=300), "another process wrote it")
    p.join(timeout=300)
    check(t[:5].cpu().tolist() == [9.0, 9.0, 9.0, 9.0, 12.0], "its write is visible here")
    print(f"memory: PASS {checks} checks", flush=True)


if __name__ == "__main__":
    main()
