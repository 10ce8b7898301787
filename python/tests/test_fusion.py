"""`fusion`: which aten ops of a compiled graph become one kernel and what it moves, on plain
CPU torch graphs (no core: the kernels it would price are captured)."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ncclsim.compute import fusion, timing


def norm_then_matmul(x, w):
    mean = x.mean(-1, keepdim=True)
    y = (x - mean) * torch.rsqrt((x - mean).pow(2).mean(-1, keepdim=True) + 1e-5)
    h = y @ w
    return torch.relu(h) * 2.0


def graph_runs(fn, *args):
    gm = make_fx(fn)(*args)
    return gm, fusion.runs(gm.graph)


def distinct(runs):
    return list(dict.fromkeys(runs.values()))


def test_pointwise_and_reduction_chains_are_runs_split_by_the_matmul():
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    gm, runs = graph_runs(norm_then_matmul, x, w)
    first, second = distinct(runs)
    assert first.name.startswith("triton_red_fused_mean_sub")
    assert second.name == "triton_poi_fused_relu_mul"
    mm = [n for n in gm.graph.nodes if n.op == "call_function" and "mm" in str(n.target)]
    assert mm and all(n not in runs for n in mm)
    # The norm's result is the run's only value read outside it (by the matmul).
    assert [fusion._base(n.target) for n in first.outputs] == ["mul"]


def test_a_lone_pointwise_op_stays_its_own_kernel():
    _, runs = graph_runs(lambda x, w: torch.relu(x) @ w, torch.randn(4, 4), torch.randn(4, 4))
    assert runs == {}


def test_a_run_reads_its_inputs_once_and_writes_what_is_used_outside():
    priced = []
    real = timing.price_fused
    timing.price_fused = lambda name, flops, nbytes, ops: priced.append((name, nbytes))
    try:
        x, w = torch.randn(32, 64), torch.randn(64, 8)
        gm = make_fx(norm_then_matmul)(x, w)
        out = fusion.compiler(gm, [x, w])([x, w])
    finally:
        timing.price_fused = real
    torch.testing.assert_close(out, norm_then_matmul(x, w))
    (norm, norm_bytes), (act, act_bytes) = priced
    # x is read by four ops of the norm and counted once; the normalised x written once.
    assert norm_bytes == x.nbytes + x.nbytes
    # relu(h) * 2: h (32 x 8) read once, the result written once.
    assert act_bytes == 2 * 32 * 8 * 4


def test_the_backend_computes_what_eager_torch_computes():
    torch.manual_seed(0)
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 4, requires_grad=True)
    want = norm_then_matmul(x, w)
    want.sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    torch._dynamo.reset()
    got = torch.compile(norm_then_matmul, backend=fusion.backend())(x, w)
    got.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x.grad, gx)
    torch.testing.assert_close(w.grad, gw)


def test_flex_attention_is_recognised():
    from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward

    assert fusion.is_flex(flex_attention) and fusion.is_flex(flex_attention_backward)
    assert not fusion.is_flex(torch.ops.aten.mm.default)


def test_block_density_of_a_causal_mask():
    # 4 x 4 blocks of 128 under a causal mask: the 10 on and below the diagonal are computed.
    def causal(b, h, q, k):
        return q >= k

    mask = (None,) * 3 + (128, 128, causal)
    assert timing._block_density(mask, 512, 512) == 10 / 16
