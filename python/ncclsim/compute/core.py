"""The fake CUDA core as the package calls it: through the core's vtable
(`ncclsim_cuda_core_v1` in libncclsim_cuda.so), laid out as the Rust declaration generates it
(`ncclsim._core_abi`), the same entries the CUDA front-ends call.

`core()` is None outside ncclsim's libraries (a torch on real GPUs, or the unit tests), and when
the loaded core is of another vtable version (then said once)."""

from __future__ import annotations

import ctypes
import struct

from .. import _core_abi as abi


def _struct(name: str, fields: list, size: int):
    cls = type(name, (ctypes.Structure,), {"_fields_": [(f, getattr(ctypes, t)) for f, t, _ in fields]})
    offsets = [getattr(cls, f).offset for f, _, _ in fields]
    if ctypes.sizeof(cls) != size or offsets != [o for _, _, o in fields]:
        raise ImportError(f"ncclsim: {name} does not have the core's layout")
    return cls


KernelCost = _struct("KernelCost", abi.KERNEL_COST_FIELDS, abi.KERNEL_COST_SIZE)
LaunchTimes = _struct("LaunchTimes", abi.LAUNCH_TIMES_FIELDS, abi.LAUNCH_TIMES_SIZE)

_PACK_CODES = {"c_double": "d", "c_int32": "i", "c_uint32": "I", "c_uint64": "Q"}


def _packer(name: str, fields: list, size: int) -> struct.Struct:
    """Writes every field of a `fields` layout in one call (native byte order, standard sizes,
    no padding: the layout's own offsets, checked): setting a structure's fields one by one
    costs an attribute store each, on every op."""
    codes = [_PACK_CODES[t] for _, t, _ in fields]
    offsets = [struct.calcsize("=" + "".join(codes[:i])) for i in range(len(codes))]
    packer = struct.Struct("=" + "".join(codes))
    if packer.size != size or offsets != [o for _, _, o in fields]:
        raise ImportError(f"ncclsim: {name}'s fields do not pack to the core's layout")
    return packer


# `pack_cost(cost, 0, flops, bytes, unit, precision, batch, m, n, k, attention, flags)` writes a
# whole `KernelCost`, in the order of its fields.
pack_cost = _packer("KernelCost", abi.KERNEL_COST_FIELDS, abi.KERNEL_COST_SIZE).pack_into


class RunSettings:
    """What the package needs of the run environment (`run_settings`): the compute mode (one
    of the `RUN_COMPUTE_*` codes), whether ops take modelled time, whether a trace directory
    is set, whether the job is folded."""

    def __init__(self, compute: int, priced: bool, trace: bool, folded: bool) -> None:
        self.compute, self.priced, self.trace, self.folded = compute, priced, trace, folded

    def mode(self) -> str | None:
        """`run`, `time`, `off`, or None when unset."""
        return {abi.RUN_COMPUTE_RUN: "run", abi.RUN_COMPUTE_TIME: "time",
                abi.RUN_COMPUTE_OFF: "off"}.get(self.compute)


_settings: list = []  # [RunSettings or None], once asked


def settings() -> RunSettings | None:
    """The process's run settings (asked of the core once), None outside ncclsim's libraries
    or when the environment has a bad value."""
    if not _settings:
        c = core()
        _settings.append(c.run_settings() if c is not None else None)
    return _settings[0]


class VtableMismatch(Exception):
    """The loaded core's vtable is of another version than this package's."""


class Core:
    """The entries of one core's vtable this package calls."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        get = getattr(lib, abi.CORE_SYMBOL)
        get.restype = ctypes.c_void_p
        table = get()
        if not table:
            raise OSError("the fake CUDA core gave no vtable")
        version = ctypes.c_uint32.from_address(table + abi.VERSION_OFFSET).value
        if version != abi.CORE_ABI_VERSION:
            raise VtableMismatch(f"the fake CUDA core's vtable is version {version}, this package's "
                          f"{abi.CORE_ABI_VERSION} (libraries and package of different builds)")

        def entry(offset: int, restype, *argtypes):
            address = ctypes.c_void_p.from_address(table + offset).value
            return ctypes.CFUNCTYPE(restype, *argtypes)(address)

        c = ctypes
        self._last_error = entry(abi.LAST_ERROR_MESSAGE_OFFSET, c.c_size_t, c.c_char_p, c.c_size_t)
        self.launch_compute = entry(
            abi.ENTRY_OFFSET["launch_compute"], c.c_int, c.c_uint64, KernelCost, c.c_char_p,
            c.c_char_p, c.c_void_p, c.c_void_p, c.c_void_p, c.POINTER(LaunchTimes))
        self.commit_memory = entry(abi.ENTRY_OFFSET["commit_memory"], c.c_int, c.c_size_t, c.c_size_t)
        self.job_group_add = entry(
            abi.ENTRY_OFFSET["job_group_add"], c.c_int, c.POINTER(c.c_uint64), c.c_size_t)
        self.step_mark = entry(
            abi.ENTRY_OFFSET["step_mark"], c.c_int, c.c_int32, c.POINTER(c.c_uint64))
        u32p = c.POINTER(c.c_uint32)
        self._run_settings = entry(abi.ENTRY_OFFSET["run_settings"], c.c_int, u32p, u32p, u32p, u32p)

    def run_settings(self) -> RunSettings | None:
        """The run environment as the core parsed it; None, said, when it has a bad value,
        which the CUDA libraries refuse too."""
        outs = [ctypes.c_uint32() for _ in range(4)]
        if self._run_settings(*[ctypes.byref(o) for o in outs]) != 0:
            print(f"ncclsim: {self.last_error()}", flush=True)
            return None
        compute, priced, trace, folded = (o.value for o in outs)
        return RunSettings(compute, bool(priced), bool(trace), bool(folded))

    def last_error(self) -> str:
        """The message of this thread's last failed call."""
        buf = ctypes.create_string_buffer(1024)
        self._last_error(buf, len(buf))
        return buf.value.decode(errors="replace")


_core: list = []  # [Core or None], once looked for


def core() -> Core | None:
    """The process's core, or None outside ncclsim's libraries."""
    if not _core:
        try:
            _core.append(Core(ctypes.CDLL(abi.CORE_LIBRARY)))
        except VtableMismatch as e:
            print(f"ncclsim: {e}; ops are not priced", flush=True)
            _core.append(None)
        except (OSError, AttributeError):  # not under ncclsim's libraries
            _core.append(None)
    return _core[0]
