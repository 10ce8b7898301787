//! `ncclsim predict` and `ncclsim whatif` end to end on the bundled topologies.

use std::process::Command;

fn ncclsim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ncclsim"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env_remove("NCCL_ALGO")
        .env_remove("NCCL_PROTO")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn predict_table_has_nccl_tests_layout() {
    let (rc, out, err) = ncclsim(&[
        "predict",
        "--topo",
        "topologies/dgx-a100.xml",
        "-b",
        "1G",
        "-e",
        "1G",
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("# Collective test starting: all_reduce_perf"));
    assert!(out.contains(
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
    ));
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("1073741824"))
        .unwrap();
    // 56 + 2^30 / 137142.9 us; busbw 238.30 on Ring/Simple with 24 channels.
    assert!(row.contains("7885.37  136.17  238.30"), "{row}");
    assert!(row.ends_with("Ring/Simple   24"), "{row}");
    assert!(out.contains("# Avg bus bandwidth    : 238.296 "), "{out}");
}

#[test]
fn predict_csv_header_and_all_ops() {
    let (rc, out, err) = ncclsim(&[
        "predict",
        "--topo",
        "topologies/dgx-h100.xml",
        "--op",
        "all",
        "-b",
        "1M",
        "-e",
        "1M",
        "--format",
        "csv",
    ]);
    assert_eq!(rc, 0, "{err}");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("size,count,type,redop,root,time_us,algbw,busbw,algo,proto,channels")
    );
    assert_eq!(lines.count(), 9);
    assert!(out.contains(",P2P,Simple,"), "{out}");
}

#[test]
fn predict_plot_and_algo_override() {
    let svg = std::env::temp_dir().join(format!("ncclsim-test-{}.svg", std::process::id()));
    let s = svg.to_str().unwrap();
    let (rc, out, err) = ncclsim(&[
        "predict",
        "--topo",
        "topologies/dgx-h100.xml",
        "-b",
        "64K",
        "-e",
        "64M",
        "-f",
        "4",
        "--algo",
        "^NVLS",
        "--format",
        "json",
        "--plot",
        s,
    ]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v[0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["algo"] != "NVLS"));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("<svg")
            && text.contains("busbw (GB/s)")
            && text.contains("NCCL&apos;s choice")
            || text.contains("NCCL's choice")
    );
    let _ = std::fs::remove_file(&svg);
}

#[test]
fn bad_input_is_reported() {
    let (rc, _, err) = ncclsim(&[
        "predict",
        "--topo",
        "topologies/dgx-a100.xml",
        "-d",
        "float128",
    ]);
    assert_eq!(rc, 2);
    assert!(err.contains("unknown data type \"float128\""), "{err}");
    let (rc, _, err) = ncclsim(&[
        "predict",
        "--topo",
        "topologies/dgx-a100.xml",
        "--algo",
        "Rng",
    ]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("NCCL_ALGO=Rng") && err.contains("\"Rng\""),
        "{err}"
    );
    let (rc, _, err) = ncclsim(&[
        "whatif",
        "--topo",
        "topologies/dgx-a100.xml",
        "--set",
        "nic.count=40",
    ]);
    assert_eq!(rc, 2);
    assert!(err.contains("only"), "{err}");
}

#[test]
fn whatif_compares_and_sweeps() {
    let (rc, out, err) = ncclsim(&[
        "whatif",
        "--topo",
        "topologies/dgx-a100.xml",
        "--set",
        "nvlink.count=6",
        "-b",
        "1G",
        "-e",
        "1G",
    ]);
    assert_eq!(rc, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("1073741824"))
        .unwrap();
    // Half the NVLinks: half the channels, about half the bandwidth.
    let ratio: f64 = row.split_whitespace().last().unwrap().parse().unwrap();
    assert!((0.45..0.55).contains(&ratio), "{row}");
    let (rc, out, err) = ncclsim(&[
        "whatif",
        "--topo",
        "topologies/dgx-a100.xml",
        "--sweep",
        "nodes=1,2",
        "-b",
        "1G",
        "-e",
        "1G",
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.starts_with("nodes,size,time_us,algbw,busbw,algo,proto,channels\n1,1073741824,"),
        "{out}"
    );
    assert!(out.contains("\n2,1073741824,"), "{out}");
    let (rc, out, _) = ncclsim(&[
        "whatif",
        "--topo",
        "topologies/dgx-a100.xml",
        "--env",
        "NCCL_ALGO=Tree",
        "-b",
        "1G",
        "-e",
        "1G",
    ]);
    assert_eq!(rc, 0);
    assert!(out.contains("Tree/Simple"), "{out}");
}

#[test]
fn empty_size_range_and_absurd_node_counts_are_errors() {
    let (code, _, err) = ncclsim(&[
        "predict",
        "--topo",
        "topologies/dgx-a100.xml",
        "-b",
        "0",
        "-e",
        "0",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("-b 0 -e 0"), "{err}");
    for n in ["4294967297", "-1"] {
        let (code, _, err) =
            ncclsim(&["predict", "--topo", "topologies/dgx-a100.xml", "--nodes", n]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--nodes"), "{err}");
        // What a node count is, not clap's "unexpected argument" or "invalid digit".
        assert!(
            err.contains(&format!(
                "'{n}' is not a node count: a whole number from 1 to 131072"
            )),
            "{err}"
        );
    }
}

#[test]
fn settings_nccl_would_replace_are_warned_about() {
    for (env, want) in [
        (
            "NCCL_MAX_NCHANNELS=0",
            "warning: NCCL_MAX_NCHANNELS=0: NCCL uses at least 1 channel",
        ),
        (
            "NCCL_NETDEVS_POLICY=foo",
            "warning: NCCL_NETDEVS_POLICY=foo is not AUTO",
        ),
        (
            "NCCL_THREAD_THRESHOLDS=abc",
            "warning: NCCL_THREAD_THRESHOLDS=abc: no number read",
        ),
    ] {
        let (code, _, err) = ncclsim(&[
            "predict",
            "--topo",
            "topologies/dgx-a100.xml",
            "--nodes",
            "2",
            "-e",
            "1M",
            "--env",
            env,
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains(want), "{env}: {err}");
        assert_eq!(err.matches("warning:").count(), 1, "{env}: {err}");
    }
}

/// "8-GPU H100 nodes or an NVL72 rack?": `whatif --vs ... --vs-nodes` compares 72 ranks on 9
/// DGX H100 nodes with one NVL72 rack (one multi-node NVLink node), and `--sweep nvl-domain=`
/// sweeps the NVLink domain size.
#[test]
fn whatif_compares_an_nvl72_rack_and_sweeps_the_domain() {
    let (code, out, err) = ncclsim(&[
        "whatif",
        "--topo",
        "topologies/dgx-h100.xml",
        "--nodes",
        "9",
        "--vs",
        "topologies/gb200-nvl72-tray.xml",
        "--vs-nodes",
        "18",
        "-b",
        "1G",
        "-e",
        "1G",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# A: topologies/dgx-h100.xml (72 ranks on 9 node(s)"),
        "{out}"
    );
    assert!(
        out.contains("--vs-nodes 18 (72 ranks on 1 node(s)"),
        "{out}"
    );
    let (code, out, err) = ncclsim(&[
        "whatif",
        "--topo",
        "topologies/gb200-nvl72-tray.xml",
        "--nodes",
        "18",
        "--sweep",
        "nvl-domain=8,72",
        "-b",
        "1G",
        "-e",
        "1G",
    ]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        rows[0].starts_with("8,") && rows[1].starts_with("72,"),
        "{out}"
    );
    assert!(rows[1].ends_with(",NVLS,Simple,24"), "{out}");
    let (code, _, err) = ncclsim(&[
        "whatif",
        "--topo",
        "topologies/gb200-nvl72-tray.xml",
        "--nodes",
        "2",
        "--sweep",
        "nvl-domain=0",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("nvl-domain=0"), "{err}");
}
