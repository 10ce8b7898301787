//! `libcuda.so.1`: the driver API subset torch's `libcaffe2_nvrtc.so` imports and programs reach
//! through `cuGetProcAddress`, over the same process-wide core as `libcudart.so.12`.
//!
//! Every export is written with [`drv_fn!`]: panics are caught and errors become `CUresult`.
//! Module, linker and kernel entry points exist so that loaders resolve them, and return
//! `CUDA_ERROR_NOT_SUPPORTED`.

#![allow(non_snake_case)]

use fake_cuda_core::client::{client, Client};
use fake_cuda_core::{CoreError, Status};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// `CUresult`.
pub type CUresult = c_int;

const SUCCESS: CUresult = 0;
const INVALID_VALUE: CUresult = 1;
const OUT_OF_MEMORY: CUresult = 2;
const NOT_INITIALIZED: CUresult = 3;
const NO_DEVICE: CUresult = 100;
const INVALID_DEVICE: CUresult = 101;
const MAP_FAILED: CUresult = 205;
const INVALID_HANDLE: CUresult = 400;
const NOT_READY: CUresult = 600;
const NOT_SUPPORTED: CUresult = 801;
const UNKNOWN: CUresult = 999;

/// The driver version reported (CUDA 12.9).
const DRIVER_VERSION: c_int = 12090;

/// Error of the driver front-end.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Reported by the core.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Decided here.
    #[error("CUresult {0}")]
    Code(CUresult),
}

impl DriverError {
    fn code(&self) -> CUresult {
        match self {
            DriverError::Code(c) => *c,
            DriverError::Core(CoreError::Load(_)) => NOT_INITIALIZED,
            DriverError::Core(e) => match e.status() {
                Status::Success => SUCCESS,
                Status::InvalidDevice => INVALID_DEVICE,
                Status::NoDevice => NO_DEVICE,
                Status::OutOfMemory | Status::Os => OUT_OF_MEMORY,
                Status::InvalidValue | Status::InvalidPointer => INVALID_VALUE,
                Status::InvalidHandle | Status::InvalidIpcHandle => INVALID_HANDLE,
                Status::NotReady => NOT_READY,
                Status::IpcMapFailed => MAP_FAILED,
                Status::KernelRefused | Status::NotSupported => NOT_SUPPORTED,
                Status::Internal => UNKNOWN,
            },
        }
    }
}

type Result<T> = std::result::Result<T, DriverError>;

fn boundary(function: &str, body: impl FnOnce() -> Result<()>) -> CUresult {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => {
            if std::env::var("NCCLSIM_DEBUG").is_ok_and(|v| v != "0") {
                eprintln!("ncclsim libcuda: {function}: {e}");
            }
            e.code()
        }
        Err(_) => UNKNOWN,
    }
}

/// Wraps an exported driver function: panic boundary and `CUresult` mapping.
macro_rules! drv_fn {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        #[unsafe(no_mangle)]
        #[allow(clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            boundary(stringify!($name), move || -> Result<()> { $body })
        }
    };
}

fn core() -> Result<&'static Client> {
    Ok(client()?)
}

fn write_out<T>(out: *mut T, value: T) -> Result<()> {
    if out.is_null() {
        return Err(DriverError::Code(INVALID_VALUE));
    }
    // SAFETY: non-null; valid by the driver API's out-parameter contract.
    unsafe { out.write(value) };
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
        if name.is_null() || len <= 0 {
            return Err(DriverError::Code(INVALID_VALUE));
        }
        let n = d
            .name
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(255)
            .min(len as usize - 1);
        // SAFETY: the caller provides `len` bytes; we write n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(d.name.as_ptr(), name, n);
            *name.add(n) = 0;
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
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (NOT_READY, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (
        NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported",
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

/// Looks a driver function up among this library's own exports.
fn own_symbol(name: *const c_char) -> Result<*mut c_void> {
    if name.is_null() {
        return Err(DriverError::Code(INVALID_VALUE));
    }
    // SAFETY: non-null C string by contract.
    let name = unsafe { CStr::from_ptr(name) };
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `own_symbol` is code in this library; `info` is a valid out-parameter.
    if unsafe { libc::dladdr(own_symbol as *const c_void, &mut info) } == 0 {
        return Ok(std::ptr::null_mut());
    }
    // SAFETY: re-opening the already loaded library by its path only takes a reference.
    let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return Ok(std::ptr::null_mut());
    }
    // SAFETY: valid handle and name; the result is an exported function or null.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    // SAFETY: balances the dlopen above; the library stays loaded.
    unsafe { libc::dlclose(h) };
    Ok(p)
}

drv_fn!(
    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        _version: c_int,
        _flags: u64,
        status: *mut c_int,
    ) {
        let p = own_symbol(symbol)?;
        write_out(pfn, p)?;
        if !status.is_null() {
            // CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND.
            write_out(status, if p.is_null() { 1 } else { 0 })?;
        }
        if p.is_null() {
            Err(DriverError::Code(500))
        } else {
            Ok(())
        }
    }
);
drv_fn!(
    fn cuGetProcAddress(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        _version: c_int,
        _flags: u64,
    ) {
        let p = own_symbol(symbol)?;
        write_out(pfn, p)?;
        if p.is_null() {
            Err(DriverError::Code(500))
        } else {
            Ok(())
        }
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
