//! Constants and dictionaries NCCL's topology code uses, in one place (NCCL 2.30.7 `topo.h`,
//! `topo.cc`, `graph.h`, with the older values named where a version profile needs them).

use crate::version::NcclVersion;

/// Bandwidth of local links (GB/s).
pub const LOC_BW: f32 = 5000.0;
/// PCIe Gen3 x16 (GB/s); also the 256-thread ring threshold in tuning.
pub const PCI_BW: f32 = 12.0;
/// Inter-socket bandwidth, AMD.
pub const AMD_BW: f32 = 16.0;
/// Intel Broadwell QPI.
pub const BDW_QPI_BW: f32 = 6.0;
/// Intel Skylake UPI.
pub const SKL_QPI_BW: f32 = 10.0;
/// Intel Sapphire Rapids UPI (2.26+).
pub const SRP_QPI_BW: f32 = 22.0;
/// Intel Emerald Rapids UPI (2.26+).
pub const ERP_QPI_BW: f32 = 40.0;
/// Zhaoxin.
pub const ZPI_BW: f32 = 6.0;
/// Zhaoxin Yongfeng.
pub const YONGFENG_ZPI_BW: f32 = 9.0;
/// IBM POWER9.
pub const P9_BW: f32 = 32.0;
/// ARM inter-socket.
pub const ARM_BW: f32 = 6.0;
/// Maximum channels (`MAXCHANNELS`) from 2.25 on; `NcclVersion::max_channels` gives each release's.
pub const MAXCHANNELS: i32 = 64;

/// Per-link NVLink bandwidth for a compute capability (`ncclTopoNVLinkBw`), per version.
pub fn nvlink_bw(sm: i32, v: NcclVersion) -> f32 {
    // SM100_NVLINK_BW from 2.25; before, sm100 falls under the sm90 rate.
    if sm >= 100 && v.at_least(2, 25) {
        if v.at_least(2, 28) {
            40.1
        } else {
            40.0
        }
    } else if sm >= 90 {
        if v.at_least(2, 21) {
            20.6
        } else {
            20.0
        }
    } else if sm == 86 {
        12.0
    } else if sm >= 80 || sm >= 70 {
        20.0
    } else if sm >= 60 {
        18.0
    } else {
        20.0
    }
}

/// CPU architecture codes (`NCCL_TOPO_CPU_ARCH_*`); 0 when unknown.
pub mod cpu_arch {
    /// x86_64.
    pub const X86: i32 = 1;
    /// ppc64.
    pub const POWER: i32 = 2;
    /// arm64.
    pub const ARM: i32 = 3;
}

/// CPU vendor codes (`NCCL_TOPO_CPU_VENDOR_*`).
pub mod cpu_vendor {
    /// GenuineIntel.
    pub const INTEL: i32 = 1;
    /// AuthenticAMD.
    pub const AMD: i32 = 2;
    /// CentaurHauls / Shanghai.
    pub const ZHAOXIN: i32 = 3;
}

/// CPU model codes (`NCCL_TOPO_CPU_MODEL_*`).
pub mod cpu_model {
    /// Broadwell and older.
    pub const INTEL_BDW: i32 = 1;
    /// Skylake .. Ice Lake.
    pub const INTEL_SKL: i32 = 2;
    /// Sapphire Rapids.
    pub const INTEL_SRP: i32 = 3;
    /// Emerald Rapids and newer.
    pub const INTEL_ERP: i32 = 4;
    /// Zhaoxin Yongfeng.
    pub const YONGFENG: i32 = 1;
}

/// NCCL's `kvDict`: prefix keys and a fallback value.
pub struct KvDict {
    /// (key, value) pairs, matched in order; a key matches when it is a prefix of the input.
    pub entries: &'static [(&'static str, i32)],
    /// Value used when nothing matches (NCCL logs it at INFO).
    pub fallback: i32,
}

impl KvDict {
    /// `kvConvertToInt`: `Ok(value)` on a prefix match, `Err(fallback)` otherwise.
    pub fn lookup(&self, s: &str) -> Result<i32, i32> {
        self.entries
            .iter()
            .find(|(k, _)| s.starts_with(k))
            .map(|&(_, v)| v)
            .ok_or(self.fallback)
    }
    /// `kvConvertToStr`: the first key of a value.
    pub fn name(&self, value: i32) -> Option<&'static str> {
        self.entries
            .iter()
            .find(|&&(_, v)| v == value)
            .map(|&(k, _)| k)
    }
}

/// Node type codes as NCCL numbers them (used for PCI class conversion).
pub mod class {
    /// GPU.
    pub const GPU: i32 = 0;
    /// PCI switch / bridge.
    pub const PCI: i32 = 1;
    /// NVSwitch.
    pub const NVS: i32 = 2;
    /// CPU (IBM NPU).
    pub const CPU: i32 = 3;
    /// NIC.
    pub const NIC: i32 = 4;
}

/// `kvDictPciClass`.
pub const PCI_CLASS: KvDict = KvDict {
    entries: &[
        ("0x060400", class::PCI),
        ("0x080100", class::PCI),
        ("0x068000", class::NVS),
        ("0x068001", class::CPU),
        ("0x03", class::GPU),
        ("0x02", class::NIC),
    ],
    fallback: class::PCI,
};

/// `kvDictPciGen`: link speed strings to 100 Mb/s per lane.
pub const PCI_GEN: KvDict = KvDict {
    entries: &[
        ("2.5 GT/s", 15),
        ("5 GT/s", 30),
        ("8 GT/s", 60),
        ("16 GT/s", 120),
        ("32 GT/s", 240),
        ("2.5 GT/s PCIe", 15),
        ("5.0 GT/s PCIe", 30),
        ("8.0 GT/s PCIe", 60),
        ("16.0 GT/s PCIe", 120),
        ("32.0 GT/s PCIe", 240),
        ("64.0 GT/s PCIe", 480),
    ],
    fallback: 60,
};

/// `kvDictCpuArch`.
pub const CPU_ARCH: KvDict = KvDict {
    entries: &[
        ("x86_64", cpu_arch::X86),
        ("arm64", cpu_arch::ARM),
        ("ppc64", cpu_arch::POWER),
    ],
    fallback: 0,
};

/// `kvDictCpuVendor`.
pub const CPU_VENDOR: KvDict = KvDict {
    entries: &[
        ("GenuineIntel", cpu_vendor::INTEL),
        ("AuthenticAMD", cpu_vendor::AMD),
        ("CentaurHauls", cpu_vendor::ZHAOXIN),
        ("  Shanghai  ", cpu_vendor::ZHAOXIN),
    ],
    fallback: 0,
};

/// Link speed string NCCL writes for a PCIe generation (1..6), as the kernel reports it.
pub fn pcie_speed_str(gen: u32) -> &'static str {
    match gen {
        1 => "2.5 GT/s PCIe",
        2 => "5.0 GT/s PCIe",
        3 => "8.0 GT/s PCIe",
        4 => "16.0 GT/s PCIe",
        5 => "32.0 GT/s PCIe",
        _ => "64.0 GT/s PCIe",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn dictionaries_match_prefixes_like_nccl() {
        assert_eq!(PCI_GEN.lookup("16.0 GT/s PCIe"), Ok(120));
        assert_eq!(PCI_GEN.lookup("32 GT/s PCIe/s"), Ok(240));
        assert_eq!(PCI_GEN.lookup("2.5 GT/s PCIe"), Ok(15));
        assert_eq!(PCI_GEN.lookup("Unknown"), Err(60));
        assert_eq!(PCI_GEN.lookup(""), Err(60));
        assert_eq!(PCI_CLASS.lookup("0x030200"), Ok(class::GPU));
        assert_eq!(PCI_CLASS.lookup("0x020700"), Ok(class::NIC));
        assert_eq!(PCI_CLASS.lookup("0x0b4000"), Err(class::PCI));
        assert_eq!(nvlink_bw(90, NcclVersion::DEFAULT), 20.6);
        assert_eq!(nvlink_bw(90, NcclVersion::new(2, 19, 4)), 20.0);
        assert_eq!(nvlink_bw(86, NcclVersion::DEFAULT), 12.0);
        assert_eq!(nvlink_bw(100, NcclVersion::DEFAULT), 40.1);
        assert_eq!(nvlink_bw(61, NcclVersion::DEFAULT), 18.0);
    }
}
