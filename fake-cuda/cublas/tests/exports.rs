//! The four built libraries carry their real SONAMEs and export every name of their lists
//! (`symbols/*.txt`) and nothing outside `cublas*`; a Python `ctypes` consumer loads them by
//! their real names.

use fake_cuda_test_support as support;
use std::path::Path;

#[test]
fn every_listed_name_is_exported_under_the_real_sonames() {
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (file, soname, list) in [
        (
            "libcublas12.so",
            "libcublas.so.12",
            "cublas/symbols/libcublas.txt",
        ),
        (
            "libcublas13.so",
            "libcublas.so.13",
            "cublas/symbols/libcublas.txt",
        ),
        (
            "libcublaslt12.so",
            "libcublasLt.so.12",
            "cublaslt/symbols/libcublasLt.txt",
        ),
        (
            "libcublaslt13.so",
            "libcublasLt.so.13",
            "cublaslt/symbols/libcublasLt.txt",
        ),
    ] {
        support::assert_exports_listed(file, &fake.join(list), "cublas");
        assert_eq!(
            support::soname(&support::built(file)).as_deref(),
            Some(soname)
        );
    }
}

#[test]
fn python_ctypes_loads_them_by_their_real_names() {
    let dir = support::scratch_dir("ctypes-cublas");
    support::link_real_names(
        &dir,
        &[
            ("libcublas13.so", "libcublas.so.13"),
            ("libcublaslt13.so", "libcublasLt.so.13"),
        ],
    );
    let script = "import ctypes\n\
                  blas = ctypes.CDLL('libcublas.so.13')\n\
                  lt = ctypes.CDLL('libcublasLt.so.13')\n\
                  lt.cublasLtGetVersion.restype = ctypes.c_size_t\n\
                  blas.cublasGetStatusName.restype = ctypes.c_char_p\n\
                  v = ctypes.c_int(0)\n\
                  print(blas.cublasGetVersion_v2(None, ctypes.byref(v)), v.value, \
                  lt.cublasLtGetVersion(), blas.cublasGetStatusName(15).decode(), \
                  blas.cublasCgemm_v2())\n";
    assert_eq!(
        support::python(&dir, script),
        "0 130500 130500 CUBLAS_STATUS_NOT_SUPPORTED 15"
    );
}
