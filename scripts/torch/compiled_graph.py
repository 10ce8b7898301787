"""A `torch.compile`d FlexAttention (forward and backward) captured in a CUDA graph and replayed
computes what the eager compiled call computes, and a buffer whose storage is freed inside the
capture (as FSDP frees its unsharded parameters) is read at replay as the capture left it, for
`ncclsim run -- python compiled_graph.py`.

Under ncclsim's torch.compile backend a compiled region's fused kernels are captured as one
graph node each, which computes all of the kernel's ops at every replay, in stream order with
the graph's other nodes. Prints `compiled-graph: ok` or exits non-zero.
"""

import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

dev = torch.device("cuda", 0)
torch.manual_seed(0)
q, k, v = (torch.randn(1, 2, 256, 16, device=dev, requires_grad=True) for _ in range(3))
mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, 256, 256, device=dev)
attend = torch.compile(flex_attention)

want = attend(q, k, v, block_mask=mask)
want.sum().backward()
want, want_grad = want.detach(), q.grad.clone()
q.grad = None

side = torch.cuda.Stream()  # warm-up on a side stream, as torch.cuda.graph's docs ask
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(2):
        attend(q, k, v, block_mask=mask).sum().backward()
        q.grad = None
torch.cuda.current_stream().wait_stream(side)

graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    out = attend(q, k, v, block_mask=mask)
    out.sum().backward()
graph.replay()
torch.cuda.synchronize()
ok = torch.allclose(out, want) and torch.allclose(q.grad, want_grad)
print(f"compiled-graph: replayed output equal {torch.allclose(out, want)}, "
      f"gradient equal {torch.allclose(q.grad, want_grad)}", flush=True)

# FSDP's pattern inside a capture: a buffer of the graph's pool is written, read, and its
# storage freed (resized to 0); each replay still reads what the buffer held at that point.
x = torch.randn(64, device=dev)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    buf = torch.empty(64, device=dev)
    buf.copy_(x)
    doubled = buf * 2
    buf.untyped_storage().resize_(0)
x.copy_(torch.arange(64.0, device=dev))
graph.replay()
torch.cuda.synchronize()
freed = torch.equal(doubled.cpu(), torch.arange(64.0) * 2)
print(f"compiled-graph: a buffer freed after the capture read at replay: {freed}", flush=True)
ok = ok and freed
print(f"compiled-graph: {'ok' if ok else 'FAIL'}", flush=True)
sys.exit(0 if ok else 1)
