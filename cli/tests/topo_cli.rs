//! The `ncclsim topo` commands as a user runs them; outputs are snapshot-checked.

use std::process::Command;

fn ncclsim(args: &[&str]) -> (i32, String, String) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = Command::new(env!("CARGO_BIN_EXE_ncclsim"))
        .args(args)
        .current_dir(root)
        .env_remove("NCCL_P2P_LEVEL")
        .output()
        .expect("run ncclsim");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn show_dgx_a100_two_nodes() {
    let (code, out, _) = ncclsim(&["topo", "show", "topologies/dgx-a100.xml", "--nodes", "2"]);
    assert_eq!(code, 0);
    assert!(out.contains("# 2 node(s) x 8 GPU(s) = 16 GPUs"));
    insta::assert_snapshot!("show_dgx_a100_2n", out);
}

#[test]
fn show_h100_dump_and_old_profile() {
    let (code, out, _) = ncclsim(&["topo", "show", "topologies/dgx-h100.xml"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("=== System : maxBw 370.8 totalBw 370.8 ==="),
        "{out}"
    );
    insta::assert_snapshot!("show_dgx_h100", out);
    let (code, out, _) = ncclsim(&[
        "topo",
        "show",
        "topologies/dgx-h100.xml",
        "--nccl-version",
        "2.19",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("=== System : maxBw 360.0 totalBw 360.0 ==="),
        "{out}"
    );
}

#[test]
fn paths_matrix_rtx3090() {
    let (code, out, _) = ncclsim(&["topo", "paths", "topologies/vendor/pcie-rtx3090/topo.xml"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("paths_rtx3090", out);
    // Settings change paths: allowing P2P everywhere does not undo the GeForce NVML rule, but
    // ignoring NVML's P2P status does.
    let (_, out2, _) = ncclsim(&[
        "topo",
        "paths",
        "topologies/vendor/pcie-rtx3090/topo.xml",
        "--env",
        "NCCL_IGNORE_DISABLED_P2P=2",
    ]);
    assert!(out2.lines().nth(3).unwrap().contains("PIX"), "{out2}");
}

#[test]
fn skeleton_reported_and_completed() {
    let (code, _, err) = ncclsim(&["topo", "show", "topologies/vendor/azure/ndv5-topo.xml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("skeleton topology") && err.contains("--gpu"),
        "{err}"
    );
    let (code, out, err) = ncclsim(&[
        "topo",
        "show",
        "topologies/vendor/azure/ndv5-topo.xml",
        "--gpu",
        "H100-SXM5",
        "--nic-speed",
        "400G",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("=== System : maxBw 370.8 totalBw 370.8 ==="),
        "{out}"
    );
    assert!(err.contains("added 8 x NVIDIA H100"), "{err}");
}

#[test]
fn check_exit_status() {
    let (code, out, _) = ncclsim(&["topo", "check", "topologies/dgx-a100.xml"]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = ncclsim(&["topo", "check", "topologies/vendor/aws/p5.48xl-topo.xml"]);
    assert_eq!(code, 1);
    assert!(out.contains("skeleton topology"), "{out}");
    let (code, out, _) = ncclsim(&["topo", "check", "topologies/vendor/azure/ncv4-topo.xml"]);
    assert_eq!(code, 1);
    assert!(out.contains("to itself"), "{out}");
}

#[test]
fn dot_and_dump_and_json() {
    let (code, out, _) = ncclsim(&["topo", "dot", "topologies/pcie-4xa100.xml"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("graph {") && out.contains("PCI 24.0"),
        "{out}"
    );
    let (code, out, _) = ncclsim(&[
        "topo",
        "dump",
        "topologies/vendor/azure/ndv4-topo.xml",
        "--gpu",
        "a100",
        "--nic-speed",
        "200G",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("<gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\">"),
        "{out}"
    );
    let (code, out, _) = ncclsim(&[
        "topo",
        "show",
        "topologies/dgx-a100.xml",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("\"max_bw\": 240.0"), "{out}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let (code, _, err) = ncclsim(&["topo", "show", "does-not-exist.xml"]);
    assert_eq!(code, 2);
    assert!(err.contains("does-not-exist.xml"), "{err}");
    let (code, _, err) = ncclsim(&["topo", "show", "topologies/dgx-a100.xml", "--gpu", "tpu-v5"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown GPU model 'tpu-v5'"), "{err}");
    let (code, _, err) = ncclsim(&[
        "topo",
        "show",
        "topologies/dgx-a100.xml",
        "--env",
        "NCCL_P2P_LEVEL=FAST",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("NCCL_P2P_LEVEL=FAST"), "{err}");
}

#[test]
fn unreadable_files_are_bad_input() {
    let dir = std::env::temp_dir().join(format!("ncclsim-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.xml");
    std::fs::write(&empty, "").unwrap();
    let bad = dir.join("bad-utf8.xml");
    std::fs::write(&bad, b"<system>\n <cpu a=\"\xff\"/></system>").unwrap();
    let bom = dir.join("bom.xml");
    std::fs::write(&bom, "\u{feff}<system version=\"日\"></system>").unwrap();
    let (e, b, m) = (
        empty.to_string_lossy().into_owned(),
        bad.to_string_lossy().into_owned(),
        bom.to_string_lossy().into_owned(),
    );
    let (code, _, err) = ncclsim(&["topo", "check", &e]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{e}:1:1:")), "{err}");
    let (code, _, err) = ncclsim(&["topo", "show", &b]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{b}:2:10: not valid UTF-8")), "{err}");
    let (code, _, err) = ncclsim(&["topo", "show", &m]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    if std::path::Path::new("/dev/zero").exists() {
        let (code, _, err) = ncclsim(&["topo", "show", "/dev/zero"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("larger than"), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
