//! Devices, versions, errors and driver entry points.

use crate::errors::{self, RuntimeError};
use crate::types::{cudaDeviceProp, cudaError_t, cudaUUID_t};
use crate::{core, ffi_fn, write_out, CUDA_VERSION};
use fake_cuda_abi::{CDeviceInfo, PROFILER_START, PROFILER_STOP};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};

/// `cudaDeviceProp` for a device, with the values a real one of that model reports where our
/// description has them and typical sm_80-class limits elsewhere.
fn properties(d: &CDeviceInfo) -> cudaDeviceProp {
    let mut p = cudaDeviceProp {
        name: d.name,
        uuid: cudaUUID_t {
            bytes: d.uuid.map(|b| b as c_char),
        },
        totalGlobalMem: d.total_memory as usize,
        sharedMemPerBlock: 48 << 10,
        regsPerBlock: 65536,
        warpSize: 32,
        memPitch: i32::MAX as usize,
        maxThreadsPerBlock: 1024,
        maxThreadsDim: [1024, 1024, 64],
        maxGridSize: [i32::MAX, 65535, 65535],
        #[cfg(not(cuda13))]
        clockRate: d.clock_khz,
        totalConstMem: 64 << 10,
        major: d.sm_major,
        minor: d.sm_minor,
        textureAlignment: 512,
        texturePitchAlignment: 32,
        #[cfg(not(cuda13))]
        deviceOverlap: 1,
        multiProcessorCount: d.multiprocessor_count,
        canMapHostMemory: 1,
        surfaceAlignment: 512,
        concurrentKernels: 1,
        ECCEnabled: 1,
        pciBusID: d.pci[1] as i32,
        pciDeviceID: d.pci[2] as i32,
        pciDomainID: d.pci[0] as i32,
        asyncEngineCount: 2,
        unifiedAddressing: 1,
        #[cfg(not(cuda13))]
        memoryClockRate: d.memory_clock_khz,
        memoryBusWidth: d.memory_bus_width,
        l2CacheSize: d.l2_cache_bytes,
        maxThreadsPerMultiProcessor: 2048,
        streamPrioritiesSupported: 1,
        globalL1CacheSupported: 1,
        localL1CacheSupported: 1,
        sharedMemPerMultiprocessor: d.shared_mem_per_multiprocessor as usize,
        regsPerMultiprocessor: 65536,
        managedMemory: 1,
        #[cfg(not(cuda13))]
        singleToDoublePrecisionPerfRatio: 2,
        concurrentManagedAccess: 1,
        computePreemptionSupported: 1,
        cooperativeLaunch: 1,
        #[cfg(not(cuda13))]
        cooperativeMultiDeviceLaunch: 1,
        sharedMemPerBlockOptin: d.shared_mem_per_block_optin as usize,
        maxBlocksPerMultiProcessor: 32,
        reservedSharedMemPerBlock: 1024,
        hostRegisterSupported: 1,
        memoryPoolsSupported: 1,
        ipcEventSupported: 1,
        #[cfg(cuda13)]
        deviceNumaId: -1,
        #[cfg(cuda13)]
        hostNumaId: -1,
        ..cudaDeviceProp::default()
    };
    p.maxTexture1D = 131072;
    p.maxTexture2D = [131072, 65536];
    p.maxTexture3D = [16384, 16384, 16384];
    p
}

/// `cudaDeviceGetAttribute` values (cudaDeviceAttr numbering); 0 for attributes we don't model.
fn attribute(d: &CDeviceInfo, attr: c_int) -> c_int {
    let p = properties(d);
    match attr {
        1 => p.maxThreadsPerBlock,
        2..=4 => p.maxThreadsDim[(attr - 2) as usize],
        5..=7 => p.maxGridSize[(attr - 5) as usize],
        8 => p.sharedMemPerBlock as c_int,
        9 => p.totalConstMem as c_int,
        10 => p.warpSize,
        11 => p.memPitch as c_int,
        12 => p.regsPerBlock,
        13 => d.clock_khz,
        14 => p.textureAlignment as c_int,
        15 => 1,
        16 => p.multiProcessorCount,
        19 => p.canMapHostMemory,
        30 => p.surfaceAlignment as c_int,
        31 => p.concurrentKernels,
        32 => p.ECCEnabled,
        33 => p.pciBusID,
        34 => p.pciDeviceID,
        36 => d.memory_clock_khz,
        37 => p.memoryBusWidth,
        38 => p.l2CacheSize,
        39 => p.maxThreadsPerMultiProcessor,
        40 => p.asyncEngineCount,
        41 => p.unifiedAddressing,
        50 => p.pciDomainID,
        51 => p.texturePitchAlignment as c_int,
        75 => p.major,
        76 => p.minor,
        78 => p.streamPrioritiesSupported,
        79 => p.globalL1CacheSupported,
        80 => p.localL1CacheSupported,
        81 => p.sharedMemPerMultiprocessor as c_int,
        82 => p.regsPerMultiprocessor,
        83 => p.managedMemory,
        87 => 2,
        89 => p.concurrentManagedAccess,
        90 => p.computePreemptionSupported,
        95 => p.cooperativeLaunch,
        96 => 1,
        97 => p.sharedMemPerBlockOptin as c_int,
        99 => p.hostRegisterSupported,
        _ => 0,
    }
}

ffi_fn!(
    fn cudaGetDeviceCount(count: *mut c_int) {
        let n = core()?.device_count()?;
        write_out(count, n)?;
        if n == 0 {
            return Err(RuntimeError::Cuda {
                code: errors::NO_DEVICE,
                message: "no device visible".into(),
            });
        }
        Ok(())
    }
);

ffi_fn!(
    fn cudaGetDevice(device: *mut c_int) {
        write_out(device, core()?.get_device()?)
    }
);

ffi_fn!(
    fn cudaSetDevice(device: c_int) {
        Ok(core()?.set_device(device)?)
    }
);

ffi_fn!(
    fn cudaInitDevice(device: c_int, _device_flags: c_uint, _flags: c_uint) {
        core()?.device_info(device)?;
        Ok(())
    }
);

ffi_fn!(
    fn cudaSetDeviceFlags(_flags: c_uint) {
        core()?;
        Ok(())
    }
);

ffi_fn!(
    fn cudaGetDeviceFlags(flags: *mut c_uint) {
        write_out(flags, 0)
    }
);

ffi_fn!(
    #[cfg(not(cuda13))]
    fn cudaGetDeviceProperties_v2(prop: *mut cudaDeviceProp, device: c_int) {
        let d = core()?.device_info(device)?;
        write_out(prop, properties(&d))
    }
);

ffi_fn!(
    fn cudaGetDeviceProperties(prop: *mut cudaDeviceProp, device: c_int) {
        let c = core()?;
        let d = c.device_info(device)?;
        #[allow(unused_mut)]
        let mut p = properties(&d);
        #[cfg(cuda13)]
        {
            // CUDA 13 also reports the board's PCI ids and the host NUMA node.
            let t = c.physical_device_topology(d.physical_index)?;
            p.gpuPciDeviceID = (t.pci_device_id << 16) | 0x10de;
            p.gpuPciSubsystemID = t.pci_subsystem_id;
            p.hostNumaId = t.numa_node;
        }
        write_out(prop, p)
    }
);

ffi_fn!(
    fn cudaDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) {
        let d = core()?.device_info(device)?;
        write_out(value, attribute(&d, attr))
    }
);

ffi_fn!(
    fn cudaDeviceGetPCIBusId(pci_bus_id: *mut c_char, len: c_int, device: c_int) {
        let d = core()?.device_info(device)?;
        let text = format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            d.pci[0], d.pci[1], d.pci[2], d.pci[3]
        );
        if pci_bus_id.is_null() || len <= text.len() as c_int {
            return Err(RuntimeError::invalid(format!(
                "buffer of {len} bytes for {text}"
            )));
        }
        // SAFETY: the caller provides `len` writable bytes; we write text.len() + 1 < len.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), pci_bus_id.cast::<u8>(), text.len());
            *pci_bus_id.add(text.len()) = 0;
        }
        Ok(())
    }
);

ffi_fn!(
    fn cudaDeviceGetByPCIBusId(device: *mut c_int, pci_bus_id: *const c_char) {
        if pci_bus_id.is_null() {
            return Err(RuntimeError::invalid("null PCI bus id"));
        }
        // SAFETY: non-null C string by the API contract.
        let want = unsafe { CStr::from_ptr(pci_bus_id) }
            .to_string_lossy()
            .to_lowercase();
        let c = core()?;
        for i in 0..c.device_count()? {
            let d = c.device_info(i)?;
            let full = format!(
                "{:04x}:{:02x}:{:02x}.{:x}",
                d.pci[0], d.pci[1], d.pci[2], d.pci[3]
            );
            // Accept "bb:dd.f" and "dddd:bb:dd.f", with any zero padding of the domain.
            if full == want || full.ends_with(&format!(":{want}")) || want.ends_with(&full[4..]) {
                return write_out(device, i);
            }
        }
        Err(RuntimeError::Cuda {
            code: errors::INVALID_DEVICE,
            message: format!("no device at {want}"),
        })
    }
);

ffi_fn!(
    fn cudaDeviceGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) {
        // Same range as current NVIDIA GPUs: 0 (lowest) to -5 (highest).
        if !least.is_null() {
            write_out(least, 0)?;
        }
        if !greatest.is_null() {
            write_out(greatest, -5)?;
        }
        Ok(())
    }
);

ffi_fn!(
    fn cudaDeviceCanAccessPeer(can: *mut c_int, device: c_int, peer: c_int) {
        let c = core()?;
        c.device_info(device)?;
        c.device_info(peer)?;
        write_out(can, c_int::from(device != peer))
    }
);

ffi_fn!(
    fn cudaDeviceEnablePeerAccess(peer: c_int, _flags: c_uint) {
        core()?.device_info(peer)?;
        Ok(())
    }
);

ffi_fn!(
    fn cudaDeviceDisablePeerAccess(peer: c_int) {
        core()?.device_info(peer)?;
        Ok(())
    }
);

ffi_fn!(
    fn cudaDeviceSynchronize() {
        Ok(core()?.device_synchronize()?)
    }
);

ffi_fn!(
    fn cudaDeviceReset() {
        // Waits for the current device and frees every allocation on it.
        let c = core()?;
        Ok(c.device_reset(c.get_device()?)?)
    }
);

ffi_fn!(
    fn cudaDeviceGraphMemTrim(device: c_int) {
        // Freed device memory keeps its pages for reuse (as CUDA's pools and graph memory
        // do); this gives them back to the system.
        core()?.trim_device(device)?;
        Ok(())
    }
);

ffi_fn!(
    #[cfg(not(cuda13))]
    fn cudaThreadSynchronize() {
        Ok(core()?.device_synchronize()?)
    }
);

ffi_fn!(
    fn cudaDeviceGetLimit(value: *mut usize, limit: c_int) {
        let v = match limit {
            0 => 1024,    // stack size
            1 => 1 << 20, // printf FIFO
            2 => 8 << 20, // malloc heap
            3 => 2,       // device runtime sync depth
            4 => 2048,    // device runtime pending launches
            5 => 64,      // L2 fetch granularity
            6 => 0,       // persisting L2 cache
            _ => return Err(RuntimeError::invalid(format!("cudaLimit {limit}"))),
        };
        write_out(value, v)
    }
);

ffi_fn!(
    fn cudaDeviceSetLimit(limit: c_int, _value: usize) {
        if !(0..=6).contains(&limit) {
            return Err(RuntimeError::invalid(format!("cudaLimit {limit}")));
        }
        Ok(())
    }
);

ffi_fn!(
    fn cudaDeviceSetCacheConfig(_config: c_int) {
        Ok(())
    }
);

ffi_fn!(
    fn cudaDeviceGetCacheConfig(config: *mut c_int) {
        write_out(config, 0)
    }
);

ffi_fn!(
    fn cudaDriverGetVersion(version: *mut c_int) {
        write_out(version, fake_cuda_abi::version::DRIVER_CUDA_VERSION)
    }
);

ffi_fn!(
    fn cudaRuntimeGetVersion(version: *mut c_int) {
        write_out(version, CUDA_VERSION)
    }
);

ffi_fn!(fn cudaGetLastError() -> cudaError_t, panic = errors::UNKNOWN; { errors::take_last() });

ffi_fn!(fn cudaPeekAtLastError() -> cudaError_t, panic = errors::UNKNOWN; { errors::peek_last() });

ffi_fn!(fn cudaGetErrorName(code: cudaError_t) -> *const c_char, panic = c"cudaErrorUnknown".as_ptr(); {
    errors::name(code).as_ptr()
});

ffi_fn!(fn cudaGetErrorString(code: cudaError_t) -> *const c_char, panic = c"unknown error".as_ptr(); {
    errors::description(code).as_ptr()
});

// The profiler range marks a region of the program (`nsys --capture-range=cudaProfilerApi`);
// the core counts the ranges so other libraries can tell which range their work falls in.
ffi_fn!(
    fn cudaProfilerStart() {
        core()?.profiler(PROFILER_START)?;
        Ok(())
    }
);

ffi_fn!(
    fn cudaProfilerStop() {
        core()?.profiler(PROFILER_STOP)?;
        Ok(())
    }
);

/// `cudaDriverEntryPointSymbolNotFound`.
const ENTRY_POINT_SYMBOL_NOT_FOUND: c_int = 1;

/// `cuGetProcAddress_v2` of the fake `libcuda.so.1`.
type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, c_ulonglong, *mut c_int) -> c_int;

/// Finds `libcuda.so.1`'s `cuGetProcAddress_v2`: the copy already loaded, else the one the
/// loader finds, else the one next to this library (under the name the loader used for it).
fn driver_get_proc_address() -> Option<GetProcAddress> {
    static FOUND: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let addr = *FOUND.get_or_init(|| {
        let mut candidates = vec![c"libcuda.so.1".to_owned()];
        // SAFETY: `Dl_info` is plain C data (pointers and integers); all zeroes is a valid value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: `driver_get_proc_address` is code in this library; `info` is an out-param.
        if unsafe { libc::dladdr(driver_get_proc_address as *const c_void, &mut info) } != 0
            && !info.dli_fname.is_null()
        {
            // SAFETY: dladdr filled a NUL-terminated path.
            let me = unsafe { CStr::from_ptr(info.dli_fname) }
                .to_string_lossy()
                .into_owned();
            if let Some(dir) = std::path::Path::new(&me).parent() {
                let path = dir.join("libcuda.so.1").to_string_lossy().into_owned();
                candidates.extend(std::ffi::CString::new(path));
            }
        }
        let flags = [libc::RTLD_NOW | libc::RTLD_NOLOAD, libc::RTLD_NOW];
        for flag in flags {
            for name in &candidates {
                // SAFETY: valid C string; loading the fake driver has no side effects.
                let h = unsafe { libc::dlopen(name.as_ptr(), flag) };
                if h.is_null() {
                    continue;
                }
                // SAFETY: valid handle and symbol name.
                let f = unsafe { libc::dlsym(h, c"cuGetProcAddress_v2".as_ptr()) };
                if !f.is_null() {
                    return Some(f as usize);
                }
            }
        }
        None
    });
    // SAFETY: the address is `cuGetProcAddress_v2`, whose C signature GetProcAddress spells.
    addr.map(|a| unsafe { std::mem::transmute::<usize, GetProcAddress>(a) })
}

/// `cudaGetDriverEntryPoint[ByVersion]`: the fake driver's implementation of `symbol` as a
/// program built for CUDA `version` means it, or "not found".
fn entry_point(
    symbol: *const c_char,
    func: *mut *mut c_void,
    version: c_uint,
    status: *mut c_int,
) -> crate::errors::Result<()> {
    if symbol.is_null() {
        return Err(RuntimeError::invalid("null symbol"));
    }
    let mut p = std::ptr::null_mut();
    if let Some(get) = driver_get_proc_address() {
        let mut found = 0;
        // SAFETY: valid C string and out-pointers; "not found" leaves `p` null.
        unsafe { get(symbol, &mut p, version as c_int, 0, &mut found) };
    }
    write_out(func, p)?;
    if !status.is_null() {
        write_out(
            status,
            if p.is_null() {
                ENTRY_POINT_SYMBOL_NOT_FOUND
            } else {
                0
            },
        )?;
    } else if p.is_null() {
        // SAFETY: non-null C string (checked above).
        let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy();
        return Err(RuntimeError::Cuda {
            code: errors::SYMBOL_NOT_FOUND,
            message: format!("no driver entry point {name}"),
        });
    }
    Ok(())
}

ffi_fn!(
    fn cudaGetDriverEntryPoint(
        symbol: *const c_char,
        func: *mut *mut c_void,
        _flags: c_ulonglong,
        status: *mut c_int,
    ) {
        entry_point(symbol, func, CUDA_VERSION as c_uint, status)
    }
);

ffi_fn!(
    fn cudaGetDriverEntryPointByVersion(
        symbol: *const c_char,
        func: *mut *mut c_void,
        version: c_uint,
        _flags: c_ulonglong,
        status: *mut c_int,
    ) {
        entry_point(symbol, func, version, status)
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_agree_with_properties() {
        let d = CDeviceInfo {
            sm_major: 8,
            pci: [0, 0x4e, 0, 0],
            multiprocessor_count: 108,
            ..CDeviceInfo::default()
        };
        assert_eq!(attribute(&d, 75), 8);
        assert_eq!(attribute(&d, 33), 0x4e);
        assert_eq!(attribute(&d, 16), 108);
        assert_eq!(attribute(&d, 10), 32);
        assert_eq!(attribute(&d, 9999), 0);
    }
}
