"""torch's own cuBLAS and cuBLASLt calls on ncclsim's libcublas/libcublasLt (`ncclsim run
--compute off`, so torch's ops are not computed by ncclsim's Python package): mm, addmm, bmm,
baddbmm, linear with bias (f32, f64, f16, bf16) and mv on CUDA tensors, each compared with the
same op on the CPU. Prints one line per check and "cublas: PASS <n> checks" at the end; exits 1
on the first failure."""
import sys

import torch

torch.manual_seed(0)
maps = open("/proc/self/maps").read()
if "libcublas" not in maps:
    print("cublas: FAIL libcublas is not loaded", flush=True)
    sys.exit(1)
checks = 0


def check(name, f, *args, atol=1e-4):
    global checks
    want = f(*args).float()
    got = f(*[a.cuda() for a in args]).cpu().float()
    err = float((got - want).abs().max())
    if not torch.allclose(got, want, atol=atol, rtol=1e-2):
        print(f"cublas: FAIL {name}: max error {err}", flush=True)
        sys.exit(1)
    checks += 1
    print(f"ok {name} (max error {err:.3g})", flush=True)


r = torch.randn
check("mm", lambda a, b: a @ b, r(33, 17), r(17, 9))
check("mm of transposed views", lambda a, b: a.t() @ b.t(), r(7, 5), r(3, 7))
check("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), r(5, 3), r(5, 7), r(7, 3))
check("bmm", torch.bmm, r(4, 6, 5), r(4, 5, 3))
check("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=-1.0), r(4, 3, 2), r(4, 3, 6), r(4, 6, 2))
lin = torch.nn.functional.linear
check("linear f32", lin, r(8, 16), r(4, 16), r(4))
check("linear f64", lin, r(8, 16).double(), r(4, 16).double(), r(4).double(), atol=1e-10)
check("linear f16", lin, r(8, 16).half(), r(4, 16).half(), r(4).half(), atol=2e-2)
check("linear bf16", lin, r(8, 16).bfloat16(), r(4, 16).bfloat16(), r(4).bfloat16(), atol=0.1)
check("mv", lambda a, v: a @ v, r(6, 4), r(4))
check("mv transposed", lambda a, v: a.t() @ v, r(4, 6), r(4))
print(f"cublas: PASS {checks} checks", flush=True)
