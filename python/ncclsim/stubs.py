"""Stub NVIDIA libraries for a torch installed without its NVIDIA wheels (`pip install torch --no-deps`).

torch's shared objects name about a dozen NVIDIA libraries (cuBLAS, cuDNN, cuFFT, ...) as
DT_NEEDED, so `import torch` fails unless files with those SONAMEs exist, define the version nodes
torch's references carry (`cublasCreate_v2@libcublas.so.13`) and the functions bound at load.
This script writes its own stand-ins: it reads what the installed torch imports (`nm -D
--undefined-only`, the `@version` of each reference), writes one C file and one linker version
script per library (each function logs its name once on stderr and returns the library's
"not initialized"/"not supported" status), and compiles them with `cc`. No NVIDIA file is read
or copied; only torch's own import tables are.

Which libraries: every NVIDIA library torch links but the CUDA runtime, driver, NVML and NCCL
(libcudart, libcuda, libnvidia-ml, libnccl), which ncclsim provides (`ncclsim run` preloads its
builds of them). cuBLAS and cuBLASLt are stubbed like cuDNN and the rest although ncclsim has
its own (`fake-cuda/cublas`, `fake-cuda/cublaslt`), which compute GEMMs on the CPU for C and C++
programs: `ncclsim run` preloads those too, so under it they win over these stubs and torch's
own cuBLAS calls (made with `--compute off`; otherwise ncclsim's Python package computes
torch's matmuls) reach them. The cuBLAS stubs themselves fail like every other stub.

`ncclsim run` runs it once per torch build when the command starts a torch program (the stand-ins
are cached under the user's cache directory and put on the loader's path after ncclsim's own
libraries); scripts/torch-venv.sh runs it for the test venv. It needs binutils (`readelf`, `nm`)
and a C compiler (`cc`, or `CC`).

Usage: python -m ncclsim.stubs [--succeed LIBS] [--all] TORCH_LIB_DIR OUT_DIR
  TORCH_LIB_DIR  the installed torch's lib/ (site-packages/torch/lib)
  OUT_DIR        where the stub libraries (and their sources, *.c / *.map / *.txt) go
  --succeed LIBS comma-separated library stems (e.g. cublas,cublasLt) whose stubs return 0
                 (success) and do nothing. Output arguments are left unwritten, so calls
                 "complete" with meaningless results: for experiments, not a promise.
  --all          stub ncclsim's own libraries too (CUDA runtime, driver, NVML, NCCL), so torch
                 imports with no GPU library at all and finds no CUDA device, as a torch built
                 without CUDA would (scripts/torch-e2e.sh runs the Python package's unit tests
                 so, python/tests).

Nothing in the stubs does work: every call fails with its library's error status (but with
`--succeed`). The functions that return or write a string, and the version queries, are
written by their public signatures (`SPECIAL`): error strings are valid strings, and versions
are real ones (cuDNN's is the one this torch was built against, which ncclsim's Python package
puts in `NCCLSIM_CUDNN_VERSION` when torch starts; the CUDA libraries' follow torch's CUDA
release), so torch's version checks pass and nothing dereferences a status code. torch's ops on
CUDA tensors are computed by ncclsim's Python package (python/ncclsim), which never calls these
libraries.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# Libraries ncclsim provides in place of NVIDIA's (fake-cuda, nccl-shim): stubbed only with
# `--all`. (`ncclsim run` preloads its libcublas and libcublasLt too; those are stubbed all the
# same, see the module's docstring.)
OURS = {"libcudart.so.12", "libcudart.so.13", "libcuda.so.1", "libnvidia-ml.so.1", "libnccl.so.2"}

# SONAME patterns of the NVIDIA libraries we stub, with the status every stub function returns
# (each library's "not initialized" or closest "not supported" code from its public header).
STUBBED = [
    (r"libcublas\.so\.\d+", 1),  # CUBLAS_STATUS_NOT_INITIALIZED
    (r"libcublasLt\.so\.\d+", 1),  # CUBLAS_STATUS_NOT_INITIALIZED
    (r"libcudnn\.so\.\d+", 1001),  # CUDNN_STATUS_NOT_INITIALIZED
    (r"libcufft\.so\.\d+", 16),  # CUFFT_NOT_SUPPORTED
    (r"libcusparse\.so\.\d+", 1),  # CUSPARSE_STATUS_NOT_INITIALIZED
    (r"libcusparseLt\.so\.\d+", 1),  # CUSPARSE_STATUS_NOT_INITIALIZED
    (r"libcusolver\.so\.\d+", 1),  # CUSOLVER_STATUS_NOT_INITIALIZED
    (r"libnvrtc\.so\.\d+", 11),  # NVRTC_ERROR_INTERNAL_ERROR
    (r"libcupti\.so\.\d+", 15),  # CUPTI_ERROR_NOT_INITIALIZED
    (r"libcufile\.so\.\d+", 5001),  # CU_FILE_DRIVER_NOT_INITIALIZED
    (r"libcurand\.so\.\d+", 101),  # CURAND_STATUS_NOT_INITIALIZED (torch 2.10 links it)
    (r"libnvshmem_host\.so\.\d+", 1),  # NVSHMEM's non-zero failure
    (r"libnvJitLink\.so\.\d+", 1),  # NVJITLINK_ERROR_UNRECOGNIZED_OPTION
    (r"libnvToolsExt\.so\.\d+", 0),  # NVTX: markers return nothing useful anyway
    # Stubbed only with `--all` (they are in OURS):
    (r"libcudart\.so\.\d+", 3),  # cudaErrorInitializationError
    (r"libcuda\.so\.\d+", 3),  # CUDA_ERROR_NOT_INITIALIZED
    (r"libnvidia-ml\.so\.\d+", 1),  # NVML_ERROR_UNINITIALIZED
    (r"libnccl\.so\.\d+", 2),  # ncclSystemError
]

# Unversioned references (the library has no version node) go to a library by name prefix.
# Order matters: the longer prefix first.
PREFIXES = [
    ("cusparseLt", "libcusparseLt.so."),
    ("cuFile", "libcufile.so."),
    ("nvshmem", "libnvshmem_host.so."),
    ("nvJitLink", "libnvJitLink.so."),
    ("nvtx", "libnvToolsExt.so."),
    ("nccl", "libnccl.so."),
    ("nvml", "libnvidia-ml.so."),
    ("cu", "libcuda.so."),  # the driver API (cuCtxGetCurrent, ...), after the other cu* prefixes
]

# Version nodes whose name is not the SONAME.
NODE_TO_SONAME_PREFIX = {"NVSHMEM": "libnvshmem_host.so."}


# Functions with their own bodies: {name: C definition}, formatted with the library's `status`,
# `major` (of its SONAME) and torch's CUDA release (`cuda_major`, `cuda_minor`). Signatures are
# the public headers' (cudnn_graph.h, cublasLt.h, cusparse.h, nvrtc.h, cupti_result.h, ...).
SPECIAL = {
    "cudnnGetVersion": "size_t cudnnGetVersion(void) {{ const char *v = getenv(\"NCCLSIM_CUDNN_VERSION\"); "
    "return v ? strtoul(v, 0, 10) : {major}0000u; }}",
    "cudnnGetProperty": "int cudnnGetProperty(int type, int *value) {{ if (!value) return 2000; "
    "const char *e = getenv(\"NCCLSIM_CUDNN_VERSION\"); size_t v = e ? strtoul(e, 0, 10) : {major}0000u; *value = type == 0 ? (int)(v / 10000) : type == 1 ? (int)(v / 100 % 100) "
    ": (int)(v % 100); return 0; }}",
    "cudnnGetCudartVersion": "size_t cudnnGetCudartVersion(void) {{ return {cuda_major}000u + {cuda_minor}0u; }}",
    "cudnnGetErrorString": "const char *cudnnGetErrorString(int s) {{ (void)s; return ncclsim_stub_text; }}",
    "cudnnGetLastErrorString": "void cudnnGetLastErrorString(char *m, size_t n) {{ if (m && n) m[0] = 0; }}",
    "cublasLtGetVersion": "size_t cublasLtGetVersion(void) {{ return {cuda_major}0000u + {cuda_minor}00u; }}",
    "cusparseGetErrorString": "const char *cusparseGetErrorString(int s) {{ (void)s; return ncclsim_stub_text; }}",
    "nvrtcGetErrorString": "const char *nvrtcGetErrorString(int s) {{ (void)s; return ncclsim_stub_text; }}",
    "nvrtcVersion": "int nvrtcVersion(int *major, int *minor) {{ if (!major || !minor) return 3; "
    "*major = {cuda_major}; *minor = {cuda_minor}; return 0; }}",
    "cuptiGetResultString": "int cuptiGetResultString(int r, const char **s) {{ (void)r; if (!s) return 1; "
    "*s = ncclsim_stub_text; return 0; }}",
    "cuptiGetCallbackName": "int cuptiGetCallbackName(int d, unsigned id, const char **s) {{ (void)d; (void)id; "
    "if (s) *s = ncclsim_stub_text; return {status}; }}",
    "nvshmem_info_get_version": "void nvshmem_info_get_version(int *major, int *minor) {{ "
    "if (major) *major = {major}; if (minor) *minor = 0; }}",
    # With `--all`: the CUDA runtime's, driver's and NCCL's error strings, and the runtime's
    # registration of the device code compiled into torch, which runs at load and at exit
    # (nothing to register: silent).
    "cudaGetErrorString": "const char *cudaGetErrorString(int s) {{ (void)s; return ncclsim_stub_text; }}",
    "cudaGetErrorName": "const char *cudaGetErrorName(int s) {{ (void)s; return ncclsim_stub_text; }}",
    "cuGetErrorString": "int cuGetErrorString(int e, const char **s) {{ (void)e; if (!s) return 1; "
    "*s = ncclsim_stub_text; return 0; }}",
    "cuGetErrorName": "int cuGetErrorName(int e, const char **s) {{ (void)e; if (!s) return 1; "
    "*s = ncclsim_stub_text; return 0; }}",
    "ncclGetErrorString": "const char *ncclGetErrorString(int s) {{ (void)s; return ncclsim_stub_text; }}",
    "ncclGetLastError": "const char *ncclGetLastError(void *comm) {{ (void)comm; return ncclsim_stub_text; }}",
    "__cudaRegisterFatBinary": "void **__cudaRegisterFatBinary(void *f) {{ static void *h; (void)f; return &h; }}",
    "__cudaRegisterFatBinaryEnd": "void __cudaRegisterFatBinaryEnd(void **h) {{ (void)h; }}",
    "__cudaUnregisterFatBinary": "void __cudaUnregisterFatBinary(void **h) {{ (void)h; }}",
    "__cudaRegisterFunction": "void __cudaRegisterFunction(void) {{ }}",
    "__cudaRegisterVar": "void __cudaRegisterVar(void) {{ }}",
}


def cuda_release(torch_lib: Path) -> tuple[int, int]:
    """torch's CUDA release (major, minor) from its version.py (`cuda = '13.2'`)."""
    text = (torch_lib.parent / "version.py").read_text() if (torch_lib.parent / "version.py").exists() else ""
    m = re.search(r"^cuda[^=]*=\s*['\"](\d+)\.(\d+)", text, re.M)
    return (int(m.group(1)), int(m.group(2))) if m else (12, 0)


def run(cmd: list[str]) -> str:
    """Runs a command and returns its stdout; exits with its stderr on failure."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"torch-stubs: {' '.join(cmd)} failed:\n{done.stderr}")
    return done.stdout


def needed(lib: Path) -> list[str]:
    """The DT_NEEDED names of a shared object."""
    out = run(["readelf", "-d", "--wide", str(lib)])
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def status_of(soname: str) -> int | None:
    """The status stubs of this library return, or None if we do not stub it."""
    for pattern, code in STUBBED:
        if re.fullmatch(pattern, soname):
            return code
    return None


def scan(torch_lib: Path, ours: set[str] = OURS) -> dict[str, dict[str, set[str]]]:
    """{soname: {version node or "": names}} of what torch's libraries import from NVIDIA's,
    but for the libraries in `ours`."""
    libs = sorted(p for p in torch_lib.glob("*.so*") if p.is_file())
    if not libs:
        sys.exit(f"torch-stubs: no shared objects in {torch_lib}")
    sonames = {n for lib in libs for n in needed(lib)}
    stubbed = sorted(n for n in sonames if n not in ours and status_of(n) is not None)
    # Anything else must be torch's own or the system's; say so if the loader cannot find it.
    known = ours | set(stubbed) | {p.name for p in torch_lib.iterdir()}
    system = run(["ldconfig", "-p"]) if shutil.which("ldconfig") else ""
    for name in sorted(sonames - known):
        if f"{name} " not in system:
            print(f"torch-stubs: warning: torch needs {name}, which is neither stubbed nor "
                  "found by ldconfig; add it to STUBBED if it is an NVIDIA library", file=sys.stderr)
    result: dict[str, dict[str, set[str]]] = {s: {} for s in stubbed}

    def owner_of_node(node: str) -> str | None:
        if node in result:
            return node
        prefix = NODE_TO_SONAME_PREFIX.get(node)
        return next((s for s in stubbed if prefix and s.startswith(prefix)), None)

    for lib in libs:
        for line in run(["nm", "-D", "--undefined-only", str(lib)]).splitlines():
            parts = line.split()
            if len(parts) != 2:
                continue
            sym = parts[1]
            name, _, node = sym.partition("@")
            node = node.lstrip("@")
            if node:
                soname = owner_of_node(node)
                if soname:
                    result[soname].setdefault(node, set()).add(name)
                continue
            for prefix, so_prefix in PREFIXES:
                if name.startswith(prefix):
                    soname = next((s for s in stubbed if s.startswith(so_prefix)), None)
                    if soname:
                        # An unversioned reference binds to any default definition; keep it
                        # in the library's one node if it has one.
                        result[soname].setdefault("", set()).add(name)
                    break
    return result


def succeeds(soname: str, stems: set[str]) -> bool:
    """Whether `soname` (libcublasLt.so.13) is one of the `--succeed` stems (cublasLt)."""
    return any(soname.startswith(f"lib{stem}.so.") for stem in stems)


def c_source(soname: str, status: int, names: list[str], cuda: tuple[int, int] = (12, 0)) -> str:
    """One C file: every name a function that reports its first call and returns `status`,
    except the `SPECIAL` ones."""
    major = int(soname.rsplit(".", 1)[-1]) if soname.rsplit(".", 1)[-1].isdigit() else 0
    head = f"""/* Generated by ncclsim scripts/torch-stubs.py: a stand-in for {soname} with the
 * names torch imports. Nothing here is NVIDIA's; every function fails, but for the error
 * strings and version queries. */
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>

static const char ncclsim_stub_text[] = "ncclsim stand-in for {soname}: no GPU library behind it";

static void ncclsim_stub_called(const char *name, atomic_int *once) {{
    if (atomic_exchange(once, 1) == 0)
        fprintf(stderr, "ncclsim: %s (%s) is a stub without a GPU library behind it; returning {status}{" (success, nothing done)" if status == 0 else ""}\\n",
                name, "{soname}");
}}
"""
    body = []
    for n in names:
        if n in SPECIAL:
            body.append(SPECIAL[n].format(status=status, major=major, cuda_major=cuda[0], cuda_minor=cuda[1]))
            continue
        body.append(
            f"long {n}(void) {{ static atomic_int once; ncclsim_stub_called(\"{n}\", &once); return {status}; }}"
        )
    return head + "\n".join(body) + "\n"


def version_script(nodes: dict[str, set[str]]) -> str:
    """A linker version script: each node with its names; unversioned names join the first
    node (or a node named after nothing if the library has none)."""
    named = {k: set(v) for k, v in nodes.items() if k}
    loose = nodes.get("", set())
    if not named and not loose:
        return "{\n  local: *;\n};\n"
    if not named:
        return "{\n  global:\n" + "".join(f"    {n};\n" for n in sorted(loose)) + "  local: *;\n};\n"
    first = sorted(named)[0]
    named[first] |= loose
    out = []
    for i, (node, names) in enumerate(sorted(named.items())):
        local = "  local: *;\n" if i == 0 else ""
        out.append(f"{node} {{\n  global:\n" + "".join(f"    {n};\n" for n in sorted(names)) + local + "};\n")
    return "".join(out)


def parse_args(argv: list[str]) -> tuple[set[str], bool, list[str]]:
    """(`--succeed` stems, `--all`, the other arguments) of the command line."""
    stems: set[str] = set()
    everything = False
    rest: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--succeed" and i + 1 < len(argv):
            stems |= {s for s in argv[i + 1].split(",") if s}
            i += 2
            continue
        if argv[i] == "--all":
            everything = True
        else:
            rest.append(argv[i])
        i += 1
    return stems, everything, rest


def main() -> None:
    stems, everything, args = parse_args(sys.argv[1:])
    if len(args) != 2 or any(a.startswith("--") for a in args):
        sys.exit(__doc__)
    torch_lib, out = Path(args[0]), Path(args[1])
    out.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "cc")
    cuda = cuda_release(torch_lib)
    for soname, nodes in scan(torch_lib, set() if everything else OURS).items():
        status = 0 if succeeds(soname, stems) else status_of(soname)
        names = sorted({n for v in nodes.values() for n in v})
        stem = out / soname
        Path(f"{stem}.txt").write_text(
            "".join(f"{n}\t{node or '-'}\n" for node, ns in sorted(nodes.items()) for n in sorted(ns))
        )
        Path(f"{stem}.c").write_text(c_source(soname, status, names, cuda))
        Path(f"{stem}.map").write_text(version_script(nodes))
        run([cc, "-shared", "-fPIC", "-O1", "-o", str(stem), f"{stem}.c",
             f"-Wl,-soname,{soname}", f"-Wl,--version-script,{stem}.map"])
        print(f"{soname}: {len(names)} functions, nodes {sorted(k for k in nodes if k) or ['(none)']}")


if __name__ == "__main__":
    main()
