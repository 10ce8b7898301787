//! The NCCL 2.30.7 ground-truth cases (`<topology>-<n>node`, see planner/tests/nccl-2.30.7/
//! README.md), shared by the planner's INFO-line test and the cost model's TUNING-table test
//! (included there with `#[path]`; both crates sit at the same depth of the workspace).

use planner::{CommPlan, Planner, PlannerSettings};
use std::sync::Arc;
use topo::{Cluster, Completion, NvlDomains};

/// The case names (fixture files `<case>.txt` in `dir`), sorted; at least `min` of them.
pub fn case_names(dir: &str, min: usize) -> Vec<String> {
    let mut cases: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".txt").map(String::from))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= min,
        "expected the recorded cases, found {}",
        cases.len()
    );
    cases
}

/// The lines NCCL printed for a case.
pub fn expected_lines(dir: &str, case: &str) -> Vec<String> {
    std::fs::read_to_string(format!("{dir}/{case}.txt"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// A multi-node NVLink case (`gb200-nvl72-tray-mnnvl-<variant>`): trays, GPUs per NVLink
/// domain, and the NCCL settings the harness ran it with.
pub struct MnnvlCase {
    /// Trays (hosts).
    pub trays: usize,
    /// GPUs per NVLink domain.
    pub domain: usize,
    /// NCCL settings.
    pub env: Vec<(&'static str, &'static str)>,
    /// NIC GUIDs: each tray's own (`hostguids-` cases: the harness's topology file had no
    /// `guid`s and its net plugin reported different GUIDs per tray, as real trays' HCAs do) or
    /// the file's on every tray (the others: every tray was given the file as NCCL_TOPO_FILE).
    pub nic_guids: topo::NicGuids,
}

/// The multi-node NVLink variants: `2tray`, `4tray`, `9tray`, `18tray` (one domain),
/// `2dom-2tray`, `2dom-4tray`, `2dom-18tray` (two domains of 2, 4 or 18 trays) and `off-2tray`
/// (two trays of one domain, `NCCL_MNNVL_ENABLE=0`); `hostguids-2dom-<n>tray` are the two-domain
/// cases with each tray's NICs given GUIDs of their own.
pub fn mnnvl_case(case: &str) -> Option<MnnvlCase> {
    let variant = case.strip_prefix("gb200-nvl72-tray-mnnvl-")?;
    let (variant, nic_guids) = match variant.strip_prefix("hostguids-") {
        Some(v) => (v, topo::NicGuids::PerHost),
        None => (variant, topo::NicGuids::AsFile),
    };
    let mut case = match variant {
        "2tray" => MnnvlCase {
            trays: 2,
            domain: 72,
            env: vec![],
            nic_guids: topo::NicGuids::AsFile,
        },
        "4tray" => MnnvlCase {
            trays: 4,
            domain: 72,
            env: vec![],
            nic_guids: topo::NicGuids::AsFile,
        },
        "18tray" => MnnvlCase {
            trays: 18,
            domain: 72,
            env: vec![],
            nic_guids: topo::NicGuids::AsFile,
        },
        "9tray" => MnnvlCase {
            trays: 9,
            domain: 72,
            env: vec![],
            nic_guids: topo::NicGuids::AsFile,
        },
        "2dom-2tray" => MnnvlCase {
            trays: 4,
            domain: 8,
            env: vec![],
            nic_guids: topo::NicGuids::AsFile,
        },
        "2dom-4tray" => MnnvlCase {
            trays: 8,
            domain: 16,
            env: vec![],
            nic_guids: topo::NicGuids::AsFile,
        },
        "2dom-18tray" => MnnvlCase {
            trays: 36,
            domain: 72,
            env: vec![],
            nic_guids: topo::NicGuids::AsFile,
        },
        "off-2tray" => MnnvlCase {
            trays: 2,
            domain: 72,
            env: vec![("NCCL_MNNVL_ENABLE", "0")],
            nic_guids: topo::NicGuids::AsFile,
        },
        other => panic!("unknown multi-node NVLink case {other}"),
    };
    case.nic_guids = nic_guids;
    Some(case)
}

/// The topology file and node count of a case.
fn topo_file(case: &str) -> (String, usize) {
    let root = env!("CARGO_MANIFEST_DIR");
    if let Some(m) = mnnvl_case(case) {
        return (
            format!("{root}/../topologies/gb200-nvl72-tray.xml"),
            m.trays,
        );
    }
    let (base, n) = case.rsplit_once('-').expect("case-<n>node");
    let n: usize = n.trim_end_matches("node").parse().expect("node count");
    let base = base.trim_end_matches("-p2pdisabled");
    if let Some(rest) = base.strip_prefix("real-") {
        let (vendor, file) = if let Some(f) = rest.strip_prefix("pcie-rtx3090-") {
            ("pcie-rtx3090", f)
        } else {
            rest.split_once('-').expect("vendor-file")
        };
        (
            format!("{root}/../topologies/vendor/{vendor}/{file}.xml"),
            n,
        )
    } else {
        (format!("{root}/../topologies/{base}.xml"), n)
    }
}

/// The world communicator of a case, with the settings the harness ran it with (GeForce boxes
/// with `NCCL_IGNORE_DISABLED_P2P=2` unless the case is the P2P-disabled variant).
pub fn plan_case(case: &str) -> CommPlan {
    plan_case_as(case, None)
}

/// [`plan_case`] with the profile of NCCL `version` (e.g. "2.19.4"; `None` = the default).
#[allow(dead_code)] // not every test crate that includes this module plans other releases
pub fn plan_case_as(case: &str, version: Option<&str>) -> CommPlan {
    let geforce =
        (case.contains("4090") || case.contains("rtx3090")) && !case.contains("p2pdisabled");
    let mnnvl = mnnvl_case(case);
    let s = PlannerSettings::from_lookup(|k| match k {
        "NCCL_IGNORE_DISABLED_P2P" if geforce => Some("2".to_string()),
        "NCCLSIM_NCCL_VERSION" => version.map(String::from),
        _ => mnnvl
            .as_ref()
            .and_then(|m| m.env.iter().find(|(n, _)| *n == k))
            .map(|(_, v)| v.to_string()),
    })
    .unwrap();
    let (file, n) = topo_file(case);
    let xml = Arc::new(topo::read_xml(&file).unwrap());
    let hosts: Vec<_> = (0..n).map(|_| (file.clone(), xml.clone())).collect();
    let mut c = Cluster::from_hosts(&hosts, &s.topo, Completion::default()).unwrap();
    if let Some(m) = &mnnvl {
        c.nic_guids = m.nic_guids;
    }
    // The harness's NVML reports GPU fabric information only in the multi-node NVLink cases.
    let domains = match &mnnvl {
        Some(m) => NvlDomains::Gpus(m.domain),
        None => NvlDomains::None,
    };
    c.set_nvl_domains(domains).unwrap();
    Planner::new(c, s).plan_world().unwrap()
}
