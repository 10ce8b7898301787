//! Modelled durations of the work the core itself executes (copies and memsets).
//!
//! Collectives get their durations from the cost model through the NCCL shim; this module only
//! prices the plain data movement of the CUDA runtime: a fixed launch latency plus bytes over
//! the relevant bandwidth of the [`DeviceDesc`]. These are modelling choices, not measurements.

use crate::device::DeviceDesc;

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
}
