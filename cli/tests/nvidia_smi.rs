//! `nvidia-smi` under `ncclsim run`: found first on the command's `PATH`, reporting the
//! simulated node through the preloaded fake NVML; its `topo -m` against `ncclsim topo paths`
//! on the bundled and vendor topologies; refused options.

mod common;

use common::repo;
use fake_cuda_test_support as support;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `ncclsim run [run options] -- COMMAND` on the libraries cargo built for this test, with a
/// clean simulation environment.
fn ncclsim_run<S: AsRef<std::ffi::OsStr>>(run_options: &[&str], command: &[S]) -> Output {
    common::ncclsim_run()
        .args(run_options)
        .arg("--")
        .args(command)
        .output()
        .expect("run ncclsim")
}

/// `ncclsim run [run options] -- nvidia-smi ARGS`.
fn smi(run_options: &[&str], args: &[&str]) -> Output {
    let mut command = vec!["nvidia-smi"];
    command.extend_from_slice(args);
    ncclsim_run(run_options, &command)
}

/// `ncclsim run [run options] -- sh -c SCRIPT sh DIR LOAD [EXTRA]`.
fn script(run_options: &[&str], script: &str, dir: &Path, load: &Path, extra: &[&str]) -> Output {
    let mut command: Vec<&std::ffi::OsStr> = vec!["sh".as_ref(), "-c".as_ref(), script.as_ref()];
    command.extend(["sh".as_ref(), dir.as_os_str(), load.as_os_str()]);
    command.extend(extra.iter().map(std::ffi::OsStr::new));
    ncclsim_run(run_options, &command)
}

fn stdout_ok(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

const DGX_A100: &[&str] = &["--topo", "topologies/dgx-a100.xml"];
/// The same on the real clock: `gpu_load` sleeps 2 ms between rounds of work to spare the CPU;
/// under the virtual clock those sleeps are the program's time and its GPUs read nearly idle.
const DGX_A100_REAL_CLOCK: &[&str] = &["--topo", "topologies/dgx-a100.xml", "--clock", "real"];

#[test]
fn list_and_csv_query_show_the_eight_gpus_of_a_dgx_a100() {
    let list = stdout_ok(&smi(DGX_A100, &["-L"]));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 8, "{list}");
    for (i, l) in lines.iter().enumerate() {
        assert!(
            l.starts_with(&format!("GPU {i}: NVIDIA A100-SXM4-40GB (UUID: GPU-")),
            "{list}"
        );
    }
    // Each simulated node (NCCLSIM_NODE) has its own GPUs: 16 distinct UUIDs on 2 nodes.
    let two = stdout_ok(&smi(
        &["--nodes", "2"],
        &["--query-gpu=uuid", "--format=csv,noheader"],
    ));
    let uuids: std::collections::BTreeSet<&str> = two.lines().collect();
    assert_eq!((two.lines().count(), uuids.len()), (16, 16), "{two}");
    let csv = stdout_ok(&smi(
        DGX_A100,
        &[
            "--query-gpu=index,name,memory.total",
            "--format=csv,noheader",
        ],
    ));
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 8, "{csv}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            *r,
            format!("{i}, NVIDIA A100-SXM4-40GB, 40960 MiB"),
            "{csv}"
        );
    }
    let csv = stdout_ok(&smi(
        DGX_A100,
        &[
            "-i",
            "3",
            "--query-gpu=index,power.limit,pci.bus_id,pstate",
            "--format=csv,nounits",
        ],
    ));
    assert_eq!(
        csv,
        "index, power.limit, pci.bus_id, pstate\n3, 400.00, 00000000:4E:00.0, P0\n"
    );
}

#[test]
fn table_query_sections_nvlinks_and_dmon_report_the_simulated_node() {
    let table = stdout_ok(&smi(DGX_A100, &[]));
    assert_eq!(table.matches("NVIDIA A100-SXM4-40GB").count(), 8, "{table}");
    assert!(table.contains("Driver Version: 600.00.00"), "{table}");
    assert!(table.contains("CUDA Version: 13.5"), "{table}");
    assert!(table.contains("/  400W |"), "{table}");
    assert!(table.contains("No running processes found"), "{table}");
    let q = stdout_ok(&smi(DGX_A100, &["-q", "-d", "POWER,MEMORY", "-i", "0"]));
    assert!(
        q.contains("Attached GPUs                             : 8"),
        "{q}"
    );
    assert!(
        q.contains("        Current Power Limit               : 400.00 W"),
        "{q}"
    );
    assert!(
        q.contains("        Total                             : 40960 MiB"),
        "{q}"
    );
    assert!(!q.contains("Temperature"), "{q}");
    let links = stdout_ok(&smi(DGX_A100, &["nvlink", "--status", "-i", "0"]));
    assert_eq!(links.matches(": 25 GB/s").count(), 12, "{links}");
    let dmon = stdout_ok(&smi(DGX_A100, &["dmon", "-c", "1"]));
    assert_eq!(
        dmon.lines().filter(|l| !l.starts_with('#')).count(),
        8,
        "{dmon}"
    );
    // 12 NVLinks per GPU to the NVSwitches; GPU 0's CPU is NUMA node 3.
    let m = stdout_ok(&smi(DGX_A100, &["topo", "-m"]));
    assert!(
        m.contains("\nGPU0\t X \tNV12\tNV12\t") && m.contains("\t48-63,176-191\t3\t\tN/A\n"),
        "{m}"
    );
    // DGX-1: one or two direct NVLinks between pairs.
    let m = stdout_ok(&smi(
        &["--topo", "topologies/dgx1-v100.xml"],
        &["topo", "-m"],
    ));
    assert!(m.contains("\nGPU0\t X \tNV1\tNV1\tNV2\tNV2\tNVB\t"), "{m}");
    // An H100 node: its own board and power cap.
    let h100 = stdout_ok(&smi(
        &["--topo", "topologies/dgx-h100.xml"],
        &[
            "--query-gpu=name,power.limit",
            "--format=csv,noheader",
            "-i",
            "0",
        ],
    ));
    assert_eq!(h100, "NVIDIA H100 80GB HBM3, 700.00 W\n");
}

/// The GPU rows of a matrix: (row GPU, column GPU) -> NCCL path type.
type Matrix = BTreeMap<(String, String), String>;

/// `ncclsim topo paths`' "Path types (NCCL)" block.
fn ncclsim_matrix(text: &str) -> Matrix {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("Path types"))
        .skip(1);
    let names: Vec<String> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    let mut m = Matrix::new();
    for l in lines.take_while(|l| !l.trim().is_empty()) {
        let cells: Vec<&str> = l.split_whitespace().collect();
        for (c, v) in names.iter().zip(&cells[1..]) {
            if cells[0].starts_with("GPU") && c.starts_with("GPU") {
                let v = if *v == "X" { "LOC" } else { v };
                m.insert((cells[0].to_string(), c.clone()), v.to_string());
            }
        }
    }
    m
}

/// `GPU<n>`: a GPU's row or column (not the "GPU NUMA ID" column).
fn is_gpu(name: &str) -> bool {
    name.strip_prefix("GPU")
        .is_some_and(|n| n.parse::<u32>().is_ok())
}

/// `nvidia-smi topo -m`: tab separated, NVLink paths as NV#.
fn smi_matrix(text: &str) -> Matrix {
    let mut lines = text.lines();
    let names: Vec<String> = lines
        .next()
        .unwrap_or_default()
        .split('\t')
        .skip(1)
        .map(String::from)
        .collect();
    let mut m = Matrix::new();
    for l in lines.take_while(|l| !l.trim().is_empty()) {
        let cells: Vec<&str> = l.split('\t').collect();
        for (c, v) in names.iter().zip(&cells[1..]) {
            if is_gpu(cells[0]) && is_gpu(c) {
                let v = v.trim();
                let v = match v {
                    "X" => "LOC",
                    _ if v.starts_with("NV") && v[2..].parse::<u32>().is_ok() => "NVL",
                    _ => v,
                };
                m.insert((cells[0].to_string(), c.clone()), v.to_string());
            }
        }
    }
    m
}

fn topology_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![repo().join("topologies")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("topologies") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "xml") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn topo_matrix_agrees_with_ncclsim_topo_paths_on_every_gpu_pair() {
    let files = topology_files();
    assert!(files.len() >= 20, "{files:?}");
    for file in files {
        let f = file.to_str().expect("utf-8 path");
        let paths = |extra: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_ncclsim"))
                .args(["topo", "paths", f])
                .args(extra)
                .env_remove("NCCL_TOPO_FILE")
                .output()
                .expect("run ncclsim topo paths")
        };
        // Skeleton files need a GPU model, given to both sides.
        let mut model = None;
        let mut out = paths(&[]);
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--gpu") {
            model = Some("A100-SXM4");
            out = paths(&["--gpu", "A100-SXM4"]);
        }
        let expected = ncclsim_matrix(&stdout_ok(&out));
        let mut run = vec!["--topo", f];
        let env = model.map(|m| format!("NCCLSIM_GPU={m}"));
        if let Some(e) = &env {
            run.extend(["--env", e.as_str()]);
        }
        let got = smi_matrix(&stdout_ok(&smi(&run, &["topo", "-m"])));
        assert!(!expected.is_empty(), "{f}: no GPU matrix");
        assert_eq!(got, expected, "{f}");
    }
}

#[test]
fn unknown_options_are_refused_with_nvidia_smis_message() {
    for args in [
        &["--bogus"][..],
        &["topo", "-x"],
        &["--query-gpu=index,warp.drive", "--format=csv"],
        &["--query-gpu=index"],
    ] {
        let o = smi(DGX_A100, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("nvidia-smi -h") || err.contains("nvidia-smi --help-query-gpu"),
            "{args:?}: {err}"
        );
    }
    // The help the messages point to exists and lists the fields.
    let help = stdout_ok(&smi(DGX_A100, &["--help-query-gpu"]));
    assert!(help.contains("\"power.draw\" [W]\n"), "{help}");
    // A GPU the node does not have.
    let o = smi(DGX_A100, &["-i", "8", "-L"]);
    assert_eq!(o.status.code(), Some(6), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("No devices were found"));
    let err = String::from_utf8_lossy(&smi(DGX_A100, &["--bogus"]).stderr).into_owned();
    assert!(
        err.starts_with(
            "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
        ),
        "{err}"
    );
    let o = smi(DGX_A100, &["--query-gpu=index,warp.drive", "--format=csv"]);
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("Field \"warp.drive\" is not a valid field to query."),
        "{o:?}"
    );
}

/// The workload of `gpu_load.c`, built against the real runtime name only: its libraries come
/// from `ncclsim run`.
fn gpu_load(dir: &Path) -> PathBuf {
    let exe = support::build_c(
        dir,
        &[("libcudart12.so", "libcudart.so.12")],
        &repo().join("cli/tests/c/gpu_load.c"),
        &[],
        &[],
        "gpu_load",
        0,
    );
    let _ = std::fs::remove_file(dir.join("libcudart.so.12"));
    exe
}

/// Rows of `--query-gpu=index,memory.used,utilization.gpu --format=csv,noheader,nounits`.
fn usage_rows(block: &str) -> Vec<(u32, u64, u32)> {
    block
        .lines()
        .map(|l| {
            let f: Vec<u64> = l.split(", ").map(|v| v.trim().parse().expect(l)).collect();
            assert_eq!(f.len(), 3, "{l}");
            (f[0] as u32, f[1], f[2] as u32)
        })
        .collect()
}

#[test]
fn nvidia_smi_in_its_own_process_sees_the_memory_and_work_of_the_jobs_other_processes() {
    let dir = support::scratch_dir("smi-job");
    let exe = gpu_load(&dir);
    // Workload A holds 256 + 16 i MiB on GPU i of all eight; B (GPU 0 only) 100 MiB. B is
    // killed (its record dangles) before the second query; A then ends normally.
    let script_text = r#"
set -e
d=$1; load=$2
q() { nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader,nounits; }
"$load" 256 16 "$d/a.ready" "$d/done" &
a=$!
CUDA_VISIBLE_DEVICES=0 "$load" 100 0 "$d/b.ready" "$d/done" &
b=$!
i=0
while [ ! -e "$d/a.ready" ] || [ ! -e "$d/b.ready" ]; do
  i=$((i+1)); [ $i -lt 1200 ] || { echo "workloads not ready" >&2; exit 1; }; sleep 0.05
done
echo "pids $a $b"
echo "== both"; q
echo "== apps"
nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv,noheader,nounits
kill -9 $b; wait $b || true
echo "== a"; q
echo "links $(ls "$NCCLSIM_JOB_DIR" | tr '\n' ' ')"
touch "$d/done"; wait $a
echo "== none"; q
echo "jobdir $NCCLSIM_JOB_DIR"
"#;
    let o = script(DGX_A100_REAL_CLOCK, script_text, &dir, &exe, &[]);
    let out = stdout_ok(&o);
    let block = |name: &str| {
        out.split(&format!("== {name}\n"))
            .nth(1)
            .and_then(|rest| rest.split("\n==").next())
            .unwrap_or_else(|| panic!("no {name} block in {out}"))
            .lines()
            .take_while(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // The context a process holds on each device it uses (documented in fake-cuda-abi).
    const CONTEXT_MIB: u64 = 400;
    let a_mib = |i: u64| 256 + 16 * i + CONTEXT_MIB;
    let both = usage_rows(&block("both"));
    assert_eq!(both.len(), 8, "{out}");
    for &(i, used, util) in &both {
        let want = a_mib(u64::from(i)) + if i == 0 { 100 + CONTEXT_MIB } else { 0 };
        assert_eq!(used, want, "GPU {i}: {out}");
        assert!(util > 0 && util <= 100, "GPU {i} utilization {util}: {out}");
    }
    // The processes table: A on all eight GPUs, B on GPU 0, each with its context.
    let pids: Vec<u32> = out
        .lines()
        .find_map(|l| l.strip_prefix("pids "))
        .expect("pids line")
        .split(' ')
        .map(|p| p.parse().expect("pid"))
        .collect();
    let apps: Vec<(u32, u64, String)> = block("apps")
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(", ").collect();
            (
                f[0].parse().expect(l),
                f[1].parse().expect(l),
                f[2].to_string(),
            )
        })
        .collect();
    assert_eq!(apps.len(), 9, "{out}");
    assert_eq!(apps.iter().filter(|a| a.0 == pids[0]).count(), 8, "{out}");
    assert!(
        apps.contains(&(pids[1], 100 + CONTEXT_MIB, "00000000:07:00.0".into())),
        "{out}"
    );
    assert!(
        apps.contains(&(pids[0], a_mib(0), "00000000:07:00.0".into())),
        "{out}"
    );
    // B killed: its memory and context are gone from GPU 0.
    let a_only = usage_rows(&block("a"));
    assert_eq!(a_only[0].1, a_mib(0), "{out}");
    assert_eq!(a_only[7].1, a_mib(7), "{out}");
    // Reading the job found B's record gone and removed its link; A's remains.
    let links = out
        .lines()
        .find_map(|l| l.strip_prefix("links "))
        .expect("links line");
    assert_eq!(links.trim(), pids[0].to_string(), "{out}");
    // Both ended: nothing is held, nothing is busy.
    for (i, used, util) in usage_rows(&block("none")) {
        assert_eq!((used, util), (0, 0), "GPU {i}: {out}");
    }
    // The job directory is gone with the run.
    let job = out
        .lines()
        .find_map(|l| l.strip_prefix("jobdir "))
        .expect("jobdir line");
    assert!(job.contains("ncclsim-job-"), "{out}");
    assert!(!Path::new(job).exists(), "{job} left behind");
}

#[test]
fn each_simulated_node_sees_only_its_own_processes() {
    let dir = support::scratch_dir("smi-nodes");
    let exe = gpu_load(&dir);
    // Node 0 loads its GPUs; node 1, once node 0 is loaded, must see its own GPUs idle and
    // empty; then node 0 looks at its own.
    let script_text = r#"
set -e
d=$1; load=$2; node=$3
q() { nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader,nounits; }
wait_for() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -lt 1200 ] || exit 1; sleep 0.05; done; }
if [ "$node" = 0 ]; then
  "$load" 64 0 "$d/ready" "$d/done" &
  a=$!
  wait_for "$d/ready"; touch "$d/node0"
  wait_for "$d/node1"; q > "$d/q0"
  touch "$d/done"; wait $a
else
  wait_for "$d/node0"; q > "$d/q1"; touch "$d/node1"
fi
"#;
    let mut options = DGX_A100_REAL_CLOCK.to_vec();
    options.extend(["--nodes", "2"]);
    let o = script(&options, script_text, &dir, &exe, &["{node}"]);
    stdout_ok(&o);
    let read = |f: &str| usage_rows(&std::fs::read_to_string(dir.join(f)).expect(f));
    for (i, used, util) in read("q0") {
        assert_eq!(used, 64 + 400, "node 0 GPU {i}");
        assert!(util > 0, "node 0 GPU {i}");
    }
    for (i, used, util) in read("q1") {
        assert_eq!((used, util), (0, 0), "node 1 GPU {i}");
    }
}
