//! Fatbinary, kernel and variable registration, launch configuration and kernel launches.
//!
//! nvcc-generated constructors register every kernel's host stub with its device name; a
//! `<<<...>>>` launch pushes a configuration, and the stub pops it and calls
//! `cudaLaunchKernel(stub, ...)`. Kernels never run on the fake device: launches are counted by
//! name in the core (or refused with `NCCLSIM_STRICT_KERNELS=1`).

use crate::errors::RuntimeError;
use crate::types::{cudaFuncAttributes, cudaLaunchConfig_t, cudaStream_t, dim3};
use crate::{core, ffi_fn, per_thread, stream_id, write_out};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::Mutex;

/// Sizes of registered `__device__` / `__constant__` variables by host shadow address.
static VARIABLES: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

/// Size of the registered variable at `addr`, if any.
pub(crate) fn variable_size(addr: usize) -> Option<usize> {
    VARIABLES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&addr)
        .copied()
}

fn register_variable(addr: usize, size: usize) {
    if addr != 0 {
        VARIABLES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(addr, size);
    }
}

#[derive(Clone, Copy)]
struct CallConfiguration {
    grid: dim3,
    block: dim3,
    shared_mem: usize,
    stream: *mut c_void,
}

thread_local! {
    static CONFIGURATIONS: RefCell<Vec<CallConfiguration>> = const { RefCell::new(Vec::new()) };
}

ffi_fn!(fn __cudaRegisterFatBinary(fat_cubin: *mut c_void) -> *mut *mut c_void, panic = std::ptr::null_mut(); {
    // The handle is a heap cell holding the fatbin pointer, freed by __cudaUnregisterFatBinary.
    Box::into_raw(Box::new(fat_cubin))
});

ffi_fn!(fn __cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) -> (), panic = (); {});

ffi_fn!(fn __cudaUnregisterFatBinary(handle: *mut *mut c_void) -> (), panic = (); {
    if !handle.is_null() {
        // SAFETY: handles come from __cudaRegisterFatBinary and are unregistered once.
        drop(unsafe { Box::from_raw(handle) });
    }
});

ffi_fn!(fn __cudaInitModule(_handle: *mut *mut c_void) -> c_char, panic = 0; { 1 });

ffi_fn!(fn __cudaRegisterFunction(_handle: *mut *mut c_void, host_fun: *const c_char, _device_fun: *mut c_char,
                                  device_name: *const c_char, _thread_limit: c_int, _tid: *mut c_void,
                                  _bid: *mut c_void, _block_dim: *mut dim3, _grid_dim: *mut dim3,
                                  _warp_size: *mut c_int) -> (), panic = (); {
    if host_fun.is_null() || device_name.is_null() {
        return;
    }
    if let Ok(c) = core() {
        // SAFETY: nvcc passes a NUL-terminated mangled name.
        let name = unsafe { CStr::from_ptr(device_name) };
        let _ = c.register_function(host_fun as usize, name);
    }
});

ffi_fn!(fn __cudaRegisterVar(_handle: *mut *mut c_void, host_var: *mut c_char, _device_address: *mut c_char,
                             _device_name: *const c_char, _ext: c_int, size: usize, _constant: c_int,
                             _global: c_int) -> (), panic = (); {
    register_variable(host_var as usize, size);
});

ffi_fn!(fn __cudaRegisterManagedVar(_handle: *mut *mut c_void, host_var_ptr: *mut *mut c_void,
                                    _device_address: *mut c_char, _device_name: *const c_char, _ext: c_int,
                                    size: usize, _constant: c_int, _global: c_int) -> (), panic = (); {
    if !host_var_ptr.is_null() {
        // SAFETY: nvcc passes the address of the managed variable's pointer.
        register_variable(unsafe { *host_var_ptr } as usize, size);
    }
});

ffi_fn!(fn __cudaRegisterHostVar(_handle: *mut *mut c_void, _device_name: *const c_char,
                                 host_var: *mut c_char, size: usize) -> (), panic = (); {
    register_variable(host_var as usize, size);
});

ffi_fn!(fn __cudaPushCallConfiguration(grid: dim3, block: dim3, shared_mem: usize, stream: *mut c_void) -> c_uint, panic = 1; {
    CONFIGURATIONS.with(|c| c.borrow_mut().push(CallConfiguration { grid, block, shared_mem, stream }));
    0
});

ffi_fn!(
    fn __cudaPopCallConfiguration(
        grid: *mut dim3,
        block: *mut dim3,
        shared_mem: *mut usize,
        stream: *mut c_void,
    ) {
        let cfg = CONFIGURATIONS
            .with(|c| c.borrow_mut().pop())
            .ok_or_else(|| RuntimeError::Cuda {
                code: 52,
                message: "no pushed launch configuration".into(),
            })?;
        write_out(grid, cfg.grid)?;
        write_out(block, cfg.block)?;
        write_out(shared_mem, cfg.shared_mem)?;
        write_out(stream.cast::<*mut c_void>(), cfg.stream)
    }
);

fn launch(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    stream: cudaStream_t,
) -> crate::errors::Result<()> {
    if func.is_null() {
        return Err(RuntimeError::Cuda {
            code: 98,
            message: "null kernel".into(),
        });
    }
    let threads = u64::from(block.x) * u64::from(block.y) * u64::from(block.z);
    if threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 {
        return Err(RuntimeError::Cuda {
            code: 9,
            message: format!("launch grid {grid:?} block {block:?}"),
        });
    }
    Ok(core()?.launch_kernel(func as usize, stream_id(stream))?)
}

ffi_fn!(
    fn cudaLaunchKernel(
        func: *const c_void,
        grid: dim3,
        block: dim3,
        _args: *mut *mut c_void,
        _shared_mem: usize,
        stream: cudaStream_t,
    ) {
        launch(func, grid, block, stream)
    }
);

// CUDA 12.4+ nvcc stubs (and every CUDA 13 stub) look a kernel up once with `__cudaGetKernel`
// and launch it with `__cudaLaunchKernel`. A `cudaKernel_t` here is the kernel's host stub
// address, so both paths reach the same registry entry.

fn kernel_handle(kernel: *mut *mut c_void, entry: *const c_void) -> crate::errors::Result<()> {
    if entry.is_null() {
        return Err(RuntimeError::Cuda {
            code: 98,
            message: "null kernel entry function".into(),
        });
    }
    write_out(kernel, entry as *mut c_void)
}

ffi_fn!(
    fn __cudaGetKernel(kernel: *mut *mut c_void, entry: *const c_void) {
        kernel_handle(kernel, entry)
    }
);

ffi_fn!(
    fn cudaGetKernel(kernel: *mut *mut c_void, entry: *const c_void) {
        kernel_handle(kernel, entry)
    }
);

ffi_fn!(
    fn __cudaLaunchKernel(
        kernel: *mut c_void,
        grid: dim3,
        block: dim3,
        _args: *mut *mut c_void,
        _shared_mem: usize,
        stream: cudaStream_t,
    ) {
        launch(kernel, grid, block, stream)
    }
);

ffi_fn!(
    fn __cudaLaunchKernel_ptsz(
        kernel: *mut c_void,
        grid: dim3,
        block: dim3,
        _args: *mut *mut c_void,
        _shared_mem: usize,
        stream: cudaStream_t,
    ) {
        launch(kernel, grid, block, per_thread(stream))
    }
);

ffi_fn!(
    fn cudaLaunchCooperativeKernel(
        func: *const c_void,
        grid: dim3,
        block: dim3,
        _args: *mut *mut c_void,
        _shared_mem: usize,
        stream: cudaStream_t,
    ) {
        launch(func, grid, block, stream)
    }
);

ffi_fn!(
    fn cudaLaunchKernelExC(
        config: *const cudaLaunchConfig_t,
        func: *const c_void,
        _args: *mut *mut c_void,
    ) {
        if config.is_null() {
            return Err(RuntimeError::invalid("null launch config"));
        }
        // SAFETY: non-null config by the API contract.
        let cfg = unsafe { *config };
        launch(func, cfg.gridDim, cfg.blockDim, cfg.stream)
    }
);

ffi_fn!(
    fn cudaFuncGetAttributes(attr: *mut cudaFuncAttributes, func: *const c_void) {
        if func.is_null() {
            return Err(RuntimeError::Cuda {
                code: 98,
                message: "null kernel".into(),
            });
        }
        write_out(
            attr,
            cudaFuncAttributes {
                maxThreadsPerBlock: 1024,
                numRegs: 32,
                ptxVersion: 80,
                binaryVersion: 80,
                maxDynamicSharedSizeBytes: 48 << 10,
                preferredShmemCarveout: -1,
                ..cudaFuncAttributes::default()
            },
        )
    }
);

ffi_fn!(
    fn cudaFuncSetAttribute(func: *const c_void, _attr: c_int, _value: c_int) {
        if func.is_null() {
            return Err(RuntimeError::Cuda {
                code: 98,
                message: "null kernel".into(),
            });
        }
        Ok(())
    }
);

ffi_fn!(
    fn cudaFuncSetCacheConfig(_func: *const c_void, _config: c_int) {
        Ok(())
    }
);

fn occupancy(block_size: c_int) -> crate::errors::Result<c_int> {
    if !(1..=1024).contains(&block_size) {
        return Err(RuntimeError::invalid(format!("block size {block_size}")));
    }
    // 2048 threads and 32 blocks per multiprocessor (sm_80), ignoring registers and shared memory.
    Ok((2048 / block_size).min(32))
}

ffi_fn!(
    fn cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        blocks: *mut c_int,
        _func: *const c_void,
        block_size: c_int,
        _dynamic_smem: usize,
    ) {
        write_out(blocks, occupancy(block_size)?)
    }
);

ffi_fn!(
    fn cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        blocks: *mut c_int,
        _func: *const c_void,
        block_size: c_int,
        _dynamic_smem: usize,
        _flags: c_uint,
    ) {
        write_out(blocks, occupancy(block_size)?)
    }
);
