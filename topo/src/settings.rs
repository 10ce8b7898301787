//! The NCCL settings that shape the topology model (path levels, PXN, GDR, NVB...), as a plain
//! struct that can also be read from environment variables with NCCL's names and semantics.

use crate::error::{Result, TopoError};
use crate::path::PathType;
use crate::version::NcclVersion;

/// `NCCL_NETDEVS_POLICY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum NetDevsPolicy {
    /// DIVUP(local NICs, local GPUs) NICs per GPU (default).
    #[default]
    Auto,
    /// Every local NIC.
    All,
    /// At most n.
    Max(u32),
}

/// `NCCL_NET_MERGE_POLICY` (NCCL 2.30.7; earlier releases always merge as `All`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum NetMergePolicy {
    /// Fuse every port within the merge level, whatever its rail (default).
    #[default]
    All,
    /// Fuse only ports with the same, defined rail id.
    Rail,
}

/// How NCCL fuses physical NIC ports into virtual NICs (NCCL 2.30.7 `ncclTopoMakeVNics`), see
/// [`crate::fusion`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NicFusion {
    /// `NCCL_NET_MERGE_LEVEL`: the farthest XML distance at which two ports are fused automatically.
    /// NCCL's `PORT` level (two ports of one NIC) is the same number as `PATH_NVL`, so it is
    /// [`PathType::Nvl`] here; `LOC` turns automatic fusion off. Default `PORT`.
    pub merge_level: PathType,
    /// `NCCL_NET_FORCE_MERGE`: `;`-separated groups of `,`-separated `name[:port]` entries, fused
    /// before the automatic pass.
    pub force_merge: Option<String>,
    /// `NCCL_NET_MERGE_POLICY`.
    pub merge_policy: NetMergePolicy,
    /// `NCCL_IB_MERGE_NICS` (the IB plugin refuses to build a multi-port device when 0).
    pub ib_merge_nics: bool,
}

impl Default for NicFusion {
    fn default() -> Self {
        NicFusion {
            merge_level: PathType::Nvl,
            force_merge: None,
            merge_policy: NetMergePolicy::All,
            ib_merge_nics: true,
        }
    }
}

/// `NCCL_NET_MERGE_LEVEL` the way NCCL 2.30.7 reads it (`kvConvertToInt` over LOC, PORT, PIX, PXB,
/// P2C, PXN, PHB, SYS): the first name the value *starts with*, case-sensitive; anything else
/// falls back to LOC (no fusion), with only an INFO line in NCCL.
pub fn parse_merge_level(value: &str) -> PathType {
    const LEVELS: [(&str, PathType); 8] = [
        ("LOC", PathType::Loc),
        ("PORT", PathType::Nvl),
        ("PIX", PathType::Pix),
        ("PXB", PathType::Pxb),
        ("P2C", PathType::P2c),
        ("PXN", PathType::Pxn),
        ("PHB", PathType::Phb),
        ("SYS", PathType::Sys),
    ];
    LEVELS
        .iter()
        .find(|(n, _)| value.starts_with(n))
        .map(|x| x.1)
        .unwrap_or(PathType::Loc)
}

/// Settings that change the topology model. Defaults are NCCL's.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TopoSettings {
    /// Which NCCL release to reproduce.
    pub version: NcclVersion,
    /// `NCCL_P2P_LEVEL` / `NCCL_P2P_DISABLE=1` (LOC). `None` = NCCL's default (PXB, SYS on AMD with <=2 GPUs).
    pub p2p_level: Option<PathType>,
    /// `NCCL_NET_GDR_LEVEL`. `None` = P2C with `NCCL_NET_GDR_C2C=1`, else PXB.
    pub net_gdr_level: Option<PathType>,
    /// `NCCL_NET_GDR_READ` (-2 = auto).
    pub net_gdr_read: i32,
    /// `NCCL_NET_GDR_C2C` (default 1).
    pub net_gdr_c2c: bool,
    /// `NCCL_NVB_DISABLE`.
    pub nvb_disable: bool,
    /// `NCCL_PXN_DISABLE`.
    pub pxn_disable: bool,
    /// `NCCL_PXN_C2C` (default 1).
    pub pxn_c2c: bool,
    /// `NCCL_IGNORE_DISABLED_P2P` (0, 1 or 2).
    pub ignore_disabled_p2p: i32,
    /// `NCCL_NETDEVS_POLICY`.
    pub netdevs_policy: NetDevsPolicy,
    /// `NCCL_NET_MERGE_LEVEL`, `NCCL_NET_FORCE_MERGE`, `NCCL_NET_MERGE_POLICY`, `NCCL_IB_MERGE_NICS`.
    pub nic_fusion: NicFusion,
    /// Multi-node NVLink: `NCCL_MNNVL_*`.
    pub mnnvl: MnnvlSettings,
}

/// `NCCL_MNNVL_ENABLE`: whether ranks of NVLink domains spanning hosts are fused into one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum MnnvlEnable {
    /// 0: never.
    Off,
    /// 1: always check the fabric, even on one host.
    On,
    /// 2 (default): check when the communicator spans hosts and P2P is not disabled.
    #[default]
    Auto,
}

/// The multi-node NVLink settings of NCCL 2.30.7 (`src/init.cc`, `src/graph/search.cc`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MnnvlSettings {
    /// `NCCL_MNNVL_ENABLE` (0, 1, 2; default 2).
    pub enable: MnnvlEnable,
    /// `NCCL_MNNVL_UUID`: both halves of every GPU's cluster UUID set to this value (-1: unset).
    pub uuid: Option<i64>,
    /// `NCCL_MNNVL_CLIQUE_ID`: every GPU's clique id (-1: unset; -2: a hash of the rack serial).
    pub clique_id: Option<i64>,
    /// `NCCL_MNNVL_CROSS_CLIQUE` (default 0): CUDA P2P between cliques of one NVLink domain.
    pub cross_clique: bool,
    /// `NCCL_MNNVL_SCATTER_NETS_ENABLE` (default 1): on a topology fused from several hosts,
    /// NICs are preferred GPU by GPU rather than channel by channel.
    pub scatter_nets: bool,
    /// `NCCL_MNNVL_RAIL_PER_HOST` (default 0): NICs of different hosts are on one rail when
    /// their PCI id and port match (rather than their ASIC and port).
    pub rail_per_host: bool,
}

impl Default for MnnvlSettings {
    fn default() -> Self {
        MnnvlSettings {
            enable: MnnvlEnable::Auto,
            uuid: None,
            clique_id: None,
            cross_clique: false,
            scatter_nets: true,
            rail_per_host: false,
        }
    }
}

impl Default for TopoSettings {
    fn default() -> Self {
        TopoSettings {
            version: NcclVersion::DEFAULT,
            p2p_level: None,
            net_gdr_level: None,
            net_gdr_read: -2,
            net_gdr_c2c: true,
            nvb_disable: false,
            pxn_disable: false,
            pxn_c2c: true,
            ignore_disabled_p2p: 0,
            netdevs_policy: NetDevsPolicy::Auto,
            nic_fusion: NicFusion::default(),
            mnnvl: MnnvlSettings::default(),
        }
    }
}

/// NCCL's `ncclGetLevel`: a path type name (LOC..SYS) or an old-style number 0-5.
pub fn parse_level(name: &str, value: &str) -> Result<PathType> {
    let v = value.trim();
    if let Some(t) = PathType::ALL
        .iter()
        .copied()
        .filter(|t| *t <= PathType::Sys)
        .find(|t| t.name() == v)
    {
        return Ok(t);
    }
    if v.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        let old = parse_c_int(v).unwrap_or(0).clamp(0, 5);
        return Ok([
            PathType::Loc,
            PathType::Pix,
            PathType::Pxb,
            PathType::Phb,
            PathType::Sys,
            PathType::Sys,
        ][old as usize]);
    }
    Err(TopoError::Setting {
        name: name.into(),
        value: value.into(),
        msg: "expected LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or an old level 0-5".into(),
    })
}

/// `strtol(s, NULL, 0)` on the leading number (decimal, 0x hex or 0 octal).
pub fn parse_c_int(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (radix, digits) =
        if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, h)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    if end == 0 {
        return if radix == 8 { Some(0) } else { None };
    }
    let v = i64::from_str_radix(&digits[..end], radix).ok()?;
    Some(if neg { -v } else { v })
}

impl TopoSettings {
    /// Read the settings from a lookup function (the process environment, a config file, a test map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut s = TopoSettings::default();
        let int = |name: &str| -> Result<Option<i64>> {
            match get(name) {
                None => Ok(None),
                Some(v) => parse_c_int(&v).map(Some).ok_or_else(|| TopoError::Setting {
                    name: name.into(),
                    value: v.clone(),
                    msg: "expected an integer".into(),
                }),
            }
        };
        if let Some(v) = get("NCCLSIM_NCCL_VERSION") {
            s.version = v.parse()?;
        }
        if int("NCCL_P2P_DISABLE")? == Some(1) {
            s.p2p_level = Some(PathType::Loc);
        } else if let Some(v) = get("NCCL_P2P_LEVEL") {
            s.p2p_level = Some(parse_level("NCCL_P2P_LEVEL", &v)?);
        }
        if let Some(v) = get("NCCL_NET_GDR_LEVEL") {
            s.net_gdr_level = Some(parse_level("NCCL_NET_GDR_LEVEL", &v)?);
        }
        if let Some(v) = int("NCCL_NET_GDR_READ")? {
            s.net_gdr_read = v as i32;
        }
        if let Some(v) = int("NCCL_NET_GDR_C2C")? {
            s.net_gdr_c2c = v != 0;
        }
        if let Some(v) = int("NCCL_NVB_DISABLE")? {
            s.nvb_disable = v != 0;
        }
        if let Some(v) = int("NCCL_PXN_DISABLE")? {
            s.pxn_disable = v != 0;
        }
        if let Some(v) = int("NCCL_PXN_C2C")? {
            s.pxn_c2c = v != 0;
        }
        if let Some(v) = int("NCCL_IGNORE_DISABLED_P2P")? {
            s.ignore_disabled_p2p = v as i32;
        }
        if let Some(v) = get("NCCL_NETDEVS_POLICY") {
            let u = v.to_ascii_uppercase();
            // NCCL falls back to AUTO (with an INFO line) on anything it does not recognise.
            s.netdevs_policy = if u == "ALL" {
                NetDevsPolicy::All
            } else if let Some(n) = u
                .strip_prefix("MAX:")
                .map(c_atoi)
                .filter(|n| *n > 0)
                .map(|n| n as u32)
            {
                NetDevsPolicy::Max(n)
            } else {
                NetDevsPolicy::Auto
            };
        }
        if let Some(v) = get("NCCL_NET_MERGE_LEVEL") {
            s.nic_fusion.merge_level = parse_merge_level(&v);
        }
        s.nic_fusion.force_merge = get("NCCL_NET_FORCE_MERGE");
        if let Some(v) = get("NCCL_NET_MERGE_POLICY") {
            // NCCL warns about anything but ALL/RAIL (any case) and keeps ALL.
            if v.eq_ignore_ascii_case("RAIL") {
                s.nic_fusion.merge_policy = NetMergePolicy::Rail;
            }
        }
        if let Some(v) = int("NCCL_IB_MERGE_NICS")? {
            s.nic_fusion.ib_merge_nics = v != 0;
        }
        if let Some(v) = int("NCCL_MNNVL_ENABLE")? {
            // NCCL compares with 0 and 1; any other value behaves as the automatic 2.
            s.mnnvl.enable = match v {
                0 => MnnvlEnable::Off,
                1 => MnnvlEnable::On,
                _ => MnnvlEnable::Auto,
            };
        }
        s.mnnvl.uuid = int("NCCL_MNNVL_UUID")?.filter(|&v| v != -1);
        s.mnnvl.clique_id = int("NCCL_MNNVL_CLIQUE_ID")?.filter(|&v| v != -1);
        if let Some(v) = int("NCCL_MNNVL_CROSS_CLIQUE")? {
            s.mnnvl.cross_clique = v != 0;
        }
        if let Some(v) = int("NCCL_MNNVL_SCATTER_NETS_ENABLE")? {
            s.mnnvl.scatter_nets = v != 0;
        }
        if let Some(v) = int("NCCL_MNNVL_RAIL_PER_HOST")? {
            s.mnnvl.rail_per_host = v != 0;
        }
        Ok(s)
    }

    /// Read the settings from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Apply `NAME=value` assignments (as given with `--env` on the command line).
    pub fn with_assignments<'a>(
        base: &TopoSettings,
        kv: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self> {
        let map: Vec<(String, String)> = kv
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut s = Self::from_lookup(|k| {
            map.iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        })?;
        if !map.iter().any(|(k, _)| k == "NCCLSIM_NCCL_VERSION") {
            s.version = base.version;
        }
        Ok(s)
    }
}

/// C's `atoi`: leading blanks, an optional sign, then digits as far as they go (0 when there are
/// none; saturating instead of undefined on overflow).
pub fn c_atoi(s: &str) -> i32 {
    let t = s.trim_start();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = (v * 10 + (b - b'0') as i64).min(i32::MAX as i64 + 1);
    }
    let v = if neg { -v } else { v };
    v.clamp(i32::MIN as i64, i32::MAX as i64) as i32
}

/// What NCCL says about settings of this layer whose values it does not take as given (it
/// falls back to its default), one line each naming the variable.
pub fn warnings(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(v) = get("NCCL_NETDEVS_POLICY") {
        let u = v.to_ascii_uppercase();
        let ok = u == "AUTO" || u == "ALL" || u.strip_prefix("MAX:").is_some_and(|n| c_atoi(n) > 0);
        if !ok {
            // NCCL 2.30.7 src/graph/topo.cc getNetDevsPolicyOnce.
            out.push(format!(
                "NCCL_NETDEVS_POLICY={v} is not AUTO, ALL or MAX:<n> with n > 0; NCCL uses AUTO"
            ));
        }
    }
    if let Some(v) = get("NCCL_NET_MERGE_POLICY") {
        if !v.eq_ignore_ascii_case("ALL") && !v.eq_ignore_ascii_case("RAIL") {
            out.push(format!(
                "NCCL_NET_MERGE_POLICY={v} is not ALL or RAIL; NCCL uses ALL"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_nccl_replaces_are_warned_about() {
        let get =
            |v: &'static str| move |k: &str| (k == "NCCL_NETDEVS_POLICY").then(|| v.to_string());
        let w = warnings(get("foo"));
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("NCCL_NETDEVS_POLICY=foo ") && w[0].ends_with("NCCL uses AUTO"));
        assert_eq!(warnings(get("MAX:0")).len(), 1);
        for ok in ["auto", "ALL", "max:2", "MAX:3x"] {
            assert!(warnings(get(ok)).is_empty(), "{ok}");
        }
        // NCCL reads the count with atoi: "MAX:3x" is 3.
        let s = TopoSettings::from_lookup(get("MAX:3x")).unwrap();
        assert_eq!(s.netdevs_policy, NetDevsPolicy::Max(3));
        assert_eq!(
            (c_atoi(" -12ab"), c_atoi("x"), c_atoi("99999999999")),
            (-12, 0, i32::MAX)
        );
        let merge = warnings(|k: &str| (k == "NCCL_NET_MERGE_POLICY").then(|| "x".to_string()));
        assert_eq!(
            merge,
            ["NCCL_NET_MERGE_POLICY=x is not ALL or RAIL; NCCL uses ALL"]
        );
    }
    #[test]
    fn env_semantics() {
        let s = TopoSettings::from_lookup(|k| match k {
            "NCCL_P2P_LEVEL" => Some("2".into()),
            "NCCL_NET_GDR_LEVEL" => Some("PHB".into()),
            "NCCL_NETDEVS_POLICY" => Some("max:2".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(s.p2p_level, Some(PathType::Pxb));
        assert_eq!(s.net_gdr_level, Some(PathType::Phb));
        assert_eq!(s.netdevs_policy, NetDevsPolicy::Max(2));
        let s =
            TopoSettings::from_lookup(|k| (k == "NCCL_P2P_DISABLE").then(|| "1".into())).unwrap();
        assert_eq!(s.p2p_level, Some(PathType::Loc));
        assert_eq!(parse_level("X", "9").unwrap(), PathType::Sys);
        assert!(parse_level("NCCL_P2P_LEVEL", "FAST")
            .unwrap_err()
            .to_string()
            .contains("NCCL_P2P_LEVEL=FAST"));
        assert_eq!(parse_c_int("0x10"), Some(16));
        assert_eq!(parse_c_int("-1"), Some(-1));
        assert_eq!(parse_c_int("12abc"), Some(12));
    }
    #[test]
    fn mnnvl_settings_read_as_nccl_reads_them() {
        let d = TopoSettings::default().mnnvl;
        assert_eq!(d.enable, MnnvlEnable::Auto);
        assert!(d.scatter_nets && !d.rail_per_host && !d.cross_clique);
        let s = TopoSettings::from_lookup(|k| match k {
            "NCCL_MNNVL_ENABLE" => Some("0".into()),
            "NCCL_MNNVL_UUID" => Some("-1".into()),
            "NCCL_MNNVL_CLIQUE_ID" => Some("-2".into()),
            "NCCL_MNNVL_SCATTER_NETS_ENABLE" => Some("0".into()),
            "NCCL_MNNVL_RAIL_PER_HOST" => Some("1".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(s.mnnvl.enable, MnnvlEnable::Off);
        assert_eq!((s.mnnvl.uuid, s.mnnvl.clique_id), (None, Some(-2)));
        assert!(!s.mnnvl.scatter_nets && s.mnnvl.rail_per_host);
        let on = |v: &'static str| {
            TopoSettings::from_lookup(move |k| (k == "NCCL_MNNVL_ENABLE").then(|| v.into()))
                .unwrap()
                .mnnvl
                .enable
        };
        assert_eq!(
            (on("1"), on("2"), on("7")),
            (MnnvlEnable::On, MnnvlEnable::Auto, MnnvlEnable::Auto)
        );
        assert!(
            TopoSettings::from_lookup(|k| (k == "NCCL_MNNVL_ENABLE").then(|| "x".into())).is_err()
        );
    }
}
