//! `ncclsim topo check`: findings about a topology file, in particular what NCCL would silently
//! drop or misread.

use crate::consts::{self, class};
use crate::profiles;
use crate::settings::parse_c_int;
use crate::system::busid_to_int;
use crate::xml::XmlElement;
use std::collections::HashMap;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Severity {
    /// Worth knowing, harmless.
    Info,
    /// NCCL accepts it but does something the author probably did not mean.
    Warning,
    /// NCCL fails on it, or the file cannot describe a usable machine.
    Error,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    /// Severity.
    pub severity: Severity,
    /// `file:line:col`.
    pub at: String,
    /// What.
    pub msg: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self.severity {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(f, "{}: {s}: {}", self.at, self.msg)
    }
}

const KNOWN: &[&str] = &[
    "system", "cpu", "pci", "pcilink", "gpu", "nvlink", "c2c", "nic", "net",
];

/// Check a file's text and parsed tree.
pub fn check(text: &str, root: &XmlElement, file: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let at = |e: &XmlElement| format!("{}", e.location(file));
    let mut push = |sev, at: String, msg: String| {
        out.push(Finding {
            severity: sev,
            at,
            msg,
        })
    };

    // Syntax NCCL's own parser rejects (we accept it).
    for (i, line) in text.lines().enumerate() {
        if line.contains('\t') {
            push(
                Severity::Warning,
                format!("{file}:{}:1", i + 1),
                "tab character: NCCL's parser rejects tabs (XML Parse error : expecting '<')"
                    .into(),
            );
            break;
        }
    }
    if text.trim_start().starts_with("<?xml") {
        push(
            Severity::Warning,
            format!("{file}:1:1"),
            "<?xml?> prolog: NCCL's parser fails on it (expected >, got '?')".into(),
        );
    }

    if root.name != "system" {
        push(
            Severity::Error,
            at(root),
            format!("top element is <{}>, not <system>", root.name),
        );
        return out;
    }
    if root.get("version") != Some("1") {
        push(
            Severity::Error,
            at(root),
            "<system> needs version=\"1\"".into(),
        );
    }
    let report = profiles::inspect(root);
    if report.is_skeleton {
        push(Severity::Error, at(root), report.summary());
    }

    let mut busids: HashMap<u64, String> = HashMap::new();
    let mut gpu_busids: HashMap<u64, &XmlElement> = HashMap::new();
    let mut nvl: Vec<(String, String, i64, String)> = Vec::new(); // (from busid, target, count, at)
    let mut net_devs: HashMap<i64, String> = HashMap::new();
    #[allow(clippy::too_many_arguments)]
    fn visit<'a>(
        e: &'a XmlElement,
        parent_busid: Option<&'a str>,
        file: &str,
        push: &mut dyn FnMut(Severity, String, String),
        busids: &mut HashMap<u64, String>,
        gpu_busids: &mut HashMap<u64, &'a XmlElement>,
        nvl: &mut Vec<(String, String, i64, String)>,
        net_devs: &mut HashMap<i64, String>,
    ) {
        let at = format!("{}", e.location(file));
        if !KNOWN.contains(&e.name.as_str()) {
            push(
                Severity::Warning,
                at.clone(),
                format!(
                    "unknown element <{}>: NCCL ignores it and its children",
                    e.name
                ),
            );
            return;
        }
        if e.attrs.len() > 16 {
            push(
                Severity::Warning,
                at.clone(),
                format!(
                    "<{}> has {} attributes; NCCL keeps the first 16",
                    e.name,
                    e.attrs.len()
                ),
            );
        }
        match e.name.as_str() {
            "cpu" => {
                for a in ["numaid", "arch"] {
                    if e.get(a).is_none() {
                        push(Severity::Error, at.clone(), format!("<cpu> without {a}: NCCL fails (Attribute {a} of node cpu not found)"));
                    }
                }
                if let Some(arch) = e.get("arch") {
                    if consts::CPU_ARCH.lookup(arch).is_err() {
                        push(
                            Severity::Warning,
                            at.clone(),
                            format!("cpu arch '{arch}' unknown to NCCL (treated as 0)"),
                        );
                    } else if arch.starts_with("x86_64") && e.get("vendor").is_none() {
                        push(
                            Severity::Error,
                            at.clone(),
                            "x86_64 <cpu> without vendor: NCCL fails".into(),
                        );
                    }
                }
            }
            "pci" => {
                let busid = e.get("busid").unwrap_or("");
                if busid.is_empty() {
                    push(Severity::Error, at.clone(), "<pci> without busid".into());
                } else {
                    let id = busid_to_int(busid);
                    if let Some(prev) = busids.insert(id, at.clone()) {
                        push(
                            Severity::Error,
                            at.clone(),
                            format!("bus id {busid} already used at {prev}"),
                        );
                    }
                }
                for a in ["class", "link_width", "link_speed"] {
                    if e.get(a).is_none() {
                        push(Severity::Error, at.clone(), format!("<pci {busid}> without {a}: NCCL fails (Attribute {a} of node pci not found)"));
                    }
                }
                if let Some(s) = e.get("link_speed") {
                    if consts::PCI_GEN.lookup(s).is_err() {
                        push(Severity::Info, at.clone(), format!("link_speed \"{s}\" is not in NCCL's dictionary: read as 8 GT/s (Gen3)"));
                    }
                }
                let cls = e
                    .get("class")
                    .map(|c| consts::PCI_CLASS.lookup(c).unwrap_or_else(|f| f));
                if cls == Some(class::GPU) && e.subs("gpu").next().is_none() {
                    push(
                        Severity::Warning,
                        at.clone(),
                        format!(
                            "GPU-class device {busid} without <gpu>: NCCL creates nothing for it"
                        ),
                    );
                }
                if cls == Some(class::NIC) && e.subs("nic").next().is_none() {
                    push(Severity::Warning, at.clone(), format!("NIC-class device {busid} without <nic>/<net>: NCCL creates nothing for it"));
                }
                if let Some(g) = e.subs("gpu").next() {
                    gpu_busids.insert(busid_to_int(busid), g);
                }
            }
            "gpu" => {
                for a in ["dev", "sm", "gdr"] {
                    if e.get(a).is_none() {
                        push(
                            Severity::Error,
                            at.clone(),
                            format!("<gpu> without {a}: NCCL fails"),
                        );
                    }
                }
                if e.get("rank").is_none() {
                    push(
                        Severity::Warning,
                        at.clone(),
                        "<gpu> without rank: NCCL drops the whole PCI subtree of this GPU".into(),
                    );
                }
                if parent_busid.is_none() {
                    push(
                        Severity::Error,
                        at.clone(),
                        "<gpu> outside a <pci> element".into(),
                    );
                }
            }
            "nvlink" => {
                let count = e.get("count").and_then(parse_c_int).unwrap_or(0);
                let target = e.get("target").unwrap_or("").to_string();
                match e
                    .get("tclass")
                    .map(|c| consts::PCI_CLASS.lookup(c).unwrap_or_else(|f| f))
                {
                    None => push(
                        Severity::Error,
                        at.clone(),
                        "<nvlink> without tclass: NCCL fails".into(),
                    ),
                    Some(class::GPU) => {
                        let from = parent_busid.unwrap_or("").to_string();
                        if busid_to_int(&from) == busid_to_int(&target) {
                            push(Severity::Warning, at.clone(), format!("NVLink from GPU {from} to itself: NCCL adds a self link that inflates totalBw"));
                        }
                        nvl.push((from, target, count, at.clone()));
                    }
                    _ => {}
                }
                if count <= 0 {
                    push(
                        Severity::Warning,
                        at.clone(),
                        "<nvlink> with no links (count <= 0)".into(),
                    );
                }
            }
            "nic" if e.subs("net").next().is_none() => {
                push(
                    Severity::Warning,
                    at.clone(),
                    "<nic> without <net>: no network device".into(),
                );
            }
            "net" => match e.get("dev").and_then(parse_c_int) {
                None => push(
                    Severity::Warning,
                    at.clone(),
                    format!(
                        "<net {}> without dev: NCCL ignores it",
                        e.get("name").unwrap_or("?")
                    ),
                ),
                Some(d) => {
                    if let Some(prev) = net_devs.insert(d, at.clone()) {
                        push(
                            Severity::Error,
                            at.clone(),
                            format!("net dev {d} already used at {prev}"),
                        );
                    }
                    if e.get("speed").and_then(parse_c_int).unwrap_or(0) <= 0 {
                        push(
                            Severity::Info,
                            at.clone(),
                            "net without a positive speed: NCCL assumes 10000 Mb/s (1.25 GB/s)"
                                .into(),
                        );
                    }
                }
            },
            _ => {}
        }
        let busid = e.get("busid").or(parent_busid);
        for c in &e.children {
            visit(c, busid, file, push, busids, gpu_busids, nvl, net_devs);
        }
    }
    for c in &root.children {
        visit(
            c,
            None,
            file,
            &mut push,
            &mut busids,
            &mut gpu_busids,
            &mut nvl,
            &mut net_devs,
        );
    }
    // Links per (from, to) bus id pair, summed over repeated elements, for the symmetry check.
    let mut pair_links: HashMap<(u64, u64), i64> = HashMap::new();
    for (from, target, count, _) in &nvl {
        *pair_links
            .entry((busid_to_int(from), busid_to_int(target)))
            .or_insert(0) += count;
    }
    for (from, target, count, at) in &nvl {
        if busid_to_int(from) == busid_to_int(target) {
            continue;
        }
        if !gpu_busids.contains_key(&busid_to_int(target)) {
            push(
                Severity::Warning,
                at.clone(),
                format!("NVLink target {target} is not a GPU of this file: NCCL drops the link"),
            );
            continue;
        }
        let back = pair_links
            .get(&(busid_to_int(target), busid_to_int(from)))
            .copied()
            .unwrap_or(0);
        if back != *count {
            push(
                Severity::Warning,
                at.clone(),
                format!("asymmetric NVLink: {from} -> {target} has {count} links, the reverse has {back}; NCCL gives each direction its own bandwidth"),
            );
        }
    }
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.at.cmp(&b.at)));
    out
}
