//! One generated case: mutated inputs written to a scratch directory and a hostile command
//! line over them.

use super::inputs::*;
use super::*;

/// One generated case: the files it writes and the command line it runs.
pub(super) struct Case {
    pub(super) topo_text: Vec<u8>,
    pub(super) graph_text: Option<Vec<u8>>,
    pub(super) args: Vec<String>,
}

const ENV_NAMES: &[&str] = &[
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NRINGS",
    "NCCL_CROSS_NIC",
    "NCCL_NVLS_ENABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NETDEVS_POLICY",
    "NCCL_THREAD_THRESHOLDS",
    "NCCL_NTHREADS",
    "NCCL_MAX_CTAS",
    "NCCL_MIN_CTAS",
    "NCCL_NVLS_NCHANNELS",
    "NCCL_COLLNET_ENABLE",
    "NCCL_NET_MERGE_LEVEL",
    "NCCL_NET_FORCE_MERGE",
    "NCCL_NET_MERGE_POLICY",
    "NCCL_IB_MERGE_NICS",
    "NCCL_PXN_DISABLE",
    "NCCL_NVB_DISABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_NET_OVERHEAD",
    "NCCL_PAT_ENABLE",
    "NCCL_MAX_P2P_NCHANNELS",
    "NCCL_MIN_P2P_NCHANNELS",
    "NCCL_IGNORE_CPU_AFFINITY",
];

const ENV_VALUES: &[&str] = &[
    "Ring",
    "Tree",
    "^NVLS",
    "allreduce:tree;broadcast:ring",
    "LL",
    "^LL128",
    "Simple",
    "SYS",
    "PHB",
    "NVL",
    "LOC",
    "AUTO",
    "ALL",
    "MAX:2",
    "MAX:0",
    "foo",
    "1 2 3 4 5 6",
    "abc",
    "-1 -1 -1 8 8 8",
    "PORT",
    "PCI",
    "mlx5_0,mlx5_1",
    "mlx5_0,mlx5_1:mlx5_2,mlx5_3",
    "RAIL",
];

/// A mutated topology (index `t` in the corpus, its text) and sometimes a mutated graph file.
fn mutated_inputs(c: &Corpus, rng: &mut Rng) -> (usize, Vec<u8>, Option<Vec<u8>>) {
    let t = rng.below(c.topos.len());
    let (name, root, vals) = &c.topos[t];
    let mut topo_text = if rng.chance(15) {
        std::fs::read(name).unwrap_or_default()
    } else {
        let mut x = root.clone();
        for _ in 0..rng.below(4) {
            mutate_tree(&mut x, rng, vals);
        }
        topo::xml::write(&x).into_bytes()
    };
    if rng.chance(12) {
        for _ in 0..1 + rng.below(3) {
            mutate_bytes(&mut topo_text, rng);
        }
    }
    let graph_text = if rng.chance(25) && !c.graphs.is_empty() {
        let mine: Vec<&(usize, XmlElement)> = c.graphs.iter().filter(|g| g.0 == t).collect();
        let (_, g) = if !mine.is_empty() && rng.chance(80) {
            *rng.pick(&mine)
        } else {
            rng.pick(&c.graphs)
        };
        let mut x = g.clone();
        let gv: Vec<String> = {
            let mut v = Vec::new();
            values_of(&x, &mut v);
            v
        };
        for _ in 0..rng.below(4) {
            mutate_tree(&mut x, rng, &gv);
        }
        let mut b = topo::xml::write(&x).into_bytes();
        if rng.chance(10) {
            mutate_bytes(&mut b, rng);
        }
        Some(b)
    } else {
        None
    };
    (t, topo_text, graph_text)
}

/// A `--nodes` value: mostly valid, sometimes hostile, rarely valid but large.
fn node_count(rng: &mut Rng) -> String {
    if rng.next() % 10_000 == 0 {
        // Valid but large: seconds each, so rare.
        rng.pick(&["2000", "131072"]).to_string()
    } else if rng.chance(3) {
        rng.pick(&["0", "-1", "x", "131073", "4294967297", "1e3", ""])
            .to_string()
    } else {
        rng.pick(&["1", "1", "2", "2", "3", "4", "8", "16", "64"])
            .to_string()
    }
}

/// The options `plan`, `predict`, `whatif` and `topo` share: the topology (as `--topo FILE` or
/// a bare path), nodes, GPU, NIC speed, NCCL release and environment entries.
fn common_flags(
    a: &mut Vec<String>,
    rng: &mut Rng,
    skeleton: bool,
    topo_path: &str,
    flag_topo: bool,
) {
    if flag_topo {
        a.push("--topo".into());
    }
    a.push(topo_path.to_string());
    if rng.chance(60) {
        a.push("--nodes".into());
        a.push(node_count(rng));
    }
    maybe(
        a,
        rng,
        if skeleton { 85 } else { 10 },
        "--gpu",
        &[
            "A100-SXM4",
            "H100-SXM5",
            "V100-SXM2",
            "A10G",
            "RTX4090",
            "B200",
            "zz",
            "",
        ],
    );
    maybe(
        a,
        rng,
        5,
        "--nic-speed",
        &["200G", "400G", "0G", "-1G", "x", "99999999999G"],
    );
    maybe(
        a,
        rng,
        20,
        "--nccl-version",
        &[
            "2.18", "2.19", "2.20", "2.23", "2.25", "2.27.5", "2.28", "2.29", "2.30", "2.30.7",
            "3.0", "2", "x", "2.17",
        ],
    );
    for _ in 0..rng.below(3) {
        a.push("--env".into());
        let k = rng.pick(ENV_NAMES);
        let v = if rng.chance(50) {
            rng.pick(ENV_VALUES)
        } else {
            rng.pick(HOSTILE)
        };
        a.push(format!("{k}={v}"));
    }
}

/// `plan`'s own options.
fn plan_flags(a: &mut Vec<String>, rng: &mut Rng) {
    maybe(
        a,
        rng,
        20,
        "--gpus",
        &[
            "0-3", "0,2,4,6", "0", "7", "0,0", "9", "3-1", "-1", "0-100000", "",
        ],
    );
    maybe(
        a,
        rng,
        25,
        "--split",
        &[
            "tp=8,dp=2",
            "tp=4,pp=2,dp=2",
            "tp=2",
            "tp=3,dp=5",
            "tp=0",
            "tp=-1",
            "x",
            "tp=8,dp=12297829382473034416",
        ],
    );
    maybe(
        a,
        rng,
        15,
        "--split-by",
        &[
            "color=rank/8",
            "color=rank%2,key=rank,name=dp",
            "color=-1",
            "color=rank/0",
            "color=(rank",
            "color=(-9223372036854775807-1)/(0-1)",
            "color=rank*rank*rank*rank",
            "key=rank",
        ],
    );
    maybe(
        a,
        rng,
        40,
        "--format",
        &["info", "graph-xml", "json", "dot", "csv"],
    );
    maybe(a, rng, 10, "--rank", &["0", "5", "15", "100000", "-1"]);
    maybe(a, rng, 5, "--comm", &["world", "tp0", "dp1", "zz"]);
}

/// `predict`'s own options.
fn predict_flags(a: &mut Vec<String>, rng: &mut Rng) {
    maybe(
        a,
        rng,
        50,
        "--op",
        &[
            "all",
            "all_reduce",
            "alltoall",
            "sendrecv",
            "gather",
            "broadcast",
            "zz",
        ],
    );
    let size = |rng: &mut Rng| {
        rng.pick(&[
            "0",
            "1",
            "8",
            "1K",
            "1M",
            "1G",
            "8G",
            "-1",
            "x",
            "1T",
            "18446744073709551615",
        ])
        .to_string()
    };
    if rng.chance(50) {
        a.push("-b".into());
        a.push(size(rng));
    }
    a.push("-e".into());
    a.push(if rng.chance(80) {
        "64M".into()
    } else {
        size(rng)
    });
    maybe(
        a,
        rng,
        40,
        "-f",
        &["2", "4", "1", "0", "-2", "1.5", "x", "1000000"],
    );
    maybe(a, rng, 20, "--mode", &["nccl", "calibrated"]);
    if rng.chance(15) {
        a.push(rng.pick(&["--algo", "--proto"]).to_string());
        a.push(rng.pick(ENV_VALUES).to_string());
    }
    maybe(a, rng, 20, "--format", &["table", "csv", "json"]);
}

/// `whatif`'s own options.
fn whatif_flags(a: &mut Vec<String>, rng: &mut Rng) {
    a.push("-e".into());
    a.push("16M".into());
    if !maybe(
        a,
        rng,
        60,
        "--set",
        &[
            "nvlink.count=6",
            "nic.speed=400G",
            "nic.count=2",
            "pcie.gen=5",
            "nodes=4",
            "nodes=-1",
            "nic.speed=x",
            "nvlink.count=100000",
            "zz=1",
        ],
    ) {
        maybe(
            a,
            rng,
            50,
            "--sweep",
            &[
                "nodes=1,2,4",
                "nic.speed=100G,400G",
                "nodes=",
                "nvlink.count=0,1",
                "zz=1,2",
            ],
        );
    }
}

pub(super) fn gen_case(c: &Corpus, rng: &mut Rng, dir: &Path) -> Case {
    let (t, topo_text, graph_text) = mutated_inputs(c, rng);
    let topo_path = dir.join("topo.xml").display().to_string();
    let graph_path = dir.join("graph.xml").display().to_string();
    let mut a: Vec<String> = Vec::new();
    let skeleton = c.skeleton[t];
    match rng.below(10) {
        0..=4 => {
            a.push("plan".into());
            common_flags(&mut a, rng, skeleton, &topo_path, true);
            plan_flags(&mut a, rng);
        }
        5..=6 => {
            a.push("predict".into());
            common_flags(&mut a, rng, skeleton, &topo_path, true);
            predict_flags(&mut a, rng);
        }
        7 => {
            a.push("whatif".into());
            common_flags(&mut a, rng, skeleton, &topo_path, true);
            whatif_flags(&mut a, rng);
        }
        _ => {
            a.push("topo".into());
            let sub = *rng.pick(&["show", "paths", "check", "dot", "dump"]);
            a.push(sub.into());
            if sub == "check" {
                a.push(topo_path.clone());
            } else {
                common_flags(&mut a, rng, skeleton, &topo_path, false);
                if sub == "show" && rng.chance(30) {
                    a.push("--format".into());
                    a.push("json".into());
                }
            }
        }
    }
    if graph_text.is_some() && a[0] != "topo" {
        a.push("--env".into());
        a.push(format!("NCCL_GRAPH_FILE={graph_path}"));
    }
    Case {
        topo_text,
        graph_text,
        args: a,
    }
}
