//! Link and path types, kept symbolic because NCCL renumbered them twice (2.26, 2.28).

use crate::version::NcclVersion;

/// A link type (NCCL `LINK_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum LinkType {
    /// Local (GPU-DEV, pcilink, CPU-attached NIC to CPU is PCI with LOC bandwidth).
    Loc,
    /// NVLink.
    Nvl,
    /// Chip-to-chip (Grace).
    C2c,
    /// PCIe.
    Pci,
    /// CPU interconnect.
    Sys,
    /// NIC to network.
    Net,
}

impl LinkType {
    /// NCCL's `topoLinkTypeStr` entry.
    pub fn name(self) -> &'static str {
        match self {
            LinkType::Loc => "LOC",
            LinkType::Nvl => "NVL",
            LinkType::C2c => "C2C",
            LinkType::Pci => "PCI",
            LinkType::Sys => "SYS",
            LinkType::Net => "NET",
        }
    }
    /// The path type a single link of this type starts as (PATH and LINK numbers coincide in NCCL).
    pub fn as_path(self) -> PathType {
        match self {
            LinkType::Loc | LinkType::Net => PathType::Loc,
            LinkType::Nvl => PathType::Nvl,
            LinkType::C2c => PathType::C2c,
            LinkType::Pci => PathType::Pix,
            LinkType::Sys => PathType::Sys,
        }
    }
}

/// A path type (NCCL `PATH_*`), ordered from closest to farthest as in NCCL 2.28+.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum PathType {
    /// Same device.
    Loc,
    /// Direct NVLink (or through NVSwitch).
    Nvl,
    /// NVLink through one intermediate GPU.
    Nvb,
    /// GPU to CPU over C2C.
    C2c,
    /// At most one PCIe switch.
    Pix,
    /// Several PCIe switches, no host bridge.
    Pxb,
    /// GPU-C2C-CPU-PCIe-NIC.
    P2c,
    /// Through a peer GPU over NVLink, then its PCIe to the NIC.
    Pxn,
    /// Through a PCIe host bridge (CPU).
    Phb,
    /// Across the CPU interconnect.
    Sys,
    /// Through the network.
    Net,
    /// Disconnected.
    Dis,
}

impl PathType {
    /// All path types in order.
    pub const ALL: [PathType; 12] = [
        PathType::Loc,
        PathType::Nvl,
        PathType::Nvb,
        PathType::C2c,
        PathType::Pix,
        PathType::Pxb,
        PathType::P2c,
        PathType::Pxn,
        PathType::Phb,
        PathType::Sys,
        PathType::Net,
        PathType::Dis,
    ];
    /// NCCL's `topoPathTypeStr` entry.
    pub fn name(self) -> &'static str {
        match self {
            PathType::Loc => "LOC",
            PathType::Nvl => "NVL",
            PathType::Nvb => "NVB",
            PathType::C2c => "C2C",
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::P2c => "P2C",
            PathType::Pxn => "PXN",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
            PathType::Net => "NET",
            PathType::Dis => "DIS",
        }
    }
    /// Parse a name (as printed by NCCL).
    pub fn from_name(s: &str) -> Option<PathType> {
        PathType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }
    /// The integer NCCL `version` uses for this type (for debug output that prints numbers).
    pub fn number(self, v: NcclVersion) -> i32 {
        let new = self as i32;
        if v.at_least(2, 28) {
            return new;
        }
        if v.at_least(2, 26) {
            // 2.26/2.27: ... C2C3 PIX4 PXB5 PXN6 P2C7 PHB8 SYS9 NET10 DIS11 (P2C from 2.27)
            return match self {
                PathType::Pxn => 6,
                PathType::P2c => 7,
                _ => new,
            };
        }
        // <= 2.25: LOC0 NVL1 NVB2 PIX3 PXB4 PXN5 PHB6 SYS7 NET8 DIS9 (no C2C, no P2C)
        match self {
            PathType::Loc => 0,
            PathType::Nvl => 1,
            PathType::Nvb => 2,
            PathType::C2c | PathType::Pix => 3,
            PathType::Pxb => 4,
            PathType::Pxn | PathType::P2c => 5,
            PathType::Phb => 6,
            PathType::Sys => 7,
            PathType::Net => 8,
            PathType::Dis => 9,
        }
    }
    /// NCCL's `mergePathType`: the farther of two, except PHB with C2C gives P2C.
    pub fn merge(a: PathType, b: PathType) -> PathType {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        if hi == PathType::Phb && lo == PathType::C2c {
            PathType::P2c
        } else {
            hi
        }
    }
}

impl std::fmt::Display for PathType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
