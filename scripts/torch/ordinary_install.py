"""A torch installed the ordinary way (`pip install torch`, NVIDIA's wheels present) computes and
communicates on ncclsim's libraries under `ncclsim run`: an all-reduce of `torch.full`, a matmul
and a convolution, each checked on the CPU; prints the CUDA, cuBLAS, NCCL and cuDNN libraries the
process maps (ncclsim's, or an NVIDIA wheel's). Run by scripts/torch-wheels-check.sh.
"""

import os, torch, torch.distributed as dist
rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"]); dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev); dist.init_process_group("nccl", device_id=dev)
x = torch.full((1024,), rank + 1.0, device=dev); dist.all_reduce(x)
assert torch.equal(x.cpu(), torch.full((1024,), world * (world + 1) / 2)), x
a = torch.randn(64, 64, device=dev); assert torch.allclose((a @ a).cpu(), a.cpu() @ a.cpu(), atol=1e-5)
conv = torch.nn.Conv2d(3, 4, 3).to(dev); xi = torch.randn(2, 3, 8, 8, device=dev)
assert torch.allclose(conv(xi).cpu(), torch.nn.functional.conv2d(xi.cpu(), conv.weight.cpu(), conv.bias.cpu()), atol=1e-5)
mapped = sorted({l.split()[-1] for l in open("/proc/self/maps") if any(k in l for k in ("libcudart", "libcublas", "libnccl.so", "libcudnn"))})
print(f"rank {rank}: PASS cudnn {torch.backends.cudnn.version()} libs {[m.split('/')[-1] + (' (nvidia wheel)' if 'nvidia' in m else '') for m in mapped]}")
dist.destroy_process_group()
