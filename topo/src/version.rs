//! NCCL version profiles: which release's behaviour the model reproduces (default 2.30.7).

use crate::error::TopoError;
use std::fmt;
use std::str::FromStr;

/// An NCCL release, e.g. 2.30.7. Only the differences listed in the reference (§0) are modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct NcclVersion {
    /// Major (2).
    pub major: u32,
    /// Minor (18..30).
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl NcclVersion {
    /// The default profile: NCCL 2.30.7.
    pub const DEFAULT: NcclVersion = NcclVersion {
        major: 2,
        minor: 30,
        patch: 7,
    };
    /// Oldest profile we model.
    pub const OLDEST: NcclVersion = NcclVersion {
        major: 2,
        minor: 18,
        patch: 3,
    };

    /// Shorthand constructor.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        NcclVersion {
            major,
            minor,
            patch,
        }
    }
    /// `true` if this release is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
    /// 2.30 hangs each GPU off a DEV node (`GPU -LOC- DEV -PCI/NVL/C2C- ...`).
    pub fn has_dev_nodes(&self) -> bool {
        self.at_least(2, 30)
    }
    /// 2.30 replaces a path on (lower type) or (same type, higher bw) or (same, same, fewer hops);
    /// earlier releases only on a strictly higher bandwidth at no greater depth.
    pub fn typed_path_update(&self) -> bool {
        self.at_least(2, 30)
    }
    /// `MAXCHANNELS`: 32 up to 2.24, 64 from 2.25 (the channel arrays, the ring search's
    /// maxChannels of MAXCHANNELS/2, channel doubling caps, `NCCL_MAX_NCHANNELS` and `maxCTAs`
    /// defaults, a NET's default `maxconn`, the channels `ncclTopoGetLocalNet` walks).
    pub fn max_channels(&self) -> usize {
        if self.at_least(2, 25) {
            64
        } else {
            32
        }
    }
    /// NCCL_VERSION_CODE for this release.
    pub fn code(&self) -> u32 {
        if self.major <= 2 && self.minor <= 8 {
            self.major * 1000 + self.minor * 100 + self.patch
        } else {
            self.major * 10000 + self.minor * 100 + self.patch
        }
    }
}

impl Default for NcclVersion {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The last patch release of each minor series we know (used when only `2.NN` is given).
fn last_patch(minor: u32) -> u32 {
    match minor {
        18 => 3,
        19 => 4,
        20 => 5,
        21 => 5,
        22 => 3,
        23 => 4,
        24 => 3,
        25 => 1,
        26 => 6,
        27 => 7,
        28 => 9,
        29 => 7,
        30 => 7,
        _ => 0,
    }
}

impl FromStr for NcclVersion {
    type Err = TopoError;
    fn from_str(s: &str) -> Result<Self, TopoError> {
        let bad = |msg: &str| TopoError::Setting {
            name: "nccl-version".into(),
            value: s.into(),
            msg: msg.into(),
        };
        let parts: Vec<&str> = s.trim().split('.').collect();
        if parts.len() < 2 || parts.len() > 3 {
            return Err(bad(
                "expected MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. 2.30 or 2.19.4",
            ));
        }
        let num = |p: &str| p.parse::<u32>().map_err(|_| bad("not a number"));
        let major = num(parts[0])?;
        let minor = num(parts[1])?;
        let patch = if parts.len() == 3 {
            num(parts[2])?
        } else {
            last_patch(minor)
        };
        let v = NcclVersion {
            major,
            minor,
            patch,
        };
        if major != 2 || v < NcclVersion::new(2, 18, 0) || v > NcclVersion::new(2, 30, 99) {
            return Err(bad("profiles exist for NCCL 2.18 to 2.30"));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parse_and_code() {
        assert_eq!("2.30".parse::<NcclVersion>().unwrap(), NcclVersion::DEFAULT);
        assert_eq!("2.27.3".parse::<NcclVersion>().unwrap().code(), 22703);
        assert!("2.17".parse::<NcclVersion>().is_err());
        assert!("x".parse::<NcclVersion>().is_err());
        assert!(NcclVersion::DEFAULT.has_dev_nodes());
        assert!(!"2.29".parse::<NcclVersion>().unwrap().has_dev_nodes());
    }
}
