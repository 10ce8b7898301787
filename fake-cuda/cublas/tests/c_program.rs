//! A C program (`c/cublas_smoke.c`) linked against the built `libcudart.so.12`,
//! `libcublas.so.12` and `libcublasLt.so.12` by their real names: cublasSgemm on a stream and a
//! cublasLtMatmul with the RELU_BIAS epilogue given a cuBLAS handle, each checked in C.

use fake_cuda_test_support as support;
use std::path::Path;
use std::process::Command;

#[test]
fn c_program_uses_cublas_and_cublaslt() {
    let dir = support::scratch_dir("cublas-c");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = support::build_c(
        &dir,
        &[
            ("libcudart12.so", "libcudart.so.12"),
            ("libcublas12.so", "libcublas.so.12"),
            ("libcublaslt12.so", "libcublasLt.so.12"),
        ],
        &here.join("tests/c/cublas_smoke.c"),
        &[here.join("../cudart/tests/c")],
        &["libm.so.6"],
        "cublas_smoke",
        0,
    );
    let text = support::run_ok(
        Command::new(exe)
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NCCLSIM_CUDA_CORE"),
    );
    assert!(text.contains("sgemm ok\n"), "{text}");
    assert!(text.contains("gemmex bf16 ok\n"), "{text}");
    assert!(text.contains("lt relu_bias ok"), "{text}");
    assert!(text.ends_with("PASS\n"), "{text}");
}
