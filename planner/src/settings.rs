//! The NCCL settings the planner honours, as a plain struct or read from the environment with
//! NCCL's names and defaults (NCCL 2.30.7).

use topo::settings::parse_c_int;
use topo::{Result, TopoError, TopoSettings};

/// Planner settings. `Default` is NCCL's defaults.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PlannerSettings {
    /// Topology-level settings (version, P2P/GDR levels, NVB, PXN, ...).
    pub topo: TopoSettings,
    /// `NCCL_CROSS_NIC` (default 2).
    pub cross_nic: i32,
    /// `NCCL_MIN_NCHANNELS` / `NCCL_MIN_NRINGS`.
    pub min_nchannels: Option<i32>,
    /// `NCCL_MAX_NCHANNELS` / `NCCL_MAX_NRINGS`.
    pub max_nchannels: Option<i32>,
    /// `NCCL_MIN_CTAS` (config.minCTAs, default 1).
    pub min_ctas: i32,
    /// `NCCL_MAX_CTAS` (config.maxCTAs, default 64).
    pub max_ctas: i32,
    /// `NCCL_NVLS_ENABLE` (0 off, 1 on, 2 auto = multicast support).
    pub nvls_enable: i32,
    /// `NCCL_NVLS_NCHANNELS` / config.nvlsCTAs.
    pub nvls_ctas: Option<i32>,
    /// `NCCL_COLLNET_ENABLE`.
    pub collnet_enable: bool,
    /// `NCCL_COLLNET_NODE_THRESHOLD` (default 2).
    pub collnet_node_threshold: i32,
    /// `NCCL_MIN_P2P_NCHANNELS` (default 1).
    pub min_p2p_nchannels: i32,
    /// `NCCL_MAX_P2P_NCHANNELS` (default 64).
    pub max_p2p_nchannels: i32,
    /// `NCCL_P2P_PER_CHANNEL_NET_BW` (GB/s, default 14).
    pub p2p_per_channel_net_bw: i32,
    /// config.nChannelsPerNetPeer (`NCCL_NCHANNELS_PER_NET_PEER`).
    pub nchannels_per_net_peer: Option<i32>,
    /// config.maxP2pPeers.
    pub max_p2p_peers: Option<i32>,
    /// `NCCL_GRAPH_FILE`: graphs that replace the search.
    pub graph_file: Option<String>,
}

impl Default for PlannerSettings {
    fn default() -> Self {
        PlannerSettings {
            topo: TopoSettings::default(),
            cross_nic: 2,
            min_nchannels: None,
            max_nchannels: None,
            min_ctas: 1,
            max_ctas: 64,
            nvls_enable: 2,
            nvls_ctas: None,
            collnet_enable: false,
            collnet_node_threshold: 2,
            min_p2p_nchannels: 1,
            max_p2p_nchannels: 64,
            p2p_per_channel_net_bw: 14,
            nchannels_per_net_peer: None,
            max_p2p_peers: None,
            graph_file: None,
        }
    }
}

impl PlannerSettings {
    /// Read from a lookup function (environment, `--env` list, test map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let topo = TopoSettings::from_lookup(&get)?;
        let int = |name: &str| -> Result<Option<i32>> {
            match get(name) {
                None => Ok(None),
                Some(v) => {
                    parse_c_int(&v)
                        .map(|x| Some(x as i32))
                        .ok_or_else(|| TopoError::Setting {
                            name: name.into(),
                            value: v.clone(),
                            msg: "expected an integer".into(),
                        })
                }
            }
        };
        let mut s = PlannerSettings {
            topo,
            ..Default::default()
        };
        if let Some(v) = int("NCCL_CROSS_NIC")? {
            s.cross_nic = v;
        }
        s.min_nchannels = int("NCCL_MIN_NRINGS")?;
        if let Some(v) = int("NCCL_MIN_NCHANNELS")? {
            s.min_nchannels = Some(v);
        }
        s.max_nchannels = int("NCCL_MAX_NRINGS")?;
        if let Some(v) = int("NCCL_MAX_NCHANNELS")? {
            s.max_nchannels = Some(v);
        }
        if let Some(v) = int("NCCL_MIN_CTAS")? {
            s.min_ctas = v;
        }
        if let Some(v) = int("NCCL_MAX_CTAS")? {
            s.max_ctas = v;
        }
        if let Some(v) = int("NCCL_NVLS_ENABLE")? {
            s.nvls_enable = v;
        }
        s.nvls_ctas = int("NCCL_NVLS_NCHANNELS")?;
        if let Some(v) = int("NCCL_COLLNET_ENABLE")? {
            s.collnet_enable = v != 0;
        }
        if let Some(v) = int("NCCL_COLLNET_NODE_THRESHOLD")? {
            s.collnet_node_threshold = v;
        }
        if let Some(v) = int("NCCL_MIN_P2P_NCHANNELS")? {
            s.min_p2p_nchannels = v;
        }
        if let Some(v) = int("NCCL_MAX_P2P_NCHANNELS")? {
            s.max_p2p_nchannels = v;
        }
        if let Some(v) = int("NCCL_P2P_PER_CHANNEL_NET_BW")? {
            s.p2p_per_channel_net_bw = v;
        }
        s.nchannels_per_net_peer = int("NCCL_NCHANNELS_PER_NET_PEER")?;
        s.graph_file = get("NCCL_GRAPH_FILE");
        Ok(s)
    }

    /// Read from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// What NCCL says about channel limits it does not take as given (`ncclMinNchannels` and
    /// `ncclMaxNchannels` in NCCL 2.30.7 src/graph/connect.cc clamp them), one line each naming
    /// the variable that was in effect; `get` is the lookup these settings were read from.
    pub fn warnings(&self, get: impl Fn(&str) -> Option<String>) -> Vec<String> {
        let max = self.topo.version.max_channels() as i32;
        let name = |new: &str, old: &str| {
            if get(new).is_some() {
                new.to_string()
            } else {
                old.to_string()
            }
        };
        let mut out = Vec::new();
        if let Some(v) = self.max_nchannels {
            let n = name("NCCL_MAX_NCHANNELS", "NCCL_MAX_NRINGS");
            if v < 1 {
                out.push(format!("{n}={v}: NCCL uses at least 1 channel (\"User asked for a maximum of {v} channels, setting it to 1\")"));
            } else if v > max {
                out.push(format!(
                    "{n}={v}: NCCL {} has at most {max} channels and uses {max}",
                    self.topo.version
                ));
            }
        }
        if let Some(v) = self.min_nchannels {
            let n = name("NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS");
            if v < 0 {
                out.push(format!("{n}={v}: a negative minimum; NCCL uses 0"));
            } else if v > max {
                out.push(format!(
                    "{n}={v}: NCCL {} has at most {max} channels and limits the minimum to {max}",
                    self.topo.version
                ));
            }
        }
        out
    }

    /// `ncclMinNchannels()`.
    pub fn min_channels(&self) -> i32 {
        let max = self.topo.version.max_channels() as i32;
        self.min_nchannels.unwrap_or(0).clamp(0, max)
    }
    /// `ncclMaxNchannels()` (default MAXCHANNELS of the release).
    pub fn max_channels(&self) -> i32 {
        let max = self.topo.version.max_channels() as i32;
        self.max_nchannels.unwrap_or(max).clamp(1, max)
    }
}
