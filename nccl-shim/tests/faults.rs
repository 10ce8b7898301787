//! Faults against the built `libnccl.so.2`, each job's ranks as child processes of a C
//! program (`tests/c/nccl_faults.c`) under a hard outer limit (killed on expiry): a rank lost
//! before init, in init and inside an AllReduce; `ncclCommAbort` from a second thread during a
//! collective, during a non-blocking init and during a blocking one, each followed by a new
//! communicator in the same processes; forged connections to a job's bootstrap root while it initialises; every
//! invalid argument; calls that disagree across ranks. For each the survivors' exact code and
//! message are checked and the time it took printed; every process must end with the
//! descriptors and threads it had before its first communicator, /dev/shm must hold no new
//! entry and the ranks' TMPDIR must stay empty.

use fake_cuda_test_support as support;
use std::io::Write;
use std::net::{SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const REMOTE_ERROR: i32 = 6;
const INTERNAL_ERROR: i32 = 3;
const INVALID_ARGUMENT: i32 = 4;
const INVALID_USAGE: i32 = 5;

fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("nccl-faults");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        support::build_c(
            &dir,
            &[
                ("libnccl.so", "libnccl.so.2"),
                ("libcudart12.so", "libcudart.so.12"),
            ],
            &here.join("tests/c/nccl_faults.c"),
            &[here.join("include")],
            &["libpthread.so.0"],
            "nccl_faults",
            0,
        )
    })
}

/// Entries of /dev/shm (none may appear: the runtime uses memfds only).
fn dev_shm() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// One rank's outcome: its result lines as (case, code, ms, message).
struct Rank {
    rank: usize,
    output: Output,
    results: Vec<(String, i32, f64, String)>,
}

impl Rank {
    fn text(&self) -> String {
        format!(
            "rank {} ({}):\n{}{}",
            self.rank,
            self.output.status,
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }

    fn result(&self, case: &str) -> &(String, i32, f64, String) {
        self.results
            .iter()
            .find(|r| r.0 == case)
            .unwrap_or_else(|| panic!("no result {case}: {}", self.text()))
    }

    /// Asserts the process ended with the descriptors and threads it started with.
    fn no_leaks(&self) {
        let out = String::from_utf8_lossy(&self.output.stdout);
        let line = out
            .lines()
            .find(|l| l.starts_with("leaks "))
            .unwrap_or_else(|| panic!("no leak line: {}", self.text()));
        for field in line.split_whitespace().skip(2) {
            let (name, v) = field.split_once('=').expect("name=before/after");
            let (before, after) = v.split_once('/').expect("before/after");
            assert_eq!(before, after, "{name} before/after: {}", self.text());
        }
    }
}

fn parse(out: &str) -> Vec<(String, i32, f64, String)> {
    out.lines()
        .filter_map(|l| l.strip_prefix("result "))
        .map(|l| {
            let field = |k: &str| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix(k))
                    .unwrap_or_default()
                    .to_string()
            };
            let msg = l.split_once("msg=").map_or("", |x| x.1).to_string();
            (
                field("case="),
                field("code=").parse().expect("code"),
                field("ms=").parse().expect("ms"),
                msg,
            )
        })
        .collect()
}

/// A job: `n` ranks of `scenario`, `setup` adjusting each rank's command.
struct Job {
    id: PathBuf,
    /// The ranks' TMPDIR, empty at the start: anything left in it is a leaked temp file.
    tmp: PathBuf,
    children: Vec<Child>,
    start: Instant,
    shm: Vec<String>,
}

impl Job {
    fn start(scenario: &str, n: usize, setup: impl Fn(usize, &mut Command)) -> Job {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = program()
            .parent()
            .expect("dir")
            .join(format!("{scenario}.{k}.id"));
        let shm = dev_shm();
        let tmp = program()
            .parent()
            .expect("dir")
            .join(format!("{scenario}.{k}.tmp"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).expect("TMPDIR");
        let children = (0..n)
            .map(|r| {
                let mut c = Command::new(program());
                c.args([
                    scenario.to_string(),
                    r.to_string(),
                    n.to_string(),
                    id.display().to_string(),
                ])
                .env_remove("CUDA_VISIBLE_DEVICES")
                .env_remove("NCCLSIM_TOPO")
                .env_remove("NCCL_TOPO_FILE")
                .env_remove("NCCLSIM_NODE")
                .env_remove("NCCL_COMM_ID")
                .env_remove("NCCL_HOSTID")
                .env_remove("NCCL_DEBUG")
                .env("NCCLSIM_TIMEOUT", "30")
                .env("TMPDIR", &tmp)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
                setup(r, &mut c);
                c.spawn().expect("spawn a rank")
            })
            .collect();
        Job {
            id,
            tmp,
            children,
            start: Instant::now(),
            shm,
        }
    }

    /// Waits for every rank, killing them all after `limit`; checks /dev/shm is as before.
    fn finish(self, limit: Duration) -> Vec<Rank> {
        let deadline = self.start + limit;
        let mut children: Vec<Option<Child>> = self.children.into_iter().map(Some).collect();
        let mut done: Vec<Option<Output>> = children.iter().map(|_| None).collect();
        while done.iter().any(|d| d.is_none()) {
            for (r, c) in children.iter_mut().enumerate() {
                if let Some(ch) = c {
                    if ch.try_wait().expect("wait").is_some() {
                        done[r] = Some(c.take().expect("child").wait_with_output().expect("out"));
                    }
                }
            }
            if Instant::now() > deadline {
                for c in children.iter_mut().flatten() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                panic!("ranks still running after {limit:?}: killed");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for f in std::fs::read_dir(self.id.parent().expect("dir"))
            .expect("dir")
            .flatten()
        {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.starts_with(&*self.id.file_name().expect("name").to_string_lossy()) {
                let _ = std::fs::remove_file(f.path());
            }
        }
        let new: Vec<String> = dev_shm()
            .into_iter()
            .filter(|e| !self.shm.contains(e))
            .collect();
        assert!(new.is_empty(), "new /dev/shm entries: {new:?}");
        let left: Vec<_> = std::fs::read_dir(&self.tmp)
            .expect("TMPDIR")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "files left in the ranks' TMPDIR: {left:?}");
        let _ = std::fs::remove_dir(&self.tmp);
        done.into_iter()
            .enumerate()
            .map(|(rank, o)| {
                let output = o.expect("output");
                let results = parse(&String::from_utf8_lossy(&output.stdout));
                Rank {
                    rank,
                    output,
                    results,
                }
            })
            .collect()
    }
}

/// Survivors (all ranks but the last) report `code` for `case` with a message containing
/// every one of `needles`, end normally and leak nothing; prints the times.
fn survivors_see(ranks: &[Rank], case: &str, code: i32, needles: &[&str]) {
    for r in &ranks[..ranks.len() - 1] {
        assert!(r.output.status.success(), "{}", r.text());
        let (_, c, ms, msg) = r.result(case);
        assert_eq!(*c, code, "{}", r.text());
        for n in needles {
            assert!(msg.contains(n), "'{msg}' lacks '{n}'");
        }
        eprintln!(
            "{case}: rank {} got code {c} after {ms:.0} ms: {msg}",
            r.rank
        );
        r.no_leaks();
    }
}

fn killed(r: &Rank) -> bool {
    use std::os::unix::process::ExitStatusExt;
    r.output.status.signal() == Some(9)
}

#[test]
fn a_rank_lost_before_init_is_named_at_the_timeout() {
    let ranks = Job::start("before", 3, |_, c| {
        c.env("NCCLSIM_TIMEOUT", "2");
    })
    .finish(Duration::from_secs(60));
    assert!(killed(&ranks[2]), "{}", ranks[2].text());
    survivors_see(
        &ranks,
        "before",
        REMOTE_ERROR,
        &["rank 2 of 3 did not join", "NCCLSIM_TIMEOUT"],
    );
}

#[test]
fn a_rank_lost_during_init_is_named_at_once() {
    // NCCLSIM_TIMEOUT is 30 s: the survivors' times show the death was noticed, not waited out.
    let ranks = Job::start("during", 3, |_, c| {
        c.env("NCCLSIM_TEST_KILL_IN_INIT", "2");
    })
    .finish(Duration::from_secs(60));
    assert!(killed(&ranks[2]), "{}", ranks[2].text());
    survivors_see(&ranks, "during", REMOTE_ERROR, &["rank 2 (pid", "exited"]);
    // Rank 0, whose hub the others are about to join, dies instead (the victim is the first
    // rank here: the job's ranks are reversed so survivors_see finds them first).
    let ranks = Job::start("during", 3, |_, c| {
        c.env("NCCLSIM_TEST_KILL_IN_INIT", "0");
    })
    .finish(Duration::from_secs(60));
    assert!(killed(&ranks[0]), "{}", ranks[0].text());
    let reversed: Vec<Rank> = ranks.into_iter().rev().collect();
    survivors_see(
        &reversed,
        "during",
        REMOTE_ERROR,
        &["rank 0 (pid", "exited"],
    );
}

#[test]
fn a_rank_lost_inside_an_allreduce_is_named_at_once() {
    let ranks = Job::start("midcoll", 3, |_, _| {}).finish(Duration::from_secs(60));
    assert!(killed(&ranks[2]), "{}", ranks[2].text());
    let host = support::run_ok(&mut Command::new("hostname"));
    survivors_see(
        &ranks,
        "midcoll",
        REMOTE_ERROR,
        &["rank 2 (pid", &format!("on {}", host.trim())],
    );
    survivors_see(&ranks, "async", REMOTE_ERROR, &["ncclCommGetAsyncError"]);
    // The same across hosts: every rank its own host, the data path over TCP.
    let ranks = Job::start("midcoll", 3, |r, c| {
        c.env("NCCL_HOSTID", format!("ncclsim-faults-host-{r}"));
    })
    .finish(Duration::from_secs(60));
    assert!(killed(&ranks[2]), "{}", ranks[2].text());
    survivors_see(&ranks, "midcoll", REMOTE_ERROR, &["rank 2"]);
}

#[test]
fn abort_from_a_second_thread_ends_a_collective_and_a_new_communicator_works() {
    let ranks = Job::start("abort_coll", 3, |_, _| {}).finish(Duration::from_secs(60));
    survivors_see(&ranks, "abort_coll", INVALID_USAGE, &["aborted"]);
    for r in &ranks {
        assert!(r.output.status.success(), "{}", r.text());
        assert_eq!(r.result("restart").1, 0);
        r.no_leaks();
    }
}

#[test]
fn abort_from_a_second_thread_ends_an_init_in_progress_and_a_new_communicator_works() {
    let ranks = Job::start("abort_init", 3, |_, _| {}).finish(Duration::from_secs(60));
    survivors_see(&ranks, "abort_init", 0, &["returned"]);
    survivors_see(&ranks, "abort_blocking_init", INVALID_USAGE, &["aborted"]);
    for r in &ranks {
        assert!(r.output.status.success(), "{}", r.text());
        assert_eq!(r.result("restart").1, 0);
        r.no_leaks();
    }
}

/// Connections a stranger could make to a job's root, knowing its address from the id file.
fn forge(root: SocketAddrV4, magic: u64) -> Vec<TcpStream> {
    let frame = |body: &[u8]| {
        let mut v = (body.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(body);
        v
    };
    let hello = |magic: u64, rank: u32, n: u32| {
        let mut b = magic.to_le_bytes().to_vec();
        b.extend_from_slice(&rank.to_le_bytes());
        b.extend_from_slice(&n.to_le_bytes());
        b.extend_from_slice(b"forged");
        frame(&b)
    };
    let sends: Vec<Vec<u8>> = vec![
        (0..=255u8).cycle().take(4096).collect(), // garbage
        hello(magic ^ 1, 0, 3),                   // another job's magic
        hello(magic, 7, 3),                       // this magic, rank out of range
        (1u64 << 29).to_le_bytes().to_vec(),      // claims a 512 MiB frame, sends nothing
        Vec::new(),                               // connects and stays silent
    ];
    sends
        .into_iter()
        .map(|b| {
            let mut s = TcpStream::connect(root).expect("connect to the root");
            s.write_all(&b).expect("send");
            s
        })
        .collect()
}

#[test]
fn forged_bootstrap_peers_do_not_disturb_a_job() {
    // Rank 0 runs the root: its warnings (on stdout, as NCCL logs) show what was refused.
    let job = Job::start("forged", 3, |r, c| {
        if r == 0 {
            c.env("NCCL_DEBUG", "WARN");
        }
    });
    let id_file = {
        let mut p = job.id.clone().into_os_string();
        p.push(".1");
        PathBuf::from(p)
    };
    let t = Instant::now();
    let id = loop {
        match std::fs::read(&id_file) {
            Ok(b) if b.len() == 128 => break b,
            _ if t.elapsed() > Duration::from_secs(30) => panic!("no id file"),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let magic = u64::from_le_bytes(id[0..8].try_into().expect("8 bytes"));
    let root = SocketAddrV4::new(
        [id[12], id[13], id[14], id[15]].into(),
        u16::from_be_bytes([id[10], id[11]]),
    );
    let strangers = forge(root, magic);
    let ranks = job.finish(Duration::from_secs(60));
    // The root has dropped every stranger: each read ends (closed or reset), none times out.
    // The one with the job's magic (it holds the id) is first told why it was refused.
    for (i, mut s) in strangers.into_iter().enumerate() {
        use std::io::Read;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        if i == 2 {
            let mut reply = Vec::new();
            s.read_to_end(&mut reply)
                .expect("the refusal, then the end");
            let text = String::from_utf8_lossy(&reply);
            assert!(text.contains("rank 7 of 3"), "refusal: {text:?}");
            continue;
        }
        let mut b = [0u8; 64];
        match s.read(&mut b) {
            Ok(0) => {}
            Ok(k) => panic!("a stranger was sent {k} bytes"),
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "a stranger's connection is still open: {e}"
            ),
        }
    }
    let log = String::from_utf8_lossy(&ranks[0].output.stdout);
    for refused in [
        "hello of 506097522914230528 bytes".to_string(),
        format!("magic {:#x} is not this communicator's", magic ^ 1),
        "rank 7 of 3".to_string(),
        "hello of 536870912 bytes".to_string(),
    ] {
        assert!(log.contains(&refused), "no refusal '{refused}' in:\n{log}");
    }
    for r in &ranks {
        assert!(r.output.status.success(), "{}", r.text());
        let (_, code, ms, _) = r.result("forged");
        assert_eq!(*code, 0);
        eprintln!(
            "forged: rank {} initialised and reduced in {ms:.0} ms",
            r.rank
        );
        r.no_leaks();
    }
}

#[test]
fn a_duplicate_rank_is_told_why_it_was_refused() {
    let ranks = Job::start("duprank", 3, |_, c| {
        c.env("NCCL_DEBUG", "WARN");
    })
    .finish(Duration::from_secs(60));
    let refused: Vec<&Rank> = ranks
        .iter()
        .filter(|r| r.result("duprank").1 != 0)
        .collect();
    assert_eq!(refused.len(), 1, "one of the two rank 1s is refused");
    let r = refused[0];
    assert_ne!(r.rank, 0, "{}", r.text());
    let (_, code, ms, msg) = r.result("duprank");
    assert_eq!(*code, INVALID_USAGE, "{}", r.text());
    assert!(msg.contains("rank 1 has already joined"), "{msg}");
    // The refused process's own WARN line says why (NCCL logs on stdout).
    let log = String::from_utf8_lossy(&r.output.stdout);
    assert!(
        log.lines()
            .any(|l| l.contains("NCCL WARN") && l.contains("rank 1 has already joined")),
        "{}",
        r.text()
    );
    eprintln!(
        "duprank: process {} refused after {ms:.0} ms: {msg}",
        r.rank
    );
    for r in &ranks {
        assert!(r.output.status.success(), "{}", r.text());
        r.no_leaks();
    }
}

/// A process claims a rank of a communicator that has already formed (ranks 0 and 1 have
/// reduced): the root, which stays while its process holds the communicator, refuses it at once
/// with `ncclInvalidUsage` and the reason, and the two ranks reduce again undisturbed. (Before,
/// the root had closed its listener, and the late rank retried its connection until the
/// bootstrap timeout.)
#[test]
fn a_rank_that_joins_a_formed_communicator_is_told_why_it_was_refused() {
    let ranks = Job::start("latedup", 3, |_, _| {}).finish(Duration::from_secs(60));
    let late = &ranks[2];
    let (_, code, ms, msg) = late.result("latedup");
    assert_eq!(*code, INVALID_USAGE, "{}", late.text());
    assert!(
        msg.contains("refused this rank: rank 1 has already joined"),
        "{msg}"
    );
    assert!(*ms < 10_000.0, "refused after {ms:.0} ms: {msg}");
    eprintln!("latedup: the late rank was refused after {ms:.0} ms: {msg}");
    for r in &ranks {
        assert!(r.output.status.success(), "{}", r.text());
        if r.rank < 2 {
            assert_eq!(r.result("latedup").1, 0, "{}", r.text());
        }
        r.no_leaks();
    }
}

#[test]
fn an_init_that_fails_inside_a_group_fails_at_the_group_end() {
    let ranks = Job::start("groupdup", 1, |_, _| {}).finish(Duration::from_secs(60));
    let r = &ranks[0];
    assert!(r.output.status.success(), "{}", r.text());
    let (_, code, ms, msg) = r.result("group_end");
    assert_eq!(*code, INVALID_USAGE, "{}", r.text());
    assert!(
        msg.contains("ncclGroupEnd")
            && msg.contains("Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0"),
        "{msg}"
    );
    eprintln!("groupdup: ncclGroupEnd returned {code} after {ms:.0} ms: {msg}");
    // The communicators stay failed: a call on one names the failure again.
    let (_, code, _, msg) = r.result("allreduce");
    assert_eq!(*code, INVALID_USAGE, "{msg}");
    assert!(msg.contains("failed to initialize"), "{msg}");
    // A rank that splits with NCCL_SPLIT_NOCOLOR inside a group gets no communicator, and the
    // group's end succeeds.
    let (_, code, _, msg) = r.result("group_nocolor");
    assert_eq!(*code, 0, "{msg}");
    r.no_leaks();
}

/// An invalid argument inside a group fails the call and the group (NCCL 2.30.7: `ArgsCheck`
/// in `ncclEnqueueCheck` at the call, `ncclGroupErrCheck` keeps the error, and
/// `ncclGroupEndInternal` returns it and runs nothing of the group): for each kind of bad
/// argument, beside a valid AllReduce on each rank of a 2-rank communicator, the call returns
/// `ncclInvalidArgument` naming the argument, `ncclGroupEnd` returns the same code with the
/// same reason, and the AllReduces did not run (the buffers keep 1 and 2, not 3). A valid group
/// afterwards sums them.
#[test]
fn an_invalid_argument_inside_a_group_fails_the_call_and_the_group() {
    let ranks = Job::start("grouperr", 1, |_, _| {}).finish(Duration::from_secs(60));
    let r = &ranks[0];
    assert!(r.output.status.success(), "{}", r.text());
    for (case, needle) in [
        ("count", "overrun its allocation"),
        ("dtype", "datatype 42"),
        ("op", "op 77"),
        ("null", "sendbuff is NULL"),
        ("peer", "peer 2"),
        ("root", "root 5"),
    ] {
        let (_, code, _, msg) = r.result(&format!("call_{case}"));
        assert_eq!(*code, INVALID_ARGUMENT, "call {case}: {msg}");
        assert!(msg.contains(needle), "call {case}: {msg}");
        let (_, code, ms, end) = r.result(&format!("end_{case}"));
        assert_eq!(*code, INVALID_ARGUMENT, "ncclGroupEnd after {case}: {end}");
        assert!(
            end.contains("ncclGroupEnd") && end.contains(needle),
            "ncclGroupEnd after {case}: {end}"
        );
        let (_, code, _, msg) = r.result(&format!("untouched_{case}"));
        assert_eq!(*code, 0, "after {case}: {msg}");
        eprintln!("grouperr {case}: ncclGroupEnd returned {INVALID_ARGUMENT} in {ms:.1} ms: {end}");
    }
    r.no_leaks();
}

#[test]
fn every_invalid_argument_is_named() {
    let ranks = Job::start("invalid", 1, |_, _| {}).finish(Duration::from_secs(60));
    let r = &ranks[0];
    assert!(r.output.status.success(), "{}", r.text());
    let cases = [
        ("null_sendbuff", "sendbuff is NULL"),
        ("null_recvbuff", "recvbuff is NULL"),
        ("host_sendbuff", "not device memory"),
        ("host_recvbuff", "not device memory"),
        ("small_buffer", "bytes needed"),
        ("small_offset", "bytes needed"),
        ("small_allgather", "recvbuff"),
        ("bad_type", "datatype 42"),
        ("bad_op", "op 77"),
        ("bad_root", "root 2"),
        ("negative_root", "root -1"),
        ("bad_peer", "peer 2"),
        ("negative_peer", "peer -1"),
        ("send_bad_type", "datatype -3"),
        ("bad_rank", "rank 2"),
        ("bad_nranks", "nranks 0"),
        ("forged_comm", "not a live communicator"),
        ("destroyed_comm", "not a live communicator"),
        ("destroyed_send", "not a live communicator"),
        ("destroyed_count", "not a live communicator"),
        ("destroy_twice", "not a live communicator"),
    ];
    for (case, needle) in cases {
        let (_, code, _, msg) = r.result(case);
        assert_eq!(*code, INVALID_ARGUMENT, "{case}: {msg}");
        assert!(msg.contains(needle), "{case}: '{msg}' lacks '{needle}'");
    }
    assert_eq!(r.results.len(), cases.len(), "{}", r.text());
    r.no_leaks();
}

/// Every rank of a call that disagrees fails with `ncclInvalidUsage` naming the disagreement,
/// and the communicator works afterwards: on one host, on three hosts (every pair over TCP),
/// and on two hosts where one host's ranks disagree among themselves.
fn disagreeing_calls(hosts: impl Fn(usize) -> Option<&'static str>) {
    let ranks = Job::start("mismatch", 3, |r, c| {
        if let Some(h) = hosts(r) {
            c.env("NCCL_HOSTID", h);
        }
    })
    .finish(Duration::from_secs(90));
    for r in &ranks {
        assert!(r.output.status.success(), "{}", r.text());
        for case in ["count", "type", "op", "kind", "root", "path", "path_last"] {
            let (_, code, ms, msg) = r.result(case);
            assert_eq!(*code, INVALID_USAGE, "rank {} {case}: {msg}", r.rank);
            assert!(msg.contains("disagree"), "rank {} {case}: {msg}", r.rank);
            eprintln!(
                "mismatch {case}: rank {} got code {code} after {ms:.1} ms: {msg}",
                r.rank
            );
        }
        r.no_leaks();
    }
}

#[test]
fn calls_that_disagree_across_ranks_fail_alike_and_the_communicator_recovers() {
    disagreeing_calls(|_| None);
}

#[test]
fn calls_that_disagree_across_hosts_fail_alike_and_the_communicator_recovers() {
    disagreeing_calls(|r| Some(["host-a", "host-b", "host-c"][r]));
    disagreeing_calls(|r| Some(["host-a", "host-a", "host-b"][r]));
}

/// Ranks waiting for a peer 500 ms late sleep rather than poll: each waiter's CPU time over
/// its call stays a few milliseconds (waits poll for at most 200 µs before sleeping), where a
/// wait that kept polling would take a large part of a core for the whole 500 ms. On one host
/// (futex) and on three (network poll).
#[test]
fn ranks_waiting_for_a_late_peer_sleep() {
    for hosts in [None, Some(["host-a", "host-b", "host-c"])] {
        let ranks = Job::start("idle", 3, |r, c| {
            if let Some(h) = hosts {
                c.env("NCCL_HOSTID", h[r]);
            }
        })
        .finish(Duration::from_secs(90));
        for r in ranks.iter().filter(|r| r.rank != 0) {
            assert!(r.output.status.success(), "{}", r.text());
            let (_, code, ms, msg) = r.result("idle");
            assert_eq!(*code, 0, "rank {}: {msg}", r.rank);
            let cpu: f64 = msg
                .strip_prefix("cpu_ms=")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("rank {}: no cpu_ms in {msg:?}", r.rank));
            eprintln!(
                "idle ({hosts:?}): rank {} waited {ms:.0} ms using {cpu:.1} ms of CPU",
                r.rank
            );
            assert!(*ms >= 400.0, "rank {} did not wait: {ms} ms", r.rank);
            assert!(
                cpu < 50.0,
                "rank {} used {cpu} ms of CPU waiting {ms} ms",
                r.rank
            );
        }
    }
}

/// `c` run as the unprivileged user of the isolation probes when the tests run as root
/// (see [`support::as_one_user`]), with its TMPDIR and the job's directory open to it.
fn as_one_user(c: &mut Command) {
    let dir = program().parent().expect("the program's directory");
    support::as_one_user(c, &[], &[dir]);
}

/// The memfds of process `pid` whose names start with one of `prefixes`.
fn memfds(pid: u32, prefixes: &[&str]) -> Vec<(PathBuf, String)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let target = std::fs::read_link(e.path()).ok()?;
            let target = target.to_string_lossy().into_owned();
            prefixes
                .iter()
                .any(|p| target.starts_with(&format!("/memfd:{p}")))
                .then(|| (e.path(), target))
        })
        .collect()
}

/// A process of the ranks' user that is not a member tries to open, through
/// `/proc/<pid>/fd/<n>`, the device-memory memfds of a running job's ranks and the
/// communicator's segment (which holds the secrets that fetch the ranks' buffers). Ranks used
/// to share memory by opening exactly those paths, so the memfds had mode 0777 and the opens
/// succeeded; now the ranks pass descriptors to each other (`SCM_RIGHTS`), the memfds have
/// mode 000 and every open is refused, while the job keeps working.
#[test]
fn a_process_outside_the_communicator_cannot_open_its_memory() {
    let job = Job::start("hold", 2, |_, c| as_one_user(c));
    let pids: Vec<u32> = job.children.iter().map(|c| c.id()).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let found = loop {
        let arenas: Vec<_> = pids
            .iter()
            .map(|&p| memfds(p, &["ncclsim-arena-"]))
            .collect();
        let segment = memfds(pids[0], &["ncclsim-comm"]);
        if arenas.iter().all(|a| !a.is_empty()) && !segment.is_empty() {
            break arenas
                .into_iter()
                .flatten()
                .chain(segment)
                .collect::<Vec<_>>();
        }
        assert!(
            Instant::now() < deadline,
            "the ranks never held their memory"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // A descriptor a rank holds only for a moment (one passed to it, mapped, then closed) may
    // be gone by the time it is probed; every other open must be refused.
    let mut refused = 0;
    for (path, what) in &found {
        let p = path.display();
        for (how, opened, err) in support::probe_opens(path) {
            assert!(!opened, "{p} ({what}) opened {how} by a non-member");
            if err.contains("No such file") || err.contains("Directory nonexistent") {
                continue;
            }
            assert!(
                err.contains("Permission denied"),
                "{p} ({what}) {how}: {err}"
            );
            refused += 1;
        }
    }
    assert!(
        refused >= 2 * pids.len(),
        "only {refused} opens were refused"
    );
    std::fs::write(format!("{}.go", job.id.display()), b"").expect("go file");
    let ranks = job.finish(Duration::from_secs(60));
    for r in &ranks {
        assert!(r.output.status.success(), "{}", r.text());
        assert_eq!(r.result("hold").1, 0, "{}", r.text());
        r.no_leaks();
    }
}

/// The last rank to arrive at a small AllReduce computes the result every rank copies; if
/// that computation fails (a panic, injected with `NCCLSIM_TEST_PANIC_SHARED` into the
/// communicator's operation #2, the `idle` case's AllReduce, at whichever rank arrives last),
/// the others are still let go: every rank's call fails with `ncclInternalError` as soon as
/// the last rank arrives (rank 0, 500 ms late), none waits out `NCCLSIM_TIMEOUT` (30 s), and
/// every rank then destroys its communicator and exits 0.
#[test]
fn a_failure_computing_a_shared_result_fails_every_rank_at_once() {
    let ranks = Job::start("idle", 3, |_, c| {
        c.env("NCCLSIM_TEST_PANIC_SHARED", "2");
        c.env("NCCLSIM_TIMEOUT", "30");
    })
    .finish(Duration::from_secs(90));
    for r in &ranks {
        assert!(r.output.status.success(), "{}", r.text());
        let (_, code, ms, msg) = r.result("idle");
        eprintln!("rank {}: code {code} after {ms:.0} ms: {msg}", r.rank);
        assert_eq!(*code, INTERNAL_ERROR, "rank {}: {}", r.rank, r.text());
        assert!(*ms < 10_000.0, "rank {} waited {ms} ms", r.rank);
    }
}
