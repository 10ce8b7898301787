//! `ncclsim plan` as a user runs it: INFO lines, graph dumps and JSON for the worked examples
//! (snapshot-checked), the TP/DP job and bad input.

use std::process::Command;

fn ncclsim(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ncclsim"));
    cmd.args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("run ncclsim");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A scalar, or an array of scalars or of arrays of scalars: printed on one line.
fn flat(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(_) => false,
        serde_json::Value::Array(a) => a.iter().all(|e| match e {
            serde_json::Value::Array(b) => b.iter().all(|x| !x.is_array() && !x.is_object()),
            serde_json::Value::Object(_) => false,
            _ => true,
        }),
        _ => true,
    }
}

/// `path = value` lines for every field of a JSON value. An array of objects whose fields are all
/// flat is printed as one `path[].field = [values...]` line per field; a long array of arrays as
/// one line per element.
fn flatten(path: &str, v: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                flatten(&format!("{path}.{k}"), x, out);
            }
        }
        Value::Array(a)
            if !a.is_empty()
                && a.iter()
                    .all(|e| e.as_object().is_some_and(|o| o.values().all(flat))) =>
        {
            let keys: Vec<&String> = a[0].as_object().unwrap().keys().collect();
            assert!(a
                .iter()
                .all(|e| e.as_object().unwrap().keys().eq(keys.iter().copied())));
            for k in keys {
                let column: Vec<Value> = a.iter().map(|e| e[k].clone()).collect();
                flatten(&format!("{path}[].{k}"), &Value::Array(column), out);
            }
        }
        Value::Array(a)
            if flat(v) && (a.iter().all(|e| !e.is_array()) || v.to_string().len() <= 200) =>
        {
            out.push(format!("{path} = {v}"));
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                flatten(&format!("{path}[{i}]"), x, out);
            }
        }
        _ => out.push(format!("{path} = {v}")),
    }
}

#[test]
fn dgx_a100_one_node_info() {
    let (code, out, err) = ncclsim(&["plan", "--topo", "topologies/dgx-a100.xml"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("NCCL INFO Pattern 4, crossNic 0, nChannels 12, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1"));
    assert!(out.contains("NCCL INFO Channel 00/24 : 0 1 2 3 4 5 6 7\n"));
    assert!(out.contains("NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer"));
    insta::assert_snapshot!("plan_dgx_a100_1n_info", out);
}

#[test]
fn dgx_h100_one_node_info_and_xml() {
    let (code, out, err) = ncclsim(&["plan", "--topo", "topologies/dgx-h100.xml"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("NCCL INFO Pattern 5, crossNic 0, nChannels 8"));
    assert!(out.contains("24 coll channels, 24 collnet channels, 16 nvls channels"));
    insta::assert_snapshot!("plan_dgx_h100_1n_info", out);
    let (code, xml, _) = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-h100.xml",
        "--format",
        "graph-xml",
    ]);
    assert_eq!(code, 0);
    assert!(xml.starts_with("<graphs version=\"1\">\n  <graph id=\"0\" pattern=\"4\""));
    insta::assert_snapshot!("plan_dgx_h100_1n_graph_xml", xml);
}

#[test]
fn dgx_a100_two_nodes_xml_json_and_graph_file() {
    let (code, xml, err) = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--format",
        "graph-xml",
    ]);
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!("plan_dgx_a100_2n_graph_xml", xml);
    let (code, json, _) = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--format",
        "json",
        "--comm",
        "world",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["n_channels"], 16);
    assert_eq!(v["graphs"]["ring"]["n_channels"], 8);
    assert_eq!(v["graphs"]["ring"]["bw_inter"], 24.0);
    // Every field and value, one line per field (arrays of records transposed into one line per
    // field), so the snapshot stays readable: `docs/plan-json.md` describes the fields.
    let mut lines = vec![format!("# {} lines of JSON", json.lines().count())];
    flatten("", &v, &mut lines);
    insta::assert_snapshot!("plan_dgx_a100_2n_json", lines.join("\n"));
    // The dump read back as NCCL_GRAPH_FILE gives the same INFO output (plus the load notice).
    let file = std::env::temp_dir().join(format!("ncclsim-plan-cli-{}.xml", std::process::id()));
    std::fs::write(&file, &xml).unwrap();
    let (_, searched, _) = ncclsim(&["plan", "--topo", "topologies/dgx-a100.xml", "--nodes", "2"]);
    let env = format!("NCCL_GRAPH_FILE={}", file.display());
    let (code, loaded, err) = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--env",
        &env,
    ]);
    std::fs::remove_file(&file).unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(loaded.contains("Search 0 : 8 channels loaded from XML graph"));
    let strip = |s: &str| -> String {
        s.lines()
            .filter(|l| !l.contains("loaded from XML graph"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&searched), strip(&loaded));
}

#[test]
fn tp_dp_job() {
    let (code, out, err) = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--split",
        "tp=8,dp=2",
    ]);
    assert_eq!(code, 0, "{err}");
    let comms: Vec<&str> = out.lines().filter(|l| l.starts_with("# comm ")).collect();
    assert_eq!(comms.len(), 11, "{comms:?}");
    assert!(comms[0].starts_with("# comm world: 16 rank(s) on 2 node(s)"));
    assert!(comms[1].starts_with("# comm tp0: 8 rank(s) on 1 node(s)"));
    assert!(comms[10].starts_with("# comm dp7: 2 rank(s) on 2 node(s)"));
    // Every communicator ends with ncclTopoTuneModel's lines as its rank 0 prints them: the
    // TUNING table (three blocks of three algorithms) and threadThresholds (Ring LL scales with
    // the rank count), then the channel counts.
    let tables = out
        .lines()
        .filter(|l| l.starts_with("NCCL INFO   Algorithm   |"))
        .count();
    assert_eq!(tables, 3 * 11);
    assert_eq!(
        out.matches("threadThresholds 8/8/64 | 128/8/64 |").count(),
        1
    );
    assert_eq!(
        out.matches("threadThresholds 8/8/64 | 64/8/64 |").count(),
        2
    );
    assert_eq!(
        out.matches("threadThresholds 8/8/64 | 16/8/64 |").count(),
        8
    );
    let dp0 = out.split("# comm dp0:").nth(1).unwrap();
    let dp0 = &dp0[..dp0.find("\n\n").unwrap()];
    insta::assert_snapshot!("plan_dgx_a100_2n_dp0_info", dp0);
    // Seen from world rank 9 (rank 9 of world, rank 1 of tp1 and dp1): those three print no
    // table; tp0 and the other dp communicators are shown from their rank 0.
    let (code, out9, err) = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--split",
        "tp=8,dp=2",
        "--rank",
        "9",
    ]);
    assert_eq!(code, 0, "{err}");
    let tables9 = out9
        .lines()
        .filter(|l| l.starts_with("NCCL INFO   Algorithm   |"))
        .count();
    assert_eq!(tables9, 3 * 8);
    assert_eq!(out9.matches("NCCL INFO threadThresholds").count(), 11);
    let (code, dot, _) = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-a100.xml",
        "--nodes",
        "2",
        "--split",
        "tp=8,dp=2",
        "--format",
        "dot",
        "--comm",
        "dp3",
    ]);
    assert_eq!(code, 0);
    assert!(dot.starts_with("digraph \"dp3\""));
    assert!(dot.contains("r0 -> r1 [color="));
}

#[test]
fn tuning_settings_reach_the_table() {
    let (code, out, err) = ncclsim(&[
        "plan",
        "--topo",
        "topologies/dgx-a100.xml",
        "--env",
        "NCCL_PROTO=^LL128",
        "--env",
        "NCCL_THREAD_THRESHOLDS=1 2 3",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let at = |prefix: &str| lines.iter().position(|l| l.starts_with(prefix)).unwrap();
    // NCCL's order: the setting echoes, the enable matrix, the table, thresholds, channel counts.
    assert!(at("NCCL INFO Trees") < at("NCCL INFO NCCL_PROTO set by environment to ^LL128"));
    assert!(at("NCCL INFO NCCL_PROTO set") < at("NCCL INFO Enabled NCCL Func/Proto/Algo Matrix:"));
    assert!(at("NCCL INFO Enabled NCCL") < at("NCCL INFO   Algorithm   |"));
    assert!(at("NCCL INFO   Algorithm   |") < at("NCCL INFO threadThresholds 1/2/3 | 64/8/64"));
    assert!(at("NCCL INFO threadThresholds") < at("NCCL INFO 24 coll channels"));
    // LL128 off: Ring and Tree LL128 keep their latency, lose their bandwidth.
    assert!(out.contains(
        "NCCL INFO     AllReduce |    15.2/  29.1 |    31.5/   0.0 |    64.4/ 110.4 |    15.0/  50.1 |    40.6/   0.0 |    56.0/ 137.1 |"
    ));
}

#[test]
fn bad_input() {
    for (args, msg) in [
        (vec!["plan", "--topo", "nope.xml"], "nope.xml"),
        (
            vec![
                "plan",
                "--topo",
                "topologies/dgx-a100.xml",
                "--split",
                "tp=3",
            ],
            "multiply to 3 but the world has 8",
        ),
        (
            vec![
                "plan",
                "--topo",
                "topologies/dgx-a100.xml",
                "--split-by",
                "color=rank/",
            ],
            "--split-by",
        ),
        (
            vec!["plan", "--topo", "topologies/dgx-a100.xml", "--gpus", "9"],
            "no GPU with dev 9",
        ),
        (
            vec!["plan", "--topo", "topologies/dgx-a100.xml", "--comm", "tp9"],
            "no such communicator",
        ),
        (
            vec!["plan", "--topo", "topologies/dgx-a100.xml", "--rank", "8"],
            "the world has 8 ranks",
        ),
        (
            vec![
                "plan",
                "--topo",
                "topologies/dgx-a100.xml",
                "--env",
                "NCCL_CROSS_NIC=x",
            ],
            "NCCL_CROSS_NIC",
        ),
        (
            vec![
                "plan",
                "--topo",
                "topologies/dgx-a100.xml",
                "--env",
                "NCCL_ALGO=ring,bogus",
            ],
            "NCCL_ALGO",
        ),
    ] {
        let (code, _, err) = ncclsim(&args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}

#[test]
fn hostile_split_and_output_options_are_errors() {
    let t = "topologies/dgx-a100.xml";
    for (args, what) in [
        (
            vec!["--split-by", "color=(-9223372036854775807-1)/(0-1)"],
            "overflows",
        ),
        (
            vec!["--split", "tp=3,dp=12297829382473034416"],
            "multiply to",
        ),
        (
            vec!["--svg", "/tmp/never-written.svg"],
            "--svg needs --format dot",
        ),
        (
            vec!["--nodes", "4294967297"],
            "'4294967297' is not a node count",
        ),
    ] {
        let mut a = vec!["plan", "--topo", t];
        a.extend(args.iter().copied());
        let (code, _, err) = ncclsim(&a);
        assert_eq!(code, 2, "{a:?}: {err}");
        assert!(err.contains(what), "{a:?}: {err}");
    }
    let deep = format!("color={}1{}", "(".repeat(30_000), ")".repeat(30_000));
    let (code, _, err) = ncclsim(&["plan", "--topo", t, "--split-by", &deep]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("longer than"), "{err}");
    let (code, _, err) = ncclsim(&[
        "plan",
        "--topo",
        t,
        "--env",
        "NCCL_GRAPH_FILE=/nonexistent-graph.xml",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("NCCL_GRAPH_FILE=/nonexistent-graph.xml"),
        "{err}"
    );
}

/// GB200 NVL72 trays: one rack is one multi-node NVLink node by default (`--nvl-domain`
/// changes the domain size, `NCCL_MNNVL_ENABLE=0` turns it off), in `plan` and `topo show`.
#[test]
fn nvl72_trays_are_one_nvlink_domain() {
    let tray = "topologies/gb200-nvl72-tray.xml";
    let comm = |out: &str| -> String {
        let l = out
            .lines()
            .find(|l| l.contains(" nRanks "))
            .unwrap_or_else(|| panic!("no comm line in {out}"));
        l[l.find(" rank ").unwrap() + 1..].to_string()
    };
    let (code, out, err) = ncclsim(&["plan", "--topo", tray, "--nodes", "18"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        comm(&out),
        "rank 0 nRanks 72 nNodes 1 localRanks 72 localRank 0 MNNVL 1"
    );
    assert!(out.contains("MNNVL 1 cliqueId 7ffe cliqueSize 72 cliqueRank 0 nvlDomainSize 72"));
    let (_, out, _) = ncclsim(&[
        "plan",
        "--topo",
        tray,
        "--nodes",
        "18",
        "--env",
        "NCCL_MNNVL_ENABLE=0",
    ]);
    assert_eq!(
        comm(&out),
        "rank 0 nRanks 72 nNodes 18 localRanks 4 localRank 0 MNNVL 0"
    );
    let (_, out, _) = ncclsim(&["plan", "--topo", tray, "--nodes", "4", "--nvl-domain", "8"]);
    assert_eq!(
        comm(&out),
        "rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 1"
    );
    // A domain smaller than a tray, and a domain on hosts without NVSwitch links, are refused.
    let (code, _, err) = ncclsim(&["plan", "--topo", tray, "--nodes", "2", "--nvl-domain", "2"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("has 4 GPUs, more than a domain holds"),
        "{err}"
    );
    let (code, _, err) = ncclsim(&[
        "plan",
        "--topo",
        "topologies/pcie-4xa100.xml",
        "--nodes",
        "2",
        "--nvl-domain",
        "8",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("no NVLink to an NVSwitch"), "{err}");
    // `topo show` prints the fused system of node 0's clique: 72 GPUs, one NVSwitch node.
    let (code, out, err) = ncclsim(&["topo", "show", tray, "--nodes", "18"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("clique fuses 18 node(s) = 72 GPUs")
            && out.contains("1 NVS node, 36 CPU(s), 72 NET(s)"),
        "{out}"
    );
    assert!(out.matches("GPU/").count() >= 72);
}
