"""The stub library generator (`ncclsim.stubs`): its pure helpers against hand-written
expectations, and the stubs it compiles for a stand-in of torch's lib/ (one library importing
two cuDNN functions, versioned, and two of NCCL's, unversioned), loaded and called."""

import ctypes
import shutil
import subprocess
import sys

import pytest

from ncclsim import stubs


def test_succeed_stems_name_whole_libraries():
    assert stubs.succeeds("libcublas.so.13", {"cublas"})
    assert stubs.succeeds("libcublasLt.so.13", {"cublasLt"})
    assert not stubs.succeeds("libcublasLt.so.13", {"cublas"})  # a stem is not a prefix
    assert not stubs.succeeds("libcublas.so.13", {"cublasLt"})


def test_command_line():
    assert stubs.parse_args(["--succeed", "cublas,cublasLt", "LIB", "OUT"]) == (
        {"cublas", "cublasLt"}, False, ["LIB", "OUT"])
    assert stubs.parse_args(["LIB", "--all", "OUT"]) == (set(), True, ["LIB", "OUT"])
    assert stubs.parse_args(["LIB", "OUT", "--succeed"]) == (set(), False, ["LIB", "OUT", "--succeed"])


def test_statuses():
    assert stubs.status_of("libcudnn.so.9") == 1001  # CUDNN_STATUS_NOT_INITIALIZED
    assert stubs.status_of("libcufft.so.12") == 16  # CUFFT_NOT_SUPPORTED
    assert stubs.status_of("libcusparseLt.so.0") == 1
    assert stubs.status_of("libfoo.so.1") is None


def test_cuda_release(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    assert stubs.cuda_release(lib) == (12, 0)  # no version.py
    (tmp_path / "version.py").write_text("__version__ = '2.15.0+cu132'\ncuda: Optional[str] = '13.2'\n")
    assert stubs.cuda_release(lib) == (13, 2)


def test_version_script():
    nodes = {"libcublas.so.13": {"b", "a"}, "": {"c"}}
    assert stubs.version_script(nodes) == (
        "libcublas.so.13 {\n  global:\n    a;\n    b;\n    c;\n  local: *;\n};\n")
    assert stubs.version_script({"": {"x"}}) == "{\n  global:\n    x;\n  local: *;\n};\n"


def cc(cwd, *args):
    subprocess.run(["cc", "-shared", "-fPIC", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def torch_lib(tmp_path):
    for tool in ("cc", "nm", "readelf"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    orig = tmp_path / "originals"
    orig.mkdir()
    (orig / "dnn.c").write_text(
        "int cudnnCreate(void **h) { return 0; }\nunsigned long cudnnGetVersion(void) { return 1; }\n")
    (orig / "dnn.map").write_text("libcudnn.so.9 { global: cudnnCreate; cudnnGetVersion; local: *; };\n")
    cc(orig, "-o", "libcudnn.so.9", "dnn.c", "-Wl,-soname,libcudnn.so.9", "-Wl,--version-script,dnn.map")
    (orig / "nccl.c").write_text(
        "int ncclGetVersion(int *v) { return 0; }\nconst char *ncclGetErrorString(int s) { return 0; }\n")
    cc(orig, "-o", "libnccl.so.2", "nccl.c", "-Wl,-soname,libnccl.so.2")
    lib = tmp_path / "torch"
    lib.mkdir()
    (lib / "t.c").write_text(
        "int cudnnCreate(void **); unsigned long cudnnGetVersion(void);\n"
        "int ncclGetVersion(int *); const char *ncclGetErrorString(int);\n"
        "long use(void) {\n"
        "  return cudnnCreate(0) + cudnnGetVersion() + ncclGetVersion(0) + !ncclGetErrorString(0);\n}\n")
    cc(lib, "-o", "libtorch_fake.so", "t.c", f"-L{orig}", "-l:libcudnn.so.9", "-l:libnccl.so.2")
    return lib


def test_scan_leaves_ncclsims_libraries_out_unless_all(torch_lib):
    cudnn = {"libcudnn.so.9": {"libcudnn.so.9": {"cudnnCreate", "cudnnGetVersion"}}}
    assert stubs.scan(torch_lib) == cudnn
    nccl = {"libnccl.so.2": {"": {"ncclGetVersion", "ncclGetErrorString"}}}  # unversioned
    assert stubs.scan(torch_lib, set()) == {**cudnn, **nccl}


def generate(monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["ncclsim.stubs", *map(str, args)])
    stubs.main()


def test_stubs_fail_with_their_status_and_say_so_once(torch_lib, tmp_path, monkeypatch, capfd):
    generate(monkeypatch, "--all", torch_lib, tmp_path / "stubs")
    dnn = ctypes.CDLL(str(tmp_path / "stubs" / "libcudnn.so.9"))
    assert (dnn.cudnnCreate(None), dnn.cudnnCreate(None)) == (1001, 1001)
    assert capfd.readouterr().err.count("cudnnCreate (libcudnn.so.9) is a stub") == 1
    dnn.cudnnGetVersion.restype = ctypes.c_size_t
    monkeypatch.delenv("NCCLSIM_CUDNN_VERSION", raising=False)
    assert dnn.cudnnGetVersion() == 90000  # the SONAME's major
    monkeypatch.setenv("NCCLSIM_CUDNN_VERSION", "91002")
    assert dnn.cudnnGetVersion() == 91002
    nccl = ctypes.CDLL(str(tmp_path / "stubs" / "libnccl.so.2"))
    assert nccl.ncclGetVersion(None) == 2  # ncclSystemError
    nccl.ncclGetErrorString.restype = ctypes.c_char_p
    assert nccl.ncclGetErrorString(2).startswith(b"ncclsim stand-in for libnccl.so.2")


def test_succeed_makes_a_librarys_stubs_return_0(torch_lib, tmp_path, monkeypatch):
    generate(monkeypatch, "--succeed", "cudnn", torch_lib, tmp_path / "noop")
    assert ctypes.CDLL(str(tmp_path / "noop" / "libcudnn.so.9")).cudnnCreate(None) == 0
    assert not (tmp_path / "noop" / "libnccl.so.2").exists()
