"""The Python half of env_check.sh: one check per call, printing what it found.

usage: python env_check.py pynvml|versions|peer|allreduce
  pynvml     every GPU through pynvml (nvidia-ml-py): name, memory, temperature, power,
             utilization, PCI bus id, NVLinks; the count must equal torch's
  versions   CUDA and cuDNN versions through torch, and NCCL's
  peer       peer access and a peer-copy bandwidth matrix (GB/s) timed with CUDA events;
             every pair must copy the bytes intact
  allreduce  torch.distributed all_reduce on NCCL (under torchrun), checked against the sum
"""
import os
import sys


def check_pynvml():
    import pynvml
    import torch

    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    print(f"driver {pynvml.nvmlSystemGetDriverVersion()}, {n} GPUs")
    assert n == torch.cuda.device_count(), (n, torch.cuda.device_count())
    for i in range(n):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        power = pynvml.nvmlDeviceGetPowerUsage(h) / 1000
        limit = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000
        util = pynvml.nvmlDeviceGetUtilizationRates(h)
        bus = pynvml.nvmlDeviceGetPciInfo(h).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        links = 0
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                links += pynvml.nvmlDeviceGetNvLinkState(h, link) == pynvml.NVML_FEATURE_ENABLED
            except pynvml.NVMLError:
                break
        name = pynvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        print(
            f"GPU {i}: {name} {bus} {mem.used >> 20}/{mem.total >> 20} MiB "
            f"{temp} C {power:.0f}/{limit:.0f} W util {util.gpu}% nvlinks {links}"
        )
        assert name == torch.cuda.get_device_name(i), (name, torch.cuda.get_device_name(i))
        assert mem.total == torch.cuda.get_device_properties(i).total_memory
        assert 0 <= util.gpu <= 100 and 20 <= temp <= 100 and 0 < power <= limit
    pynvml.nvmlShutdown()


def check_versions():
    import torch

    cuda = torch.version.cuda
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    print(f"torch {torch.__version__}, CUDA {cuda}, cuDNN {cudnn}, NCCL {nccl}")
    assert torch.cuda.is_available() and cuda and torch.cuda.device_count() > 0
    assert cudnn, "cuDNN is not available to torch"


def check_peer():
    import torch

    n = torch.cuda.device_count()
    size = 16 << 20
    src = [torch.full((size // 4,), float(i), device=f"cuda:{i}") for i in range(n)]
    print("peer-copy bandwidth, GB/s (row: source, column: destination)")
    print("      " + "".join(f"{f'GPU{j}':>8}" for j in range(n)))
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append("       -")
                continue
            assert torch.cuda.can_device_access_peer(i, j), (i, j)
            dst = torch.empty(size // 4, device=f"cuda:{j}")
            with torch.cuda.device(i):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                dst.copy_(src[i])
                end.record()
                end.synchronize()
                ms = start.elapsed_time(end)
            assert torch.equal(dst.cpu(), src[i].cpu()), (i, j)
            assert ms > 0, (i, j, ms)
            row.append(f"{size / ms / 1e6:8.1f}")
        print(f"GPU{i:<3}" + "".join(row))


def check_allreduce():
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    want = world * (world + 1) / 2
    assert torch.all(x == want).item(), (rank, x[:4])
    print(f"rank {rank}/{world}: all_reduce sum {x[0].item():.0f} == {want:.0f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    checks = {
        "pynvml": check_pynvml,
        "versions": check_versions,
        "peer": check_peer,
        "allreduce": check_allreduce,
    }
    if len(sys.argv) != 2 or sys.argv[1] not in checks:
        sys.exit(__doc__)
    checks[sys.argv[1]]()
