"""Compute operations in the run's traces (`NCCLSIM_TRACE=DIR`).

Each process that computes on the simulated GPUs writes `DIR/compute-<host>-<pid>.json`, a
Chrome-trace / Perfetto JSON array of complete events (category `compute`) beside the NCCL
trace of the same process: the op, its stream's virtual start and modelled duration, the
device and its board's name, stream, shapes, dtype, FLOPs, bytes, the units and precision it was priced on, and the
`cudaProfilerStart` range it ran in. Events are buffered and the file is rewritten complete
(valid JSON) at every flush and at exit. `ncclsim trace kernels DIR` lists them with the NCCL
operations in nsys's GPU trace columns.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading

_lock = threading.Lock()
_events: list[str] = []
_state = {"file": None, "count": 0, "tail": 0, "off": False}
_FLUSH = 512


def _open():
    d = os.environ.get("NCCLSIM_TRACE")
    if not d:
        _state["off"] = True
        return None
    try:
        os.makedirs(d, exist_ok=True)
        f = open(os.path.join(d, f"compute-{socket.gethostname()}-{os.getpid()}.json"), "w+")
        f.write("[\n")
        _state["tail"] = f.tell()
        f.write("]\n")
        f.flush()
    except OSError as e:
        print(f"ncclsim: NCCLSIM_TRACE: {e}; compute is not traced", flush=True)
        _state["off"] = True
        return None
    _state["file"] = f
    atexit.register(flush)
    return f


def enabled() -> bool:
    if _state["file"] is not None:
        return True
    if _state["off"]:
        return False
    return _open() is not None


def add(event: dict) -> None:
    """Queues one event (written at the next flush)."""
    with _lock:
        _events.append(json.dumps(event, separators=(",", ":")))
        full = len(_events) >= _FLUSH
    if full:
        flush()


def flush() -> None:
    with _lock:
        f = _state["file"]
        if f is None or not _events:
            return
        f.seek(_state["tail"])
        text = (",\n" if _state["count"] else "") + ",\n".join(_events)
        f.write(text)
        _state["tail"] = f.tell()
        f.write("\n]\n")
        f.truncate()
        f.flush()
        _state["count"] += len(_events)
        _events.clear()
