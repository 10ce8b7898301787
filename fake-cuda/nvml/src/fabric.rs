//! GPU fabric information (`nvmlDeviceGetGpuFabricInfo`, `nvmlDeviceGetGpuFabricInfoV`): what
//! a GPU of a multi-node NVLink domain (a GB200/GB300 NVL72 rack) reports about the NVLink
//! fabric it has joined, and what NCCL reads to decide whether ranks on different hosts share
//! one NVLink domain (NCCL 2.30.7 `src/init.cc` `fillInfo`).
//!
//! The domains are the ones `ncclsim plan` and the simulated NCCL use (`topo::mnnvl::node_fabric`,
//! asked of the core: `physical_device_fabric`): nodes whose NVLinks go to an external NVSwitch fabric are
//! packed into domains of up to 72 GPUs, or of `NCCLSIM_NVL_DOMAIN` GPUs. Every GPU of a node
//! reports its domain's cluster UUID, the clique id GB200 racks report, fabric state
//! "completed" and the racks' health mask. GPUs of other nodes have no fabric: the calls return
//! `NVML_ERROR_NOT_SUPPORTED`, as on a machine without one.
//!
//! Layouts, from NVML's reference (`nvmlGpuFabricInfo_t`, `nvmlGpuFabricInfo_v2_t`): the
//! legacy structure holds the 16-byte cluster UUID, a return code (`status`, success once the
//! GPU has registered), the 32-bit clique id and the one-byte state; version 2 adds a 32-bit
//! structure version in front and the 32-bit health mask at the end. The version word is
//! NVML's usual `size | (version << 24)`.

use super::{
    core, err, index, nvmlDevice_t, write_out, NvmlError, Result, INVALID_ARGUMENT, SUCCESS,
};
use fake_cuda_abi::CFabricInfo as FabricInfo;
use std::ffi::{c_int, c_uint};

/// `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`.
const ARGUMENT_VERSION_MISMATCH: c_int = 25;

/// `nvmlGpuFabricInfo_t`.
#[repr(C)]
#[allow(non_camel_case_types, non_snake_case)]
#[derive(Debug, Clone, Copy, Default)]
pub struct nvmlGpuFabricInfo_t {
    /// The cluster (NVLink domain) UUID.
    pub clusterUuid: [u8; 16],
    /// Registration error, valid once `state` is completed.
    pub status: c_int,
    /// The clique within the cluster.
    pub cliqueId: c_uint,
    /// `NVML_GPU_FABRIC_STATE_*` (`nvmlGpuFabricState_t` is one byte).
    pub state: u8,
}

/// `nvmlGpuFabricInfo_v2_t` (`nvmlGpuFabricInfoV_t`).
#[repr(C)]
#[allow(non_camel_case_types, non_snake_case)]
#[derive(Debug, Clone, Copy, Default)]
pub struct nvmlGpuFabricInfo_v2_t {
    /// `nvmlGpuFabricInfo_v2`: the structure's size | 2 << 24.
    pub version: c_uint,
    /// The cluster (NVLink domain) UUID.
    pub clusterUuid: [u8; 16],
    /// Registration error, valid once `state` is completed.
    pub status: c_int,
    /// The clique within the cluster.
    pub cliqueId: c_uint,
    /// `NVML_GPU_FABRIC_STATE_*`.
    pub state: u8,
    /// `NVML_GPU_FABRIC_HEALTH_MASK_*` fields.
    pub healthMask: c_uint,
}

/// `nvmlGpuFabricInfo_v2`.
pub const FABRIC_INFO_V2: c_uint =
    std::mem::size_of::<nvmlGpuFabricInfo_v2_t>() as c_uint | 2 << 24;

/// `device`'s fabric, as the core built it; NOT_SUPPORTED when its node has none.
fn fabric(device: nvmlDevice_t) -> Result<FabricInfo> {
    let i = index(device)?;
    Ok(core()?.physical_device_fabric(i as i32)?)
}

/// The UUID's bytes: its two halves as NCCL reads them back (native 64-bit words).
fn uuid_bytes(f: &FabricInfo) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&f.cluster_uuid[0].to_ne_bytes());
    b[8..].copy_from_slice(&f.cluster_uuid[1].to_ne_bytes());
    b
}

nvml_fn!(
    fn nvmlDeviceGetGpuFabricInfo(device: nvmlDevice_t, info: *mut nvmlGpuFabricInfo_t) {
        let f = fabric(device)?;
        write_out(
            info,
            nvmlGpuFabricInfo_t {
                clusterUuid: uuid_bytes(&f),
                status: SUCCESS,
                cliqueId: f.clique_id,
                state: f.state as u8,
            },
        )
    }
);

nvml_fn!(
    fn nvmlDeviceGetGpuFabricInfoV(device: nvmlDevice_t, info: *mut nvmlGpuFabricInfo_v2_t) {
        let f = fabric(device)?;
        if info.is_null() {
            return Err(err(INVALID_ARGUMENT, "null fabric info"));
        }
        // SAFETY: non-null; the caller sets `version`, the structure's first word.
        let version = unsafe { info.cast::<c_uint>().read_unaligned() };
        if version != FABRIC_INFO_V2 {
            return Err(err(
                ARGUMENT_VERSION_MISMATCH,
                format!(
                    "fabric info version {:#x} (size {}, version {}): only nvmlGpuFabricInfo_v2 ({FABRIC_INFO_V2:#x}) is known",
                    version,
                    version & 0x00ff_ffff,
                    version >> 24
                ),
            ));
        }
        write_out(
            info,
            nvmlGpuFabricInfo_v2_t {
                version,
                clusterUuid: uuid_bytes(&f),
                status: SUCCESS,
                cliqueId: f.clique_id,
                state: f.state as u8,
                healthMask: f.health_mask,
            },
        )
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_nvmls() {
        // 16 + 4 + 4 + 1 (+3 padding).
        assert_eq!(std::mem::size_of::<nvmlGpuFabricInfo_t>(), 28);
        assert_eq!(std::mem::offset_of!(nvmlGpuFabricInfo_v2_t, state), 28);
        assert_eq!(std::mem::offset_of!(nvmlGpuFabricInfo_v2_t, healthMask), 32);
        assert_eq!(FABRIC_INFO_V2, 36 | 2 << 24);
    }
}
