//! What cases are made of: the seeded generator, hostile values, the corpus of repository
//! topologies and graph files, and mutations of their element trees and bytes.

use super::*;

/// A small deterministic generator (SplitMix64): cases are reproducible from their seed.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    pub(super) fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// `flag` and one of `values`, `percent`% of the time (the chance is drawn first, then the
/// value); whether they were added.
pub(super) fn maybe(
    a: &mut Vec<String>,
    rng: &mut Rng,
    percent: u64,
    flag: &str,
    values: &[&str],
) -> bool {
    if !rng.chance(percent) {
        return false;
    }
    a.push(flag.into());
    a.push(rng.pick(values).to_string());
    true
}

/// Values that have broken parsers before: signs, overflow, NaN, hex, empty, junk, huge.
pub(super) const HOSTILE: &[&str] = &[
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
pub(super) fn mutate_tree(root: &mut XmlElement, rng: &mut Rng, values: &[String]) {
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
pub(super) fn mutate_bytes(b: &mut Vec<u8>, rng: &mut Rng) {
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
pub(super) fn values_of(e: &XmlElement, out: &mut Vec<String>) {
    for (_, v) in e.attrs.iter() {
        out.push(v.to_string());
    }
    for c in &e.children {
        values_of(c, out);
    }
}

/// The inputs cases start from: topology files (with whether each is a skeleton that needs
/// `--gpu`) and graph files dumped for some of them.
pub(super) struct Corpus {
    pub(super) topos: Vec<(String, XmlElement, Vec<String>)>,
    pub(super) skeleton: Vec<bool>,
    pub(super) graphs: Vec<(usize, XmlElement)>,
}

pub(super) fn corpus(repo: &Path) -> Result<Corpus, String> {
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
