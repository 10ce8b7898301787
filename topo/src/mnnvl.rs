//! NVLink domains that span hosts (multi-node NVLink, "MNNVL": GB200/GB300 NVL72 racks).
//!
//! What NCCL 2.30.7 learns from NVML's GPU fabric information (`nvmlDeviceGetGpuFabricInfoV`,
//! read in `src/init.cc` `fillInfo`): each GPU's cluster UUID, clique id and fabric state. Ranks
//! whose GPUs share a cluster UUID are one NVLink domain; those that also share the clique id
//! are one clique, and a communicator with MNNVL on fuses its topology across the clique
//! (`src/mnnvl.cc` `ncclMnnvlCheck`, `src/graph/topo.cc` `ncclTopoGetSystem`).
//!
//! A simulated host has no NVML, so the fabric information is derived here: a host whose GPUs'
//! NVLinks go to NVSwitches that are not devices of the host (NCCL writes the target of such a
//! link as the bus id `fffffff:ff...`, "not visible, assuming NVSwitch", `src/graph/xml.cc`
//! `ncclTopoGetXmlFromGpu`) is a tray of a rack-scale NVLink fabric. Consecutive such hosts form
//! domains of up to [`DEFAULT_DOMAIN_GPUS`] GPUs (a GB200/GB300 NVL72 rack), or of the size the
//! user asks for; each domain gets its own cluster UUID and the clique id real GB200 racks
//! report (`0x7ffe`, the same on every rack: only the UUID tells racks apart).

use crate::error::{Result, TopoError};
use crate::xml::XmlElement;

/// `NVML_GPU_FABRIC_STATE_COMPLETED`: the GPU has joined its fabric.
pub const FABRIC_STATE_COMPLETED: u32 = 3;

/// The clique id every GPU of a GB200 NVL72 rack reports (NVIDIA/nccl issue #1769:
/// `cliqueId 0x7ffe state 3 healthMask 0xaa`).
pub const RACK_CLIQUE_ID: u32 = 0x7ffe;

/// The health mask the same report shows.
pub const RACK_HEALTH_MASK: u32 = 0xaa;

/// GPUs of one NVLink domain unless told otherwise: one NVL72 rack.
pub const DEFAULT_DOMAIN_GPUS: usize = 72;

/// NCCL's PCI class of an NVSwitch (`PCI_NVSWITCH_CLASS`).
const NVSWITCH_CLASS: &str = "0x068000";

/// One GPU's fabric information as NVML reports it (`nvmlGpuFabricInfoV_t`, the fields NCCL
/// reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct FabricInfo {
    /// The cluster UUID as the two 64-bit halves NCCL prints (`%lx.%lx`).
    pub cluster_uuid: [u64; 2],
    /// The clique id.
    pub clique_id: u32,
    /// The fabric state (`FABRIC_STATE_COMPLETED` once joined).
    pub state: u32,
    /// The health mask.
    pub health_mask: u32,
}

impl FabricInfo {
    /// The fabric information of the GPUs of domain `domain` (0-based): a UUID of their own,
    /// the rack clique id, state completed.
    pub fn of_domain(domain: usize) -> FabricInfo {
        FabricInfo {
            // "ncclsim" in the first half, the domain number in the second: never zero.
            cluster_uuid: [0x6e63_636c_7369_6d00, domain as u64 + 1],
            clique_id: RACK_CLIQUE_ID,
            state: FABRIC_STATE_COMPLETED,
            health_mask: RACK_HEALTH_MASK,
        }
    }

    /// The information NCCL uses after its overrides (`src/init.cc` `fillInfo`):
    /// `NCCL_MNNVL_UUID` sets both UUID halves to its value; `NCCL_MNNVL_CLIQUE_ID` replaces the
    /// clique id, -2 meaning a hash of the rack's chassis serial number (here: of the domain's
    /// UUID, since a domain is a rack).
    pub fn with_overrides(mut self, settings: &crate::settings::MnnvlSettings) -> FabricInfo {
        let rack = self.cluster_uuid;
        if let Some(u) = settings.uuid {
            self.cluster_uuid = [u as u64, u as u64];
        }
        match settings.clique_id {
            Some(-2) => self.clique_id = rack_hash(rack),
            Some(c) => self.clique_id = c as u32,
            None => {}
        }
        self
    }

    /// Whether the UUID is unset (NCCL then turns MNNVL off).
    pub fn uuid_is_zero(&self) -> bool {
        self.cluster_uuid == [0, 0]
    }
}

/// A 32-bit hash standing for NCCL's hash of the rack serial: equal for equal racks.
fn rack_hash(uuid: [u64; 2]) -> u32 {
    let h = crate::hash::fnv1a_parts(
        crate::hash::FNV1A_BASIS,
        [&uuid[0].to_le_bytes()[..], &uuid[1].to_le_bytes()],
    );
    (h ^ (h >> 32)) as u32
}

/// Whether a GPU of `root` has an NVLink to an NVSwitch outside the host (target class NVSwitch
/// and NCCL's "not visible" bus id, which starts with `fffffff`).
pub fn fabric_attached(root: &XmlElement) -> bool {
    let mut found = false;
    root.walk(&mut |e, _| {
        if e.name == "nvlink"
            && e.get("tclass")
                .is_some_and(|c| c.trim().eq_ignore_ascii_case(NVSWITCH_CLASS))
            && e.get("target")
                .is_some_and(|t| t.trim().to_ascii_lowercase().starts_with("fffffff"))
        {
            found = true;
        }
    });
    found
}

/// Whether a GPU of `root` has an NVLink to any NVSwitch (the ones a domain can be built of).
pub fn has_nvswitch_links(root: &XmlElement) -> bool {
    let mut found = false;
    root.walk(&mut |e, _| {
        if e.name == "nvlink"
            && e.get("tclass")
                .is_some_and(|c| c.trim().eq_ignore_ascii_case(NVSWITCH_CLASS))
        {
            found = true;
        }
    });
    found
}

/// How hosts are grouped into NVLink domains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NvlDomains {
    /// Hosts attached to an external NVSwitch fabric form domains of up to 72 GPUs; others
    /// have no fabric information.
    #[default]
    Auto,
    /// Every host with NVLinks to NVSwitches is in a domain of this many GPUs.
    Gpus(usize),
    /// No host reports fabric information (what a machine without an NVLink fabric manager,
    /// or a simulated one whose NVML reports none, shows NCCL).
    None,
}

/// Which identity the NICs of hosts built from one topology file get when the hosts' XMLs are
/// fused into one multi-node NVLink system.
///
/// NCCL 2.30.7 takes a `<net>`'s `guid` as the identity of the NIC's ASIC (`src/graph/topo.cc`
/// `ncclTopoAddNet`: `net.asic`), and during the search takes a channel's bandwidth from every
/// NET with the same ASIC and port (`src/graph/search.cc` `ncclTopoSearchRecNet`), on a system
/// that, for a clique, holds every host's NICs (`ncclTopoGetSystem` fuses the ranks' XMLs, each
/// host's nodes keyed by its `host_hash`, NET ids by `NCCL_TOPO_ID(systemId, dev)`). Without a
/// topology file the GUID comes from the net plugin (`ncclTopoFillNet` via
/// `xmlInitAttrUint64(netNode, "guid", props.guid)`; the IB plugin reports the HCA's node GUID),
/// so on real trays every host's NICs are distinct ASICs. Only a topology file that carries
/// `guid` attributes overrides it (`xmlInitAttr` keeps an attribute already present), so the same
/// file given to every host (`NCCL_TOPO_FILE`) makes every host's NIC k one ASIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NicGuids {
    /// Real hardware: a GUID a host shares with an earlier host of the clique (its file is a copy
    /// of that host's) is replaced, on that host, by one of its own; NICs of one host that share
    /// a GUID (ports of one ASIC) still share it.
    #[default]
    PerHost,
    /// The GUIDs of each host's file as written, as NCCL reads them when every host is given
    /// that file as `NCCL_TOPO_FILE`.
    AsFile,
}

/// The GUID host `host_hash` gives its NIC whose file says `guid` when an earlier host of the
/// clique already has that GUID (SplitMix64 of both: any value works as long as it is the same
/// for every rank of the host and unlikely to equal another NIC's).
pub fn host_guid(guid: u64, host_hash: u64) -> u64 {
    let mut z = guid ^ host_hash.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One host as the domain assignment sees it.
#[derive(Debug, Clone, Copy)]
pub struct HostShape<'a> {
    /// Where the host came from (for errors).
    pub source: &'a str,
    /// Its GPUs.
    pub gpus: usize,
    /// Whether its NVLinks go to an external NVSwitch fabric ([`fabric_attached`]).
    pub attached: bool,
    /// Whether it has NVLinks to NVSwitches at all ([`has_nvswitch_links`]).
    pub nvswitch: bool,
}

/// The fabric information of each host, in host order: consecutive eligible hosts are packed
/// into domains of at most the domain's GPU count (a host never straddles two domains).
pub fn assign_domains(hosts: &[HostShape], domains: NvlDomains) -> Result<Vec<Option<FabricInfo>>> {
    let size = match domains {
        NvlDomains::None => return Ok(vec![None; hosts.len()]),
        NvlDomains::Auto => DEFAULT_DOMAIN_GPUS,
        NvlDomains::Gpus(0) => {
            return Err(TopoError::Model(
                "--nvl-domain 0: an NVLink domain needs at least one GPU".into(),
            ))
        }
        NvlDomains::Gpus(n) => n,
    };
    let mut out = Vec::with_capacity(hosts.len());
    let mut domain = 0usize;
    let mut used = 0usize;
    for h in hosts {
        let eligible = match domains {
            NvlDomains::None => false,
            NvlDomains::Auto => h.attached,
            NvlDomains::Gpus(_) => {
                if !h.nvswitch {
                    return Err(TopoError::Model(format!(
                        "--nvl-domain {size}: {} has no NVLink to an NVSwitch, so its GPUs cannot join an NVLink domain",
                        h.source
                    )));
                }
                true
            }
        };
        if !eligible {
            out.push(None);
            continue;
        }
        if h.gpus > size {
            return Err(TopoError::Model(format!(
                "--nvl-domain {size}: {} has {} GPUs, more than a domain holds",
                h.source, h.gpus
            )));
        }
        if used + h.gpus > size {
            domain += 1;
            used = 0;
        }
        used += h.gpus;
        out.push(Some(FabricInfo::of_domain(domain)));
    }
    Ok(out)
}

/// `--nvl-domain`'s value (or `NCCLSIM_NVL_DOMAIN`'s) as a grouping: none given is
/// [`NvlDomains::Auto`].
pub fn domains_of(gpus: Option<usize>) -> NvlDomains {
    gpus.map_or(NvlDomains::Auto, NvlDomains::Gpus)
}

/// The fabric information of node `node` of a cluster whose nodes are all copies of `root`
/// (`gpus` GPUs each), as [`assign_domains`] gives it: what NVML reports on that node's GPUs.
/// The assignment packs hosts in order, so nodes after `node` do not change it.
pub fn node_fabric(
    root: &XmlElement,
    source: &str,
    gpus: usize,
    node: usize,
    domains: NvlDomains,
) -> Result<Option<FabricInfo>> {
    let shape = HostShape {
        source,
        gpus,
        attached: fabric_attached(root),
        nvswitch: has_nvswitch_links(root),
    };
    let hosts = vec![shape; node + 1];
    Ok(assign_domains(&hosts, domains)?.pop().flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tray(attached: bool) -> HostShape<'static> {
        HostShape {
            source: "t.xml",
            gpus: 4,
            attached,
            nvswitch: true,
        }
    }

    #[test]
    fn trays_pack_into_racks_of_72_gpus() {
        let hosts = vec![tray(true); 40];
        let f = assign_domains(&hosts, NvlDomains::Auto).unwrap();
        let dom = |h: usize| f[h].unwrap().cluster_uuid[1];
        assert_eq!(
            (dom(0), dom(17), dom(18), dom(35), dom(36)),
            (1, 1, 2, 2, 3)
        );
        assert!(f.iter().all(|x| x.unwrap().clique_id == 0x7ffe));
        let f = assign_domains(&hosts[..4], NvlDomains::Gpus(8)).unwrap();
        assert_eq!(
            f.iter()
                .map(|x| x.unwrap().cluster_uuid[1])
                .collect::<Vec<_>>(),
            [1, 1, 2, 2]
        );
        // Hosts on a local NVSwitch only join a domain when asked.
        let f = assign_domains(&[tray(false), tray(false)], NvlDomains::Auto).unwrap();
        assert_eq!(f, [None, None]);
        let err = assign_domains(&hosts[..1], NvlDomains::Gpus(2)).unwrap_err();
        assert!(err.to_string().contains("t.xml has 4 GPUs"), "{err}");
        let pcie = HostShape {
            nvswitch: false,
            ..tray(false)
        };
        let err = assign_domains(&[pcie], NvlDomains::Gpus(8)).unwrap_err();
        assert!(
            err.to_string().contains("no NVLink to an NVSwitch"),
            "{err}"
        );
    }

    #[test]
    fn a_node_gets_the_domain_of_its_place_in_the_cluster() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../topologies/gb200-nvl72-tray.xml"
        );
        let tray = crate::read_xml(path).unwrap();
        let of = |node, d| node_fabric(&tray, path, 4, node, d).unwrap();
        // 18 trays of 4 GPUs to a rack: trays 0-17 share a UUID, tray 18 starts the next.
        let uuid = |node| of(node, NvlDomains::Auto).unwrap().cluster_uuid;
        assert_eq!(uuid(0), uuid(17));
        assert_ne!(uuid(17), uuid(18));
        assert_ne!(uuid(0), [0, 0]);
        assert_eq!(of(1, NvlDomains::Gpus(4)).unwrap().cluster_uuid[1], 2);
        assert_eq!(of(0, NvlDomains::None), None);
        let a100 = concat!(env!("CARGO_MANIFEST_DIR"), "/../topologies/dgx-a100.xml");
        let node = crate::read_xml(a100).unwrap();
        assert_eq!(
            node_fabric(&node, a100, 8, 1, NvlDomains::Auto).unwrap(),
            None
        );
    }

    #[test]
    fn overrides_replace_uuid_and_clique() {
        let s = crate::settings::MnnvlSettings {
            uuid: Some(5),
            clique_id: Some(-2),
            ..Default::default()
        };
        let a = FabricInfo::of_domain(0).with_overrides(&s);
        let b = FabricInfo::of_domain(1).with_overrides(&s);
        assert_eq!(a.cluster_uuid, [5, 5]);
        assert_ne!(a.clique_id, b.clique_id, "one clique per rack");
        let s = crate::settings::MnnvlSettings {
            clique_id: Some(7),
            ..Default::default()
        };
        assert_eq!(FabricInfo::of_domain(3).with_overrides(&s).clique_id, 7);
    }

    #[test]
    fn only_invisible_nvswitch_targets_are_a_fabric() {
        let x = |target: &str| {
            crate::xml::parse(
                &format!(
                    "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\"><gpu dev=\"0\"><nvlink target=\"{target}\" count=\"18\" tclass=\"0x068000\"/></gpu></pci></cpu></system>"
                ),
                "x.xml",
            )
            .unwrap()
        };
        assert!(fabric_attached(&x("fffffff:ff:ff.0")));
        assert!(!fabric_attached(&x("0000:1a:00.0")));
        assert!(has_nvswitch_links(&x("0000:1a:00.0")));
    }
}
