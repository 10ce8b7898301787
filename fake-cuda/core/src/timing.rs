//! Modelled durations of the work the core itself executes (copies and memsets).
//!
//! Collectives get their durations from the cost model through the NCCL shim; this module only
//! prices the plain data movement of the CUDA runtime: a fixed launch latency plus bytes over
//! the relevant bandwidth of the [`DeviceDesc`]. These are modelling choices, not measurements.

use crate::device::{DeviceDesc, NvLinkPeer};

/// Which link a copy crosses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPath {
    /// Host memory to host memory.
    HostToHost,
    /// Across the host link (PCIe or C2C), either direction.
    HostLink,
    /// Inside device memory (read and write both cost bandwidth).
    DeviceToDevice,
    /// A memset: device memory writes only.
    Memset,
}

/// Latency of any copy or memset, in ns.
pub const COPY_LATENCY_NS: u64 = 2_000;

/// Virtual duration of moving `bytes` along `path` on `dev`.
pub fn copy_ns(dev: &DeviceDesc, path: CopyPath, bytes: u64) -> u64 {
    // GB/s = bytes per ns.
    let bytes_per_ns = match path {
        CopyPath::HostToHost => return 0,
        CopyPath::HostLink => dev.host_link_bandwidth_gbps,
        CopyPath::DeviceToDevice => dev.memory_bandwidth_gbps / 2.0,
        CopyPath::Memset => dev.memory_bandwidth_gbps,
    };
    COPY_LATENCY_NS + (bytes as f64 / bytes_per_ns).ceil() as u64
}

/// Bandwidth in GB/s of the path between two different GPUs: their direct NVLinks (links of
/// `a` whose far end is `b`; `b`'s physical index is `b_index`), else the NVLinks both have to
/// NVSwitches (the fewer of the two counts), else PCIe (the slower host link of the two).
pub fn peer_bandwidth_gbps(a: &DeviceDesc, b: &DeviceDesc, b_index: usize) -> f64 {
    let count =
        |d: &DeviceDesc, peer: NvLinkPeer| d.nvlinks.iter().filter(|l| l.peer == peer).count();
    let direct = count(a, NvLinkPeer::Gpu(b_index));
    let switched = count(a, NvLinkPeer::Switch).min(count(b, NvLinkPeer::Switch));
    let links = if direct > 0 { direct } else { switched };
    if links > 0 {
        links as f64 * a.nvlink_bandwidth_gbps.min(b.nvlink_bandwidth_gbps)
    } else {
        a.host_link_bandwidth_gbps.min(b.host_link_bandwidth_gbps)
    }
}

/// Virtual duration of copying `bytes` between two different GPUs (see
/// [`peer_bandwidth_gbps`]).
pub fn peer_copy_ns(a: &DeviceDesc, b: &DeviceDesc, b_index: usize, bytes: u64) -> u64 {
    COPY_LATENCY_NS + (bytes as f64 / peer_bandwidth_gbps(a, b, b_index)).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_link_copy_of_24_gb_takes_a_second() {
        let dev = &crate::device::dgx_a100()[0];
        assert_eq!(
            copy_ns(dev, CopyPath::HostLink, 24_000_000_000),
            1_000_000_000 + COPY_LATENCY_NS
        );
        assert_eq!(copy_ns(dev, CopyPath::HostToHost, 1 << 30), 0);
        assert!(
            copy_ns(dev, CopyPath::DeviceToDevice, 1 << 30)
                > copy_ns(dev, CopyPath::Memset, 1 << 30)
        );
    }

    #[test]
    fn copies_between_gpus_take_the_nvlink_or_pcie_path() {
        let devs = crate::device::dgx_a100();
        // DGX A100: 12 NVLinks to NVSwitches per GPU at NCCL's 20 GB/s per sm80 link.
        assert_eq!(devs[0].nvlink_bandwidth_gbps, 20.0);
        assert_eq!(peer_bandwidth_gbps(&devs[0], &devs[5], 5), 240.0);
        assert_eq!(
            peer_copy_ns(&devs[0], &devs[5], 5, 240_000_000),
            1_000_000 + COPY_LATENCY_NS
        );
        let mut pcie = devs[0].clone();
        pcie.nvlinks.clear();
        assert_eq!(peer_bandwidth_gbps(&pcie, &devs[5], 5), 24.0);
        let mut direct = devs[0].clone();
        direct.nvlinks.truncate(2);
        for l in &mut direct.nvlinks {
            l.peer = NvLinkPeer::Gpu(3);
        }
        assert_eq!(peer_bandwidth_gbps(&direct, &devs[3], 3), 40.0);
    }
}
