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
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        support::build_c(
            &dir,
            &[
                ("libnccl.so", "libnccl.so.2"),
                ("libcudart12.so", "libcudart.so.12"),
            ],
            &here.join("tests/c/nccl_check.c"),
            &[here.join("include")],
            &["libpthread.so.0"],
            "nccl_check",
            0,
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
        .env_remove("NCCLSIM_NVL_DOMAIN")
        .env_remove("NCCL_MNNVL_ENABLE")
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
fn a_run_variable_changed_after_cuda_started_leaves_nccl_on_the_cores_job() {
    let out = wait_all(
        vec![command(&["envchange".into(), "1".into()])
            .spawn()
            .expect("spawn")],
        Duration::from_secs(120),
    );
    assert!(out.contains("ok envchange"), "{out}");
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

/// Two GB200 NVL72 trays of 4 GPUs (one NVLink domain through the rack's NVSwitches): the
/// 8-rank communicator is one multi-node NVLink node, and with `NCCL_MNNVL_ENABLE=0` two nodes
/// joined by the network. The comm and clique lines are NCCL 2.30.7's own for these systems
/// (planner/tests/nccl-2.30.7/mnnvl, rank 0); every collective's result is checked by the
/// program against its own reference.
#[test]
fn two_gb200_trays_are_one_multi_node_nvlink_node() {
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topologies/gb200-nvl72-tray.xml");
    let cases = [
        (
            None,
            "nRanks 8 nNodes 1 localRanks 8 localRank {r} MNNVL 1",
            Some("MNNVL 1 cliqueId 7ffe cliqueSize 8 cliqueRank {r} nvlDomainSize 8"),
        ),
        (
            Some("0"),
            "nRanks 8 nNodes 2 localRanks 4 localRank {l} MNNVL 0",
            None,
        ),
    ];
    for (enable, comm_line, clique_line) in cases {
        let out = ranks_with("rank", 8, &[], |r, c| {
            c.env("NCCLSIM_TOPO", &topo)
                .env("NCCLSIM_NODE", (r / 4).to_string())
                .env("NCCL_DEBUG", "INFO");
            if let Some(e) = enable {
                c.env("NCCL_MNNVL_ENABLE", e);
            }
        });
        assert_eq!(out.matches("ok rank").count(), 8, "{out}");
        for r in 0..8 {
            let fill = |s: &str| {
                s.replace("{r}", &r.to_string())
                    .replace("{l}", &(r % 4).to_string())
            };
            let want = format!("rank {r} {}", fill(comm_line));
            assert!(out.contains(&want), "no `{want}` in:\n{out}");
            match clique_line {
                Some(c) => assert!(out.contains(&fill(c)), "no `{}` in:\n{out}", fill(c)),
                None => assert!(!out.contains("MNNVL 1"), "{out}"),
            }
        }
    }
}

/// `NCCLSIM_REPORT` with `%h` and `%p`: one JSON file per process, holding the fake CUDA
/// core's figures (peak memory per GPU, API calls) and the runtime's `nccl` section, whose
/// calls, bytes and predicted times per communicator and operation are those of the
/// process's trace; `NCCL_DEBUG=INFO` prints the same report at exit. A captured AllReduce
/// replayed on another stream after rank 0's 128 MiB copy makes the other ranks wait for
/// rank 0, as an eager call does, and is counted in the report.
#[test]
fn report_per_process_and_graph_replays_aligned_across_ranks() {
    let dir = support::scratch_dir("nccl-report");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("report dir");
    let trace = dir.join("trace");
    let out = ranks(
        "steps",
        4,
        &["marks"],
        &[
            (
                "NCCLSIM_REPORT",
                dir.join("report-%h-%p.json").display().to_string(),
            ),
            ("NCCLSIM_TRACE", trace.display().to_string()),
            ("NCCL_DEBUG", "INFO".into()),
            (
                "NCCL_DEBUG_FILE",
                dir.join("log-%p.txt").display().to_string(),
            ),
        ],
    );
    assert_eq!(out.matches("ok steps rank").count(), 4, "{out}");

    // The replay: ranks 1-3 wait for rank 0's copy (several ms of virtual time) in the
    // replayed AllReduce, so the event time around their launch covers it.
    for line in out.lines().filter(|l| l.starts_with("replay rank")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (rank, us): (usize, f64) = (f[2].parse().unwrap(), f[4].parse().unwrap());
        if rank != 0 {
            assert!(
                us > 1000.0,
                "rank {rank} did not wait for rank 0 in the replay: {line}"
            );
        }
    }

    let mut reports = 0;
    for entry in std::fs::read_dir(&dir).expect("dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("report-") else {
            continue;
        };
        reports += 1;
        assert!(!rest.contains('%'), "%h/%p replaced: {name}");
        let pid = rest
            .trim_end_matches(".json")
            .rsplit('-')
            .next()
            .unwrap()
            .to_string();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("JSON report");
        assert!(
            v["calls"]["malloc"].as_u64().unwrap() >= 2,
            "core's call counts: {v}"
        );
        let comms = v["nccl"]["communicators"].as_array().expect("nccl section");
        assert_eq!(comms.len(), 1, "{v}");
        let c = &comms[0];
        let rank = c["rank"].as_u64().unwrap() as usize;
        assert_eq!(c["nranks"], 4);
        assert_eq!(c["destroyed"], true);
        assert!(c["coll_channels"].as_u64().unwrap() > 0);
        // Peak memory of the rank's GPU: its buffers, and rank 0's 128 MiB copy target.
        let peak = v["devices"][rank % 8]["peak_bytes"].as_u64().unwrap();
        let buffers = (1u64 << 18) * 4 * 5;
        let want = if rank == 0 {
            buffers + (128 << 20)
        } else {
            buffers
        };
        assert!(peak >= want, "rank {rank}: peak {peak} < {want}");
        assert_eq!(v["devices"][(rank + 1) % 8]["peak_bytes"], 0);
        // Calls per op: 3 AllReduce in steps and 1 replayed, 3 AllGather, 1 Broadcast.
        let ops: std::collections::BTreeMap<String, &serde_json::Value> = c["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["op"].as_str().unwrap().to_string(), o))
            .collect();
        let calls = |op: &str| ops[op]["calls"].as_u64().unwrap();
        assert_eq!(
            (calls("AllReduce"), calls("AllGather"), calls("Broadcast")),
            (4, 3, 1)
        );
        assert_eq!(ops["AllReduce"]["bytes"], 4 * (1 << 20));
        // Predicted times equal the sums of the process's trace.
        let t: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(trace.join(format!(
                "ncclsim-{}.json",
                rest.trim_start_matches('-').trim_end_matches(".json")
            )))
            .expect("the process's trace"),
        )
        .unwrap();
        let mut share = 0.0;
        for (op, o) in &ops {
            let traced: f64 = t
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["name"] == op.as_str())
                .map(|e| e["args"]["predicted_us"].as_f64().unwrap())
                .sum();
            let got = o["predicted_us"].as_f64().unwrap();
            assert!(
                traced > 0.0 && (got - traced).abs() < 0.01,
                "{op}: report {got} trace {traced}"
            );
            share += o["share_pct"].as_f64().unwrap();
        }
        assert!((share - 100.0).abs() < 0.01, "shares add up to {share}");
        // The same report as INFO lines at exit.
        let log = std::fs::read_to_string(dir.join(format!("log-{pid}.txt"))).expect("log");
        assert!(log.contains("NCCL INFO NCCLSIM report: comm 0x"), "{log}");
        assert!(
            log.lines()
                .any(|l| l.contains("NCCLSIM report:   AllReduce") && l.contains("calls      4")),
            "{log}"
        );
        assert!(
            log.contains(&format!("NCCLSIM report: GPU {} (", rank % 8)),
            "{log}"
        );
    }
    assert_eq!(reports, 4, "one report per process");
}

/// The report is written at `ncclCommDestroy`: a process that then leaves without running its
/// exit handlers (`_exit`) still leaves a complete report.
#[test]
fn report_is_written_at_comm_destroy() {
    let dir = support::scratch_dir("nccl-report-destroy");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("report dir");
    let out = ranks(
        "steps",
        2,
        &["exit-early"],
        &[(
            "NCCLSIM_REPORT",
            dir.join("report-%p.json").display().to_string(),
        )],
    );
    assert_eq!(out.matches("ok steps rank").count(), 2, "{out}");
    let reports: Vec<serde_json::Value> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| {
            let text = std::fs::read_to_string(e.expect("entry").path()).expect("report");
            serde_json::from_str(&text).expect("complete JSON")
        })
        .collect();
    assert_eq!(
        reports.len(),
        2,
        "one report per process, no temporary files left"
    );
    for v in &reports {
        let c = &v["nccl"]["communicators"][0];
        assert_eq!(c["destroyed"], true, "{v}");
        assert_eq!(c["calls"], 8, "{v}");
        assert!(
            v["devices"].as_array().is_some_and(|d| !d.is_empty()),
            "{v}"
        );
    }
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
