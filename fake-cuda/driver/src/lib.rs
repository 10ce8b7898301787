//! `libcuda.so.1`: the driver API subset torch's `libcaffe2_nvrtc.so` imports and programs reach
//! through `cuGetProcAddress`, over the same process-wide core as `libcudart.so.12`.
//!
//! Every export is written with [`drv_fn!`]: panics are caught and errors become `CUresult`.
//! Module, linker and kernel entry points exist so that loaders resolve them, and return
//! `CUDA_ERROR_NOT_SUPPORTED`.

#![allow(non_snake_case)]

use fake_cuda_abi::error::{CoreError, Status};
use fake_cuda_client::{client, Client};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// `CUresult`.
pub type CUresult = c_int;

const SUCCESS: CUresult = 0;
pub(crate) const INVALID_VALUE: CUresult = 1;
const OUT_OF_MEMORY: CUresult = 2;
const NOT_INITIALIZED: CUresult = 3;
const NO_DEVICE: CUresult = 100;
const INVALID_DEVICE: CUresult = 101;
const MAP_FAILED: CUresult = 205;
const INVALID_HANDLE: CUresult = 400;
pub(crate) const NOT_FOUND: CUresult = 500;
const NOT_READY: CUresult = 600;
pub(crate) const NOT_SUPPORTED: CUresult = 801;
const STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
const UNKNOWN: CUresult = 999;

/// The driver version reported: the core's (CUDA 13.5), shared with NVML and the runtimes, at
/// least the version of every runtime we ship.
const DRIVER_VERSION: c_int = fake_cuda_abi::version::DRIVER_CUDA_VERSION;

/// Error of the driver front-end.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Reported by the core.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Decided here.
    #[error("CUresult {0}")]
    Code(CUresult),
    /// `cuGetProcAddress` of a name this library does not export.
    #[error("no driver function {0} (CUDA_ERROR_NOT_FOUND)")]
    NoSymbol(String),
}

impl DriverError {
    fn code(&self) -> CUresult {
        match self {
            DriverError::Code(c) => *c,
            DriverError::NoSymbol(_) => NOT_FOUND,
            // The driver API has no "invalid device function".
            DriverError::Core(e) if e.status() == Status::KernelRefused => NOT_SUPPORTED,
            DriverError::Core(e) => e.cuda_code(),
        }
    }
}

type Result<T> = std::result::Result<T, DriverError>;

impl ffi_boundary::FfiError for DriverError {
    /// `CUDA_ERROR_NOT_READY` is an answer, not a failure.
    const LIBRARY: ffi_boundary::Library =
        ffi_boundary::Library::new("libcuda", UNKNOWN).answering(&[NOT_READY]);

    fn code(&self) -> i32 {
        DriverError::code(self)
    }
}

/// Writes an exported driver function inside the C boundary ([`ffi_boundary::ffi_fn!`] with
/// [`DriverError`]): panics caught, errors become `CUresult`.
macro_rules! drv_fn {
    ($($function:tt)*) => {
        ffi_boundary::ffi_fn!(DriverError; export $($function)*);
    };
}

fn core() -> Result<&'static Client> {
    Ok(client()?)
}

fn write_out<T>(out: *mut T, value: T) -> Result<()> {
    // Driver out-parameters point to a writable `T` when non-null (API contract).
    ffi_boundary::non_null!(*out = value; else DriverError::Code(INVALID_VALUE));
    Ok(())
}

drv_fn!(
    fn cuInit(_flags: c_uint) {
        core()?;
        Ok(())
    }
);
drv_fn!(
    fn cuDriverGetVersion(version: *mut c_int) {
        write_out(version, DRIVER_VERSION)
    }
);
drv_fn!(
    fn cuDeviceGetCount(count: *mut c_int) {
        write_out(count, core()?.device_count()?)
    }
);
drv_fn!(
    fn cuDeviceGet(device: *mut c_int, ordinal: c_int) {
        core()?.device_info(ordinal)?;
        write_out(device, ordinal)
    }
);
drv_fn!(
    fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int) {
        let d = core()?.device_info(device)?;
        let mut text = ffi_boundary::c_array_text(&d.name);
        text.truncate((len.max(1) - 1) as usize);
        // SAFETY: the caller provides `len` bytes at `name`.
        if !unsafe { ffi_boundary::write_c_string(name, len.max(0) as usize, &text) } {
            return Err(DriverError::Code(INVALID_VALUE));
        }
        Ok(())
    }
);
drv_fn!(
    fn cuDeviceTotalMem_v2(bytes: *mut usize, device: c_int) {
        write_out(bytes, core()?.device_info(device)?.total_memory as usize)
    }
);
drv_fn!(
    fn cuDeviceGetUuid(uuid: *mut [u8; 16], device: c_int) {
        write_out(uuid, core()?.device_info(device)?.uuid)
    }
);
drv_fn!(
    fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], device: c_int) {
        write_out(uuid, core()?.device_info(device)?.uuid)
    }
);
drv_fn!(
    fn cuDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) {
        // CUdevice_attribute shares cudaDeviceAttr's numbering for the attributes modelled here.
        let d = core()?.device_info(device)?;
        let v = match attr {
            1 => 1024,
            10 => 32,
            16 => d.multiprocessor_count,
            33 => d.pci[1] as c_int,
            34 => d.pci[2] as c_int,
            50 => d.pci[0] as c_int,
            75 => d.sm_major,
            76 => d.sm_minor,
            // Virtual memory management and POSIX file descriptor handles (fake_cuda_core::vmm).
            102 | 103 => 1,
            // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: GPUs in an NVLink domain spanning
            // nodes (vmm::node_has_fabric).
            128 => c_int::from(vmm::node_has_fabric()?),
            // CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: Hopper and later GPUs on NVSwitches
            // (multicast::supported).
            132 => c_int::from(multicast::supported(device)?),
            _ => 0,
        };
        write_out(value, v)
    }
);
drv_fn!(
    fn cuDevicePrimaryCtxGetState(device: c_int, flags: *mut c_uint, active: *mut c_int) {
        core()?.device_info(device)?;
        write_out(flags, 0)?;
        write_out(active, 1)
    }
);
drv_fn!(
    fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, device: c_int) {
        core()?.device_info(device)?;
        // A context is just a tagged device number (never 0).
        write_out(ctx, (device as usize + 1) as *mut c_void)
    }
);
drv_fn!(
    fn cuDevicePrimaryCtxRelease_v2(device: c_int) {
        // The primary context lives as long as the process; releasing it is a no-op.
        core()?.device_info(device)?;
        Ok(())
    }
);
drv_fn!(
    fn cuDevicePrimaryCtxReset_v2(device: c_int) {
        core()?.device_info(device)?;
        Ok(())
    }
);
drv_fn!(
    fn cuDevicePrimaryCtxSetFlags_v2(device: c_int, _flags: c_uint) {
        core()?.device_info(device)?;
        Ok(())
    }
);
drv_fn!(
    fn cuCtxGetDevice(device: *mut c_int) {
        write_out(device, core()?.get_device()?)
    }
);
drv_fn!(
    fn cuCtxGetFlags(flags: *mut c_uint) {
        write_out(flags, 0)
    }
);
drv_fn!(
    fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) {
        // The priorities `cuStreamCreateWithPriority` accepts (it clamps to -5..=0).
        if !least.is_null() {
            write_out(least, 0)?;
        }
        if !greatest.is_null() {
            write_out(greatest, -5)?;
        }
        Ok(())
    }
);
drv_fn!(
    fn cuCtxGetCurrent(ctx: *mut *mut c_void) {
        write_out(ctx, (core()?.get_device()? as usize + 1) as *mut c_void)
    }
);
drv_fn!(
    fn cuCtxSetCurrent(ctx: *mut c_void) {
        if ctx.is_null() {
            return Ok(());
        }
        Ok(core()?.set_device(ctx as usize as c_int - 1)?)
    }
);
drv_fn!(
    fn cuCtxPushCurrent_v2(ctx: *mut c_void) {
        // One context per device, current per thread: pushing makes it current (the
        // previous one is not restored by a pop).
        if ctx.is_null() {
            return Err(DriverError::Code(INVALID_VALUE));
        }
        Ok(core()?.set_device(ctx as usize as c_int - 1)?)
    }
);
drv_fn!(
    fn cuCtxPopCurrent_v2(ctx: *mut *mut c_void) {
        let current = (core()?.get_device()? as usize + 1) as *mut c_void;
        if !ctx.is_null() {
            write_out(ctx, current)?;
        }
        Ok(())
    }
);
drv_fn!(
    fn cuMemAlloc_v2(ptr: *mut u64, size: usize) {
        let c = core()?;
        write_out(ptr, c.malloc(c.get_device()?, size)? as u64)
    }
);
drv_fn!(
    fn cuMemFree_v2(ptr: u64) {
        Ok(core()?.free(ptr as usize)?)
    }
);
drv_fn!(
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        let c = core()?;
        let (f, t) = c.mem_info(c.get_device()?)?;
        write_out(free, f as usize)?;
        write_out(total, t as usize)
    }
);
drv_fn!(
    fn cuPointerGetAttribute(data: *mut c_void, attr: c_int, ptr: u64) {
        let i = core()?.pointer_info(ptr as usize)?;
        match attr {
            // CU_POINTER_ATTRIBUTE_MEMORY_TYPE: host 1, device 2 (same as cudaMemoryType).
            2 if i.kind != 0 => write_out(data.cast::<c_uint>(), i.kind as c_uint),
            // CU_POINTER_ATTRIBUTE_DEVICE_POINTER.
            3 if i.kind != 0 => write_out(data.cast::<u64>(), ptr),
            _ => Err(DriverError::Code(INVALID_VALUE)),
        }
    }
);

// ---- memory copies, streams, events, IPC ----------------------------------------------------
// Streams and events are the core's, so a `CUstream` and a `cudaStream_t` are the same handle
// (as with NVIDIA's libraries).

/// `CUstream` / `CUevent`.
pub type CUhandle = *mut c_void;
/// `CUipcMemHandle` / `CUipcEventHandle`: 64 opaque bytes (our encoding: fake_cuda_core::ipc).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUipcHandle {
    /// Opaque bytes.
    pub reserved: [u8; 64],
}
const _: () = assert!(std::mem::size_of::<CUipcHandle>() == 64);

/// The legacy default stream, which synchronous copies use.
const LEGACY: u64 = 0;
/// `cudaMemcpyDefault`: the core infers the direction from the pointers.
const COPY_DEFAULT: c_int = 4;

/// A synchronous copy of `n` bytes.
///
/// # Safety
/// Host sides must be valid for the copy (readable `src`, writable `dst`).
unsafe fn copy_sync(dst: u64, src: u64, n: usize) -> Result<()> {
    let c = core()?;
    // SAFETY: this function's contract.
    unsafe { c.memcpy(dst as usize, src as usize, n, COPY_DEFAULT, LEGACY) }?;
    Ok(c.stream_synchronize(LEGACY)?)
}

drv_fn!(
    fn cuMemcpy(dst: u64, src: u64, n: usize) {
        // SAFETY: the caller's host sides are valid for the copy (the driver API's contract).
        unsafe { copy_sync(dst, src, n) }
    }
);
drv_fn!(
    fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) {
        // SAFETY: the caller's `src` holds `n` bytes (the driver API's contract).
        unsafe { copy_sync(dst, src as u64, n) }
    }
);
drv_fn!(
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) {
        // SAFETY: the caller's `dst` has room for `n` bytes (the driver API's contract).
        unsafe { copy_sync(dst as u64, src, n) }
    }
);
drv_fn!(
    fn cuMemcpyAsync(dst: u64, src: u64, n: usize, stream: CUhandle) {
        let c = core()?;
        // SAFETY: the caller's host sides stay valid until the copy runs (the driver API's
        // contract).
        Ok(unsafe { c.memcpy(dst as usize, src as usize, n, COPY_DEFAULT, stream as u64) }?)
    }
);
drv_fn!(
    fn cuMemsetD8_v2(dst: u64, value: u8, n: usize) {
        let c = core()?;
        c.memset(dst as usize, c_int::from(value), n, LEGACY)?;
        Ok(c.stream_synchronize(LEGACY)?)
    }
);
drv_fn!(
    fn cuMemsetD8Async(dst: u64, value: u8, n: usize, stream: CUhandle) {
        Ok(core()?.memset(dst as usize, c_int::from(value), n, stream as u64)?)
    }
);

drv_fn!(
    fn cuStreamCreate(stream: *mut CUhandle, flags: c_uint) {
        if stream.is_null() {
            return Err(DriverError::Code(INVALID_VALUE));
        }
        write_out(stream, core()?.stream_create(flags & 1, 0)? as CUhandle)
    }
);
drv_fn!(
    fn cuStreamCreateWithPriority(stream: *mut CUhandle, flags: c_uint, priority: c_int) {
        if stream.is_null() {
            return Err(DriverError::Code(INVALID_VALUE));
        }
        let s = core()?.stream_create(flags & 1, priority.clamp(-5, 0))?;
        write_out(stream, s as CUhandle)
    }
);
drv_fn!(
    fn cuStreamDestroy_v2(stream: CUhandle) {
        Ok(core()?.stream_destroy(stream as u64)?)
    }
);
drv_fn!(
    fn cuStreamSynchronize(stream: CUhandle) {
        Ok(core()?.stream_synchronize(stream as u64)?)
    }
);
drv_fn!(
    fn cuStreamQuery(stream: CUhandle) {
        Ok(core()?.stream_query(stream as u64)?)
    }
);
drv_fn!(
    fn cuStreamWaitEvent(stream: CUhandle, event: CUhandle, _flags: c_uint) {
        Ok(core()?.stream_wait_event(stream as u64, event as u64)?)
    }
);
drv_fn!(
    fn cuStreamGetPriority(stream: CUhandle, priority: *mut c_int) {
        write_out(priority, core()?.stream_info(stream as u64)?.priority)
    }
);
drv_fn!(
    fn cuStreamGetFlags(stream: CUhandle, flags: *mut c_uint) {
        write_out(flags, core()?.stream_info(stream as u64)?.flags)
    }
);
drv_fn!(
    fn cuCtxSynchronize() {
        Ok(core()?.device_synchronize()?)
    }
);

drv_fn!(
    fn cuEventCreate(event: *mut CUhandle, flags: c_uint) {
        if event.is_null() || flags & !0xf != 0 {
            return Err(DriverError::Code(INVALID_VALUE));
        }
        write_out(event, core()?.event_create(flags & 0x7)? as CUhandle)
    }
);
drv_fn!(
    fn cuEventDestroy_v2(event: CUhandle) {
        Ok(core()?.event_destroy(event as u64)?)
    }
);
drv_fn!(
    fn cuEventRecord(event: CUhandle, stream: CUhandle) {
        Ok(core()?.event_record(event as u64, stream as u64)?)
    }
);
drv_fn!(
    fn cuEventQuery(event: CUhandle) {
        Ok(core()?.event_query(event as u64)?)
    }
);
drv_fn!(
    fn cuEventSynchronize(event: CUhandle) {
        Ok(core()?.event_synchronize(event as u64)?)
    }
);
drv_fn!(
    fn cuEventElapsedTime(ms: *mut f32, start: CUhandle, end: CUhandle) {
        write_out(ms, core()?.event_elapsed_ms(start as u64, end as u64)?)
    }
);
drv_fn!(
    fn cuEventElapsedTime_v2(ms: *mut f32, start: CUhandle, end: CUhandle) {
        write_out(ms, core()?.event_elapsed_ms(start as u64, end as u64)?)
    }
);

drv_fn!(
    fn cuIpcGetMemHandle(handle: *mut CUipcHandle, ptr: u64) {
        let h = core()?.ipc_get_mem_handle(ptr as usize)?;
        write_out(handle, CUipcHandle { reserved: h })
    }
);
fn ipc_open(ptr: *mut u64, handle: CUipcHandle) -> Result<()> {
    if ptr.is_null() {
        return Err(DriverError::Code(INVALID_VALUE));
    }
    write_out(ptr, core()?.ipc_open_mem_handle(&handle.reserved)? as u64)
}
drv_fn!(
    fn cuIpcOpenMemHandle(ptr: *mut u64, handle: CUipcHandle, _flags: c_uint) {
        ipc_open(ptr, handle)
    }
);
drv_fn!(
    fn cuIpcOpenMemHandle_v2(ptr: *mut u64, handle: CUipcHandle, _flags: c_uint) {
        ipc_open(ptr, handle)
    }
);
drv_fn!(
    fn cuIpcCloseMemHandle(ptr: u64) {
        Ok(core()?.ipc_close_mem_handle(ptr as usize)?)
    }
);
drv_fn!(
    fn cuIpcGetEventHandle(handle: *mut CUipcHandle, event: CUhandle) {
        let h = core()?.ipc_get_event_handle(event as u64)?;
        write_out(handle, CUipcHandle { reserved: h })
    }
);
drv_fn!(
    fn cuIpcOpenEventHandle(event: *mut CUhandle, handle: CUipcHandle) {
        if event.is_null() {
            return Err(DriverError::Code(INVALID_VALUE));
        }
        write_out(
            event,
            core()?.ipc_open_event_handle(&handle.reserved)? as CUhandle,
        )
    }
);

drv_fn!(
    fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, device: c_int) {
        let d = core()?.device_info(device)?;
        let text = format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            d.pci[0], d.pci[1], d.pci[2], d.pci[3]
        );
        // SAFETY: the caller provides `len` bytes at `bus_id`.
        if !unsafe { ffi_boundary::write_c_string(bus_id, len.max(0) as usize, text.as_bytes()) } {
            return Err(DriverError::Code(INVALID_VALUE));
        }
        Ok(())
    }
);
drv_fn!(
    fn cuDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int) {
        let c = core()?;
        c.device_info(device)?;
        c.device_info(peer)?;
        write_out(can, c_int::from(device != peer))
    }
);

const ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (SUCCESS, c"CUDA_SUCCESS", c"no error"),
    (
        INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument",
    ),
    (OUT_OF_MEMORY, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (
        NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error",
    ),
    (
        NO_DEVICE,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (
        INVALID_DEVICE,
        c"CUDA_ERROR_INVALID_DEVICE",
        c"invalid device ordinal",
    ),
    (
        MAP_FAILED,
        c"CUDA_ERROR_MAP_FAILED",
        c"mapping of buffer object failed",
    ),
    (
        INVALID_HANDLE,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (
        NOT_FOUND,
        c"CUDA_ERROR_NOT_FOUND",
        c"named symbol not found",
    ),
    (NOT_READY, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (
        NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported",
    ),
    (800, c"CUDA_ERROR_NOT_PERMITTED", c"operation not permitted"),
    (
        STREAM_CAPTURE_UNSUPPORTED,
        c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        c"operation not permitted when stream is capturing",
    ),
    (
        graphs::GRAPH_EXEC_UPDATE_FAILURE,
        c"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
        c"the graph update was not performed because it included changes which violated \
          constraints specific to instantiated graph update",
    ),
    (UNKNOWN, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

drv_fn!(
    fn cuGetErrorString(error: CUresult, text: *mut *const c_char) {
        let e = ERRORS
            .iter()
            .find(|e| e.0 == error)
            .ok_or(DriverError::Code(INVALID_VALUE))?;
        write_out(text, e.2.as_ptr())
    }
);
drv_fn!(
    fn cuGetErrorName(error: CUresult, text: *mut *const c_char) {
        let e = ERRORS
            .iter()
            .find(|e| e.0 == error)
            .ok_or(DriverError::Code(INVALID_VALUE))?;
        write_out(text, e.1.as_ptr())
    }
);

/// Driver functions whose ABI changed: (name asked for, first CUDA version of the new ABI,
/// the export that implements it). `cuGetProcAddress` resolves a plain name to the newest ABI
/// the caller's CUDA version knows, as the real driver does.
const VERSIONED: &[(&str, c_int, &str)] = &[
    ("cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2"),
    ("cuMemAlloc", 3020, "cuMemAlloc_v2"),
    ("cuMemFree", 3020, "cuMemFree_v2"),
    ("cuMemGetInfo", 3020, "cuMemGetInfo_v2"),
    ("cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2"),
    ("cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2"),
    ("cuMemsetD8", 3020, "cuMemsetD8_v2"),
    ("cuMemsetD16", 3020, "cuMemsetD16_v2"),
    ("cuMemsetD32", 3020, "cuMemsetD32_v2"),
    ("cuMemGetAddressRange", 3020, "cuMemGetAddressRange_v2"),
    ("cuStreamDestroy", 4000, "cuStreamDestroy_v2"),
    ("cuCtxPushCurrent", 4000, "cuCtxPushCurrent_v2"),
    (
        "cuDevicePrimaryCtxRelease",
        11000,
        "cuDevicePrimaryCtxRelease_v2",
    ),
    (
        "cuDevicePrimaryCtxReset",
        11000,
        "cuDevicePrimaryCtxReset_v2",
    ),
    (
        "cuDevicePrimaryCtxSetFlags",
        11000,
        "cuDevicePrimaryCtxSetFlags_v2",
    ),
    ("cuCtxPopCurrent", 4000, "cuCtxPopCurrent_v2"),
    ("cuEventDestroy", 4000, "cuEventDestroy_v2"),
    ("cuLinkCreate", 6050, "cuLinkCreate_v2"),
    ("cuLinkAddData", 6050, "cuLinkAddData_v2"),
    ("cuIpcOpenMemHandle", 11000, "cuIpcOpenMemHandle_v2"),
    ("cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2"),
    ("cuGetProcAddress", 12000, "cuGetProcAddress_v2"),
    ("cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2"),
    // Newest first: the first entry the caller's version reaches is taken.
    ("cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags"),
    ("cuGraphInstantiate", 11000, "cuGraphInstantiate_v2"),
    ("cuGraphExecUpdate", 12000, "cuGraphExecUpdate_v2"),
    ("cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3"),
    ("cuStreamGetCaptureInfo", 11030, "cuStreamGetCaptureInfo_v2"),
];

/// The export of this library that `symbol` means at CUDA version `version`, if any.
fn resolve_symbol(symbol: &CStr, version: c_int) -> *mut c_void {
    let name = symbol.to_string_lossy();
    let target = VERSIONED
        .iter()
        .find(|(base, since, _)| *base == name && version >= *since)
        .map_or(name.as_ref(), |(_, _, target)| target);
    let Ok(target) = std::ffi::CString::new(target) else {
        return std::ptr::null_mut();
    };
    // SAFETY: `Dl_info` is plain C data (pointers and integers); all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `resolve_symbol` is code in this library; `info` is a valid out-parameter.
    if unsafe { libc::dladdr(resolve_symbol as *const c_void, &mut info) } == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: re-opening the already loaded library by its path only takes a reference.
    let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: valid handle and name; the result is an exported function or null.
    let p = unsafe { libc::dlsym(h, target.as_ptr()) };
    // SAFETY: balances the dlopen above; the library stays loaded.
    unsafe { libc::dlclose(h) };
    p
}

fn proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    status: *mut c_int,
) -> Result<()> {
    if symbol.is_null() {
        return Err(DriverError::Code(INVALID_VALUE));
    }
    // SAFETY: non-null C string by contract.
    let symbol = unsafe { CStr::from_ptr(symbol) };
    let p = resolve_symbol(symbol, version);
    write_out(pfn, p)?;
    if !status.is_null() {
        // CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND.
        write_out(status, if p.is_null() { 1 } else { 0 })?;
    }
    if p.is_null() {
        Err(DriverError::NoSymbol(symbol.to_string_lossy().into_owned()))
    } else {
        Ok(())
    }
}

drv_fn!(
    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: c_int,
        _flags: u64,
        status: *mut c_int,
    ) {
        proc_address(symbol, pfn, version, status)
    }
);
drv_fn!(
    fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, _flags: u64) {
        proc_address(symbol, pfn, version, std::ptr::null_mut())
    }
);

// Imported by torch's libcaffe2_nvrtc.so; no modules or kernels run on the fake device.
macro_rules! unsupported {
    ($($name:ident),* $(,)?) => {
        $(drv_fn!(fn $name() { Err(DriverError::Code(NOT_SUPPORTED)) });)*
    };
}
unsupported!(
    cuFuncGetAttribute,
    cuFuncSetAttribute,
    cuFuncSetCacheConfig,
    cuLaunchCooperativeKernel,
    cuLaunchKernel,
    cuLinkAddData_v2,
    cuLinkComplete,
    cuLinkCreate_v2,
    cuModuleGetFunction,
    cuModuleLoad,
    cuModuleLoadData,
    cuModuleLoadDataEx,
    cuModuleUnload,
    cuOccupancyMaxActiveBlocksPerMultiprocessor,
    cuTensorMapEncodeTiled,
);

mod fabric;
mod graphs;
mod multicast;
mod vmm;
