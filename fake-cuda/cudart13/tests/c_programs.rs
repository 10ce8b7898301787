//! C programs linked against the built `libcudart.so.13` by its real name: the CUDA 13 struct
//! layouts (`cudaDeviceProp` 1008 bytes, `cudaPointerAttributes` 88), the 7-argument
//! `cudaStreamGetCaptureInfo`, and kernels launched the nvcc 13 way (`__cudaGetKernel` +
//! `__cudaLaunchKernel`).

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn smoke() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("cudart13-c");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cudart13_smoke.c");
        support::build_c(
            &dir,
            &[("libcudart13.so", "libcudart.so.13")],
            &src,
            &[],
            &[],
            "cudart13_smoke",
            0,
        )
    })
}

fn run(args: &[&str], env: &[(&str, &str)]) -> String {
    support::run_ok(
        Command::new(smoke())
            .args(args)
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NCCLSIM_STRICT_KERNELS")
            .env_remove("NCCLSIM_REPORT")
            .envs(env.iter().copied()),
    )
}

#[test]
fn device_properties_have_the_cuda_13_layout() {
    let text = run(&["props"], &[]);
    assert!(
        text.contains("device 0 NVIDIA A100-SXM4-40GB sm 8.0 mem 42949672960 sms 108 bus 07\n"),
        "{text}"
    );
    assert!(text.contains("device 7 NVIDIA A100-SXM4-40GB sm 8.0 mem 42949672960 sms 108 bus bd\n"));
    assert!(text.contains("PASS props"));
}

#[test]
fn pointer_attributes_and_capture_info_have_the_cuda_13_shapes() {
    assert!(run(&["pointers"], &[]).contains("PASS pointers"));
}

#[test]
fn kernels_launch_through_get_kernel_and_are_counted() {
    let dir = support::scratch_dir("cudart13-report");
    let report = dir.join("kernels.json");
    let text = run(
        &["kernels"],
        &[("NCCLSIM_REPORT", report.to_str().unwrap())],
    );
    assert!(text.contains("launch -> 0\n"), "{text}");
    let json = std::fs::read_to_string(&report).expect("report written at exit");
    assert!(json.contains("\"_Z5scalePff\": 1"), "{json}");
    let text = run(&["kernels"], &[("NCCLSIM_STRICT_KERNELS", "1")]);
    assert!(text.contains("launch -> 98\n"), "{text}");
}
