"""Every operator in torch's own OpInfo database, on the simulated GPU and on the CPU.

For each OpInfo of `torch.testing._internal.common_methods_invocations.op_db` that declares CUDA
support for the dtype, each of its sample inputs is made for the simulated GPU (as the OpInfo
makes them for CUDA), copied to the CPU storage and all (so views keep their layout), run on
both, and the results compared with `torch.testing.assert_close` (torch's default tolerances for
the dtype). Ops whose values are random or undefined (sampling, dropout, `empty*`) are compared
by shape and dtype only. A sample the CPU itself refuses, or one torch's CUDA build has no kernel
for ("Could not run ... CUDA backend", as on a real GPU), is counted apart.

Run in one process under `ncclsim run` (needs `expecttest`, which the OpInfo module imports):
    ncclsim run -- python scripts/torch/opinfo_sweep.py [--dtype float32] [--max-samples N]
Prints a summary and every mismatch; exits non-zero if any sample differs or errors on the
simulated GPU only.
"""

import argparse
import sys
import time
import traceback

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

RANDOM = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "cauchy", "exponential",
          "geometric", "log_normal", "empty", "poisson", "randperm", "new_empty", "fractional_max_pool",
          "rrelu", "lowrank")

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="float32")
parser.add_argument("--max-samples", type=int, default=4)
parser.add_argument("--only", default=None, help="comma-separated op names")
parser.add_argument("--why", action="store_true", help="print why the CPU refuses a sample")
args = parser.parse_args()
dtype = getattr(torch, args.dtype)
dev = torch.device("cuda", 0)
only = set(args.only.split(",")) if args.only else None


def host_copy(t):
    """A CPU copy of a tensor with its whole storage, offset and strides."""
    if not isinstance(t, torch.Tensor) or not t.is_cuda:
        return t
    if t.layout != torch.strided:
        return t.cpu()
    c = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage().cpu(), t.storage_offset(), t.size(), t.stride())
    return c.conj() if t.is_conj() else c


def tolerance(want):
    """torch's default tolerances, widened for 16-bit floats to one unit in the last place at the
    result's scale: the simulated GPU and the CPU may reach an op through different CPU
    algorithms (cuDNN's ops map to `convolution`, whose CPU backends differ by path), which
    round differently."""
    ulp = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}.get(want.dtype)
    if ulp is None or want.numel() == 0:
        return {}
    scale = want.float().abs().nan_to_num(0.0, 0.0, 0.0).max().item()
    return {"atol": ulp * max(1.0, scale), "rtol": 1.6e-2 if want.dtype == torch.bfloat16 else 1e-3}


def outputs(r):
    flat, _ = tree_flatten(r)
    return [t for t in flat if isinstance(t, torch.Tensor)]


counts = {"ops": 0, "samples": 0, "equal": 0, "equal-in-float32": 0, "shape-only": 0, "cpu-refuses": 0,
          "no-cuda-kernel": 0,
          "mismatch": 0, "error": 0}
bad = []
start = time.time()
for op in op_db:
    if only and op.name not in only:
        continue
    if dtype not in op.supported_dtypes("cuda"):
        continue
    counts["ops"] += 1
    random_op = any(k in op.name for k in RANDOM)
    try:
        samples = list(op.sample_inputs(dev, dtype, requires_grad=False))[: args.max_samples]
    except Exception:
        continue
    for s in samples:
        counts["samples"] += 1
        random = random_op or (s.kwargs.get("dropout_p") or 0) > 0
        gpu_args = (s.input, *s.args)
        upcast = False
        try:
            want = op(*tree_map(host_copy, gpu_args), **tree_map(host_copy, s.kwargs))
        except Exception as e:
            # No CPU kernel for a 16-bit type: the reference is the op in float32, cast back.
            try:
                if (dtype not in (torch.float16, torch.bfloat16) or op.name.startswith(("fft.", "stft", "istft"))
                        or ("BFloat16" not in str(e) and "Half" not in str(e))):
                    raise
                f32 = lambda t: host_copy(t).float() if isinstance(t, torch.Tensor) and t.dtype == dtype else host_copy(t)
                want = tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t,
                                op(*tree_map(f32, gpu_args), **tree_map(f32, s.kwargs)))
                upcast = True
            except Exception:
                counts["cpu-refuses"] += 1
                if args.why:
                    print(f"CPU-REFUSES {op.name}: {str(e).splitlines()[0][:150]}")
                continue
        try:
            got = op(*gpu_args, **s.kwargs)
            g, w = outputs(got), outputs(want)
            if len(g) != len(w):
                raise AssertionError(f"{len(g)} outputs, want {len(w)}")
            for a, b in zip(g, w):
                if a.shape != b.shape or a.dtype != b.dtype:
                    raise AssertionError(f"{tuple(a.shape)} {a.dtype}, want {tuple(b.shape)} {b.dtype}")
                if not random:
                    torch.testing.assert_close(a.cpu(), b, equal_nan=True, check_device=False, **tolerance(b))
            if not isinstance(got, torch.Tensor) and not isinstance(got, (tuple, list)) and not random:
                if got != want and not (got != got and want != want):
                    raise AssertionError(f"{got!r}, want {want!r}")
            counts["shape-only" if random else "equal-in-float32" if upcast else "equal"] += 1
        except AssertionError as e:
            counts["mismatch"] += 1
            detail = " ".join(line.strip() for line in str(e).splitlines()[:4])
            bad.append(f"MISMATCH {op.name} ({op.variant_test_name}): {detail[:300]}")
        except NotImplementedError as e:
            if "Could not run" in str(e) and "CUDA" in str(e):
                counts["no-cuda-kernel"] += 1
                continue
            if upcast and ("BFloat16" in str(e) or "Half" in str(e)):
                counts["cpu-refuses"] += 1  # refused on the simulated GPU as on the CPU
                continue
            counts["error"] += 1
            bad.append(f"ERROR {op.name} ({op.variant_test_name}): {str(e).splitlines()[0][:200]}")
        except RuntimeError as e:
            if upcast and ("BFloat16" in str(e) or "Half" in str(e)):
                counts["cpu-refuses"] += 1  # refused on the simulated GPU as on the CPU
                continue
            counts["error"] += 1
            where = traceback.extract_tb(e.__traceback__)[-1]
            bad.append(f"ERROR {op.name} ({op.variant_test_name}): {type(e).__name__}: "
                       f"{str(e).splitlines()[0][:200] if str(e) else ''} [{where.name}]")
        except Exception as e:
            counts["error"] += 1
            where = traceback.extract_tb(e.__traceback__)[-1]
            bad.append(f"ERROR {op.name} ({op.variant_test_name}): {type(e).__name__}: "
                       f"{str(e).splitlines()[0][:200] if str(e) else ''} [{where.name}]")

for line in bad:
    print(line)
print(f"opinfo-sweep {args.dtype}: " + ", ".join(f"{k} {v}" for k, v in counts.items())
      + f" in {time.time() - start:.0f} s", flush=True)
sys.exit(1 if counts["mismatch"] or counts["error"] else 0)
