//! Devices from an NCCL topology XML: what each `<gpu>` of the file looks like to a program.
//!
//! The topology says where a GPU sits (PCI bus id, the PCI switches above it, its CPU/NUMA
//! node, its NVLinks and what they reach) and which board it is (PCI device id, `sm`); the GPU
//! model profile of the `topo` crate gives the name and memory size, and `compute_model::spec` the
//! per-board numbers CUDA reports (multiprocessors, clocks, caches, bandwidths).
//!
//! The run environment ([`run_env::RunEnv`]) picks the file: `NCCLSIM_TOPO`, else
//! `NCCL_TOPO_FILE`, else the bundled DGX A100 node (`topologies/dgx-a100.xml`). `NCCLSIM_NODE`
//! says which node of a multi-node run this process is on (UUIDs differ per node),
//! `NCCLSIM_GPU` names a GPU model to complete skeleton files that have no `<gpu>` elements.

use crate::device::{synthetic_uuid, DeviceDesc, NvLink, NvLinkPeer, PciBusId};
use crate::error::{CoreError, Result};
use topo::xml::XmlElement;

pub use fake_cuda_abi::{BUNDLED_NAME, BUNDLED_XML};

/// Which topology file and node the run environment names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopologyChoice {
    /// Path of the XML (`NCCLSIM_TOPO`, else `NCCL_TOPO_FILE`); `None` for the bundled node.
    pub file: Option<String>,
    /// Node index of this process (`NCCLSIM_NODE`, default 0).
    pub node: u32,
    /// GPU model for skeleton files (`NCCLSIM_GPU`).
    pub gpu_model: Option<String>,
    /// GPUs per NVLink domain (`NCCLSIM_NVL_DOMAIN`); `None`: as the hardware groups them.
    pub nvl_domain: Option<usize>,
}

impl TopologyChoice {
    /// The node file, node and GPU model of `env`.
    pub fn of(env: &run_env::RunEnv) -> TopologyChoice {
        TopologyChoice {
            file: env.topo.as_ref().map(|p| p.to_string_lossy().into_owned()),
            node: env.node_or_zero(),
            gpu_model: env.gpu_model.clone(),
            nvl_domain: env.nvl_domain,
        }
    }

    /// The devices of the chosen node, in CUDA device order.
    pub fn devices(&self) -> Result<Vec<DeviceDesc>> {
        let bad = |e: topo::TopoError| CoreError::Topology(e.to_string());
        let (text, source) = match &self.file {
            None => (BUNDLED_XML.to_string(), BUNDLED_NAME.to_string()),
            Some(f) => (
                std::fs::read_to_string(f).map_err(|e| CoreError::Topology(format!("{f}: {e}")))?,
                f.clone(),
            ),
        };
        let xml = topo::xml::parse(&text, &source).map_err(bad)?;
        let gpu = match &self.gpu_model {
            Some(m) => Some(topo::profiles::gpu_model(m).map_err(bad)?),
            None => None,
        };
        let completion = topo::Completion {
            gpu,
            nic_speed_mbps: None,
        };
        let (prepared, _notes) = topo::cluster::prepare(&xml, &source, completion).map_err(bad)?;
        let stem = std::path::Path::new(&source)
            .file_stem()
            .map_or(source.clone(), |s| s.to_string_lossy().into_owned());
        let mut devices = devices_from_xml(
            &prepared,
            &format!("{stem}/node{}", self.node),
            &source,
            gpu,
        )?;
        let fabric = self.fabric(&xml, &source, devices.len())?;
        for d in &mut devices {
            d.fabric = fabric;
        }
        Ok(devices)
    }

    /// The fabric of this node when every node of the job is a copy of `root` with `gpus`
    /// GPUs, grouped into NVLink domains as `ncclsim plan --nvl-domain` groups them
    /// ([`topo::mnnvl::node_fabric`]).
    fn fabric(
        &self,
        root: &XmlElement,
        source: &str,
        gpus: usize,
    ) -> Result<Option<fake_cuda_abi::CFabricInfo>> {
        let domains = topo::mnnvl::domains_of(self.nvl_domain);
        let f = topo::mnnvl::node_fabric(root, source, gpus, self.node as usize, domains).map_err(
            |e| match self.nvl_domain {
                Some(n) => CoreError::Topology(format!(
                    "GPU fabric ({}={n}): {e}",
                    run_env::names::NVL_DOMAIN
                )),
                None => CoreError::Topology(format!("GPU fabric: {e}")),
            },
        )?;
        Ok(f.map(|f| fake_cuda_abi::CFabricInfo {
            cluster_uuid: f.cluster_uuid,
            clique_id: f.clique_id,
            state: f.state,
            health_mask: f.health_mask,
            reserved: 0,
        }))
    }
}

/// A `<gpu>` found while walking the tree, with where it sits.
struct Found<'a> {
    gpu: &'a XmlElement,
    pci: &'a XmlElement,
    ancestors: Vec<PciBusId>,
    numa_node: i32,
    order: usize,
}

fn hex(e: &XmlElement, key: &str) -> Option<u32> {
    let v = e.get(key)?;
    u32::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

fn collect<'a>(
    e: &'a XmlElement,
    ancestors: &mut Vec<PciBusId>,
    numa_node: i32,
    out: &mut Vec<Found<'a>>,
) {
    for c in &e.children {
        match c.name.as_str() {
            "cpu" => {
                let numa = c
                    .get("numaid")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(numa_node);
                collect(c, &mut Vec::new(), numa, out);
            }
            "pci" => {
                if let Some(g) = c.subs("gpu").next() {
                    let order = out.len();
                    out.push(Found {
                        gpu: g,
                        pci: c,
                        ancestors: ancestors.clone(),
                        numa_node,
                        order,
                    });
                }
                let id = c.get("busid").and_then(|b| PciBusId::parse(b).ok());
                if let Some(id) = id {
                    ancestors.push(id);
                }
                collect(c, ancestors, numa_node, out);
                if id.is_some() {
                    ancestors.pop();
                }
            }
            _ => collect(c, ancestors, numa_node, out),
        }
    }
}

/// The devices of one node's XML, ordered by `<gpu dev=...>` (document order otherwise).
/// `uuid_label` makes UUIDs distinct per node; `fallback` is the model for GPUs whose PCI
/// device id the profiles do not know.
pub fn devices_from_xml(
    root: &XmlElement,
    uuid_label: &str,
    source: &str,
    fallback: Option<&'static topo::profiles::GpuModel>,
) -> Result<Vec<DeviceDesc>> {
    let mut found = Vec::new();
    collect(root, &mut Vec::new(), -1, &mut found);
    if found.is_empty() {
        return Err(CoreError::Topology(format!(
            "{source}: no <gpu> element (set NCCLSIM_GPU to complete a skeleton file)"
        )));
    }
    found.sort_by_key(|f| {
        (
            f.gpu
                .get("dev")
                .and_then(|d| d.parse::<usize>().ok())
                .unwrap_or(usize::MAX),
            f.order,
        )
    });
    let gpu_buses: Vec<Option<PciBusId>> = found
        .iter()
        .map(|f| f.pci.get("busid").and_then(|b| PciBusId::parse(b).ok()))
        .collect();
    let mut devices = Vec::with_capacity(found.len());
    for (f, bus) in found.iter().zip(&gpu_buses) {
        let at = f.gpu.location(source);
        let pci = bus.ok_or_else(|| {
            CoreError::Topology(format!(
                "{at}: the <pci> above this <gpu> has no valid busid"
            ))
        })?;
        let device_id = hex(f.pci, "device").unwrap_or(0);
        let model = topo::profiles::gpu_by_pci_device(device_id)
            .or(fallback)
            .or_else(|| topo::profiles::gpu_by_sm(f.gpu.get("sm")?.parse().ok()?))
            .ok_or_else(|| {
                CoreError::Topology(format!(
                    "{at}: unknown GPU (PCI device {device_id:#06x}, sm {}); set NCCLSIM_GPU",
                    f.gpu.get("sm").unwrap_or("?")
                ))
            })?;
        let sm_version = f
            .gpu
            .get("sm")
            .and_then(|s| s.parse().ok())
            .unwrap_or(model.sm as u32);
        let mut nvlinks = Vec::new();
        for l in f.gpu.subs("nvlink") {
            let target = l
                .get("target")
                .and_then(|t| PciBusId::parse(t).ok())
                .ok_or_else(|| {
                    CoreError::Topology(format!(
                        "{}: <nvlink> without a valid target",
                        l.location(source)
                    ))
                })?;
            let count: u32 = l.get("count").and_then(|c| c.parse().ok()).unwrap_or(1);
            let peer = if let Some(i) = gpu_buses.iter().position(|b| *b == Some(target)) {
                NvLinkPeer::Gpu(i)
            } else if l.get("tclass").is_some_and(|c| c.starts_with("0x0680")) {
                NvLinkPeer::Switch
            } else {
                NvLinkPeer::Cpu
            };
            for _ in 0..count {
                nvlinks.push(NvLink {
                    remote: target,
                    peer,
                });
            }
        }
        // The numbers CUDA reports that a topology file does not carry: the board's.
        let facts = compute_model::spec(model.keys[0]);
        devices.push(DeviceDesc {
            name: model.name.to_string(),
            uuid: synthetic_uuid(uuid_label, pci),
            pci,
            spec: facts,
            pci_device_id: device_id,
            pci_subsystem_id: (hex(f.pci, "subsystem_device").unwrap_or(0) << 16)
                | hex(f.pci, "subsystem_vendor").unwrap_or(0),
            sm_version,
            memory_bytes: u64::from(model.mem_gib) << 30,
            multiprocessor_count: facts.sms,
            clock_khz: facts.clock_mhz * 1000,
            memory_clock_khz: facts.memory_clock_mhz * 1000,
            memory_bus_width_bits: facts.bus_width_bits,
            l2_cache_bytes: facts.l2_mib << 20,
            shared_mem_per_multiprocessor: facts.smem_per_sm_kib << 10,
            shared_mem_per_block_optin: (facts.smem_per_sm_kib - 1) << 10,
            memory_bandwidth_gbps: facts.memory_gbps,
            host_link_bandwidth_gbps: facts.host_link_gbps,
            nvlink_bandwidth_gbps: f64::from(topo::consts::nvlink_bw(
                sm_version as i32,
                topo::NcclVersion::DEFAULT,
            )),
            numa_node: f.numa_node,
            pci_ancestors: f.ancestors.clone(),
            nvlinks,
            fabric: None,
        });
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundled() -> Vec<DeviceDesc> {
        TopologyChoice::default().devices().unwrap()
    }

    #[test]
    fn bundled_node_is_a_dgx_a100() {
        let d = bundled();
        assert_eq!(d.len(), 8);
        let buses: Vec<u32> = d.iter().map(|x| x.pci.bus).collect();
        assert_eq!(buses, [0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd]);
        // PCI id 0x20b0 is the 40 GB board of the original DGX A100.
        assert_eq!(d[0].name, "NVIDIA A100-SXM4-40GB");
        assert_eq!(d[0].sm_version, 80);
        assert_eq!(d[0].memory_bytes, 40 << 30);
        assert_eq!(d[0].multiprocessor_count, 108);
        assert_eq!(d[0].pci_device_id, 0x20b0);
        // 12 NVLinks, 2 to each of the 6 NVSwitches.
        assert_eq!(d[0].nvlinks.len(), 12);
        assert!(d[0].nvlinks.iter().all(|l| l.peer == NvLinkPeer::Switch));
        assert_eq!(d[0].nvlinks[0].remote.bus, 0xc4);
        assert_eq!(d[0].nvlinks[11].remote.bus, 0xc9);
        // GPU 0 sits below 0000:01:00.0 -> 0000:05:00.0 on NUMA node 3.
        assert_eq!(d[0].numa_node, 3);
        assert_eq!(
            d[0].pci_ancestors.iter().map(|p| p.bus).collect::<Vec<_>>(),
            [0x01, 0x05]
        );
    }

    #[test]
    fn boards_get_their_datasheet_power_limits() {
        // The TDP of each board (NVIDIA's datasheets), by the model its devices are built as.
        let tdp = |name: &str| {
            let m = topo::profiles::GPU_MODELS
                .iter()
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("no GPU model named {name}"));
            compute_model::spec(m.keys[0]).tdp_watts
        };
        assert_eq!(tdp("NVIDIA A100-SXM4-40GB"), 400);
        assert_eq!(tdp("NVIDIA A100-SXM4-80GB"), 400);
        assert_eq!(tdp("NVIDIA A100 80GB PCIe"), 300);
        assert_eq!(tdp("NVIDIA H100 80GB HBM3"), 700);
        assert_eq!(tdp("NVIDIA H200"), 700);
        assert_eq!(tdp("Tesla V100-SXM2-32GB"), 300);
        assert_eq!(tdp("NVIDIA B200"), 1000);
        assert_eq!(tdp("NVIDIA GeForce RTX 4090"), 450);
        assert_eq!(bundled()[0].spec.tdp_watts, 400);
    }

    #[test]
    fn nodes_get_distinct_uuids() {
        let n0 = bundled();
        let n1 = TopologyChoice {
            node: 1,
            ..TopologyChoice::default()
        }
        .devices()
        .unwrap();
        assert_ne!(n0[0].uuid, n1[0].uuid);
        assert_eq!(n0[0].pci, n1[0].pci);
    }

    #[test]
    fn every_bundled_topology_with_gpus_loads() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../topologies");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "xml") {
                continue;
            }
            let choice = TopologyChoice {
                file: Some(path.to_string_lossy().into_owned()),
                ..TopologyChoice::default()
            };
            let devices = choice
                .devices()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!devices.is_empty(), "{}", path.display());
            for d in &devices {
                assert!(d.memory_bytes > 0 && d.multiprocessor_count > 0, "{d:?}");
            }
        }
    }

    #[test]
    fn gpu_to_gpu_nvlinks_name_the_peer() {
        let xml = r#"<system version="1"><cpu numaid="0">
            <pci busid="0000:01:00.0" class="0x030000" device="0x1db1">
              <gpu dev="0" sm="70"><nvlink target="0000:02:00.0" count="2" tclass="0x030200"/></gpu></pci>
            <pci busid="0000:02:00.0" class="0x030000" device="0x1db1">
              <gpu dev="1" sm="70"><nvlink target="0000:01:00.0" count="2" tclass="0x030200"/></gpu></pci>
            </cpu></system>"#;
        let root = topo::xml::parse(xml, "t.xml").unwrap();
        let d = devices_from_xml(&root, "t", "t.xml", None).unwrap();
        assert_eq!(d[0].name, "Tesla V100-SXM2-32GB");
        assert_eq!(d[0].nvlinks.len(), 2);
        assert_eq!(d[0].nvlinks[0].peer, NvLinkPeer::Gpu(1));
        assert_eq!(d[1].nvlinks[1].peer, NvLinkPeer::Gpu(0));
    }

    #[test]
    fn errors_name_the_problem() {
        let choice = TopologyChoice {
            file: Some("/nonexistent/topo.xml".into()),
            ..TopologyChoice::default()
        };
        let e = choice.devices().unwrap_err().to_string();
        assert!(e.contains("/nonexistent/topo.xml"), "{e}");
        let root = topo::xml::parse("<system version=\"1\"><cpu/></system>", "e.xml").unwrap();
        let e = devices_from_xml(&root, "e", "e.xml", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no <gpu>"), "{e}");
    }
}
