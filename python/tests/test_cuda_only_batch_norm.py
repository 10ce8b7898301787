"""cuDNN's batch norm and SyncBatchNorm's kernels (`cuda_only`) against CPU torch's batch norm
and its autograd. SyncBatchNorm is followed as torch.nn.SyncBatchNorm runs it on 2 ranks with
batches of 3 and 5: per-rank statistics, gathered with their counts, then each rank's
normalisation; backward, per-rank reductions summed over the ranks (the all-reduce), then each
rank's input gradient. Together they must equal batch norm of the whole batch."""

import torch
import torch.nn.functional as F

from ncclsim.compute import cuda_only

EPS, MOMENTUM = 1e-5, 0.1
f64 = torch.float64


def close(a, b, tol=1e-10):
    return torch.allclose(a, b, rtol=tol, atol=tol)


def test_cudnn_batch_norm_training_and_eval():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 5, 5, dtype=f64), torch.randn(3, dtype=f64), torch.randn(3, dtype=f64)
    rm, rv = torch.zeros(3, dtype=f64), torch.ones(3, dtype=f64)
    ref_rm, ref_rv = rm.clone(), rv.clone()
    out, mean, invstd, reserve = cuda_only.cudnn_batch_norm(x, w, b, rm, rv, True, MOMENTUM, EPS)
    assert close(out, F.batch_norm(x, ref_rm, ref_rv, w, b, True, MOMENTUM, EPS))
    assert close(rm, ref_rm) and close(rv, ref_rv)
    dims = (0, 2, 3)
    assert close(mean, x.mean(dims)) and close(invstd, 1 / (x.var(dims, unbiased=False) + EPS).sqrt())
    assert reserve.numel() == 0
    out, *_ = cuda_only.cudnn_batch_norm(x, w, b, rm, rv, False, MOMENTUM, EPS)
    assert close(out, F.batch_norm(x, ref_rm, ref_rv, w, b, False, MOMENTUM, EPS))


def test_cudnn_batch_norm_backward_is_autograds():
    torch.manual_seed(1)
    x = torch.randn(4, 3, 5, 5, dtype=f64, requires_grad=True)
    w = torch.randn(3, dtype=f64, requires_grad=True)
    b = torch.randn(3, dtype=f64, requires_grad=True)
    g = torch.randn(4, 3, 5, 5, dtype=f64)
    F.batch_norm(x, None, None, w, b, True, MOMENTUM, EPS).backward(g)
    x0, w0, b0 = x.detach(), w.detach(), b.detach()
    _, mean, invstd, reserve = cuda_only.cudnn_batch_norm(x0, w0, b0, None, None, True, MOMENTUM, EPS)
    gx, gw, gb = cuda_only.cudnn_batch_norm_backward(x0, g, w0, None, None, mean, invstd, EPS, reserve)
    assert close(gx, x.grad) and close(gw, w.grad) and close(gb, b.grad)


def sync_forward(xs, w, b, rm, rv):
    """SyncBatchNorm's forward over ranks holding `xs`: (outputs, mean, invstd, counts)."""
    stats = [cuda_only.batch_norm_stats(x, EPS) for x in xs]
    mean_all = torch.stack([m for m, _ in stats])
    invstd_all = torch.stack([i for _, i in stats])
    counts = torch.tensor([x.numel() // x.size(1) for x in xs], dtype=mean_all.dtype)
    mean, invstd = cuda_only.batch_norm_gather_stats_with_counts(
        xs[0], mean_all, invstd_all, rm, rv, MOMENTUM, EPS, counts)
    return [cuda_only.batch_norm_elemt(x, w, b, mean, invstd, EPS) for x in xs], mean, invstd, counts


def test_sync_batch_norm_forward_equals_batch_norm_of_the_whole_batch():
    torch.manual_seed(2)
    xs = [torch.randn(3, 4, 2, 3, dtype=f64), torch.randn(5, 4, 2, 3, dtype=f64) + 1]
    w, b = torch.randn(4, dtype=f64), torch.randn(4, dtype=f64)
    rm, rv = torch.zeros(4, dtype=f64), torch.ones(4, dtype=f64)
    ref_rm, ref_rv = rm.clone(), rv.clone()
    outs, _, _, _ = sync_forward(xs, w, b, rm, rv)
    want = F.batch_norm(torch.cat(xs), ref_rm, ref_rv, w, b, True, MOMENTUM, EPS)
    assert close(torch.cat(outs), want)
    assert close(rm, ref_rm) and close(rv, ref_rv)  # running variance unbiased, as torch's


def test_sync_batch_norm_backward_equals_autograd_of_the_whole_batch():
    torch.manual_seed(3)
    xs = [torch.randn(3, 4, 2, 3, dtype=f64), torch.randn(5, 4, 2, 3, dtype=f64) * 2]
    w, b = torch.randn(4, dtype=f64), torch.randn(4, dtype=f64)
    gs = [torch.randn_like(x) for x in xs]
    full = torch.cat(xs).requires_grad_()
    wr, br = w.clone().requires_grad_(), b.clone().requires_grad_()
    F.batch_norm(full, None, None, wr, br, True, MOMENTUM, EPS).backward(torch.cat(gs))

    _, mean, invstd, counts = sync_forward(xs, w, b, None, None)
    reduced = [cuda_only.batch_norm_backward_reduce(g, x, mean, invstd, w, True, True, True)
               for g, x in zip(gs, xs)]
    sum_dy = sum(r[0] for r in reduced)  # all-reduced over the ranks
    sum_dy_xmu = sum(r[1] for r in reduced)
    count = counts.to(torch.int32)
    gx = [cuda_only.batch_norm_backward_elemt(g, x, mean, invstd, w, sum_dy, sum_dy_xmu, count)
          for g, x in zip(gs, xs)]
    assert close(torch.cat(gx), full.grad)
    # Each rank's weight and bias gradients are its share (DDP sums them as parameter gradients).
    assert close(sum(r[2] for r in reduced), wr.grad) and close(sum(r[3] for r in reduced), br.grad)


def test_reduced_precision_inputs_get_float32_statistics():
    torch.manual_seed(4)
    x = torch.randn(6, 3, 4, 4).to(torch.bfloat16)
    mean, invstd = cuda_only.batch_norm_stats(x, EPS)
    exact = x.double()
    assert mean.dtype == invstd.dtype == torch.float32
    assert torch.allclose(mean.double(), exact.mean((0, 2, 3)), rtol=1e-5, atol=1e-6)
    assert torch.allclose(invstd.double(), 1 / (exact.var((0, 2, 3), unbiased=False) + EPS).sqrt(), rtol=1e-5)
    y = cuda_only.batch_norm_elemt(x, None, None, mean, invstd, EPS)
    assert y.dtype == torch.bfloat16
    want = F.batch_norm(exact, None, None, None, None, True, 0.0, EPS)
    assert torch.allclose(y.double(), want, rtol=1e-2, atol=1e-2)
