//! The runtime's host collectives against their anchors, measured side by side in one run:
//! AllReduce (float sum, out of place) of ncclsim's `libnccl.so.2` with N ranks as processes,
//! OpenMPI's `MPI_Allreduce` over shared memory with the same N (skipped with a note when
//! `mpicc`/`mpirun` are missing: `benches/install-openmpi.sh` installs them), and the memory
//! bound: N processes each copying the same bytes with `memcpy` at once. Each program times
//! its own loop; criterion's `iter_custom` runs it with criterion's iteration count.
//!
//! `cargo bench -p benches --bench runtime`; BENCHMARKS.md has the figures.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

struct Programs {
    dir: PathBuf,
    nccl: PathBuf,
    init: PathBuf,
    memcpy: PathBuf,
    mpi: Option<PathBuf>,
}

fn programs() -> &'static Programs {
    static P: OnceLock<Programs> = OnceLock::new();
    P.get_or_init(|| {
        let dir = support::scratch_dir("bench-runtime");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let nccl_program = |source: &str, exe: &str| {
            support::build_c(
                &dir,
                &[
                    ("libnccl.so", "libnccl.so.2"),
                    ("libcudart12.so", "libcudart.so.12"),
                ],
                &here.join(source),
                &[here.join("../nccl-shim/include")],
                &[],
                exe,
                2,
            )
        };
        let nccl = nccl_program("c/nccl_allreduce.c", "nccl_allreduce");
        let init = nccl_program("c/nccl_init.c", "nccl_init");
        let memcpy = support::compile_c_opt(
            &dir,
            &here.join("c/memcpy_bound.c"),
            &[],
            &["libpthread.so.0"],
            "memcpy_bound",
        );
        let mpi_exe = dir.join("mpi_allreduce");
        let mpi = Command::new("mpicc")
            .args(["-O2", "-o"])
            .arg(&mpi_exe)
            .arg(here.join("c/mpi_allreduce.c"))
            .status()
            .ok()
            .filter(|s| s.success())
            .map(|_| mpi_exe);
        if mpi.is_none() {
            eprintln!(
                "OpenMPI not found (mpicc): run benches/install-openmpi.sh to measure the anchor"
            );
        }
        Programs {
            dir,
            nccl,
            init,
            memcpy,
            mpi,
        }
    })
}

fn seconds(out: std::process::Output, what: &str) -> f64 {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{what} printed no time"))
}

/// Calls a program's timed loop makes for criterion's `iters`: at least as many as give a
/// steady mean per call (the counts `allreduce-sweep.sh` uses). Each sample starts new
/// processes, which criterion counts as nothing, so it asks for few iterations of a small
/// message; a loop of a handful of calls times its first, cold ones. The runners return the
/// loop's mean per call times `iters`.
fn loop_len(n: usize, bytes: usize, iters: u64) -> u64 {
    let steady = match bytes {
        0..=4096 if n <= 8 => 20_000,
        0..=4096 => 5_000,
        4097..=1_048_576 => 200,
        1_048_577..=16_777_216 => 20,
        _ => 2,
    };
    iters.max(steady)
}

fn run_nccl(n: usize, bytes: usize, iters: u64) -> Duration {
    run_nccl_sim(n, bytes, iters, true)
}

/// [`run_nccl`] with the simulation (plans and predicted times) on or off.
fn run_nccl_sim(n: usize, bytes: usize, iters: u64, sim: bool) -> Duration {
    let p = programs();
    let sim = if sim { "1" } else { "0" };
    let id = p.dir.join(format!("id-{n}-{bytes}"));
    let _ = std::fs::remove_file(&id);
    let calls = loop_len(n, bytes, iters);
    let args = |r: usize| {
        vec![
            r.to_string(),
            n.to_string(),
            id.display().to_string(),
            bytes.to_string(),
            calls.to_string(),
        ]
    };
    let others: Vec<_> = (1..n)
        .map(|r| {
            Command::new(&p.nccl)
                .args(args(r))
                .env("NCCLSIM_NODE", (r / 8).to_string())
                .env("NCCLSIM_TIMEOUT", "300")
                .env("NCCLSIM_SIM", sim)
                .spawn()
                .expect("spawn")
        })
        .collect();
    let out = Command::new(&p.nccl)
        .args(args(0))
        .env("NCCLSIM_NODE", "0")
        .env("NCCLSIM_TIMEOUT", "300")
        .env("NCCLSIM_SIM", sim)
        .output()
        .expect("rank 0");
    for mut o in others {
        let _ = o.wait();
    }
    let _ = std::fs::remove_file(&id);
    Duration::from_secs_f64(seconds(out, "nccl_allreduce") * iters as f64)
}

fn run_mpi(exe: &Path, n: usize, bytes: usize, iters: u64) -> Duration {
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            &n.to_string(),
        ])
        .arg(exe)
        .args([bytes.to_string(), loop_len(n, bytes, iters).to_string()])
        .output()
        .expect("mpirun");
    Duration::from_secs_f64(seconds(out, "mpi_allreduce") * iters as f64)
}

fn run_memcpy(n: usize, bytes: usize, iters: u64) -> Duration {
    let out = Command::new(&programs().memcpy)
        .args([
            n.to_string(),
            bytes.to_string(),
            loop_len(n, bytes, iters).to_string(),
        ])
        .output()
        .expect("memcpy_bound");
    Duration::from_secs_f64(seconds(out, "memcpy_bound") * iters as f64)
}

fn allreduce(c: &mut Criterion) {
    for n in [8usize, 16] {
        let mut g = c.benchmark_group(format!("host_allreduce_{n}_ranks"));
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(4));
        for bytes in [8usize, 4 << 10, 1 << 20, 16 << 20, 256 << 20] {
            g.throughput(Throughput::Bytes(bytes as u64));
            g.bench_with_input(BenchmarkId::new("ncclsim", bytes), &bytes, |b, &s| {
                b.iter_custom(|it| run_nccl(n, s, it))
            });
            if let Some(mpi) = &programs().mpi {
                g.bench_with_input(BenchmarkId::new("openmpi", bytes), &bytes, |b, &s| {
                    b.iter_custom(|it| run_mpi(mpi, n, s, it))
                });
            }
            if bytes >= 1 << 20 {
                g.bench_with_input(BenchmarkId::new("memcpy_bound", bytes), &bytes, |b, &s| {
                    b.iter_custom(|it| run_memcpy(n, s, it))
                });
            }
        }
        g.finish();
    }
}

/// Seconds of (world init, TP=8/DP split) for `n` processes, from a common start to the
/// slowest rank.
fn run_init(n: usize) -> (f64, f64) {
    let p = programs();
    let id = p.dir.join(format!("init-{n}"));
    let _ = std::fs::remove_file(&id);
    let args = |r: usize| vec![r.to_string(), n.to_string(), id.display().to_string()];
    let others: Vec<_> = (1..n)
        .map(|r| {
            Command::new(&p.init)
                .args(args(r))
                .env("NCCLSIM_NODE", (r / 8).to_string())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let out = Command::new(&p.init)
        .args(args(0))
        .env("NCCLSIM_NODE", "0")
        .output()
        .expect("rank 0");
    for mut o in others {
        let _ = o.wait();
    }
    assert!(
        out.status.success(),
        "nccl_init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text
        .split_whitespace()
        .map(|x| x.parse::<f64>().expect("seconds"));
    (it.next().expect("init"), it.next().expect("split"))
}

fn init(c: &mut Criterion) {
    let mut g = c.benchmark_group("comm_init_16_processes");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(5));
    g.bench_function("ncclCommInitRank", |b| {
        b.iter_custom(|it| {
            (0..it)
                .map(|_| Duration::from_secs_f64(run_init(16).0))
                .sum()
        })
    });
    g.bench_function("ncclCommSplit_tp8_dp2", |b| {
        b.iter_custom(|it| {
            (0..it)
                .map(|_| Duration::from_secs_f64(run_init(16).1))
                .sum()
        })
    });
    g.finish();
}

/// What the simulation adds to each call after the first: pricing one collective on its
/// communicator's plan (the plan itself is made once, at init).
fn pricing(c: &mut Criterion) {
    let sim = nccl::testing::sim::sim().expect("the simulation loads the bundled topology");
    let members: Vec<(usize, i32)> = (0..16).map(|r| (r / 8, (r % 8) as i32)).collect();
    let comm = sim.plan(&members, "world").expect("plan");
    let mut g = c.benchmark_group("runtime_per_call");
    g.bench_function("plan_lookup_cached_16_ranks", |b| {
        b.iter(|| {
            sim.plan(std::hint::black_box(&members), "world")
                .expect("plan")
        })
    });
    g.bench_function("price_allreduce_4MiB", |b| {
        b.iter(|| {
            nccl::testing::sim::predict(
                &comm,
                nccl::testing::types::Collective::AllReduce,
                std::hint::black_box(1 << 20),
                nccl::testing::types::DataType::Float32,
                0,
                16,
            )
        })
    });
    // The whole call, one rank, 8 bytes: with and without the simulation.
    for (name, on) in [
        ("allreduce_8B_1_rank_simulated", true),
        ("allreduce_8B_1_rank_not_simulated", false),
    ] {
        g.bench_function(name, |b| b.iter_custom(|it| run_nccl_sim(1, 8, it, on)));
    }
    g.finish();
}

criterion_group!(benches, allreduce, init, pricing);
criterion_main!(benches);
