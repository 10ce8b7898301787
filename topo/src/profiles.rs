//! GPU model profiles (public hardware facts) and the completion of vendor "skeleton" topology files,
//! which describe the CPU/PCI tree but leave out the `<gpu>`, `<nvlink>`, `<nic>` and `<net>` children
//! that NCCL fills in from the devices it detects at run time.

use crate::consts;
use crate::error::{Result, TopoError};
use crate::xml::XmlElement;

/// How a board's NVLinks are wired on its usual platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvlinkFabric {
    /// No NVLink (PCIe only).
    None,
    /// All links go to NVSwitches: links per switch.
    NvSwitch(&'static [u32]),
    /// The DGX-1 / HGX-1 hybrid cube mesh of 8 GPUs (6 links per GPU).
    HybridCubeMesh,
}

/// What we know about a GPU board.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuModel {
    /// Names accepted on the command line (first is canonical).
    pub keys: &'static [&'static str],
    /// Marketing name as NVML reports it.
    pub name: &'static str,
    /// PCI device ids (vendor 0x10de).
    pub pci_devices: &'static [u32],
    /// Compute capability x10.
    pub sm: i32,
    /// Memory in GiB.
    pub mem_gib: u32,
    /// NVLink wiring on the platform the board usually ships in.
    pub fabric: NvlinkFabric,
    /// Whether the driver reports P2P as supported (GeForce boards report no P2P through NVML).
    pub p2p: bool,
    /// GPUDirect RDMA support.
    pub gdr: bool,
    /// PCIe generation of the board.
    pub pcie_gen: u32,
    /// GPU<->CPU C2C: (links, per-link MB/s as NVML reports), on Grace platforms.
    pub c2c: Option<(u32, u32)>,
    /// Host CPU usually paired with it, for skeletons that omit CPU attributes: (arch, vendor, family, model).
    pub host_cpu: (&'static str, &'static str, u32, u32),
}

const AMD_ROME: (&str, &str, u32, u32) = ("x86_64", "AuthenticAMD", 23, 49);
const AMD_GENOA: (&str, &str, u32, u32) = ("x86_64", "AuthenticAMD", 25, 17);
const INTEL_BDW: (&str, &str, u32, u32) = ("x86_64", "GenuineIntel", 6, 79);
const INTEL_ICX: (&str, &str, u32, u32) = ("x86_64", "GenuineIntel", 6, 106);
const INTEL_SPR: (&str, &str, u32, u32) = ("x86_64", "GenuineIntel", 6, 143);
const INTEL_EMR: (&str, &str, u32, u32) = ("x86_64", "GenuineIntel", 6, 207);
const GRACE: (&str, &str, u32, u32) = ("arm64", "", 0, 0);

const A100_SXM4_80GB: GpuModel = GpuModel {
    keys: &["A100-SXM4", "a100", "a100-sxm4-80gb"],
    name: "NVIDIA A100-SXM4-80GB",
    pci_devices: &[0x20b2],
    sm: 80,
    mem_gib: 80,
    fabric: NvlinkFabric::NvSwitch(&[2, 2, 2, 2, 2, 2]),
    p2p: true,
    gdr: true,
    pcie_gen: 4,
    c2c: None,
    host_cpu: AMD_ROME,
};

/// The boards we know. Sources: NVIDIA product briefs and datasheets (V100, A100, H100, H200, B200,
/// GB200, GB300, A10G, GeForce RTX 3090/4090), PCI ids from the public pci.ids database.
pub const GPU_MODELS: &[GpuModel] = &[
    GpuModel {
        keys: &["V100-SXM2", "v100"],
        name: "Tesla V100-SXM2-32GB",
        pci_devices: &[0x1db1, 0x1db5],
        sm: 70,
        mem_gib: 32,
        fabric: NvlinkFabric::HybridCubeMesh,
        p2p: true,
        gdr: true,
        pcie_gen: 3,
        c2c: None,
        host_cpu: INTEL_BDW,
    },
    A100_SXM4_80GB,
    GpuModel {
        // The original DGX A100 board (PCI id 0x20b0), as in topologies/dgx-a100.xml: the
        // 80 GB board with half the memory.
        keys: &["A100-SXM4-40GB", "a100-40gb"],
        name: "NVIDIA A100-SXM4-40GB",
        pci_devices: &[0x20b0],
        mem_gib: 40,
        ..A100_SXM4_80GB
    },
    GpuModel {
        keys: &["A100-PCIE", "a100-pcie-80gb", "a100-pcie-40gb"],
        name: "NVIDIA A100 80GB PCIe",
        pci_devices: &[0x20b5, 0x20f1],
        sm: 80,
        mem_gib: 80,
        fabric: NvlinkFabric::None,
        p2p: true,
        gdr: true,
        pcie_gen: 4,
        c2c: None,
        host_cpu: INTEL_ICX,
    },
    GpuModel {
        keys: &["H100-SXM5", "h100", "h100-sxm"],
        name: "NVIDIA H100 80GB HBM3",
        pci_devices: &[0x2330],
        sm: 90,
        mem_gib: 80,
        fabric: NvlinkFabric::NvSwitch(&[5, 4, 4, 5]),
        p2p: true,
        gdr: true,
        pcie_gen: 5,
        c2c: None,
        host_cpu: INTEL_SPR,
    },
    GpuModel {
        keys: &["H100-PCIE", "h100-pcie"],
        name: "NVIDIA H100 PCIe",
        pci_devices: &[0x2331],
        sm: 90,
        mem_gib: 80,
        fabric: NvlinkFabric::None,
        p2p: true,
        gdr: true,
        pcie_gen: 5,
        c2c: None,
        host_cpu: INTEL_SPR,
    },
    GpuModel {
        keys: &["H200", "h200-sxm"],
        name: "NVIDIA H200",
        pci_devices: &[0x2335],
        sm: 90,
        mem_gib: 141,
        fabric: NvlinkFabric::NvSwitch(&[5, 4, 4, 5]),
        p2p: true,
        gdr: true,
        pcie_gen: 5,
        c2c: None,
        host_cpu: INTEL_EMR,
    },
    GpuModel {
        keys: &["B200", "b200"],
        name: "NVIDIA B200",
        pci_devices: &[0x2901],
        sm: 100,
        mem_gib: 180,
        fabric: NvlinkFabric::NvSwitch(&[9, 9]),
        p2p: true,
        gdr: true,
        pcie_gen: 5,
        c2c: None,
        host_cpu: INTEL_EMR,
    },
    GpuModel {
        keys: &["GB200", "gb200"],
        name: "NVIDIA GB200",
        pci_devices: &[0x2941],
        sm: 100,
        mem_gib: 186,
        fabric: NvlinkFabric::NvSwitch(&[18]),
        p2p: true,
        gdr: true,
        pcie_gen: 5,
        c2c: Some((5, 44712)),
        host_cpu: GRACE,
    },
    GpuModel {
        // Blackwell Ultra in a GB300 NVL72 tray: compute capability 10.3, 18 NVLink5 links to the
        // rack fabric, NVLink-C2C to Grace as on GB200; 288 GB HBM3e (NVML reports 278 GiB).
        // The B300's PCI device id is not in the sources used: the board is found by sm.
        keys: &["GB300", "gb300"],
        name: "NVIDIA GB300",
        pci_devices: &[],
        sm: 103,
        mem_gib: 278,
        fabric: NvlinkFabric::NvSwitch(&[18]),
        p2p: true,
        gdr: true,
        pcie_gen: 5,
        c2c: Some((5, 44712)),
        host_cpu: GRACE,
    },
    GpuModel {
        keys: &["A10G", "a10g"],
        name: "NVIDIA A10G",
        pci_devices: &[0x2237],
        sm: 86,
        mem_gib: 24,
        fabric: NvlinkFabric::None,
        p2p: true,
        gdr: true,
        pcie_gen: 4,
        c2c: None,
        host_cpu: AMD_ROME,
    },
    GpuModel {
        keys: &["RTX3090", "rtx-3090", "3090"],
        name: "NVIDIA GeForce RTX 3090",
        pci_devices: &[0x2204],
        sm: 86,
        mem_gib: 24,
        fabric: NvlinkFabric::None,
        p2p: false,
        gdr: false,
        pcie_gen: 4,
        c2c: None,
        host_cpu: INTEL_ICX,
    },
    GpuModel {
        keys: &["RTX4090", "rtx-4090", "4090"],
        name: "NVIDIA GeForce RTX 4090",
        pci_devices: &[0x2684],
        sm: 89,
        mem_gib: 24,
        fabric: NvlinkFabric::None,
        p2p: false,
        gdr: false,
        pcie_gen: 4,
        c2c: None,
        host_cpu: AMD_GENOA,
    },
];

/// Find a model by command-line name (case-insensitive, ignoring '-' and '_').
pub fn gpu_model(key: &str) -> Result<&'static GpuModel> {
    let norm = |s: &str| s.to_ascii_lowercase().replace(['-', '_', ' '], "");
    let k = norm(key);
    GPU_MODELS
        .iter()
        .find(|m| m.keys.iter().any(|x| norm(x) == k))
        .ok_or_else(|| {
            TopoError::Model(format!(
                "unknown GPU model '{key}'; known: {}",
                GPU_MODELS
                    .iter()
                    .map(|m| m.keys[0])
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// Find a model by the name the driver reports for it (`cudaDeviceProp::name`, NVML's).
pub fn gpu_by_name(name: &str) -> Option<&'static GpuModel> {
    GPU_MODELS.iter().find(|m| m.name == name)
}

/// Find a model by PCI device id.
pub fn gpu_by_pci_device(device: u32) -> Option<&'static GpuModel> {
    GPU_MODELS.iter().find(|m| m.pci_devices.contains(&device))
}

/// The first known board of compute capability `sm` (x10), for files that name no known PCI id.
pub fn gpu_by_sm(sm: i32) -> Option<&'static GpuModel> {
    GPU_MODELS.iter().find(|m| m.sm == sm)
}

/// Parse a NIC speed such as `200G`, `400Gb`, `100000` (Mb/s) into Mb/s.
pub fn parse_nic_speed(s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .trim_end_matches("bps")
        .trim_end_matches("b/s")
        .trim_end_matches('b');
    let (num, mult) = if let Some(n) = t.strip_suffix('g') {
        (n, 1000.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v > 0.0 => Ok((v * mult).round() as u64),
        _ => Err(TopoError::Setting {
            name: "nic-speed".into(),
            value: s.into(),
            msg: "expected a speed like 100G, 200G, 400G or a number of Mb/s".into(),
        }),
    }
}

/// What a file lacks before NCCL can use it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SkeletonReport {
    /// No `<gpu>` element at all: a vendor skeleton.
    pub is_skeleton: bool,
    /// PCI slots of GPU class without a `<gpu>` child.
    pub gpu_slots: usize,
    /// PCI slots of NIC class without a `<nic>` child.
    pub nic_slots: usize,
    /// `<pci>` elements without a class.
    pub classless_pci: usize,
    /// `<cpu>` elements without arch.
    pub cpus_without_arch: usize,
    /// `<gpu>` elements.
    pub gpus: usize,
    /// `<net>` elements.
    pub nets: usize,
}

impl SkeletonReport {
    /// One line for users.
    pub fn summary(&self) -> String {
        format!(
            "skeleton topology: no <gpu> elements ({} GPU-class PCI slots, {} NIC-class PCI slots, {} PCI elements without class, {} CPUs without arch); give --gpu MODEL (and --nic-speed SPEED) to complete it",
            self.gpu_slots, self.nic_slots, self.classless_pci, self.cpus_without_arch
        )
    }
}

fn class_of(e: &XmlElement) -> Option<i32> {
    e.get("class")
        .map(|c| consts::PCI_CLASS.lookup(c).unwrap_or_else(|f| f))
}

/// Distinct NVSwitch bus ids the GPUs' `<nvlink>` elements point at (NCCL folds them into one NVS node).
pub fn nvswitch_targets(root: &XmlElement) -> usize {
    let mut seen: Vec<u64> = Vec::new();
    root.walk(&mut |e, _| {
        if e.name == "nvlink"
            && e.get("tclass")
                .map(|c| consts::PCI_CLASS.lookup(c) == Ok(consts::class::NVS))
                .unwrap_or(false)
        {
            let t = crate::system::busid_to_int(e.get("target").unwrap_or(""));
            if !seen.contains(&t) {
                seen.push(t);
            }
        }
    });
    seen.len()
}

/// Look at a file and say whether (and how) it is a skeleton.
pub fn inspect(root: &XmlElement) -> SkeletonReport {
    let mut r = SkeletonReport::default();
    root.walk(&mut |e, _| match e.name.as_str() {
        "gpu" => r.gpus += 1,
        "net" => r.nets += 1,
        "cpu" if e.get("arch").is_none() => r.cpus_without_arch += 1,
        "pci" => match class_of(e) {
            None => r.classless_pci += 1,
            Some(consts::class::GPU) if e.subs("gpu").next().is_none() => r.gpu_slots += 1,
            Some(consts::class::NIC) if e.subs("nic").next().is_none() => r.nic_slots += 1,
            _ => {}
        },
        _ => {}
    });
    r.is_skeleton = r.gpus == 0;
    r
}

/// Fill a skeleton with the given GPU model (and NICs of `nic_speed_mbps`, when given), as NCCL's
/// detection would on that machine. Returns the completed XML and notes on every guess made.
pub fn complete(
    root: &XmlElement,
    model: &GpuModel,
    nic_speed_mbps: Option<u64>,
) -> (XmlElement, Vec<String>) {
    let mut notes = Vec::new();
    let mut x = root.clone();
    // Every platform we know has at most 8 GPUs per node.
    let gpu_count_target = 8;
    // 1. CPU attributes NCCL needs.
    let (arch, vendor, fam, modl) = model.host_cpu;
    let mut filled_cpu = 0;
    for cpu in x.children.iter_mut().filter(|c| c.name == "cpu") {
        if cpu.get("arch").is_none() {
            cpu.set("arch", arch);
            if !vendor.is_empty() {
                cpu.set("vendor", vendor);
                cpu.set("familyid", fam);
                cpu.set("modelid", modl);
            }
            filled_cpu += 1;
        }
    }
    if filled_cpu > 0 {
        notes.push(format!(
            "{filled_cpu} <cpu> without arch: assumed {arch} {vendor} family {fam} model {modl} (the usual host of {})",
            model.name
        ));
    }
    // 2. Class-less PCI elements: bridges if they have children; leaves directly under a CPU are GPU
    //    slots, leaves under a switch are NICs (the AWS files describe NIC-only switches that way).
    let existing_gpu_slots = inspect(&x).gpu_slots;
    let mut classless_gpus = 0usize;
    let mut classless_nics = 0usize;
    for cpu in x.children.iter_mut().filter(|c| c.name == "cpu") {
        for pci in cpu.children.iter_mut().filter(|c| c.name == "pci") {
            classify(
                pci,
                true,
                existing_gpu_slots,
                &mut classless_gpus,
                &mut classless_nics,
                gpu_count_target,
            );
        }
    }
    if classless_gpus + classless_nics > 0 {
        notes.push(format!(
            "PCI elements without class: {classless_gpus} taken as GPUs (leaves directly under a CPU), {classless_nics} as NICs (leaves under a switch)"
        ));
    }
    // 3. No GPU slot at all: one GPU under each bottom-level switch (AWS p5 layout).
    if inspect(&x).gpu_slots == 0 {
        let mut added = 0;
        let mut n = 0;
        for cpu in x.children.iter_mut().filter(|c| c.name == "cpu") {
            add_gpu_per_switch(cpu, model, &mut n, &mut added);
        }
        if added > 0 {
            notes.push(format!("no GPU slot in the file: added one {} under each of {added} bottom-level PCI switches", model.name));
        }
    }
    // 4. GPU slots get <gpu> (dev in bus id order, as NVML numbers them) and NVLinks.
    let mut slots: Vec<String> = Vec::new();
    x.walk(&mut |e, _| {
        if e.name == "pci"
            && class_of(e) == Some(consts::class::GPU)
            && e.subs("gpu").next().is_none()
        {
            slots.push(e.get("busid").unwrap_or("").to_string());
        }
    });
    let mut sorted = slots.clone();
    sorted.sort_by_key(|b| crate::system::busid_to_int(b));
    let n_gpus = sorted.len();
    let dev_of = |busid: &str| sorted.iter().position(|b| b == busid).unwrap_or(0);
    let mut nic_i = 0usize;
    let mut nic_skipped = 0usize;
    fill(
        &mut x,
        model,
        &sorted,
        &dev_of,
        nic_speed_mbps,
        &mut nic_i,
        &mut nic_skipped,
    );
    if n_gpus > 0 {
        notes.push(format!(
            "added {n_gpus} x {} (sm {}, {}) with NVML order = PCI bus order",
            model.name,
            model.sm,
            match model.fabric {
                NvlinkFabric::None => "no NVLink".to_string(),
                NvlinkFabric::NvSwitch(l) =>
                    format!("{} NVLinks to NVSwitch", l.iter().sum::<u32>()),
                NvlinkFabric::HybridCubeMesh => "DGX-1 hybrid cube-mesh NVLinks".to_string(),
            }
        ));
    }
    if matches!(model.fabric, NvlinkFabric::HybridCubeMesh) && n_gpus != 8 {
        notes.push(format!("the hybrid cube mesh needs 8 GPUs, the file has {n_gpus}: NVLinks only between the first 8"));
    }
    if nic_i > 0 {
        notes.push(format!(
            "added {nic_i} NICs at {} Mb/s with GPUDirect RDMA",
            nic_speed_mbps.unwrap_or(0)
        ));
    }
    if nic_skipped > 0 {
        notes.push(format!(
            "{nic_skipped} NIC slots left empty: give --nic-speed to add them"
        ));
    }
    (x, notes)
}

fn classify(
    e: &mut XmlElement,
    under_cpu: bool,
    gpu_slots: usize,
    gpus: &mut usize,
    nics: &mut usize,
    max_gpus: usize,
) {
    let has_pci_kids = e.children.iter().any(|c| c.name == "pci");
    if e.get("class").is_none() {
        if has_pci_kids {
            e.set("class", "0x060400");
        } else if under_cpu && gpu_slots + *gpus < max_gpus {
            e.set("class", "0x030200");
            *gpus += 1;
        } else {
            e.set("class", "0x020000");
            *nics += 1;
        }
    }
    for c in e.children.iter_mut().filter(|c| c.name == "pci") {
        classify(c, false, gpu_slots, gpus, nics, max_gpus);
    }
}

fn add_gpu_per_switch(e: &mut XmlElement, model: &GpuModel, n: &mut usize, added: &mut usize) {
    let kids_are_leaves = e
        .children
        .iter()
        .filter(|c| c.name == "pci")
        .all(|c| c.children.iter().all(|g| g.name != "pci"));
    let has_pci = e.children.iter().any(|c| c.name == "pci");
    if e.name == "pci" && has_pci && kids_are_leaves {
        let busid = format!("0000:{:02x}:00.0", 0xe0 + (*n % 32));
        *n += 1;
        e.children.insert(
            0,
            XmlElement::new("pci")
                .with("busid", busid)
                .with("class", "0x030200"),
        );
        let _ = model;
        *added += 1;
        return;
    }
    for c in e
        .children
        .iter_mut()
        .filter(|c| c.name == "pci" || c.name == "cpu")
    {
        add_gpu_per_switch(c, model, n, added);
    }
}

/// DGX-1 hybrid cube mesh: (gpu a, gpu b, links).
const CUBE_MESH: &[(usize, usize, u32)] = &[
    (0, 1, 1),
    (0, 2, 1),
    (0, 3, 2),
    (0, 4, 2),
    (1, 2, 2),
    (1, 3, 1),
    (1, 5, 2),
    (2, 3, 2),
    (2, 6, 1),
    (3, 7, 1),
    (4, 5, 1),
    (4, 6, 1),
    (4, 7, 2),
    (5, 6, 2),
    (5, 7, 1),
    (6, 7, 2),
];

fn fill(
    e: &mut XmlElement,
    model: &GpuModel,
    sorted: &[String],
    dev_of: &dyn Fn(&str) -> usize,
    nic_speed: Option<u64>,
    nic_i: &mut usize,
    nic_skipped: &mut usize,
) {
    if e.name == "pci" {
        let cls = class_of(e);
        if cls == Some(consts::class::GPU) && e.subs("gpu").next().is_none() {
            let busid = e.get("busid").unwrap_or("").to_string();
            let dev = dev_of(&busid);
            e.init("vendor", "0x10de");
            e.init("device", format!("0x{:04x}", model.pci_devices[0]));
            e.init("link_speed", consts::pcie_speed_str(model.pcie_gen));
            e.init("link_width", 16);
            let mut gpu = XmlElement::new("gpu")
                .with("dev", dev)
                .with("sm", model.sm)
                .with("rank", dev)
                .with("gdr", u8::from(model.gdr));
            match model.fabric {
                NvlinkFabric::None => {}
                NvlinkFabric::NvSwitch(per_switch) => {
                    for (i, count) in per_switch.iter().enumerate() {
                        gpu.children.push(
                            XmlElement::new("nvlink")
                                .with("target", format!("ffff:ff:{:02x}.0", 0x10 + i))
                                .with("count", count)
                                .with("tclass", "0x068000"),
                        );
                    }
                }
                NvlinkFabric::HybridCubeMesh => {
                    for &(a, b, links) in CUBE_MESH {
                        let peer = if a == dev {
                            b
                        } else if b == dev {
                            a
                        } else {
                            continue;
                        };
                        if let Some(target) = sorted.get(peer) {
                            gpu.children.push(
                                XmlElement::new("nvlink")
                                    .with("target", target)
                                    .with("count", links)
                                    .with("tclass", "0x030200"),
                            );
                        }
                    }
                }
            }
            if let Some((count, bw)) = model.c2c {
                gpu.children
                    .push(XmlElement::new("c2c").with("bw", bw).with("count", count));
            }
            e.children.push(gpu);
            return;
        }
        if cls == Some(consts::class::NIC) && e.subs("nic").next().is_none() {
            e.init("link_speed", consts::pcie_speed_str(model.pcie_gen));
            e.init("link_width", 16);
            match nic_speed {
                Some(speed) => {
                    let i = *nic_i;
                    *nic_i += 1;
                    e.children.push(
                        XmlElement::new("nic").child(
                            XmlElement::new("net")
                                .with("name", format!("mlx5_{i}"))
                                .with("dev", i)
                                .with("speed", speed)
                                .with("port", 1)
                                .with("latency", "0.000000")
                                .with("guid", format!("0x{:x}", 0x1000 + i))
                                .with("maxconn", 131072)
                                .with("gdr", 1),
                        ),
                    );
                }
                None => *nic_skipped += 1,
            }
            return;
        }
        e.init("link_speed", consts::pcie_speed_str(model.pcie_gen));
        e.init("link_width", 16);
    }
    for c in e.children.iter_mut() {
        fill(c, model, sorted, dev_of, nic_speed, nic_i, nic_skipped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn cube_mesh_has_six_links_per_gpu() {
        for g in 0..8 {
            let n: u32 = CUBE_MESH
                .iter()
                .filter(|(a, b, _)| *a == g || *b == g)
                .map(|x| x.2)
                .sum();
            assert_eq!(n, 6, "GPU {g}");
        }
    }
    #[test]
    fn speeds() {
        assert_eq!(parse_nic_speed("200G").unwrap(), 200000);
        assert_eq!(parse_nic_speed("400Gb").unwrap(), 400000);
        assert_eq!(parse_nic_speed("100000").unwrap(), 100000);
        assert!(parse_nic_speed("fast").is_err());
        assert_eq!(gpu_model("h100").unwrap().sm, 90);
        assert!(gpu_model("tpu").unwrap_err().to_string().contains("known:"));
    }
}
