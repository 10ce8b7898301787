"""Checks the outputs of scripts/torch-e2e.sh against `ncclsim` (plain Python, no torch).

  check_outputs.py bench NCCLSIM TOPO NODES LOG
      every `bench world|tp OP SIZE time_us T ...` line of scripts/torch/bench.py equals
      `ncclsim predict` for the same communicator (world: NODES nodes; tp: one node), op and
      size, within 0.1 %; the pipeline send over the network is slower than inside the node,
      and the peer copy is the fastest of the three.
  check_outputs.py host-clock NCCLSIM TOPO NODES LOG
      every `host-clock all_reduce SIZE time_us T` line of scripts/torch/host_clock.py (timed
      with time.perf_counter under `ncclsim run --clock virtual`) equals `ncclsim predict` for
      the world (NODES nodes of TOPO) within 1 %.
  check_outputs.py info NCCLSIM TOPO NODES DEBUG_FILE
      the world communicator's INFO lines in rank 0's NCCL_DEBUG_FILE equal
      `ncclsim plan --topo TOPO --nodes NODES --rank 0` for the world.
Prints what it compared; exits 1 on the first difference.
"""

import json
import re
import subprocess
import sys


def fail(msg):
    print(f"check_outputs: FAIL: {msg}", flush=True)
    sys.exit(1)


def predicted(ncclsim, topo, nodes, op, size):
    out = subprocess.run(
        [ncclsim, "predict", "--topo", topo, "--nodes", str(nodes), "--op", op,
         "-b", str(size), "-e", str(size), "--format", "json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["rows"][0]["time_us"]


def bench(ncclsim, topo, nodes, log):
    lines = [l.split() for l in open(log, errors="replace") if l.startswith("bench ")]
    got = {}
    for f in lines:
        got[(f[1], f[2], int(f[3]))] = float(f[5])
    coll = [k for k in got if k[0] in ("world", "tp")]
    if len(coll) != 32:
        fail(f"{log}: {len(coll)} collective measurements, expected 32 (2 comms x 4 ops x 4 sizes)")
    for (comm, op, size) in sorted(coll):
        want = predicted(ncclsim, topo, nodes if comm == "world" else 1, op, size)
        t = got[(comm, op, size)]
        ok = abs(t - want) <= 1e-3 * want
        print(f"{comm:5} {op:14} {size:>9} B  torch.cuda.Event {t:10.3f} us  "
              f"ncclsim predict {want:10.3f} us  {'ok' if ok else 'DIFFERENT'}")
        if not ok:
            fail(f"{comm} {op} {size}: measured {t} us, predicted {want} us")
    net = got.get(("pp_network", "send", 64 << 20))
    nvl = got.get(("pp_nvlink", "send", 64 << 20))
    copy = got.get(("peer_copy", "cuda0_to_cuda1", 64 << 20))
    if None in (net, nvl, copy):
        fail(f"{log}: missing pipeline or peer-copy lines")
    print(f"64 MiB: pipeline send across nodes {net:.1f} us, inside a node {nvl:.1f} us, "
          f"peer copy cuda:0 -> cuda:1 {copy:.1f} us")
    if not net > nvl > 0 or not nvl >= copy > 0:
        fail("expected network send > NVLink send >= peer copy")


def host_clock(ncclsim, topo, nodes, log):
    lines = [l.split() for l in open(log, errors="replace") if l.startswith("host-clock ")]
    if len(lines) != 4:
        fail(f"{log}: {len(lines)} host-clock measurements, expected 4 sizes")
    for f in lines:
        op, size, t = f[1], int(f[2]), float(f[4])
        want = predicted(ncclsim, topo, nodes, op, size)
        ok = abs(t - want) <= 1e-2 * want
        print(f"{op} {size:>9} B  time.perf_counter {t:10.3f} us  "
              f"ncclsim predict {want:10.3f} us  {'ok' if ok else 'DIFFERENT'}")
        if not ok:
            fail(f"{op} {size}: measured {t} us with the host clock, predicted {want} us")


def info(ncclsim, topo, nodes, debug_file):
    out = subprocess.run(
        [ncclsim, "plan", "--topo", topo, "--nodes", str(nodes), "--rank", "0"],
        check=True, capture_output=True, text=True).stdout
    want, cur = [], None
    for line in out.splitlines():
        if line.startswith("# comm "):
            cur = line[len("# comm "):].split(":")[0]
        elif line.startswith("NCCL INFO ") and cur == "world":
            want.append(line[len("NCCL INFO "):])
    got = []
    for line in open(debug_file, errors="replace"):
        m = re.search(r" NCCL INFO (.*)$", line.rstrip("\n"))
        if m:
            got.append(m.group(1))
    # The world is the first communicator rank 0 creates; its plan lines come first. The
    # runtime's `comm %p` is the program's handle, the planner's a placeholder.
    def unpointed(line):
        return re.sub(r"^comm 0x[0-9a-f]+ ", "comm * ", line)
    want = [unpointed(w) for w in want]
    first = [unpointed(g) for g in got if not g.endswith("Init COMPLETE")][: len(want)]
    if not want:
        fail("ncclsim plan printed no INFO lines for the world")
    if first != want:
        for i, (a, b) in enumerate(zip(first, want)):
            if a != b:
                fail(f"{debug_file}: INFO line {i} is {a!r}, ncclsim plan prints {b!r}")
        fail(f"{debug_file}: {len(first)} INFO lines, ncclsim plan prints {len(want)}")
    print(f"world communicator: rank 0's {len(want)} INFO lines equal `ncclsim plan --rank 0`")


if __name__ == "__main__":
    modes = {"bench": bench, "host-clock": host_clock, "info": info}
    if len(sys.argv) != 6 or sys.argv[1] not in modes:
        print(__doc__)
        sys.exit(2)
    modes[sys.argv[1]](sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
