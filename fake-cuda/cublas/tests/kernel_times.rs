//! Measured kernel times (`NCCLSIM_KERNEL_TIMES`) in a C program's CUDA event timing: cuBLAS
//! GEMMs and raw kernels take the durations a hand-written nsys GPU trace lists for them (by
//! name and occurrence, cycling), or an Orion kernel-info file's (by launch order); a GEMM the
//! table does not list keeps the compute model's time; a bad file stops the program with the
//! file, line and column.

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Builds the program into `dir` (a scratch directory of the test's own).
fn program(dir: &Path) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    support::build_c(
        dir,
        &[
            ("libcudart12.so", "libcudart.so.12"),
            ("libcublas12.so", "libcublas.so.12"),
        ],
        &here.join("tests/c/kernel_times.c"),
        &[here.join("../cudart/tests/c")],
        &[],
        "kernel_times",
        0,
    )
}

fn data(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run(exe: &Path, table: &str, by: Option<&str>) -> Output {
    let mut cmd = Command::new(exe);
    cmd.env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NCCLSIM_CUDA_CORE")
        .env_remove("NCCLSIM_KERNEL_TIMES_MATCH")
        .env("NCCLSIM_KERNEL_TIMES", table);
    if let Some(by) = by {
        cmd.env("NCCLSIM_KERNEL_TIMES_MATCH", by);
    }
    cmd.output().expect("run the test program")
}

/// The durations (ns) the program printed, in its order.
fn times(exe: &Path, table: &str, by: Option<&str>) -> Vec<(String, u64)> {
    let out = run(exe, table, by);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.ends_with("PASS\n"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.parse().unwrap()))
        .collect()
}

const HOLD: u64 = 10_000_000_000;

#[test]
fn gemms_and_kernels_take_the_measured_times() {
    let exe = program(&support::scratch_dir("cublas-kernel-times"));
    // Only the raw kernel `hold` is listed: everything else has its default time.
    let model = times(&exe, &data("hold_only.csv"), None);
    let sgemm = model[1].1;
    let dgemm = model[4].1;
    assert!(sgemm > 0 && dgemm > 0, "{model:?}");
    let names: Vec<&str> = model.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["hold", "sgemm", "sgemm", "sgemm", "dgemm", "vecAdd", "vecAdd"]
    );
    let durations: Vec<u64> = model.iter().map(|w| w.1).collect();
    assert_eq!(durations, [HOLD, sgemm, sgemm, sgemm, dgemm, 0, 0]);

    // By name: cublasSgemm_v2's two measured occurrences in turn, then again from the first;
    // vecAdd's registered (mangled) name finds nsys's demangled one; cublasDgemm_v2 is not
    // listed and keeps the model's time; the copy and the NCCL kernel rows are not launches.
    let named = times(&exe, &data("gemm_times.csv"), None);
    let durations: Vec<u64> = named.iter().map(|w| w.1).collect();
    assert_eq!(
        durations,
        [HOLD, 111_000, 222_000, 111_000, dgemm, 7_000, 7_000]
    );

    // By order (Orion's file, whose names are the real GPU's kernels): the k-th launch takes
    // the k-th row, the seventh launch the first row again.
    let ordered = times(&exe, &data("orion_order.csv"), Some("order"));
    let durations: Vec<u64> = ordered.iter().map(|w| w.1).collect();
    assert_eq!(
        durations,
        [HOLD, 31_000, 32_000, 33_000, 90_000, 4_000, HOLD]
    );
}

#[test]
fn a_bad_table_stops_the_program_naming_file_line_and_column() {
    let dir = support::scratch_dir("cublas-kernel-times-bad");
    let exe = program(&dir);
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "Name,Duration (ns)\nhold(),10\nvecAdd,soon\n").unwrap();
    let out = run(&exe, bad.to_str().unwrap(), None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let want = format!(
        "{}:3: column 2 (\"Duration (ns)\"): \"soon\" is not a number",
        bad.display()
    );
    assert!(stderr.contains(&want), "{stderr}");
    let out = run(&exe, &data("hold_only.csv"), Some("names"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("NCCLSIM_KERNEL_TIMES_MATCH=\"names\": expected name or order"),
        "{stderr}"
    );
}
