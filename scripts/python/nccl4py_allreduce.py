"""NCCL's own Python bindings (nccl4py, from PyPI) on ncclsim's libnccl.so.2: each rank of
`ncclsim run --procs-per-node N` makes a communicator from a unique id shared through a file,
allocates device memory with nccl.core.mem_alloc, copies host data in with the driver API
(cuda.bindings), all-reduces on a cuda.core stream, copies the result back and checks it.
Usage: python nccl4py_allreduce.py ID_FILE  (RANK, WORLD_SIZE, LOCAL_RANK from the launcher).
The buffers carry no element type, so nccl4py reduces them as bytes: the inputs are small
enough that every sum fits in a byte."""
import os
import sys
import time

import numpy as np
from cuda.bindings import driver as drv
from cuda.core import Device
import nccl.core as nccl

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
dev = Device(int(os.environ["LOCAL_RANK"]))
dev.set_current()
idf = sys.argv[1]
if rank == 0:
    with open(idf + ".tmp", "wb") as f:
        f.write(bytes(nccl.get_unique_id()))
    os.rename(idf + ".tmp", idf)
deadline = time.time() + 60
while not os.path.exists(idf):
    if time.time() > deadline:
        sys.exit(f"rank {rank}: no unique id in {idf}")
    time.sleep(0.05)
with open(idf, "rb") as f:
    comm = nccl.Communicator.init(world, rank, nccl.UniqueId.from_bytes(f.read()))

n = 4096
ok = drv.CUresult.CUDA_SUCCESS
host = (np.arange(n) % 7 + rank).astype(np.uint8)
send, recv = nccl.mem_alloc(n), nccl.mem_alloc(n)
assert drv.cuMemcpyHtoD(int(send.handle), host.ctypes.data, n)[0] == ok
stream = dev.create_stream()
comm.allreduce(send, recv, nccl.SUM, stream=stream)
stream.sync()
got = np.empty(n, dtype=np.uint8)
assert drv.cuMemcpyDtoH(got.ctypes.data, int(recv.handle), n)[0] == ok
want = sum((np.arange(n) % 7 + r) for r in range(world)).astype(np.uint8)
if not np.array_equal(got, want):
    bad = int(np.flatnonzero(got != want)[0])
    sys.exit(f"rank {rank}: FAIL nccl4py allreduce: byte {bad} is {got[bad]}, want {want[bad]}")
comm.destroy()
print(f"rank {rank}: PASS nccl4py allreduce ({n} bytes, {world} ranks)", flush=True)
