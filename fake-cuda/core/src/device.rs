//! Device descriptions and the visible-device list.
//!
//! A [`DeviceDesc`] holds what a program can ask about a GPU: CUDA's properties and NVML's view
//! of where it sits (PCI ancestors, NUMA node, NVLinks). [`crate::topology`] builds them from
//! an NCCL topology XML; this module knows nothing about XML.

use crate::error::{CoreError, Result};

/// A PCI address `dddd:bb:dd.f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciBusId {
    /// PCI domain.
    pub domain: u32,
    /// Bus number.
    pub bus: u32,
    /// Device number.
    pub device: u32,
    /// Function number.
    pub function: u32,
}

impl PciBusId {
    /// Parses `dddd:bb:dd.f` (hex, as NCCL's XML and `nvidia-smi` print it).
    pub fn parse(text: &str) -> Result<PciBusId> {
        let bad = || CoreError::InvalidValue(format!("PCI bus id {text:?} is not dddd:bb:dd.f"));
        let (domain, rest) = text.split_once(':').ok_or_else(bad)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
        let (device, function) = rest.split_once('.').ok_or_else(bad)?;
        let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
        Ok(PciBusId {
            domain: hex(domain)?,
            bus: hex(bus)?,
            device: hex(device)?,
            function: hex(function)?,
        })
    }
}

impl std::fmt::Display for PciBusId {
    /// The form `cudaDeviceGetPCIBusId` returns: `0000:07:00.0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// What the fake driver reports about one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceDesc {
    /// Marketing name, as `cudaDeviceProp::name` and NVML report it.
    pub name: String,
    /// 16-byte UUID (`cudaDeviceProp::uuid`, NVML `GPU-...`).
    pub uuid: [u8; 16],
    /// PCI address.
    pub pci: PciBusId,
    /// The board's numbers and compute peaks (`compute_model::spec` of its model).
    pub spec: compute_model::GpuSpec,
    /// Compute capability times ten (80 for sm_80).
    pub sm_version: u32,
    /// Device memory in bytes; allocations past it fail.
    pub memory_bytes: u64,
    /// Streaming multiprocessors.
    pub multiprocessor_count: u32,
    /// Boost clock in kHz.
    pub clock_khz: u32,
    /// Memory clock in kHz.
    pub memory_clock_khz: u32,
    /// Memory bus width in bits.
    pub memory_bus_width_bits: u32,
    /// L2 cache in bytes.
    pub l2_cache_bytes: u32,
    /// Shared memory per multiprocessor in bytes.
    pub shared_mem_per_multiprocessor: u32,
    /// Largest opt-in shared memory per block in bytes.
    pub shared_mem_per_block_optin: u32,
    /// Device memory bandwidth in GB/s (prices device-to-device copies and memsets).
    pub memory_bandwidth_gbps: f64,
    /// Host link bandwidth in GB/s (prices host-to-device and device-to-host copies).
    pub host_link_bandwidth_gbps: f64,
    /// Bandwidth of one NVLink in GB/s (NCCL's per-link figure for the compute capability;
    /// prices copies between GPUs with [`DeviceDesc::nvlinks`]).
    pub nvlink_bandwidth_gbps: f64,
    /// PCI device id (vendor 0x10de), e.g. 0x20b0.
    pub pci_device_id: u32,
    /// PCI subsystem id as NVML packs it: subsystem device << 16 | subsystem vendor.
    pub pci_subsystem_id: u32,
    /// NUMA node of the CPU the GPU hangs off (-1 if unknown).
    pub numa_node: i32,
    /// PCI bridges/switches above the GPU, outermost first.
    pub pci_ancestors: Vec<PciBusId>,
    /// NVLinks in link-index order (a `count="2"` link of the XML is two entries).
    pub nvlinks: Vec<NvLink>,
    /// The NVLink fabric spanning hosts the GPU's node is part of, if any.
    pub fabric: Option<fake_cuda_abi::CFabricInfo>,
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvLink {
    /// PCI address of the remote end.
    pub remote: PciBusId,
    /// What the remote end is.
    pub peer: NvLinkPeer,
}

/// The far end of an NVLink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvLinkPeer {
    /// Another GPU of the node (physical index).
    Gpu(usize),
    /// An NVSwitch.
    Switch,
    /// A CPU (NVLink to POWER9 / C2C-style hosts).
    Cpu,
}

/// How close two GPUs are in the PCI tree (NVML's `nvmlGpuTopologyLevel_t` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum TopologyLevel {
    /// The same GPU.
    Internal = 0,
    /// Both directly below one PCI switch.
    Single = 10,
    /// Below one PCI switch tree, through several switches.
    Multiple = 20,
    /// Below one host bridge (not modelled apart from [`TopologyLevel::Node`]).
    HostBridge = 30,
    /// On one NUMA node (CPU), through different root ports.
    Node = 40,
    /// Across CPUs.
    System = 50,
}

/// Where the PCI paths of two GPUs meet.
pub fn common_ancestor(a: &DeviceDesc, b: &DeviceDesc) -> TopologyLevel {
    if a.pci == b.pci {
        return TopologyLevel::Internal;
    }
    if a.numa_node != b.numa_node {
        return TopologyLevel::System;
    }
    let shared = a
        .pci_ancestors
        .iter()
        .zip(&b.pci_ancestors)
        .take_while(|(x, y)| x == y)
        .count();
    if shared == 0 {
        TopologyLevel::Node
    } else if shared == a.pci_ancestors.len() && shared == b.pci_ancestors.len() {
        TopologyLevel::Single
    } else {
        TopologyLevel::Multiple
    }
}

impl DeviceDesc {
    /// Compute capability major version.
    pub fn sm_major(&self) -> u32 {
        self.sm_version / 10
    }

    /// Compute capability minor version.
    pub fn sm_minor(&self) -> u32 {
        self.sm_version % 10
    }

    /// The UUID in NVIDIA's text form, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn uuid_string(&self) -> String {
        uuid_string(&self.uuid)
    }
}

pub use fake_cuda_abi::uuid_string;

/// A stable made-up UUID for a device, derived from the node name and the PCI address so that
/// every process of a run sees the same UUIDs.
pub fn synthetic_uuid(node: &str, pci: PciBusId) -> [u8; 16] {
    // Two FNV-1a passes with different seeds give 16 well-mixed bytes; not cryptographic, only
    // stable and distinct per (node, bus id).
    let text = format!("{node}/{pci}");
    let fnv = |seed: u64| topo::hash::fnv1a_parts(seed, [text.as_bytes()]);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    out[8..].copy_from_slice(&fnv(0x8422_2325_cbf2_9ce4).to_be_bytes());
    // Mark it as an RFC 4122 version-4 style UUID so tools that parse UUIDs accept it.
    out[6] = (out[6] & 0x0f) | 0x40;
    out[8] = (out[8] & 0x3f) | 0x80;
    out
}

/// The bundled node (`topologies/dgx-a100.xml`): eight A100-SXM4 behind six NVSwitches.
pub fn dgx_a100() -> Vec<DeviceDesc> {
    crate::topology::TopologyChoice::default()
        .devices()
        .expect("invariant: the bundled topology is tested to load")
}

/// Which physical devices a process sees, in ordinal order, per `CUDA_VISIBLE_DEVICES`.
///
/// As with the real driver: unset means all devices; entries are indices or (prefixes of)
/// `GPU-` UUIDs; the list stops at the first entry that is invalid, names a missing device or
/// repeats one.
pub fn visible_devices(all: &[DeviceDesc], cuda_visible_devices: Option<&str>) -> Vec<usize> {
    let Some(spec) = cuda_visible_devices else {
        return (0..all.len()).collect();
    };
    let mut out = Vec::new();
    for entry in spec.split(',') {
        let entry = entry.trim();
        let found = if let Ok(index) = entry.parse::<usize>() {
            (index < all.len()).then_some(index)
        } else if entry.len() > 4 && entry.starts_with("GPU-") {
            let matches: Vec<usize> = (0..all.len())
                .filter(|&i| all[i].uuid_string().starts_with(entry))
                .collect();
            (matches.len() == 1).then(|| matches[0])
        } else {
            None
        };
        match found {
            Some(i) if !out.contains(&i) => out.push(i),
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dgx_a100_has_eight_distinct_gpus() {
        let devs = dgx_a100();
        assert_eq!(devs.len(), 8);
        assert_eq!(devs[0].pci.to_string(), "0000:07:00.0");
        assert_eq!(devs[7].pci.to_string(), "0000:bd:00.0");
        assert_eq!(devs[3].sm_major(), 8);
        assert_eq!(devs[3].sm_minor(), 0);
        assert_eq!(devs[0].memory_bytes, 40 * 1024 * 1024 * 1024);
        let mut uuids: Vec<_> = devs.iter().map(|d| d.uuid).collect();
        uuids.dedup();
        assert_eq!(uuids.len(), 8);
        assert!(devs[0].uuid_string().starts_with("GPU-"));
        assert_eq!(devs[0].uuid_string().len(), 40);
    }

    #[test]
    fn pci_bus_id_round_trip() {
        let id = PciBusId::parse("0000:4e:00.0").unwrap();
        assert_eq!(id.bus, 0x4e);
        assert_eq!(id.to_string(), "0000:4e:00.0");
        assert!(PciBusId::parse("4e:00.0").is_err());
    }

    #[test]
    fn cuda_visible_devices_semantics() {
        let all = dgx_a100();
        assert_eq!(visible_devices(&all, None), (0..8).collect::<Vec<_>>());
        assert_eq!(visible_devices(&all, Some("3,1")), vec![3, 1]);
        assert_eq!(visible_devices(&all, Some("")), Vec::<usize>::new());
        // Stops at the first invalid, missing or repeated entry.
        assert_eq!(visible_devices(&all, Some("2,x,3")), vec![2]);
        assert_eq!(visible_devices(&all, Some("5,9,1")), vec![5]);
        assert_eq!(visible_devices(&all, Some("4,4,1")), vec![4]);
        let uuid = all[6].uuid_string();
        assert_eq!(visible_devices(&all, Some(&uuid[..12])), vec![6]);
    }

    #[test]
    fn common_ancestors_on_a_dgx_a100() {
        let d = dgx_a100();
        // GPUs 0 and 1 share the switch 0000:01:00.0 through different downstream switches.
        assert_eq!(common_ancestor(&d[0], &d[0]), TopologyLevel::Internal);
        assert_eq!(common_ancestor(&d[0], &d[1]), TopologyLevel::Multiple);
        // GPUs 0 and 2 hang off different CPUs.
        assert_eq!(common_ancestor(&d[0], &d[2]), TopologyLevel::System);
        let mut twin = d[0].clone();
        twin.pci.bus += 1;
        assert_eq!(common_ancestor(&d[0], &twin), TopologyLevel::Single);
        twin.pci_ancestors.truncate(0);
        assert_eq!(common_ancestor(&d[0], &twin), TopologyLevel::Node);
    }
}
