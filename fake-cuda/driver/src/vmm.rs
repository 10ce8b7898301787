//! The driver's virtual memory management API (`cuMem*` of CUDA 10.2+): physical allocation
//! handles, address reservations, mappings and access, POSIX file descriptor sharing, address
//! ranges, and the word-sized fills and stream writes that come with them. The semantics live
//! in the core (`fake_cuda_core::vmm`); this file checks the C structs and flags.

use crate::{core, write_out, CUhandle, DriverError, Result, INVALID_VALUE, NOT_SUPPORTED};
use fake_cuda_abi::{GRANULARITY, HANDLE_TYPE_POSIX_FD};
use std::ffi::{c_int, c_uint, c_void};

/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
const ALLOCATION_PINNED: c_int = 1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: c_int = 1;
use crate::fabric::{self, FABRIC_HANDLE_BYTES, HANDLE_TYPE_FABRIC};

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemLocation {
    /// `CUmemLocationType` (1: device).
    pub kind: c_int,
    /// Device ordinal.
    pub id: c_int,
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAllocationProp {
    /// `CUmemAllocationType` (1: pinned).
    pub kind: c_int,
    /// `CUmemAllocationHandleType` bits.
    pub requested_handle_types: c_int,
    /// Where the memory lives.
    pub location: CUmemLocation,
    /// Windows only.
    pub win32_handle_meta_data: *mut c_void,
    /// compressionType, gpuDirectRDMACapable, usage (u16), reserved.
    pub alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAccessDesc {
    /// The device given access.
    pub location: CUmemLocation,
    /// `CUmemAccess_flags`.
    pub flags: c_int,
}

const _: () = assert!(std::mem::size_of::<CUmemAllocationProp>() == 32);
const _: () = assert!(std::mem::offset_of!(CUmemAllocationProp, alloc_flags) == 24);
const _: () = assert!(std::mem::size_of::<CUmemAccessDesc>() == 12);

fn invalid() -> DriverError {
    DriverError::Code(INVALID_VALUE)
}

/// Reads a caller's struct, refusing null.
fn read_in<T: Copy>(p: *const T) -> Result<T> {
    if p.is_null() {
        return Err(invalid());
    }
    // SAFETY: non-null, and points to a readable `T` by the API contract.
    Ok(unsafe { p.read_unaligned() })
}

/// The device ordinal of a device location.
fn device_of(loc: CUmemLocation) -> Result<c_int> {
    if loc.kind != LOCATION_DEVICE {
        return Err(invalid());
    }
    core()?.device_info(loc.id)?;
    Ok(loc.id)
}

/// Checks allocation properties: pinned memory on a device.
fn check_prop(prop: *const CUmemAllocationProp) -> Result<CUmemAllocationProp> {
    let p = read_in(prop)?;
    if p.kind != ALLOCATION_PINNED {
        return Err(invalid());
    }
    device_of(p.location)?;
    Ok(p)
}

/// Whether this process's simulated node is in an NVLink domain spanning nodes (what NVML's GPU
/// fabric information reports; the core's `physical_device_fabric`): its GPUs then report
/// fabric handle support, as GB200/GB300 NVL72 GPUs do.
pub(crate) fn node_has_fabric() -> Result<bool> {
    match fabric::domain() {
        Ok(_) => Ok(true),
        Err(DriverError::Code(NOT_SUPPORTED)) => Ok(false),
        Err(e) => Err(e),
    }
}

drv_fn!(
    fn cuMemGetAllocationGranularity(
        granularity: *mut usize,
        prop: *const CUmemAllocationProp,
        option: c_int,
    ) {
        check_prop(prop)?;
        // CU_MEM_ALLOC_GRANULARITY_MINIMUM / _RECOMMENDED: the same on the modelled GPUs.
        if !(0..=1).contains(&option) {
            return Err(invalid());
        }
        write_out(granularity, GRANULARITY as usize)
    }
);
drv_fn!(
    fn cuMemCreate(handle: *mut u64, size: usize, prop: *const CUmemAllocationProp, flags: u64) {
        let p = check_prop(prop)?;
        if flags != 0 || handle.is_null() {
            return Err(invalid());
        }
        let types = p.requested_handle_types as u32;
        let h = if p.requested_handle_types & HANDLE_TYPE_FABRIC != 0 {
            if types & !(HANDLE_TYPE_FABRIC as u32 | HANDLE_TYPE_POSIX_FD) != 0 {
                return Err(DriverError::Code(NOT_SUPPORTED));
            }
            fabric::create(p.location.id, size as u64, types)?
        } else {
            core()?.mem_create(p.location.id, size as u64, types)?
        };
        write_out(handle, h)
    }
);
drv_fn!(
    fn cuMemRelease(handle: u64) {
        core()?.mem_release(handle)?;
        fabric::released(handle);
        Ok(())
    }
);
drv_fn!(
    fn cuMemAddressReserve(ptr: *mut u64, size: usize, alignment: usize, addr: u64, flags: u64) {
        if flags != 0 || ptr.is_null() {
            return Err(invalid());
        }
        let p = core()?.mem_address_reserve(size, alignment, addr as usize)?;
        write_out(ptr, p as u64)
    }
);
drv_fn!(
    fn cuMemAddressFree(ptr: u64, size: usize) {
        Ok(core()?.mem_address_free(ptr as usize, size)?)
    }
);
drv_fn!(
    fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) {
        if flags != 0 {
            return Err(invalid());
        }
        Ok(core()?.mem_map(ptr as usize, size, offset as u64, handle)?)
    }
);
drv_fn!(
    fn cuMemUnmap(ptr: u64, size: usize) {
        Ok(core()?.mem_unmap(ptr as usize, size)?)
    }
);
drv_fn!(
    fn cuMemSetAccess(ptr: u64, size: usize, desc: *const CUmemAccessDesc, count: usize) {
        if count == 0 || desc.is_null() {
            return Err(invalid());
        }
        let c = core()?;
        for i in 0..count {
            let d = read_in(desc.wrapping_add(i))?;
            let device = device_of(d.location)?;
            c.mem_set_access(ptr as usize, size, device, d.flags as u32)?;
        }
        Ok(())
    }
);
drv_fn!(
    fn cuMemGetAccess(flags: *mut u64, location: *const CUmemLocation, ptr: u64) {
        let device = device_of(read_in(location)?)?;
        let f = core()?.mem_get_access(ptr as usize, device)?;
        write_out(flags, u64::from(f))
    }
);
drv_fn!(
    fn cuMemExportToShareableHandle(shareable: *mut c_void, handle: u64, kind: c_int, flags: u64) {
        if flags != 0 || shareable.is_null() {
            return Err(invalid());
        }
        match kind {
            1 => {
                // A fabric allocation is exportable as a descriptor only when asked for.
                if fabric::requested_types(handle).is_some_and(|t| t & HANDLE_TYPE_POSIX_FD == 0) {
                    return Err(invalid());
                }
                let fd = core()?.mem_export(handle)?;
                write_out(shareable.cast::<c_int>(), fd)
            }
            HANDLE_TYPE_FABRIC => {
                let bytes = fabric::export(handle)?;
                write_out(shareable.cast::<[u8; FABRIC_HANDLE_BYTES]>(), bytes)
            }
            _ => Err(invalid()),
        }
    }
);
drv_fn!(
    fn cuMemImportFromShareableHandle(handle: *mut u64, os_handle: *mut c_void, kind: c_int) {
        if handle.is_null() {
            return Err(invalid());
        }
        match kind {
            // The descriptor travels in the pointer-sized argument.
            1 => write_out(handle, core()?.mem_import(os_handle as usize as c_int)?),
            // The handle's 64 bytes are at the pointer.
            HANDLE_TYPE_FABRIC => {
                let bytes = read_in(os_handle.cast::<[u8; FABRIC_HANDLE_BYTES]>().cast_const())?;
                write_out(handle, fabric::import(&bytes)?)
            }
            _ => Err(invalid()),
        }
    }
);
drv_fn!(
    fn cuMemRetainAllocationHandle(handle: *mut u64, addr: *mut c_void) {
        if handle.is_null() {
            return Err(invalid());
        }
        write_out(handle, core()?.mem_retain(addr as usize)?)
    }
);
drv_fn!(
    fn cuMemGetAllocationPropertiesFromHandle(prop: *mut CUmemAllocationProp, handle: u64) {
        let i = core()?.mem_handle_info(handle)?;
        write_out(
            prop,
            CUmemAllocationProp {
                kind: ALLOCATION_PINNED,
                requested_handle_types: fabric::requested_types(handle)
                    .unwrap_or(i.handle_types & HANDLE_TYPE_POSIX_FD)
                    as c_int,
                location: CUmemLocation {
                    kind: LOCATION_DEVICE,
                    id: i.device,
                },
                win32_handle_meta_data: std::ptr::null_mut(),
                alloc_flags: [0; 8],
            },
        )
    }
);
drv_fn!(
    fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, ptr: u64) {
        let i = core()?.pointer_info(ptr as usize)?;
        // cudaMemoryTypeDevice: allocations, IPC imports and accessible mappings.
        if i.kind != 2 {
            return Err(DriverError::Code(crate::NOT_FOUND));
        }
        // Either output may be null (not wanted).
        if !base.is_null() {
            write_out(base, i.base as u64)?;
        }
        if !size.is_null() {
            write_out(size, i.size)?;
        }
        Ok(())
    }
);

// ---- fills and stream memory operations ----------------------------------------------------

fn fill(
    dst: u64,
    pattern: u64,
    elem: u32,
    count: usize,
    stream: CUhandle,
    sync: bool,
) -> Result<()> {
    let c = core()?;
    c.memset_pattern(dst as usize, pattern, elem, count, stream as u64)?;
    if sync {
        c.stream_synchronize(stream as u64)?;
    }
    Ok(())
}

drv_fn!(
    fn cuMemsetD16_v2(dst: u64, value: u16, n: usize) {
        fill(dst, u64::from(value), 2, n, std::ptr::null_mut(), true)
    }
);
drv_fn!(
    fn cuMemsetD32_v2(dst: u64, value: c_uint, n: usize) {
        fill(dst, u64::from(value), 4, n, std::ptr::null_mut(), true)
    }
);
drv_fn!(
    fn cuMemsetD16Async(dst: u64, value: u16, n: usize, stream: CUhandle) {
        fill(dst, u64::from(value), 2, n, stream, false)
    }
);
drv_fn!(
    fn cuMemsetD32Async(dst: u64, value: c_uint, n: usize, stream: CUhandle) {
        fill(dst, u64::from(value), 4, n, stream, false)
    }
);
drv_fn!(
    fn cuStreamWriteValue32(stream: CUhandle, addr: u64, value: c_uint, _flags: c_uint) {
        fill(addr, u64::from(value), 4, 1, stream, false)
    }
);
drv_fn!(
    fn cuStreamWriteValue32_v2(stream: CUhandle, addr: u64, value: c_uint, _flags: c_uint) {
        fill(addr, u64::from(value), 4, 1, stream, false)
    }
);
drv_fn!(
    fn cuStreamWriteValue64(stream: CUhandle, addr: u64, value: u64, _flags: c_uint) {
        fill(addr, value, 8, 1, stream, false)
    }
);
drv_fn!(
    fn cuStreamWriteValue64_v2(stream: CUhandle, addr: u64, value: u64, _flags: c_uint) {
        fill(addr, value, 8, 1, stream, false)
    }
);
