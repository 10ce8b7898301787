//! C programs against the built `libnccl.so.2` and `libcudart.so.12`, linked by their real
//! names: ranks as threads of one process (`ncclCommInitAll`, one thread driving every rank in
//! a group, a captured graph launched twice), ranks as processes sharing a unique id through a
//! file (every collective, every data type, splits, grouped send/receive, sizes from 1 element
//! to more than 64 MiB), the 16-process TP=8/DP=2 job on 2 simulated nodes, and non-blocking
//! init polled to completion. Every result is checked against a reference in the program.

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("nccl-c");
        support::link_real_names(
            &dir,
            &[
                ("libnccl.so", "libnccl.so.2"),
                ("libcudart12.so", "libcudart.so.12"),
            ],
        );
        support::built("libncclsim_cuda.so");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        support::compile_c(
            &dir,
            &here.join("tests/c/nccl_check.c"),
            &[here.join("include")],
            &["libnccl.so.2", "libcudart.so.12", "libpthread.so.0"],
            "nccl_check",
        )
    })
}

fn command(args: &[String]) -> Command {
    let mut c = Command::new(program());
    c.args(args)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NCCLSIM_TOPO")
        .env_remove("NCCL_TOPO_FILE")
        .env_remove("NCCLSIM_NODE")
        .env_remove("NCCL_COMM_ID")
        .env_remove("NCCL_HOSTID")
        .env("NCCLSIM_TIMEOUT", "120")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for every child (killing all after `limit`), asserting each succeeded.
fn wait_all(children: Vec<Child>, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut text = String::new();
    loop {
        let mut running = false;
        for c in children.iter_mut() {
            let Some(ch) = c else { continue };
            match ch.try_wait().expect("wait") {
                Some(_) => {
                    let out = c.take().expect("child").wait_with_output().expect("output");
                    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                    assert!(
                        out.status.success(),
                        "a rank failed ({}):\n{stdout}\n{}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    );
                    text.push_str(&stdout);
                }
                None => running = true,
            }
        }
        if !running {
            return text;
        }
        if Instant::now() > deadline {
            for c in children.iter_mut().flatten() {
                let _ = c.kill();
            }
            panic!("ranks still running after {limit:?}:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fresh unique-id file path (tests run in parallel: every call gets its own).
fn id_file(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = program().parent().expect("dir").join(format!("{name}.{k}"));
    let _ = std::fs::remove_file(&p);
    p
}

fn ranks(scenario: &str, n: usize, extra: &[&str], env: &[(&str, String)]) -> String {
    ranks_with(scenario, n, extra, |_, c| {
        for (k, v) in env {
            c.env(k, v);
        }
    })
}

fn ranks_with(
    scenario: &str,
    n: usize,
    extra: &[&str],
    setup: impl Fn(usize, &mut Command),
) -> String {
    let id = id_file(&format!("{scenario}-{n}.id"));
    let children = (0..n)
        .map(|r| {
            let mut args = vec![scenario.to_string(), r.to_string()];
            if scenario != "tpdp" {
                args.push(n.to_string());
            }
            args.push(id.display().to_string());
            args.extend(extra.iter().map(|s| s.to_string()));
            let mut c = command(&args);
            setup(r, &mut c);
            c.spawn().expect("spawn a rank")
        })
        .collect();
    let out = wait_all(children, Duration::from_secs(600));
    let _ = std::fs::remove_file(&id);
    out
}

#[test]
fn threads_init_all_group_and_graph_replay() {
    let out = wait_all(
        vec![command(&["threads".into(), "4".into()])
            .spawn()
            .expect("spawn")],
        Duration::from_secs(300),
    );
    assert!(out.contains("ok threads 4"), "{out}");
}

#[test]
fn processes_every_collective_on_1_2_3_and_8_ranks() {
    for n in [1, 2, 3, 8] {
        let out = ranks("rank", n, &[], &[]);
        assert_eq!(out.matches("ok rank").count(), n, "{out}");
    }
}

#[test]
fn processes_more_than_64_mib() {
    // 16.8 M floats = 67 MB per buffer.
    let out = ranks("rank", 2, &["16800001"], &[]);
    assert_eq!(out.matches("ok rank").count(), 2, "{out}");
}

#[test]
fn nonblocking_init_is_polled_to_completion() {
    let out = ranks("nonblocking", 3, &[], &[]);
    assert_eq!(out.matches("ok nonblocking init").count(), 3, "{out}");
}

#[test]
fn tp8_dp2_job_on_two_simulated_nodes() {
    let node = |r: &str| (r.parse::<usize>().expect("rank") / 8).to_string();
    let id = id_file("tpdp.id");
    let children = (0..16)
        .map(|r| {
            let mut c = command(&["tpdp".into(), r.to_string(), id.display().to_string()]);
            c.env("NCCLSIM_NODE", node(&r.to_string()));
            c.spawn().expect("spawn a rank")
        })
        .collect();
    let out = wait_all(children, Duration::from_secs(600));
    assert_eq!(out.matches("ok tpdp rank").count(), 16, "{out}");
}

/// Ranks on two hosts, told apart by `NCCL_HOSTID` (NCCL's own host identity) and joined by
/// TCP on loopback: the test does not create network namespaces. Hosts interleave (even ranks
/// on one, odd on the other), so reductions in rank order mix local and remote inputs.
#[test]
fn two_hosts_over_tcp_on_loopback() {
    eprintln!("two hosts: NCCL_HOSTID groups over TCP on loopback (no network namespaces)");
    let out = ranks_with("rank", 4, &[], |r, c| {
        c.env("NCCL_HOSTID", format!("ncclsim-test-host-{}", r % 2));
    });
    assert_eq!(out.matches("ok rank").count(), 4, "{out}");
    let out = ranks_with("rank", 3, &[], |r, c| {
        c.env("NCCL_HOSTID", format!("ncclsim-test-host-{}", r / 2));
    });
    assert_eq!(out.matches("ok rank").count(), 3, "{out}");
}

/// Two network namespaces joined by a veth pair (test-only addresses 10.231.N.1-2/24), made
/// by the test and deleted at its end; two ranks in each, with their own `NCCL_HOSTID`, the
/// bootstrap and data over the veth. Needs `ip netns` (root); says so and stops otherwise.
struct Namespaces {
    names: [String; 2],
}

impl Namespaces {
    fn create() -> Result<Namespaces, String> {
        let id = std::process::id();
        let names = [format!("ncclsim-a{id}"), format!("ncclsim-b{id}")];
        let net = 1 + id % 250;
        let ns = Namespaces {
            names: names.clone(),
        };
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("ip: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "ip {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        ip(&["netns", "add", &names[0]])?;
        ip(&["netns", "add", &names[1]])?;
        let (va, vb) = (
            format!("nsa{}", id % 100_000),
            format!("nsb{}", id % 100_000),
        );
        ip(&[
            "link", "add", &va, "netns", &names[0], "type", "veth", "peer", "name", &vb, "netns",
            &names[1],
        ])?;
        for (n, (ns_name, dev)) in [(&names[0], &va), (&names[1], &vb)].into_iter().enumerate() {
            ip(&[
                "-n",
                ns_name,
                "addr",
                "add",
                &format!("10.231.{net}.{}/24", n + 1),
                "dev",
                dev,
            ])?;
            ip(&["-n", ns_name, "link", "set", dev, "up"])?;
            ip(&["-n", ns_name, "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

#[test]
fn two_hosts_in_network_namespaces_joined_by_veth() {
    let ns = match Namespaces::create() {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!(
                "network namespaces unavailable here ({why}); the loopback test covers two hosts"
            );
            return;
        }
    };
    eprintln!(
        "two hosts: network namespaces {} and {} joined by a veth pair",
        ns.names[0], ns.names[1]
    );
    let id = id_file("netns.id");
    let children = (0..4)
        .map(|r| {
            let host = r / 2;
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns.names[host]])
                .arg(program())
                .args([
                    "rank".to_string(),
                    r.to_string(),
                    "4".into(),
                    id.display().to_string(),
                ])
                .env("NCCL_HOSTID", format!("ncclsim-netns-{host}"))
                .env("NCCL_SOCKET_IFNAME", "nsa,nsb")
                .env("NCCLSIM_TIMEOUT", "120")
                .env_remove("NCCL_COMM_ID")
                .env_remove("NCCLSIM_NODE")
                .env_remove("CUDA_VISIBLE_DEVICES")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().expect("spawn a rank in a namespace")
        })
        .collect();
    let out = wait_all(children, Duration::from_secs(600));
    let _ = std::fs::remove_file(&id);
    assert_eq!(out.matches("ok rank").count(), 4, "{out}");
}

#[test]
fn a_killed_rank_fails_the_others_with_remote_error() {
    let id = id_file("die.id");
    let start = Instant::now();
    let children: Vec<Child> = (0..3)
        .map(|r| {
            command(&[
                "die".into(),
                r.to_string(),
                "3".into(),
                id.display().to_string(),
            ])
            .spawn()
            .expect("spawn")
        })
        .collect();
    let mut outs = Vec::new();
    for c in children {
        outs.push(c.wait_with_output().expect("wait"));
    }
    let _ = std::fs::remove_file(&id);
    // NCCLSIM_TIMEOUT is 120 s: an answer within 30 s comes from noticing the dead process.
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
    for o in &outs[..2] {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && text.contains("ok remote error") && text.contains("rank 2"),
            "{text}{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(outs[2].status.signal(), Some(9));
}

#[test]
fn invalid_arguments_are_named_and_mismatched_calls_fail_alike() {
    let out = wait_all(
        vec![command(&["invalid".into(), "0".into()])
            .spawn()
            .expect("spawn")],
        Duration::from_secs(120),
    );
    assert!(out.contains("ok invalid arguments"), "{out}");
    let out = ranks("mismatch", 3, &[], &[]);
    assert_eq!(out.matches("ok mismatch detected").count(), 3, "{out}");
}

#[test]
fn the_test_perturbation_makes_a_checked_result_wrong() {
    // NCCLSIM_TEST_PERTURB=0 flips a bit of rank 0's results: the program's checks must see it.
    let id = id_file("perturb-1.id");
    let out = command(&[
        "rank".into(),
        "0".into(),
        "1".into(),
        id.display().to_string(),
    ])
    .env("NCCLSIM_TEST_PERTURB", "0")
    .output()
    .expect("run a rank");
    let _ = std::fs::remove_file(&id);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("FAIL rank 0 ") && err.contains("expected"),
        "{err}"
    );
}
