//! `ncclsim fuzz` (built with `--features fuzz`): a structure-aware fuzzer over topology files,
//! `NCCL_GRAPH_FILE` graph files and command lines, checking that bad input never panics, aborts
//! or runs long.
//!
//! Each case takes a topology of the repository (`topologies/`, `topologies/vendor/`) and
//! sometimes a graph file NCCL would dump for it, mutates them on their element tree (attribute
//! values swapped for hostile ones, attributes and elements dropped, duplicated, renamed,
//! moved or nested deeper) or on their bytes (flips, truncation, control characters, byte-order
//! marks, invalid UTF-8), writes them to a scratch directory and runs a generated command line
//! (`plan`, `predict`, `whatif`, `topo ...` with hostile options) on them.
//!
//! In-process mode runs the command in this process under `catch_unwind` (its output goes to
//! /dev/null) and counts panics and cases over the time limit. Child mode runs the `ncclsim`
//! binary per case with a time limit and an address-space limit, and also catches aborts
//! (stack overflows, allocation failures) and hangs. Every failing case is written to the
//! output directory as a script that reproduces it.
//!
//! `inputs` holds the generator, the corpus and the mutations; `cases` turns them into one case
//! (files and command line); this file runs cases and reports failures.

use clap::{Args, Parser};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use topo::XmlElement;

/// `ncclsim fuzz` options.
#[derive(Args, Debug, Clone)]
pub struct FuzzArgs {
    /// Cases to run (over all threads).
    #[arg(long, default_value_t = 10_000)]
    pub cases: u64,
    /// First seed; case i uses seed + i, so a case can be replayed alone with --cases 1.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker threads (in-process) or concurrent children (child mode).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Run every case as a child process (catches aborts and hangs; much slower).
    #[arg(long)]
    pub child: bool,
    /// Time limit per case, seconds (a slower case is a failure).
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// Address-space limit per child, MiB.
    #[arg(long, default_value_t = 4096)]
    pub mem_mib: u64,
    /// Where failing cases are written.
    #[arg(long, default_value = "fuzz-failures")]
    pub out: PathBuf,
    /// Repository root (for topologies/).
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print each case's command line (to stderr) before running it.
    #[arg(long)]
    pub verbose: bool,
}

macro_rules! say {
    ($($t:tt)*) => {
        report(&format!($($t)*))
    };
}

mod cases;
mod inputs;

use cases::{gen_case, Case};
use inputs::{corpus, Rng};

/// A case that failed: why, and the command line.
struct Failure {
    seed: u64,
    kind: String,
    detail: String,
    case: Case,
}

fn save(out: &Path, f: &Failure) {
    let dir = out.join(format!("case-{}", f.seed));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("topo.xml"), &f.case.topo_text);
    if let Some(g) = &f.case.graph_text {
        let _ = std::fs::write(dir.join("graph.xml"), g);
    }
    let args: Vec<String> = f
        .case
        .args
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let _ = std::fs::write(
        dir.join("README"),
        format!(
            "{}: {}\nThe files were at a scratch directory; rerun with them copied back there, or replay with\n  ncclsim fuzz --seed {} --cases 1 --threads 1 --verbose\nncclsim {}\n",
            f.kind,
            f.detail,
            f.seed,
            args.join(" ")
        ),
    );
}

/// Where the fuzzer's own lines go (a copy of stderr while the commands' stderr is silenced).
static REPORT_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(2);

fn report(line: &str) {
    let fd = REPORT_FD.load(Ordering::Relaxed);
    let text = format!("{line}\n");
    // SAFETY: writing a buffer this function owns to a descriptor the process keeps open.
    unsafe {
        libc::write(fd, text.as_ptr().cast(), text.len());
    }
}

/// How one case ended: `Ok(true)` refused as bad input, `Ok(false)` accepted, `Err((kind,
/// detail))` a failure.
type Outcome = Result<bool, (String, String)>;

/// What the worker threads share.
#[derive(Default)]
struct Tally {
    /// The next case index to hand out.
    next: AtomicU64,
    done: AtomicU64,
    /// Cases refused as bad input.
    exit2: AtomicU64,
    failures: Mutex<Vec<Failure>>,
    /// The slowest case so far and its seed.
    slowest: Mutex<(Duration, u64)>,
}

/// Run the fuzzer; returns the number of failures.
pub fn run(a: &FuzzArgs, run_cli: fn(Vec<String>) -> Result<(), String>) -> Result<u64, String> {
    let corpus = corpus(&a.repo)?;
    say!(
        "fuzz: {} topologies, {} graph files; {} case(s) from seed {} on {} thread(s), {} mode",
        corpus.topos.len(),
        corpus.graphs.len(),
        a.cases,
        a.seed,
        a.threads,
        if a.child {
            "child-process"
        } else {
            "in-process"
        }
    );
    let scratch = std::env::temp_dir().join(format!("ncclsim-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // In-process: the commands' output and warnings go to /dev/null (the fuzzer reports on a
    // copy of stderr); panics are caught, not printed.
    let saved = (!a.child).then(silence_output);
    let prev_hook = std::panic::take_hook();
    if !a.child {
        std::panic::set_hook(Box::new(|_| {}));
    }
    let tally = Tally::default();
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for w in 0..a.threads.max(1) {
            let dir = scratch.join(format!("w{w}"));
            let (corpus, tally, exe) = (&corpus, &tally, &exe);
            std::thread::Builder::new()
                .stack_size(64 << 20)
                .spawn_scoped(sc, move || {
                    let _ = std::fs::create_dir_all(&dir);
                    worker(a, corpus, tally, &dir, exe, run_cli, t0)
                })
                .expect("a fuzz worker thread");
        }
    });
    std::panic::set_hook(prev_hook);
    if let Some(saved) = saved {
        restore_output(saved);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let n = tally.done.load(Ordering::Relaxed);
    let fails = tally.failures.lock().map(|f| f.len()).unwrap_or(0) as u64;
    let (slow, slow_seed) = *tally.slowest.lock().unwrap_or_else(|p| p.into_inner());
    let secs = t0.elapsed().as_secs_f64();
    let exit2 = tally.exit2.load(Ordering::Relaxed);
    let report = format!(
        "fuzz: {n} cases in {secs:.1} s ({:.0}/s): {exit2} rejected as bad input, {} accepted, {fails} failure(s) (panic, abort, signal or over {} s); slowest case {slow:?} {} (seed {slow_seed})",
        n as f64 / secs,
        n - exit2 - fails,
        a.timeout,
        if a.child { "wall" } else { "CPU" }
    );
    say!("{report}");
    let _ = std::io::stderr().flush();
    Ok(fails)
}

/// Sends this process's standard output and error to /dev/null and the fuzzer's own lines to
/// a copy of stderr; returns the saved descriptors.
fn silence_output() -> (i32, i32) {
    // SAFETY: duplicating and redirecting this process's standard output descriptors.
    unsafe {
        let keep = (libc::dup(1), libc::dup(2));
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            libc::close(null);
        }
        REPORT_FD.store(keep.1, Ordering::Relaxed);
        keep
    }
}

/// Puts back the descriptors [`silence_output`] saved.
fn restore_output((out, err): (i32, i32)) {
    REPORT_FD.store(2, Ordering::Relaxed);
    // SAFETY: restoring the descriptors saved by silence_output.
    unsafe {
        libc::dup2(out, 1);
        libc::dup2(err, 2);
        libc::close(out);
        libc::close(err);
    }
}

/// One worker: takes case indices until none are left, runs each and records how it ended.
fn worker(
    a: &FuzzArgs,
    corpus: &inputs::Corpus,
    tally: &Tally,
    dir: &Path,
    exe: &Path,
    run_cli: fn(Vec<String>) -> Result<(), String>,
    t0: Instant,
) {
    loop {
        let i = tally.next.fetch_add(1, Ordering::Relaxed);
        if i >= a.cases {
            break;
        }
        let seed = a.seed + i;
        let mut rng = Rng(seed);
        let case = gen_case(corpus, &mut rng, dir);
        let _ = std::fs::write(dir.join("topo.xml"), &case.topo_text);
        if let Some(g) = &case.graph_text {
            let _ = std::fs::write(dir.join("graph.xml"), g);
        }
        if a.verbose {
            say!("case {seed}: ncclsim {}", case.args.join(" "));
        }
        let start = Instant::now();
        let cpu0 = thread_cpu();
        let outcome = if a.child {
            run_child(exe, &case.args, a.timeout, a.mem_mib)
        } else {
            run_in_process(run_cli, case.args.clone())
        };
        let wall = start.elapsed();
        // In-process, the limit is on this thread's CPU time (on a shared machine wall time
        // mostly measures the other processes); a wall time six times the limit counts too (a
        // case waiting forever). Children are timed by the wall clock.
        let took = if a.child { wall } else { thread_cpu() - cpu0 };
        {
            let mut s = tally.slowest.lock().unwrap_or_else(|p| p.into_inner());
            if took > s.0 {
                *s = (took, seed);
            }
        }
        let limit = Duration::from_secs(a.timeout);
        let outcome = match outcome {
            Ok(_) if took > limit || wall > 6 * limit => {
                Err(("slow".to_string(), format!("{took:?} CPU, {wall:?} wall")))
            }
            o => o,
        };
        match outcome {
            Ok(true) => {
                tally.exit2.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err((kind, detail)) => {
                let f = Failure {
                    seed,
                    kind,
                    detail,
                    case,
                };
                save(&a.out, &f);
                say!("fuzz: case {seed}: {}: {}", f.kind, f.detail);
                tally
                    .failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(f);
            }
        }
        let n = tally.done.fetch_add(1, Ordering::Relaxed) + 1;
        if n % 10_000 == 0 {
            say!(
                "fuzz: {n} cases, {:.0}/s, {} failure(s)",
                n as f64 / t0.elapsed().as_secs_f64(),
                tally.failures.lock().map(|f| f.len()).unwrap_or(0)
            );
        }
    }
}

/// Runs one command line in this process, a panic caught and reported as a failure.
fn run_in_process(run_cli: fn(Vec<String>) -> Result<(), String>, args: Vec<String>) -> Outcome {
    match std::panic::catch_unwind(move || run_cli(args)) {
        Ok(Ok(())) => Ok(false),
        Ok(Err(_)) => Ok(true),
        Err(p) => Err((
            "panic".to_string(),
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        )),
    }
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec this function owns.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Run one case as a child `ncclsim` with a time and an address-space limit. `Ok(true)` for a
/// clean error exit, `Ok(false)` for success, `Err` for a signal, an abort or a timeout.
fn run_child(exe: &Path, args: &[String], timeout: u64, mem_mib: u64) -> Outcome {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let bytes = mem_mib << 20;
    // SAFETY: between fork and exec, only setrlimit (async-signal-safe) is called.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| ("spawn".to_string(), e.to_string()))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                return match (st.code(), st.signal()) {
                    (Some(0), _) => Ok(false),
                    (Some(1), _) | (Some(2), _) => Ok(true),
                    (Some(c), _) => Err(("exit".into(), format!("exit status {c}"))),
                    (None, Some(s)) => Err(("signal".into(), format!("killed by signal {s}"))),
                    _ => Err(("exit".into(), format!("{st}"))),
                };
            }
            Ok(None) if start.elapsed() > Duration::from_secs(timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(("timeout".into(), format!("over {timeout} s")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(("wait".into(), e.to_string())),
        }
    }
}

/// Parse a command line the way `main` does (for the in-process mode).
pub fn parse<C: Parser>(args: Vec<String>) -> Result<C, String> {
    C::try_parse_from(std::iter::once("ncclsim".to_string()).chain(args)).map_err(|e| e.to_string())
}
