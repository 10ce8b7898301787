//! C programs linked against the built `libcudart.so.12` and `libcuda.so.1` by their real names.
//!
//! The test symlinks the cdylibs under their real names into a scratch directory under the
//! target directory, compiles `c/cudart_smoke.c` with the `cc` crate's compiler, links it with
//! `-l:libcudart.so.12` and an rpath, and runs one scenario per test. The front-end finds `libncclsim_cuda.so` next to the
//! real file the symlink points to (cargo's `deps/` directory).

use fake_cuda_test_support as support;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

fn deps_dir() -> PathBuf {
    support::deps_dir()
}

/// Builds the smoke program once per test binary; returns its path.
fn smoke() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("cudart12-c");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        support::build_c(
            &dir,
            &[
                ("libcudart12.so", "libcudart.so.12"),
                ("libcuda_driver.so", "libcuda.so.1"),
            ],
            &here.join("tests/c/cudart_smoke.c"),
            &[here.join("../ncclsim-cuda/include")],
            &[],
            "cudart_smoke",
            0,
        )
    })
}

fn command(args: &[&str]) -> Command {
    let mut c = Command::new(smoke());
    c.args(args)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NCCLSIM_PACE")
        .env_remove("NCCLSIM_CLOCK")
        .env_remove("NCCLSIM_STRICT_KERNELS")
        .env_remove("NCCLSIM_CUDA_CORE")
        .env_remove("NCCLSIM_REPORT")
        .env_remove("NCCLSIM_TOPO")
        .env_remove("NCCL_TOPO_FILE")
        .env_remove("NCCLSIM_NODE")
        .env_remove("NCCLSIM_HOST_MEMORY")
        .env("NCCLSIM_TEST_CORE", deps_dir().join("libncclsim_cuda.so"));
    c
}

fn run(c: &mut Command) -> Output {
    let out = c.output().expect("run cudart_smoke");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scenario failed ({}):\nstdout:\n{text}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn device_properties_and_attributes() {
    let text = stdout(&run(&mut command(&["props"])));
    assert!(text.contains("count 8\n"), "{text}");
    assert!(
        text.contains("device 0 NVIDIA A100-SXM4-40GB sm 8.0 mem 42949672960 bus 0000:07:00.0"),
        "{text}"
    );
    assert!(text.contains("device 7 NVIDIA A100-SXM4-40GB sm 8.0 mem 42949672960 bus 0000:bd:00.0"));
    assert!(text.contains("PASS props"));
}

#[test]
fn cuda_visible_devices_is_honoured() {
    let text = stdout(&run(command(&["props"]).env("CUDA_VISIBLE_DEVICES", "4,2")));
    assert!(text.contains("count 2\n"), "{text}");
    assert!(text.contains("device 0 NVIDIA A100-SXM4-40GB sm 8.0 mem 42949672960 bus 0000:87:00.0"));
    assert!(text.contains("device 1 NVIDIA A100-SXM4-40GB sm 8.0 mem 42949672960 bus 0000:47:00.0"));
}

#[test]
fn devices_come_from_the_topology_file() {
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies/dgx-h100.xml");
    let text = stdout(&run(command(&["props"]).env("NCCLSIM_TOPO", &topo)));
    assert!(text.contains("count 8\n"), "{text}");
    assert!(
        text.contains("device 0 NVIDIA H100 80GB HBM3 sm 9.0 mem 85899345920 bus 0000:1b:00.0"),
        "{text}"
    );
    // NCCL's own variable works too, and CUDA_VISIBLE_DEVICES applies on top.
    let text = stdout(&run(command(&["props"])
        .env("NCCL_TOPO_FILE", &topo)
        .env("CUDA_VISIBLE_DEVICES", "1")));
    assert!(text.contains("count 1\n"), "{text}");
    assert!(text.contains("device 0 NVIDIA H100 80GB HBM3 sm 9.0 mem 85899345920 bus 0000:43:00.0"));
}

#[test]
fn an_unusable_topology_is_a_clear_error() {
    let out = command(&["props"])
        .env("NCCLSIM_TOPO", "/nonexistent/node.xml")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ncclsim: no fake CUDA devices: topology: /nonexistent/node.xml"),
        "{err}"
    );
    assert!(err.contains("cudaGetDeviceCount"), "{err}");
}

#[test]
fn malloc_copy_memset_round_trip() {
    assert!(stdout(&run(&mut command(&["memory"]))).contains("PASS memory"));
}

#[test]
fn out_of_memory_past_capacity() {
    assert!(stdout(&run(&mut command(&["oom"]))).contains("PASS oom"));
}

#[test]
fn writes_past_the_host_memory_are_allocation_errors() {
    let text = stdout(&run(
        command(&["host-memory"]).env("NCCLSIM_HOST_MEMORY", "64M")
    ));
    assert!(text.contains("PASS host-memory"), "{text}");
}

#[test]
fn stream_and_event_ordering_in_virtual_time() {
    let text = stdout(&run(&mut command(&["streams"])));
    assert!(text.contains("PASS streams"), "{text}");
}

#[test]
fn pacing_holds_completion_until_virtual_time() {
    let text = stdout(&run(command(&["pace"]).env("NCCLSIM_PACE", "1")));
    assert!(text.contains("PASS pace"), "{text}");
}

#[test]
fn kernel_launches_are_counted_or_refused() {
    let text = stdout(&run(&mut command(&["kernels"])));
    assert!(text.contains("launch -> 0\n"), "{text}");
    let text = stdout(&run(
        command(&["kernels"]).env("NCCLSIM_STRICT_KERNELS", "1")
    ));
    assert!(text.contains("launch -> 98\n"), "{text}");
}

fn ncclsim_shm_entries() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("ncclsim"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn two_processes_share_memory_through_ipc_handles() {
    let shm_before = ncclsim_shm_entries();
    let mut exporter = command(&["ipc-export"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(exporter.stdout.take().unwrap()).lines();
    let handle = lines.next().expect("exporter prints a handle").unwrap();
    assert_eq!(handle.len(), 128, "{handle:?}");

    // Another process maps it, checks the contents and writes back.
    let text = stdout(&run(&mut command(&["ipc-import", &handle])));
    assert!(text.contains("PASS ipc-import"), "{text}");
    // The driver API opens the same handle.
    let text = stdout(&run(&mut command(&["ipc-import-driver", &handle])));
    assert!(text.contains("PASS ipc-import-driver"), "{text}");
    // Altered or garbage handles are refused.
    let text = stdout(&run(&mut command(&["ipc-forged", &handle])));
    assert!(text.contains("rejected"), "{text}");

    // The exporter sees the importer's writes.
    exporter.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(
        exporter.wait().unwrap().success(),
        "exporter failed: {rest:?}"
    );
    assert!(rest.iter().any(|l| l == "PASS ipc-export"), "{rest:?}");

    // The owner is gone: its handle is stale and opening it fails cleanly.
    let text = stdout(&run(&mut command(&["ipc-try", &handle])));
    assert!(text.contains("open -> 205\n"), "{text}");
    assert_eq!(
        ncclsim_shm_entries(),
        shm_before,
        "shared-memory objects leaked"
    );
}

#[test]
fn report_file_at_exit() {
    let dir = support::scratch_dir("cudart12-report");
    let path = dir.join("memory.json");
    run(command(&["memory"]).env("NCCLSIM_REPORT", &path));
    let report = std::fs::read_to_string(&path).expect("report written at exit");
    // Two 1 MiB buffers were live at once on device 0, none at exit.
    assert!(report.contains("\"peak_bytes\": 2097152"), "{report}");
    assert!(report.contains("\"current_bytes\": 0"), "{report}");
    assert!(
        report.contains("\"pci_bus_id\": \"0000:07:00.0\""),
        "{report}"
    );
    assert!(report.contains("\"malloc\": 2"), "{report}");
    let path = dir.join("kernels.json");
    run(command(&["kernels"]).env("NCCLSIM_REPORT", &path));
    let report = std::fs::read_to_string(&path).unwrap();
    assert!(report.contains("\"_Z4fillPfi\": 1"), "{report}");
}

#[test]
fn graph_capture_records_and_launch_replays() {
    let dir = support::scratch_dir("cudart12-graphs");
    let dot = dir.join("graph.dot");
    let text = stdout(&run(&mut command(&["graphs", dot.to_str().unwrap()])));
    assert!(text.contains("nodes 4\nhost calls 2\n"), "{text}");
    assert!(text.contains("PASS graphs"), "{text}");
    let dot = std::fs::read_to_string(&dot).expect("cudaGraphDebugDotPrint wrote the file");
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains("memcpy HostToDevice 1x4096 bytes"), "{dot}");
    assert!(dot.contains("n2 -> n3"), "{dot}");
}

#[test]
fn per_thread_default_stream_entry_points() {
    assert!(stdout(&run(&mut command(&["per-thread"]))).contains("PASS per-thread"));
}

#[test]
fn device_reset_frees_the_device_memory() {
    assert!(stdout(&run(&mut command(&["reset"]))).contains("PASS reset"));
}

#[test]
fn driver_and_runtime_share_one_core() {
    assert!(stdout(&run(&mut command(&["driver"]))).contains("PASS driver"));
}
