//! Soak run of the runtime (not a criterion benchmark: one long run, its numbers reported):
//! 16 ranks as processes (2 simulated nodes x 8 GPUs) run 1000 steps of a TP=8 x DP=2 job,
//! each step a TP AllReduce (256 KiB), a TP AllGather (64 KiB per rank), a DP ReduceScatter
//! (256 KiB) and a grouped send/receive with both world-ring neighbours (64 KiB each way);
//! one more step on known inputs is checked (`benches/c/nccl_soak.c`). Every rank reports its
//! resident memory, descriptors and threads after steps 1, 10, 100 and the last; this prints
//! them per rank and summed, and the wall time of the slowest rank.
//!
//! `cargo bench -p benches --bench soak` (`NCCLSIM_SOAK_RANKS`, `NCCLSIM_SOAK_ITERS` change the
//! 16 ranks and 1000 steps). The ranks are killed if the run exceeds 30 minutes.
//! BENCHMARKS.md has the figures.

use fake_cuda_test_support as support;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One measure after steps 1, 10, 100 and the last.
type Samples = [i64; 4];

struct Report {
    rss_kb: Samples,
    fds: Samples,
    threads: Samples,
    wall_s: f64,
}

fn parse(line: &str) -> Option<Report> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let four = |at: usize| -> Option<Samples> {
        let mut v = [0; 4];
        for (k, x) in v.iter_mut().enumerate() {
            *x = w.get(at + k)?.parse().ok()?;
        }
        Some(v)
    };
    Some(Report {
        rss_kb: four(4)?,
        fds: four(9)?,
        threads: four(14)?,
        wall_s: w.get(19)?.parse().ok()?,
    })
}

fn row(r: &Report) -> String {
    let cols = |v: &Samples, w: usize| {
        v.iter()
            .map(|x| format!("{x:>w$}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "{}   {}   {}",
        cols(&r.rss_kb, 8),
        cols(&r.fds, 4),
        cols(&r.threads, 4)
    )
}

fn main() {
    let n = env_usize("NCCLSIM_SOAK_RANKS", 16);
    let iters = env_usize("NCCLSIM_SOAK_ITERS", 1000);
    let dir = support::scratch_dir("bench-soak");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = support::build_c(
        &dir,
        &[
            ("libnccl.so", "libnccl.so.2"),
            ("libcudart12.so", "libcudart.so.12"),
        ],
        &here.join("c/nccl_soak.c"),
        &[here.join("../nccl-shim/include")],
        &[],
        "nccl_soak",
        2,
    );
    let id = dir.join("soak.id");
    let _ = std::fs::remove_file(&id);
    let start = Instant::now();
    let mut children: Vec<_> = (0..n)
        .map(|r| {
            Command::new(&exe)
                .args([
                    r.to_string(),
                    n.to_string(),
                    id.display().to_string(),
                    iters.to_string(),
                ])
                .env("NCCLSIM_NODE", (r / 8).to_string())
                .env("NCCLSIM_TIMEOUT", "300")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a rank")
        })
        .map(Some)
        .collect();
    let limit = Duration::from_secs(30 * 60);
    let mut outputs = vec![None; n];
    while outputs.iter().any(|o| o.is_none()) {
        for (r, c) in children.iter_mut().enumerate() {
            if c.as_mut()
                .is_some_and(|ch| ch.try_wait().expect("wait").is_some())
            {
                outputs[r] = Some(c.take().expect("child").wait_with_output().expect("output"));
            }
        }
        if start.elapsed() > limit {
            for c in children.iter_mut().flatten() {
                let _ = c.kill();
            }
            panic!("soak still running after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let total = start.elapsed();
    let mut sum = Report {
        rss_kb: [0; 4],
        fds: [0; 4],
        threads: [0; 4],
        wall_s: 0.0,
    };
    println!(
        "{n} ranks x {iters} steps (TP AllReduce, TP AllGather, DP ReduceScatter, ring send/recv)"
    );
    println!("rank  RSS KiB after step 1/10/100/last   fds 1/10/100/last   threads 1/10/100/last");
    for (r, o) in outputs.into_iter().enumerate() {
        let o = o.expect("output");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "rank {r} failed ({}): {text}{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        let rep = text
            .lines()
            .find_map(parse)
            .unwrap_or_else(|| panic!("rank {r} printed no report: {text}"));
        println!("{r:4}  {}", row(&rep));
        for k in 0..4 {
            sum.rss_kb[k] += rep.rss_kb[k];
            sum.fds[k] += rep.fds[k];
            sum.threads[k] += rep.threads[k];
        }
        sum.wall_s = sum.wall_s.max(rep.wall_s);
    }
    println!(" all  {}", row(&sum));
    println!(
        "steps: {:.2} s on the slowest rank ({:.2} ms per step); whole run with init: {:.2} s",
        sum.wall_s,
        sum.wall_s * 1e3 / iters as f64,
        total.as_secs_f64()
    );
}
