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

use clap::{Args, Parser};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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

/// A small deterministic generator (SplitMix64): cases are reproducible from their seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// `flag` and one of `values`, `percent`% of the time (the chance is drawn first, then the
/// value); whether they were added.
fn maybe(a: &mut Vec<String>, rng: &mut Rng, percent: u64, flag: &str, values: &[&str]) -> bool {
    if !rng.chance(percent) {
        return false;
    }
    a.push(flag.into());
    a.push(rng.pick(values).to_string());
    true
}

/// Values that have broken parsers before: signs, overflow, NaN, hex, empty, junk, huge.
const HOSTILE: &[&str] = &[
    "",
    "0",
    "-1",
    "1",
    "2",
    "-2147483648",
    "2147483647",
    "2147483648",
    "4294967297",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "NaN",
    "inf",
    "-inf",
    "1e309",
    "0x",
    "0x7fffffff",
    "0xffffffffffffffff",
    "x",
    " 3",
    "3 ",
    "1.5",
    "-0",
    "+7",
    "000000000000000000001",
    "00:00.0",
    "0000:ff:ff.f",
    "ffff:ff:ff.f",
    "zz:zz.z",
    "\u{1}",
    "日本",
    "SYS",
    "NVL",
    "PIX",
    "LOC",
    "NET",
    "DIS",
    "64",
    "65",
    "1000",
    "100000",
    "16.0 GT/s PCIe",
    "0x060400",
    "0x030200",
    "0x020700",
    "0x068000",
    "x86_64",
    "ppc64",
    "AuthenticAMD",
    "GenuineIntel",
    "mlx5_0",
    "mlx5_0,mlx5_1",
];

const NAMES: &[&str] = &[
    "system", "cpu", "pci", "gpu", "nvlink", "c2c", "nic", "net", "pcilink", "graphs", "graph",
    "channel", "bogus",
];

/// Every element of a tree, as index paths from the root.
fn element_paths(e: &XmlElement, at: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    out.push(at.clone());
    for (i, c) in e.children.iter().enumerate() {
        at.push(i);
        element_paths(c, at, out);
        at.pop();
    }
}

fn at_path<'a>(e: &'a mut XmlElement, path: &[usize]) -> &'a mut XmlElement {
    path.iter().fold(e, |e, &i| &mut e.children[i])
}

/// One structural mutation of a tree.
fn mutate_tree(root: &mut XmlElement, rng: &mut Rng, values: &[String]) {
    let mut paths = Vec::new();
    element_paths(root, &mut Vec::new(), &mut paths);
    let path = rng.pick(&paths).clone();
    match rng.below(9) {
        // Replace an attribute's value with a hostile one or one found elsewhere in the file.
        0..=2 => {
            let e = at_path(root, &path);
            if e.attrs.is_empty() {
                return;
            }
            let k = e.attrs[rng.below(e.attrs.len())].0.to_string();
            let v = if rng.chance(60) {
                rng.pick(HOSTILE).to_string()
            } else {
                rng.pick(values).clone()
            };
            e.set(&k, v);
        }
        // Drop an attribute.
        3 => {
            let e = at_path(root, &path);
            if !e.attrs.is_empty() {
                let i = rng.below(e.attrs.len());
                let mut a = e.attrs.to_vec();
                a.remove(i);
                e.attrs = a.into();
            }
        }
        // Add an attribute (a known name from elsewhere or a junk one).
        4 => {
            let e = at_path(root, &path);
            let k = rng
                .pick(&[
                    "dev",
                    "rank",
                    "busid",
                    "count",
                    "target",
                    "tclass",
                    "speed",
                    "nchannels",
                    "id",
                    "pattern",
                    "port",
                    "guid",
                    "class",
                    "numaid",
                    "gdr",
                    "sm",
                    "zz",
                ])
                .to_string();
            e.set(&k, rng.pick(HOSTILE).to_string());
        }
        // Drop an element.
        5 if !path.is_empty() => {
            let (last, parent) = path.split_last().expect("not the root");
            at_path(root, parent).children.remove(*last);
        }
        // Duplicate an element (next to itself).
        6 if !path.is_empty() => {
            let (last, parent) = path.split_last().expect("not the root");
            let p = at_path(root, parent);
            let copy = p.children[*last].clone();
            let most = if rng.chance(5) { 300 } else { 3 };
            let n = 1 + rng.below(most);
            for _ in 0..n {
                p.children.insert(*last, copy.clone());
            }
        }
        // Rename an element.
        7 => {
            let e = at_path(root, &path);
            e.name = rng.pick(NAMES).to_string().into();
        }
        // Move an element under another one, or wrap it in copies of its parent (deeper nesting).
        _ => {
            if path.is_empty() {
                return;
            }
            let (last, parent) = path.split_last().expect("not the root");
            let moved = at_path(root, parent).children.remove(*last);
            let mut paths = Vec::new();
            element_paths(root, &mut Vec::new(), &mut paths);
            let to = rng.pick(&paths).clone();
            let mut el = moved;
            if rng.chance(30) {
                for _ in 0..1 + rng.below(80) {
                    let mut wrap = at_path(root, &to).clone();
                    wrap.children = vec![el];
                    el = wrap;
                }
            }
            at_path(root, &to).children.push(el);
        }
    }
}

/// One byte-level mutation of a text.
fn mutate_bytes(b: &mut Vec<u8>, rng: &mut Rng) {
    if b.is_empty() {
        b.extend_from_slice(b"<");
    }
    let i = rng.below(b.len());
    match rng.below(8) {
        0 => b[i] ^= 1 << rng.below(8),
        1 => b.truncate(i),
        2 => b.insert(
            i,
            rng.pick(&[0u8, 0x1c, b'\t', b'<', b'>', b'"', b'&', 0xff, 0xc3])
                .to_owned(),
        ),
        3 => {
            let bom = "\u{feff}".as_bytes();
            b.splice(0..0, bom.iter().copied());
        }
        4 => {
            let j = rng.below(b.len());
            let (a, z) = (i.min(j), i.max(j));
            let chunk = b[a..z.min(a + 4096)].to_vec();
            b.splice(i..i, chunk);
        }
        5 => {
            b.splice(i..i, "日本語".bytes());
        }
        6 => {
            let s = rng.pick(&[
                "&amp;",
                "&foo;",
                "&#0;",
                "&#x110000;",
                "<!--",
                "]]>",
                "<?xml version=\"1.0\"?>",
                "<!DOCTYPE x [<!ENTITY a \"b\">]>",
            ]);
            b.splice(i..i, s.bytes());
        }
        _ => {
            b.remove(i);
        }
    }
}

/// All attribute values of a tree (mutations reuse them elsewhere).
fn values_of(e: &XmlElement, out: &mut Vec<String>) {
    for (_, v) in e.attrs.iter() {
        out.push(v.to_string());
    }
    for c in &e.children {
        values_of(c, out);
    }
}

/// The inputs cases start from: topology files (with whether each is a skeleton that needs
/// `--gpu`) and graph files dumped for some of them.
struct Corpus {
    topos: Vec<(String, XmlElement, Vec<String>)>,
    skeleton: Vec<bool>,
    graphs: Vec<(usize, XmlElement)>,
}

fn corpus(repo: &Path) -> Result<Corpus, String> {
    let mut files = Vec::new();
    let mut dirs = vec![repo.join("topologies")];
    while let Some(d) = dirs.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for f in rd.flatten() {
            let p = f.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "xml") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut topos = Vec::new();
    for f in &files {
        let name = f.display().to_string();
        let root = topo::read_xml(&name).map_err(|e| e.to_string())?;
        let mut vals = Vec::new();
        values_of(&root, &mut vals);
        topos.push((name, root, vals));
    }
    let skeleton: Vec<bool> = topos
        .iter()
        .map(|(_, r, _)| topo::profiles::inspect(r).is_skeleton)
        .collect();
    // Graph files as NCCL dumps them, for the 2-node world of every complete topology.
    let mut graphs = Vec::new();
    for (i, (name, _, _)) in topos.iter().enumerate() {
        let settings = planner::PlannerSettings::default();
        let completion = skeleton[i].then(|| topo::Completion {
            gpu: topo::profiles::gpu_model("A100-SXM4").ok(),
            nic_speed_mbps: None,
        });
        let Ok(cl) = topo::Cluster::load(name, 2, &settings.topo, completion) else {
            continue;
        };
        let Ok(plan) = planner::Planner::new(cl, settings).plan_world() else {
            continue;
        };
        let search = &plan.searches[0];
        if let Some(t) = &search.topo {
            graphs.push((i, planner::graph_xml::graphs_to_xml(search, &t.system)));
        }
    }
    if topos.is_empty() {
        return Err(format!("no topologies under {}", repo.display()));
    }
    Ok(Corpus {
        topos,
        skeleton,
        graphs,
    })
}

/// One generated case: the files it writes and the command line it runs.
struct Case {
    topo_text: Vec<u8>,
    graph_text: Option<Vec<u8>>,
    args: Vec<String>,
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

fn gen_case(c: &Corpus, rng: &mut Rng, dir: &Path) -> Case {
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
    let topo_path = dir.join("topo.xml").display().to_string();
    let graph_path = dir.join("graph.xml").display().to_string();
    let mut a: Vec<String> = Vec::new();
    let node_count = |rng: &mut Rng| -> String {
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
    };
    let common = |a: &mut Vec<String>, rng: &mut Rng, flag_topo: bool| {
        if flag_topo {
            a.push("--topo".into());
        }
        a.push(topo_path.clone());
        if rng.chance(60) {
            a.push("--nodes".into());
            a.push(node_count(rng));
        }
        maybe(
            a,
            rng,
            if c.skeleton[t] { 85 } else { 10 },
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
    };
    match rng.below(10) {
        0..=4 => {
            a.push("plan".into());
            common(&mut a, rng, true);
            maybe(
                &mut a,
                rng,
                20,
                "--gpus",
                &[
                    "0-3", "0,2,4,6", "0", "7", "0,0", "9", "3-1", "-1", "0-100000", "",
                ],
            );
            maybe(
                &mut a,
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
                &mut a,
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
                &mut a,
                rng,
                40,
                "--format",
                &["info", "graph-xml", "json", "dot", "csv"],
            );
            maybe(&mut a, rng, 10, "--rank", &["0", "5", "15", "100000", "-1"]);
            maybe(&mut a, rng, 5, "--comm", &["world", "tp0", "dp1", "zz"]);
        }
        5..=6 => {
            a.push("predict".into());
            common(&mut a, rng, true);
            maybe(
                &mut a,
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
                &mut a,
                rng,
                40,
                "-f",
                &["2", "4", "1", "0", "-2", "1.5", "x", "1000000"],
            );
            maybe(&mut a, rng, 20, "--mode", &["nccl", "calibrated"]);
            if rng.chance(15) {
                a.push(rng.pick(&["--algo", "--proto"]).to_string());
                a.push(rng.pick(ENV_VALUES).to_string());
            }
            maybe(&mut a, rng, 20, "--format", &["table", "csv", "json"]);
        }
        7 => {
            a.push("whatif".into());
            common(&mut a, rng, true);
            a.push("-e".into());
            a.push("16M".into());
            if !maybe(
                &mut a,
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
                    &mut a,
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
        _ => {
            a.push("topo".into());
            let sub = *rng.pick(&["show", "paths", "check", "dot", "dump"]);
            a.push(sub.into());
            if sub == "check" {
                a.push(topo_path.clone());
            } else {
                common(&mut a, rng, false);
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

/// Run the fuzzer; returns the number of failures.
pub fn run(a: &FuzzArgs, run_cli: fn(Vec<String>) -> Result<(), String>) -> Result<u64, String> {
    let corpus = Arc::new(corpus(&a.repo)?);
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
    let saved = if a.child {
        None
    } else {
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
            Some(keep)
        }
    };
    let prev_hook = std::panic::take_hook();
    if !a.child {
        std::panic::set_hook(Box::new(|_| {}));
    }
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let exit2 = Arc::new(AtomicU64::new(0));
    let failures: Arc<Mutex<Vec<Failure>>> = Arc::new(Mutex::new(Vec::new()));
    let slowest = Arc::new(Mutex::new((Duration::ZERO, 0u64)));
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for w in 0..a.threads.max(1) {
            let (corpus, next, done, exit2, failures, slowest) = (
                corpus.clone(),
                next.clone(),
                done.clone(),
                exit2.clone(),
                failures.clone(),
                slowest.clone(),
            );
            let dir = scratch.join(format!("w{w}"));
            let exe = exe.clone();
            std::thread::Builder::new()
                .stack_size(64 << 20)
                .spawn_scoped(sc, move || {
                    let _ = std::fs::create_dir_all(&dir);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= a.cases {
                            break;
                        }
                        let seed = a.seed + i;
                        let mut rng = Rng(seed);
                        let case = gen_case(&corpus, &mut rng, &dir);
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
                            run_child(&exe, &case.args, a.timeout, a.mem_mib)
                        } else {
                            let args = case.args.clone();
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
                        };
                        let wall = start.elapsed();
                        // In-process, the limit is on this thread's CPU time (on a shared
                        // machine wall time mostly measures the other processes); a wall time
                        // six times the limit counts too (a case waiting forever). Children
                        // are timed by the wall clock.
                        let took = if a.child { wall } else { thread_cpu() - cpu0 };
                        {
                            let mut s = slowest.lock().unwrap_or_else(|p| p.into_inner());
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
                                exit2.fetch_add(1, Ordering::Relaxed);
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
                                failures.lock().unwrap_or_else(|p| p.into_inner()).push(f);
                            }
                        }
                        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if n % 10_000 == 0 {
                            say!(
                                "fuzz: {n} cases, {:.0}/s, {} failure(s)",
                                n as f64 / t0.elapsed().as_secs_f64(),
                                failures.lock().map(|f| f.len()).unwrap_or(0)
                            );
                        }
                    }
                })
                .expect("a fuzz worker thread");
        }
    });
    std::panic::set_hook(prev_hook);
    if let Some((out, err)) = saved {
        REPORT_FD.store(2, Ordering::Relaxed);
        // SAFETY: restoring the descriptors saved above.
        unsafe {
            libc::dup2(out, 1);
            libc::dup2(err, 2);
            libc::close(out);
            libc::close(err);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let n = done.load(Ordering::Relaxed);
    let fails = failures.lock().map(|f| f.len()).unwrap_or(0) as u64;
    let (slow, slow_seed) = *slowest.lock().unwrap_or_else(|p| p.into_inner());
    let secs = t0.elapsed().as_secs_f64();
    let report = format!(
        "fuzz: {n} cases in {secs:.1} s ({:.0}/s): {} rejected as bad input, {} accepted, {fails} failure(s) (panic, abort, signal or over {} s); slowest case {slow:?} {} (seed {slow_seed})",
        n as f64 / secs,
        exit2.load(Ordering::Relaxed),
        n - exit2.load(Ordering::Relaxed) - fails,
        a.timeout,
        if a.child { "wall" } else { "CPU" }
    );
    say!("{report}");
    let _ = std::io::stderr().flush();
    Ok(fails)
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
fn run_child(
    exe: &Path,
    args: &[String],
    timeout: u64,
    mem_mib: u64,
) -> Result<bool, (String, String)> {
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
