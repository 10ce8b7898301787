//! Memory-safety and fidelity checks of the fake CUDA core, from C programs linked against the
//! built `libcudart.so.12` by its real name (`c/cudart_safety.c`).
//!
//! Every scenario runs in its own child process, so a scenario that crashes (SIGSEGV) fails its
//! test with the signal in the message instead of taking the test runner down.

use fake_cuda_test_support as support;
use std::io::{BufRead, BufReader, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::OnceLock;

/// Builds the scenario program once per test binary; returns its path.
fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("cudart12-safety");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        support::build_c(
            &dir,
            &[
                ("libcudart12.so", "libcudart.so.12"),
                ("libcuda_driver.so", "libcuda.so.1"),
            ],
            &here.join("tests/c/cudart_safety.c"),
            &[here.join("../ncclsim-cuda/include")],
            &[],
            "cudart_safety",
            0,
        )
    })
}

/// The scenario program linked against `libcudart.so.12` in `dir/a` and `libcuda.so.1` in
/// `dir/b`, each directory with its own copy (not a link) of every library.
fn two_directory_program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("cudart12-two-dirs");
        let (a, b) = (dir.join("a"), dir.join("b"));
        for (d, file, real) in [
            (&a, "libcudart12.so", "libcudart.so.12"),
            (&a, "libncclsim_cuda.so", "libncclsim_cuda.so"),
            (&b, "libcuda_driver.so", "libcuda.so.1"),
            (&b, "libncclsim_cuda.so", "libncclsim_cuda.so"),
        ] {
            std::fs::create_dir_all(d).expect("create a library directory");
            std::fs::copy(support::built(file), d.join(real)).expect("copy a library");
        }
        // The program finds libcuda.so.1 through a link in `a`; the driver still resolves its
        // own directory to `b` and would load b's core.
        std::os::unix::fs::symlink(b.join("libcuda.so.1"), a.join("libcuda.so.1"))
            .expect("link libcuda.so.1");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        support::compile_c(
            &a,
            &here.join("tests/c/cudart_safety.c"),
            &[here.join("../ncclsim-cuda/include")],
            &["libcudart.so.12", "libcuda.so.1"],
            "cudart_safety",
        )
    })
}

/// The program with a clean fake-CUDA environment.
fn command(args: &[&str]) -> Command {
    with_clean_env(Command::new(program()), args)
}

fn with_clean_env(mut c: Command, args: &[&str]) -> Command {
    c.args(args);
    for var in [
        "CUDA_VISIBLE_DEVICES",
        "NCCLSIM_PACE",
        "NCCLSIM_CLOCK",
        "NCCLSIM_STRICT_KERNELS",
        "NCCLSIM_CUDA_CORE",
        "NCCLSIM_REPORT",
        "NCCLSIM_TOPO",
        "NCCL_TOPO_FILE",
        "NCCLSIM_NODE",
        "NCCLSIM_CACHE_LIMIT",
    ] {
        c.env_remove(var);
    }
    c
}

fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a scenario to completion and asserts it passed.
fn pass(c: &mut Command, scenario: &str) -> String {
    let out = c.output().expect("run cudart_safety");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains(&format!("PASS {scenario}")),
        "scenario {scenario} failed: {}",
        describe(&out)
    );
    text
}

/// A scenario process that talks over its stdin/stdout.
struct Peer {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Peer {
    fn spawn(args: &[&str]) -> Peer {
        Peer::start(command(args))
    }

    fn start(mut c: Command) -> Peer {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn cudart_safety");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        Peer { child, lines }
    }

    fn line(&mut self) -> String {
        self.lines
            .next()
            .expect("the peer prints a line")
            .expect("utf-8 line")
    }

    fn send(&mut self, text: &str) {
        let stdin = self.child.stdin.as_mut().expect("piped");
        stdin.write_all(text.as_bytes()).expect("write to peer");
        stdin.write_all(b"\n").expect("write to peer");
        stdin.flush().expect("flush");
    }

    /// Kills the process (SIGKILL) and waits for it.
    fn kill(mut self) {
        self.child.kill().expect("kill the peer");
        self.child.wait().expect("wait for the killed peer");
    }

    fn finish(mut self, scenario: &str) {
        drop(self.child.stdin.take());
        let rest: Vec<String> = self.lines.by_ref().map_while(|l| l.ok()).collect();
        let status = self.child.wait().expect("wait for peer");
        assert!(
            status.success() && rest.iter().any(|l| *l == format!("PASS {scenario}")),
            "{scenario} failed ({status}): {rest:?}"
        );
    }
}

#[test]
fn captured_stream_callbacks_survive_every_replay() {
    pass(&mut command(&["captured-callback"]), "captured-callback");
}

#[test]
fn a_freed_exported_range_is_not_reused_while_an_importer_maps_it() {
    let mut owner = Peer::spawn(&["ipc-reuse-owner"]);
    let handle = owner.line();
    assert_eq!(handle.len(), 128, "{handle:?}");
    let mut importer = Peer::spawn(&["ipc-reuse-importer", &handle]);
    assert_eq!(importer.line(), "opened");
    owner.send("go");
    assert_eq!(owner.line(), "reallocated");
    importer.send("go");
    importer.finish("ipc-reuse-importer");
    owner.send("go");
    owner.finish("ipc-reuse-owner");
}

#[test]
fn ipc_event_handles_are_validated_like_memory_handles() {
    let mut owner = Peer::spawn(&["ipc-event-owner"]);
    let handle = owner.line();
    assert_eq!(handle.len(), 128, "{handle:?}");
    let mut importer = Peer::spawn(&["ipc-event-importer", &handle]);
    assert_eq!(importer.line(), "checked");
    owner.send("go");
    assert_eq!(owner.line(), "destroyed");
    importer.send("go");
    importer.finish("ipc-event-importer");
    owner.send("go");
    owner.finish("ipc-event-owner");
}

#[test]
fn copies_through_pointers_of_a_reset_device_fail_cleanly() {
    pass(&mut command(&["stale-after-reset"]), "stale-after-reset");
}

#[test]
fn copies_through_a_closed_ipc_mapping_fail_cleanly() {
    let mut owner = Peer::spawn(&["ipc-hold"]);
    let handle = owner.line();
    pass(
        &mut command(&["stale-after-close", &handle]),
        "stale-after-close",
    );
    owner.send("go");
    owner.finish("ipc-hold");
}

/// `c` run as the unprivileged user of the isolation probes when the tests run as root
/// (see [`support::as_one_user`]), with the test program reachable by that user.
fn as_one_user(mut c: Command) -> Command {
    support::as_one_user(&mut c, &[program()], &[]);
    c
}

/// The device-memory memfds of process `pid`, as its descriptor table names them.
fn arena_memfds(pid: u32) -> Vec<PathBuf> {
    let dir = format!("/proc/{pid}/fd");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| {
            let path = e.ok()?.path();
            let target = std::fs::read_link(&path).ok()?;
            target
                .to_string_lossy()
                .starts_with("/memfd:ncclsim-arena-")
                .then_some(path)
        })
        .collect()
}

/// A process of the same user that is given no IPC handle tries to reach a running process's
/// device memory the way the memfd design used to allow: opening the owner's arena memfd
/// through `/proc/<pid>/fd/<n>` for reading and writing (then it could map it). That open used
/// to succeed (the memfd had mode 0777, and importers themselves mapped arenas that way),
/// giving the caller every byte of the device. The memfds now have mode 000 and reach members
/// only as descriptors their owner passes over a Unix socket, so the open is refused, while a
/// process holding the IPC handle still maps, writes and closes the allocation.
#[test]
fn another_process_of_the_user_cannot_open_device_memory_through_proc() {
    let mut owner = Peer::start(as_one_user(command(&["ipc-hold"])));
    let handle = owner.line();
    let memfds = arena_memfds(owner.child.id());
    assert!(!memfds.is_empty(), "the owner holds an arena memfd");
    for path in &memfds {
        for (how, opened, err) in support::probe_opens(path) {
            assert!(
                !opened && err.contains("Permission denied"),
                "{} opened {how} by a process without the handle: {err}",
                path.display()
            );
        }
    }
    pass(
        &mut as_one_user(command(&["stale-after-close", &handle])),
        "stale-after-close",
    );
    owner.send("go");
    owner.finish("ipc-hold");
}

/// With `NCCLSIM_HARDEN=1` the owner is not dumpable: another process of the user can no
/// longer list or follow its descriptors (so not even `chmod` a memfd back through
/// `/proc/<pid>/fd/<n>`), nor read its memory through `/proc/<pid>/mem` (ptrace attach is
/// refused by the same kernel check, `ptrace_may_access`); its state stays public for
/// liveness checks, and members still map what they hold a handle to.
#[test]
fn a_hardened_process_closes_its_descriptors_and_memory_to_the_user() {
    let mut c = as_one_user(command(&["ipc-hold"]));
    c.env("NCCLSIM_HARDEN", "1");
    let mut owner = Peer::start(c);
    let handle = owner.line();
    let pid = owner.child.id();
    for (what, script) in [
        ("its descriptors", format!("ls /proc/{pid}/fd")),
        ("its memory", format!("exec 3</proc/{pid}/mem")),
    ] {
        let (ok, err) = support::probe(&script);
        assert!(
            !ok && err.contains("Permission denied"),
            "{what} open to another process of the user: {err}"
        );
    }
    let (ok, err) = support::probe(&format!("grep -q '^{pid} (' /proc/{pid}/stat"));
    assert!(ok, "/proc/{pid}/stat: {err}");
    pass(
        &mut as_one_user(command(&["stale-after-close", &handle])),
        "stale-after-close",
    );
    owner.send("go");
    owner.finish("ipc-hold");
}

#[test]
fn memcpy_peer_checks_devices_and_pointers() {
    pass(&mut command(&["memcpy-peer"]), "memcpy-peer");
}

#[test]
fn copies_between_gpus_are_priced_by_their_nvlink_path() {
    pass(&mut command(&["peer-copy-time"]), "peer-copy-time");
}

#[test]
fn an_invalid_node_index_means_no_device_and_says_why_once() {
    let out = command(&["no-device"])
        .env("NCCLSIM_NODE", "abc")
        .output()
        .expect("run cudart_safety");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("PASS no-device"),
        "{}",
        describe(&out)
    );
    let why = "ncclsim: no fake CUDA devices: environment: NCCLSIM_NODE=\"abc\": expected a \
               simulated node index (0, 1, ...)";
    assert_eq!(err.matches(why).count(), 1, "{err}");
}

#[test]
fn front_ends_in_two_directories_share_the_loaded_core() {
    let exe = two_directory_program();
    pass(
        &mut with_clean_env(Command::new(exe), &["two-directories"]),
        "two-directories",
    );
}

#[test]
fn a_second_copy_of_the_core_refuses_to_start_and_says_why() {
    let exe = two_directory_program();
    let other = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("b/libncclsim_cuda.so");
    let mut c = with_clean_env(Command::new(exe), &["second-core", other.to_str().unwrap()]);
    let out = c.output().expect("run cudart_safety");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("PASS second-core"),
        "{}",
        describe(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("another copy of libncclsim_cuda.so is loaded in this process"),
        "{err}"
    );
}

#[test]
fn every_library_keeps_its_own_soname() {
    for (file, want) in [
        ("libncclsim_cuda.so", "libncclsim_cuda.so"),
        ("libcudart12.so", "libcudart.so.12"),
        ("libcuda_driver.so", "libcuda.so.1"),
    ] {
        let got = support::soname(&support::built(file));
        assert_eq!(got.as_deref(), Some(want), "{file}");
    }
}

#[test]
fn per_thread_state_of_exited_threads_is_dropped() {
    let dir = support::scratch_dir("cudart12-safety-report");
    let path = dir.join("threads.json");
    pass(
        command(&["many-threads"]).env("NCCLSIM_REPORT", &path),
        "many-threads",
    );
    let report = std::fs::read_to_string(&path).expect("report written at exit");
    let streams: usize = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("\"streams\": "))
        .and_then(|v| v.trim_end_matches(',').parse().ok())
        .unwrap_or_else(|| panic!("no stream count in {report}"));
    // 2000 threads each made a per-thread default stream; a few of the last ones may not be
    // swept yet, the rest are gone.
    assert!(
        streams <= 64,
        "{streams} streams left after 2000 threads exited"
    );
}

#[test]
fn freed_memory_keeps_its_pages_until_trimmed() {
    pass(&mut command(&["cached-pages"]), "cached-pages");
}

#[test]
fn an_importer_killed_without_closing_does_not_hold_the_range() {
    let mut owner = Peer::spawn(&["ipc-dead-importer-owner"]);
    let handle = owner.line();
    let mut importer = Peer::spawn(&["ipc-open-and-wait", &handle]);
    assert_eq!(importer.line(), "opened");
    importer.kill();
    owner.send("go");
    owner.finish("ipc-dead-importer-owner");
}
