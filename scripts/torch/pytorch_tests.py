"""PyTorch's own distributed test suite, unmodified, from the installed torch, under `ncclsim run`.

The torch wheel ships the test class PyTorch's CI runs for every process-group backend:
`torch.testing._internal.distributed.distributed_test.DistributedTest._DistTestBase`
(collectives of every kind and dtype on CUDA tensors, subgroups, DDP in its many modes,
SyncBatchNorm, the autograd profiler's view of collectives, monitored barriers, model
averagers). PyTorch's `test/distributed/test_distributed_spawn.py` runs it with `BACKEND=nccl`
by mixing it into `TestDistBackend` (each test spawns `WORLD_SIZE` processes, which meet through
a file store) and turning cuDNN's TF32 off; this script does the same, so nothing is fetched:
the tests are those of the torch under test.

Usage (inside `ncclsim run --topo FILE --lib-path STUBS -- python ...`):
    [WORLD_SIZE=N] pytorch_tests.py [--only NAME,...|torch] [--report FILE]

WORLD_SIZE is the processes per test (default 2).

Each test's outcome is one of: passed; skipped by the test's own decorators (a CPU-only,
gloo-only or MPI-only test, a world size it does not run at; counted per reason); failed as
`EXPECTED` below says, with the reason; failed otherwise. The script exits 1 if any test fails
that `EXPECTED` does not name, or passes although it names it (the list is then stale). The
report (JSON) holds every test's outcome and the counts.

`EXPECTED` has three kinds of entries:
- "torch": the test does not hold for torch's own default NCCL backend (torch 2.15's
  `c10d::nccl2`), only for its previous one (`ProcessGroupNCCL`, chosen by
  `TORCH_DIST_USE_NCCL2=0`); the suite runs these again with that setting, where they must pass.
- "simulator": a behaviour of ncclsim that differs from a GPU's, named.
- "racy": as "torch" (it passes on the previous backend), and under ncclsim the outcome on
  nccl2 depends on the order in which the host runs the threads of one rank (named); either
  outcome is counted as such ("either outcome"), not as a pass.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import unittest

# What the tests read at import: the backend and the world size.
os.environ.setdefault("BACKEND", "nccl")
os.environ.setdefault("WORLD_SIZE", "2")

import torch  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

_PROFILER_NAMES = (
    "torch", "counts the autograd profiler's events named `nccl:<collective>`, which torch's "
    "previous backend records; torch's default backend (nccl2) names them without the prefix "
    "(`all_reduce`, `broadcast`), so the count is 0")
_BOUND_DEVICE = (
    "torch", "nccl2 binds a process group to the device current when it is created (cuda:0: "
    "the test sets each rank's device only after creating the group), and refuses the rank's "
    "own device in the object collectives that follow")
_HANG = (
    "simulator", "rank 1 calls an all_reduce rank 0 never calls; NCCL returns at once and the "
    "kernel waits on the GPU, where ncclsim moves the data on the host inside the call, so the "
    "call itself waits (until rank 0 ends the test) and torch's wait(timeout) is never reached")

_BARRIER_DEVICE = (
    "racy", "nccl2 binds the group to cuda:0 (as above) but runs rank 1's barrier on its "
    "tensors' device, cuda:1, and makes the host wait for cuda:0's current stream, which does "
    "not wait for the barrier: rank 1 leaves before rank 0 reaches it, and its main thread's "
    "clock moves past rank 0's only if another of its threads has waited for work that ends "
    "later before the main thread reads the clock. The virtual clock is the "
    "host's: a wait on any thread moves it, so the outcome depends on which of the two threads "
    "the host runs first (on a GPU the main thread reads the clock at once and the test "
    "fails); under `--clock real` ncclsim's meeting of the ranks, which happens on the host "
    "inside the call, hides this")
_HOST_FREE = (
    "simulator", "under `--clock real` the host costs nothing on the devices' timeline, so DDP's "
    "two CUDA events around its communication start, with no kernel between, are 0 ns apart "
    "and the measured compute/communication overlap the test requires to be at least 1 ns is "
    "0 (under the virtual clock, the default, it passes)")

EXPECTED: dict[str, tuple[str, str]] = {
    **{name: _PROFILER_NAMES for name in (
        "test_all_gather_cuda",
        "test_all_gather_cuda_complex",
        "test_all_reduce_sum_cuda",
        "test_all_reduce_sum_cuda_async",
        "test_all_reduce_sum_cuda_complex",
        "test_all_to_all_single_equal_split_cuda",
        "test_all_to_all_single_equal_split_cuda_complex",
        "test_all_to_all_single_equal_split_full_group_cuda",
        "test_broadcast_cuda",
        "test_reduce_sum_cuda",
        "test_reduce_sum_cuda_twice",
        "test_ddp_profiling_torch_profiler",
        "test_send_recv_nccl_autograd_profiler",
        "test_send_recv_nccl_torch_profiler",
    )},
    "test_all_gather_object_default_pg": _BOUND_DEVICE,
    "test_all_gather_object_subgroup": _BOUND_DEVICE,
    "test_monitored_barrier_allreduce_hang": _HANG,
    "test_monitored_barrier_allreduce_hang_wait_all_ranks": _HANG,
    **({"test_ddp_logging_data_gpu": _HOST_FREE} if os.environ.get("NCCLSIM_CLOCK") == "real"
       else {"test_barrier_cuda": _BARRIER_DEVICE}),
}


def _name(test) -> str:
    """A test's method name."""
    return test.id().rsplit(".", 1)[-1]


class _Outcomes(unittest.TextTestResult):
    """unittest's verbose result, keeping each test's outcome by name."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes: dict[str, tuple[str, str]] = {}

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes[_name(test)] = ("passed", "")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[_name(test)] = ("skipped", reason)

    def _failed(self, test, err):
        self.outcomes[_name(test)] = ("failed", self._exc_info_to_string(err, test)[-2000:])

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._failed(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._failed(test, err)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """As PyTorch's test_distributed_spawn.py defines it (at module level: each test's spawned
    processes import this file and find the class by name)."""

    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


def _suite(only: set[str] | None):
    suite = unittest.TestLoader().loadTestsFromTestCase(TestDistBackendWithSpawn)
    if only is not None:
        suite = unittest.TestSuite(t for t in suite if _name(t) in only)
    return suite


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated test names, or 'torch' for EXPECTED's torch entries")
    p.add_argument("--report", help="write every outcome and the counts here (JSON)")
    args = p.parse_args()
    only = None
    if args.only == "torch":
        only = {n for n, (kind, _) in EXPECTED.items() if kind in ("torch", "racy")}
    elif args.only:
        only = set(args.only.split(","))
    temp = tempfile.mkdtemp(prefix="ncclsim-pytorch-tests-")
    os.environ["TEMP_DIR"] = temp
    try:
        suite = _suite(only)
        result = unittest.TextTestRunner(resultclass=_Outcomes, verbosity=2).run(suite)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    # With --only torch the setting under test is the previous backend, where they must pass.
    expected = {} if args.only == "torch" else EXPECTED
    counts = {"passed": 0, "skipped": 0, "failed as expected": 0, "failed": 0, "passed unexpectedly": 0,
              "either outcome": 0}
    skips: collections.Counter[str] = collections.Counter()
    problems = []
    for name, (outcome, detail) in sorted(result.outcomes.items()):
        if outcome == "skipped":
            counts["skipped"] += 1
            skips[detail] += 1
        elif expected.get(name, ("", ""))[0] == "racy":
            counts["either outcome"] += 1
        elif outcome == "passed" and name in expected:
            counts["passed unexpectedly"] += 1
            problems.append(f"{name}: passed, but EXPECTED says it fails ({expected[name][1]})")
        elif outcome == "passed":
            counts["passed"] += 1
        elif name in expected:
            counts["failed as expected"] += 1
        else:
            counts["failed"] += 1
            problems.append(f"{name}: failed\n{detail}")
    print(f"pytorch-tests: {len(result.outcomes)} tests, world size {os.environ['WORLD_SIZE']}: "
          + ", ".join(f"{v} {k}" for k, v in counts.items()))
    for reason, n in skips.most_common():
        print(f"  skipped {n}: {reason}")
    for name in sorted(expected):
        outcome = result.outcomes.get(name, ("", ""))[0]
        kind, why = expected[name]
        if outcome == "failed" or (kind == "racy" and outcome == "passed"):
            print(f"  expected ({kind}, {outcome}) {name}: {why}")
    for problem in problems:
        print(f"pytorch-tests: PROBLEM {problem}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"counts": counts, "skips": skips,
                       "outcomes": {k: v[0] for k, v in sorted(result.outcomes.items())}}, f, indent=1)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
