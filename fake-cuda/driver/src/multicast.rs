//! The driver's multicast object API (`cuMulticast*`, CUDA 12.1+): NVLS memory on NVSwitch
//! systems, as NCCL's NVLS transport and PyTorch's symmetric memory use it. The semantics live
//! in the core (`fake_cuda_core::vmm::multicast`); this file checks the C structs, flags and
//! devices.
//!
//! A device supports multicast (`CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`) when it is a Hopper
//! or later GPU (compute capability 9.0+) with NVLinks to NVSwitches: DGX/HGX H100, H200 and
//! B200 nodes and the trays of a GB200/GB300 NVL72 rack; not A100 (the bundled DGX A100) nor
//! GPUs joined by direct NVLinks or PCIe. That is what NCCL's NVLS support requires as well.

use crate::fabric::{self, HANDLE_TYPE_FABRIC};
use crate::{core, write_out, DriverError, Result, INVALID_VALUE, NOT_SUPPORTED};
use fake_cuda_abi::{GRANULARITY, HANDLE_TYPE_POSIX_FD};
use std::ffi::{c_int, c_uint};

/// `CUDA_ERROR_INVALID_DEVICE`.
const INVALID_DEVICE: crate::CUresult = 101;
/// `CU_MULTICAST_GRANULARITY_MINIMUM` and `_RECOMMENDED`.
const GRANULARITY_OPTIONS: [c_int; 2] = [0, 1];
/// NVLink peer kind of an NVSwitch in `CDeviceTopology`.
const PEER_NVSWITCH: i32 = 1;

/// `CUmulticastObjectProp` (`CUmulticastObjectProp_v1`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmulticastObjectProp {
    /// Devices in the team.
    pub num_devices: c_uint,
    /// Bytes bound per device.
    pub size: usize,
    /// `CUmemAllocationHandleType` bits the object may be exported as.
    pub handle_types: u64,
    /// Must be 0.
    pub flags: u64,
}

const _: () = assert!(std::mem::size_of::<CUmulticastObjectProp>() == 32);
const _: () = assert!(std::mem::offset_of!(CUmulticastObjectProp, size) == 8);

fn invalid() -> DriverError {
    DriverError::Code(INVALID_VALUE)
}

/// Whether visible device `ordinal` supports multicast objects.
pub(crate) fn supported(ordinal: c_int) -> Result<bool> {
    let c = core()?;
    let d = c.device_info(ordinal)?;
    if d.sm_major < 9 {
        return Ok(false);
    }
    let t = c.physical_device_topology(d.physical_index)?;
    let links = &t.nvlinks[..(t.nvlink_count as usize).min(t.nvlinks.len())];
    Ok(links.iter().any(|l| l.peer_kind == PEER_NVSWITCH))
}

/// Whether any visible device supports multicast objects.
fn node_supported() -> Result<bool> {
    let n = core()?.device_count()?;
    for d in 0..n {
        if supported(d)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Checks object properties: a team, no flags, known handle types.
fn check_prop(prop: *const CUmulticastObjectProp) -> Result<CUmulticastObjectProp> {
    if prop.is_null() {
        return Err(invalid());
    }
    // SAFETY: non-null, and points to a readable struct by the API contract.
    let p = unsafe { prop.read_unaligned() };
    let known = u64::from(HANDLE_TYPE_POSIX_FD) | HANDLE_TYPE_FABRIC as u64;
    if p.num_devices == 0 || p.flags != 0 || p.handle_types & !known != 0 {
        return Err(invalid());
    }
    Ok(p)
}

drv_fn!(
    fn cuMulticastGetGranularity(
        granularity: *mut usize,
        prop: *const CUmulticastObjectProp,
        option: c_int,
    ) {
        check_prop(prop)?;
        if !GRANULARITY_OPTIONS.contains(&option) {
            return Err(invalid());
        }
        if !node_supported()? {
            return Err(DriverError::Code(NOT_SUPPORTED));
        }
        // The recommended value is the minimum too: a larger one (real GPUs report more)
        // would make programs that round buffers up to it (NCCL's ncclMemAlloc) commit that
        // much host memory per buffer.
        write_out(granularity, GRANULARITY as usize)
    }
);
drv_fn!(
    fn cuMulticastCreate(handle: *mut u64, prop: *const CUmulticastObjectProp) {
        let p = check_prop(prop)?;
        if handle.is_null() {
            return Err(invalid());
        }
        if !node_supported()? {
            return Err(DriverError::Code(NOT_SUPPORTED));
        }
        let types = p.handle_types as u32;
        let h = if p.handle_types & HANDLE_TYPE_FABRIC as u64 != 0 {
            fabric::create_multicast(p.num_devices, p.size as u64, types)?
        } else {
            core()?.mcast_create(p.num_devices, p.size as u64, types)?
        };
        write_out(handle, h)
    }
);
drv_fn!(
    fn cuMulticastAddDevice(handle: u64, device: c_int) {
        if !supported(device)? {
            return Err(DriverError::Code(INVALID_DEVICE));
        }
        Ok(core()?.mcast_add_device(handle, device)?)
    }
);
drv_fn!(
    fn cuMulticastBindMem(
        handle: u64,
        mc_offset: usize,
        mem: u64,
        mem_offset: usize,
        size: usize,
        flags: u64,
    ) {
        if flags != 0 {
            return Err(invalid());
        }
        Ok(core()?.mcast_bind_mem(
            handle,
            mc_offset as u64,
            mem,
            mem_offset as u64,
            size as u64,
        )?)
    }
);
drv_fn!(
    fn cuMulticastBindAddr(handle: u64, mc_offset: usize, ptr: u64, size: usize, flags: u64) {
        if flags != 0 {
            return Err(invalid());
        }
        Ok(core()?.mcast_bind_addr(handle, mc_offset as u64, ptr as usize, size as u64)?)
    }
);
drv_fn!(
    fn cuMulticastUnbind(handle: u64, device: c_int, mc_offset: usize, size: usize) {
        Ok(core()?.mcast_unbind(handle, device, mc_offset as u64, size as u64)?)
    }
);
