//! `libnvidia-ml.so.1` from C (linked by its real name next to `libcudart.so.12`), its
//! exported names against the checked-in list, and loading through Python's `ctypes`.

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn smoke() -> &'static (PathBuf, PathBuf) {
    static EXE: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("nvml-c");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/nvml_smoke.c");
        let exe = support::build_c(
            &dir,
            &[
                ("libnvidia_ml.so", "libnvidia-ml.so.1"),
                ("libcudart12.so", "libcudart.so.12"),
            ],
            &src,
            &[],
            &[],
            "nvml_smoke",
            0,
        );
        (dir, exe)
    })
}

fn run(scenario: &str, env: &[(&str, &str)]) -> String {
    support::run_ok(
        Command::new(&smoke().1)
            .arg(scenario)
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NCCLSIM_TOPO")
            .env_remove("NCCL_TOPO_FILE")
            .envs(env.iter().copied()),
    )
}

#[test]
fn devices_handles_and_properties_agree_with_cuda() {
    let text = run("devices", &[]);
    assert!(text.contains("count 8\n"), "{text}");
    assert!(
        text.contains(
            "nvml 0 NVIDIA A100-SXM4-40GB 00000000:07:00.0 0000:07:00.0 20b010de sm 8.0\n"
        ),
        "{text}"
    );
    assert!(text.contains("nvml 7 NVIDIA A100-SXM4-40GB 00000000:BD:00.0 0000:BD:00.0"));
    assert!(text.contains("cuda 7 = nvml 7\n"));
    // DGX A100: GPUs 0 and 1 share a PCIe switch tree, GPU 2 is on the other CPU; all reach
    // each other over NVSwitch.
    assert!(
        text.contains("ancestor 0-0 0\nancestor 0-1 20\nancestor 0-2 50\n"),
        "{text}"
    );
    assert!(text.contains("p2p nvlink 0-2 0\n"), "{text}");
    assert!(text.contains("PASS devices"));
}

#[test]
fn nvml_ignores_cuda_visible_devices() {
    let text = run("devices", &[("CUDA_VISIBLE_DEVICES", "5,3")]);
    assert!(text.contains("count 8\n"), "{text}");
    assert!(
        text.contains("cuda 0 = nvml 5\ncuda 1 = nvml 3\n"),
        "{text}"
    );
}

#[test]
fn nvlinks_lead_to_the_nvswitches() {
    let text = run("nvlinks", &[]);
    assert!(text.contains("links 12\n"), "{text}");
    assert!(
        text.contains("link 0 -> 00000000:C4:00.0 type 2\n"),
        "{text}"
    );
    assert!(
        text.contains("link 11 -> 00000000:C9:00.0 type 2\n"),
        "{text}"
    );
    // A topology with direct GPU-GPU NVLinks reports GPUs at the far end.
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies/dgx1-v100.xml");
    let text = run("nvlinks", &[("NCCLSIM_TOPO", topo.to_str().unwrap())]);
    assert!(text.contains(" type 0\n"), "{text}");
    assert!(text.contains("PASS nvlinks"));
}

#[test]
fn every_listed_name_is_exported() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("symbols/nvml-required.txt");
    support::assert_exports_listed("libnvidia_ml.so", &list, "nvml");
}

#[test]
fn python_ctypes_loads_it_by_its_real_name() {
    let dir = &smoke().0;
    let script = "import ctypes\n\
                  lib = ctypes.CDLL('libnvidia-ml.so.1')\n\
                  n = ctypes.c_uint(0)\n\
                  print(lib.nvmlInit_v2(), lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), n.value)\n";
    assert_eq!(support::python(dir, script), "0 0 8");
}
