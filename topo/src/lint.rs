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
    let mut l = Lint {
        file,
        out: Vec::new(),
        busids: HashMap::new(),
        gpu_busids: HashMap::new(),
        nvl: Vec::new(),
        net_devs: HashMap::new(),
    };
    l.syntax(text);
    if l.system(root) {
        for c in &root.children {
            l.visit(c, None);
        }
        l.nvlink_pairs();
    }
    let mut out = l.out;
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.at.cmp(&b.at)));
    out
}

/// One NVLink element as the symmetry check needs it.
struct NvLink {
    from: String,
    target: String,
    count: i64,
    at: String,
}

/// The findings so far and what the cross-element checks collect on the way.
struct Lint<'a> {
    file: &'a str,
    out: Vec<Finding>,
    /// Where each PCI bus id was first used.
    busids: HashMap<u64, String>,
    /// The GPUs by bus id.
    gpu_busids: HashMap<u64, &'a XmlElement>,
    /// NVLinks to GPUs.
    nvl: Vec<NvLink>,
    /// Where each network device index was first used.
    net_devs: HashMap<i64, String>,
}

impl<'a> Lint<'a> {
    fn push(&mut self, severity: Severity, at: String, msg: String) {
        self.out.push(Finding { severity, at, msg });
    }

    /// Syntax NCCL's own parser rejects (we accept it).
    fn syntax(&mut self, text: &str) {
        let file = self.file;
        if let Some(i) = text.lines().position(|line| line.contains('\t')) {
            self.push(
                Severity::Warning,
                format!("{file}:{}:1", i + 1),
                "tab character: NCCL's parser rejects tabs (XML Parse error : expecting '<')"
                    .into(),
            );
        }
        if text.trim_start().starts_with("<?xml") {
            self.push(
                Severity::Warning,
                format!("{file}:1:1"),
                "<?xml?> prolog: NCCL's parser fails on it (expected >, got '?')".into(),
            );
        }
    }

    /// The top element; false when it is not `<system>` (nothing else is checked then).
    fn system(&mut self, root: &XmlElement) -> bool {
        let at = format!("{}", root.location(self.file));
        if root.name != "system" {
            self.push(
                Severity::Error,
                at,
                format!("top element is <{}>, not <system>", root.name),
            );
            return false;
        }
        if root.get("version") != Some("1") {
            self.push(
                Severity::Error,
                at.clone(),
                "<system> needs version=\"1\"".into(),
            );
        }
        let report = profiles::inspect(root);
        if report.is_skeleton {
            self.push(Severity::Error, at, report.summary());
        }
        true
    }

    /// One element and its subtree; `parent_busid` is the bus id of the nearest enclosing
    /// element that has one.
    fn visit(&mut self, e: &'a XmlElement, parent_busid: Option<&'a str>) {
        let at = format!("{}", e.location(self.file));
        if !KNOWN.contains(&e.name.as_str()) {
            self.push(
                Severity::Warning,
                at,
                format!(
                    "unknown element <{}>: NCCL ignores it and its children",
                    e.name
                ),
            );
            return;
        }
        if e.attrs.len() > 16 {
            self.push(
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
            "cpu" => self.cpu(e, &at),
            "pci" => self.pci(e, &at),
            "gpu" => self.gpu(e, &at, parent_busid),
            "nvlink" => self.nvlink(e, &at, parent_busid),
            "nic" if e.subs("net").next().is_none() => {
                self.push(
                    Severity::Warning,
                    at.clone(),
                    "<nic> without <net>: no network device".into(),
                );
            }
            "net" => self.net(e, &at),
            _ => {}
        }
        let busid = e.get("busid").or(parent_busid);
        for c in &e.children {
            self.visit(c, busid);
        }
    }

    fn cpu(&mut self, e: &XmlElement, at: &str) {
        for a in ["numaid", "arch"] {
            if e.get(a).is_none() {
                self.push(
                    Severity::Error,
                    at.into(),
                    format!("<cpu> without {a}: NCCL fails (Attribute {a} of node cpu not found)"),
                );
            }
        }
        if let Some(arch) = e.get("arch") {
            if consts::CPU_ARCH.lookup(arch).is_err() {
                self.push(
                    Severity::Warning,
                    at.into(),
                    format!("cpu arch '{arch}' unknown to NCCL (treated as 0)"),
                );
            } else if arch.starts_with("x86_64") && e.get("vendor").is_none() {
                self.push(
                    Severity::Error,
                    at.into(),
                    "x86_64 <cpu> without vendor: NCCL fails".into(),
                );
            }
        }
    }

    fn pci(&mut self, e: &'a XmlElement, at: &str) {
        let busid = e.get("busid").unwrap_or("");
        if busid.is_empty() {
            self.push(Severity::Error, at.into(), "<pci> without busid".into());
        } else {
            let id = busid_to_int(busid);
            if let Some(prev) = self.busids.insert(id, at.into()) {
                self.push(
                    Severity::Error,
                    at.into(),
                    format!("bus id {busid} already used at {prev}"),
                );
            }
        }
        for a in ["class", "link_width", "link_speed"] {
            if e.get(a).is_none() {
                self.push(
                    Severity::Error,
                    at.into(),
                    format!(
                        "<pci {busid}> without {a}: NCCL fails (Attribute {a} of node pci not found)"
                    ),
                );
            }
        }
        if let Some(s) = e.get("link_speed") {
            if consts::PCI_GEN.lookup(s).is_err() {
                self.push(
                    Severity::Info,
                    at.into(),
                    format!(
                        "link_speed \"{s}\" is not in NCCL's dictionary: read as 8 GT/s (Gen3)"
                    ),
                );
            }
        }
        let cls = e
            .get("class")
            .map(|c| consts::PCI_CLASS.lookup(c).unwrap_or_else(|f| f));
        if cls == Some(class::GPU) && e.subs("gpu").next().is_none() {
            self.push(
                Severity::Warning,
                at.into(),
                format!("GPU-class device {busid} without <gpu>: NCCL creates nothing for it"),
            );
        }
        if cls == Some(class::NIC) && e.subs("nic").next().is_none() {
            self.push(
                Severity::Warning,
                at.into(),
                format!(
                    "NIC-class device {busid} without <nic>/<net>: NCCL creates nothing for it"
                ),
            );
        }
        if let Some(g) = e.subs("gpu").next() {
            self.gpu_busids.insert(busid_to_int(busid), g);
        }
    }

    fn gpu(&mut self, e: &XmlElement, at: &str, parent_busid: Option<&str>) {
        for a in ["dev", "sm", "gdr"] {
            if e.get(a).is_none() {
                self.push(
                    Severity::Error,
                    at.into(),
                    format!("<gpu> without {a}: NCCL fails"),
                );
            }
        }
        if e.get("rank").is_none() {
            self.push(
                Severity::Warning,
                at.into(),
                "<gpu> without rank: NCCL drops the whole PCI subtree of this GPU".into(),
            );
        }
        if parent_busid.is_none() {
            self.push(
                Severity::Error,
                at.into(),
                "<gpu> outside a <pci> element".into(),
            );
        }
    }

    fn nvlink(&mut self, e: &XmlElement, at: &str, parent_busid: Option<&str>) {
        let count = e.get("count").and_then(parse_c_int).unwrap_or(0);
        let target = e.get("target").unwrap_or("").to_string();
        match e
            .get("tclass")
            .map(|c| consts::PCI_CLASS.lookup(c).unwrap_or_else(|f| f))
        {
            None => self.push(
                Severity::Error,
                at.into(),
                "<nvlink> without tclass: NCCL fails".into(),
            ),
            Some(class::GPU) => {
                let from = parent_busid.unwrap_or("").to_string();
                if busid_to_int(&from) == busid_to_int(&target) {
                    self.push(
                        Severity::Warning,
                        at.into(),
                        format!(
                            "NVLink from GPU {from} to itself: NCCL adds a self link that inflates totalBw"
                        ),
                    );
                }
                self.nvl.push(NvLink {
                    from,
                    target,
                    count,
                    at: at.into(),
                });
            }
            _ => {}
        }
        if count <= 0 {
            self.push(
                Severity::Warning,
                at.into(),
                "<nvlink> with no links (count <= 0)".into(),
            );
        }
    }

    fn net(&mut self, e: &XmlElement, at: &str) {
        match e.get("dev").and_then(parse_c_int) {
            None => self.push(
                Severity::Warning,
                at.into(),
                format!(
                    "<net {}> without dev: NCCL ignores it",
                    e.get("name").unwrap_or("?")
                ),
            ),
            Some(d) => {
                if let Some(prev) = self.net_devs.insert(d, at.into()) {
                    self.push(
                        Severity::Error,
                        at.into(),
                        format!("net dev {d} already used at {prev}"),
                    );
                }
                if e.get("speed").and_then(parse_c_int).unwrap_or(0) <= 0 {
                    self.push(
                        Severity::Info,
                        at.into(),
                        "net without a positive speed: NCCL assumes 10000 Mb/s (1.25 GB/s)".into(),
                    );
                }
            }
        }
    }

    /// NVLinks to targets that are not GPUs of the file, and links whose reverse direction has
    /// another count (summed over repeated elements).
    fn nvlink_pairs(&mut self) {
        let nvl = std::mem::take(&mut self.nvl);
        let mut pair_links: HashMap<(u64, u64), i64> = HashMap::new();
        for l in &nvl {
            *pair_links
                .entry((busid_to_int(&l.from), busid_to_int(&l.target)))
                .or_insert(0) += l.count;
        }
        for l in nvl {
            let (from, target, count) = (&l.from, &l.target, l.count);
            if busid_to_int(from) == busid_to_int(target) {
                continue;
            }
            if !self.gpu_busids.contains_key(&busid_to_int(target)) {
                self.push(
                    Severity::Warning,
                    l.at,
                    format!(
                        "NVLink target {target} is not a GPU of this file: NCCL drops the link"
                    ),
                );
                continue;
            }
            let back = pair_links
                .get(&(busid_to_int(target), busid_to_int(from)))
                .copied()
                .unwrap_or(0);
            if back != count {
                self.push(Severity::Warning, l.at, format!("asymmetric NVLink: {from} -> {target} has {count} links, the reverse has {back}; NCCL gives each direction its own bandwidth"));
            }
        }
    }
}
