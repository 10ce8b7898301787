//! Device descriptions and the visible-device list.
//!
//! A [`DeviceDesc`] holds what a program can ask about a GPU. For now the only source is the
//! bundled DGX A100 node ([`dgx_a100`]); the topology crate will later build the same structs
//! from an NCCL topology XML, which is why this struct knows nothing about XML.

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
        let h: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "GPU-{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// A stable made-up UUID for a device, derived from the node name and the PCI address so that
/// every process of a run sees the same UUIDs.
pub fn synthetic_uuid(node: &str, pci: PciBusId) -> [u8; 16] {
    // Two FNV-1a passes with different seeds give 16 well-mixed bytes; not cryptographic, only
    // stable and distinct per (node, bus id).
    let text = format!("{node}/{pci}");
    let fnv = |seed: u64| {
        text.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    out[8..].copy_from_slice(&fnv(0x8422_2325_cbf2_9ce4).to_be_bytes());
    // Mark it as an RFC 4122 version-4 style UUID so tools that parse UUIDs accept it.
    out[6] = (out[6] & 0x0f) | 0x40;
    out[8] = (out[8] & 0x3f) | 0x80;
    out
}

/// The bundled node: a DGX A100 with eight A100-SXM4-80GB at their public PCI addresses.
pub fn dgx_a100() -> Vec<DeviceDesc> {
    const BUSES: [u32; 8] = [0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd];
    BUSES
        .iter()
        .map(|&bus| {
            let pci = PciBusId {
                domain: 0,
                bus,
                device: 0,
                function: 0,
            };
            DeviceDesc {
                name: "NVIDIA A100-SXM4-80GB".to_string(),
                uuid: synthetic_uuid("dgx-a100", pci),
                pci,
                sm_version: 80,
                memory_bytes: 80 << 30,
                multiprocessor_count: 108,
                clock_khz: 1_410_000,
                memory_clock_khz: 1_593_000,
                memory_bus_width_bits: 5120,
                l2_cache_bytes: 40 << 20,
                shared_mem_per_multiprocessor: 164 << 10,
                shared_mem_per_block_optin: 163 << 10,
                memory_bandwidth_gbps: 2039.0,
                host_link_bandwidth_gbps: 24.0,
            }
        })
        .collect()
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
        assert_eq!(devs[0].memory_bytes, 80 * 1024 * 1024 * 1024);
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
}
