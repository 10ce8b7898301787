//! Device and host memory, copies, memsets, pointer attributes and IPC handles.

use crate::errors::Result;
use crate::errors::{self, RuntimeError};
use crate::types::{cudaEvent_t, cudaIpcHandle, cudaPointerAttributes, cudaStream_t};
use crate::{core, ffi_fn, stream_id, write_out};
use fake_cuda_client::Client;
use std::ffi::{c_int, c_uint, c_void};

/// The legacy default stream, which synchronous copies use.
const LEGACY: u64 = 0;

fn copy_kind(kind: c_int) -> Result<c_int> {
    if (0..=4).contains(&kind) {
        Ok(kind)
    } else {
        Err(RuntimeError::Cuda {
            code: errors::INVALID_MEMCPY_DIRECTION,
            message: format!("cudaMemcpyKind {kind}"),
        })
    }
}

/// Allocates `size` bytes on the current device into `*dev_ptr`.
fn device_alloc(dev_ptr: *mut *mut c_void, size: usize) -> Result<()> {
    if dev_ptr.is_null() {
        return Err(RuntimeError::invalid("null devPtr"));
    }
    let c = core()?;
    let p = c.malloc(c.get_device()?, size)?;
    write_out(dev_ptr, p as *mut c_void)
}

/// The synchronous form of a stream operation: run it on the legacy default stream and wait.
fn on_legacy_and_wait(op: impl FnOnce(&Client, u64) -> Result<()>) -> Result<()> {
    let c = core()?;
    op(c, LEGACY)?;
    Ok(c.stream_synchronize(LEGACY)?)
}

ffi_fn!(
    fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) {
        device_alloc(dev_ptr, size)
    }
);

ffi_fn!(
    fn cudaMallocAsync(dev_ptr: *mut *mut c_void, size: usize, _stream: cudaStream_t) {
        device_alloc(dev_ptr, size)
    }
);

ffi_fn!(
    fn cudaMallocManaged(dev_ptr: *mut *mut c_void, size: usize, _flags: c_uint) {
        // Device memory is host-accessible here, so managed memory is plain device memory.
        device_alloc(dev_ptr, size)
    }
);

ffi_fn!(
    fn cudaMallocPitch(dev_ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) {
        if dev_ptr.is_null() || pitch.is_null() {
            return Err(RuntimeError::invalid("null devPtr or pitch"));
        }
        let p = width.max(1).next_multiple_of(512);
        let total = p
            .checked_mul(height.max(1))
            .ok_or_else(|| RuntimeError::invalid("pitched size overflows"))?;
        let c = core()?;
        let ptr = c.malloc(c.get_device()?, total)?;
        write_out(pitch, p)?;
        write_out(dev_ptr, ptr as *mut c_void)
    }
);

ffi_fn!(
    fn cudaFree(dev_ptr: *mut c_void) {
        // cudaFree(NULL) is the classic way to initialise the runtime: it must succeed.
        Ok(core()?.free(dev_ptr as usize)?)
    }
);

ffi_fn!(
    fn cudaFreeAsync(dev_ptr: *mut c_void, _stream: cudaStream_t) {
        Ok(core()?.free(dev_ptr as usize)?)
    }
);

ffi_fn!(
    fn cudaMemGetInfo(free: *mut usize, total: *mut usize) {
        let c = core()?;
        let (f, t) = c.mem_info(c.get_device()?)?;
        write_out(free, f as usize)?;
        write_out(total, t as usize)
    }
);

ffi_fn!(
    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) {
        if ptr.is_null() {
            return Err(RuntimeError::invalid("null ptr"));
        }
        write_out(ptr, core()?.host_alloc(size)? as *mut c_void)
    }
);

ffi_fn!(
    fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, _flags: c_uint) {
        if ptr.is_null() {
            return Err(RuntimeError::invalid("null pHost"));
        }
        write_out(ptr, core()?.host_alloc(size)? as *mut c_void)
    }
);

ffi_fn!(
    fn cudaFreeHost(ptr: *mut c_void) {
        Ok(core()?.host_free(ptr as usize)?)
    }
);

ffi_fn!(
    fn cudaHostRegister(ptr: *mut c_void, size: usize, _flags: c_uint) {
        Ok(core()?.host_register(ptr as usize, size)?)
    }
);

ffi_fn!(
    fn cudaHostUnregister(ptr: *mut c_void) {
        Ok(core()?.host_unregister(ptr as usize)?)
    }
);

ffi_fn!(
    fn cudaHostGetDevicePointer(dev_ptr: *mut *mut c_void, host: *mut c_void, _flags: c_uint) {
        // Mapped host memory has the same address on the fake device.
        let info = core()?.pointer_info(host as usize)?;
        if info.kind != 1 {
            return Err(RuntimeError::invalid(format!(
                "{host:?} is not pinned host memory"
            )));
        }
        write_out(dev_ptr, host)
    }
);

ffi_fn!(
    fn cudaHostGetFlags(flags: *mut c_uint, host: *mut c_void) {
        let info = core()?.pointer_info(host as usize)?;
        if info.kind != 1 {
            return Err(RuntimeError::invalid(format!(
                "{host:?} is not pinned host memory"
            )));
        }
        write_out(flags, 0)
    }
);

ffi_fn!(
    fn cudaPointerGetAttributes(attributes: *mut cudaPointerAttributes, ptr: *const c_void) {
        let i = core()?.pointer_info(ptr as usize)?;
        let p = ptr as *mut c_void;
        let (dev, host) = match i.kind {
            2 => (p, std::ptr::null_mut()),
            1 => (p, p),
            _ => (std::ptr::null_mut(), p),
        };
        // CUDA 13's struct has more (reserved) fields, zeroed by the update.
        #[allow(clippy::needless_update)]
        let a = cudaPointerAttributes {
            r#type: i.kind,
            device: i.device.max(0),
            devicePointer: dev,
            hostPointer: host,
            ..cudaPointerAttributes::default()
        };
        write_out(attributes, a)
    }
);

ffi_fn!(
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int) {
        let kind = copy_kind(kind)?;
        let (dst, src) = (dst as usize, src as usize);
        on_legacy_and_wait(|c, s| {
            // SAFETY: the caller's host sides are valid for the copy (CUDA's API contract).
            Ok(unsafe { c.memcpy(dst, src, count, kind, s) }?)
        })
    }
);

ffi_fn!(
    fn cudaMemcpyAsync(
        dst: *mut c_void,
        src: *const c_void,
        count: usize,
        kind: c_int,
        stream: cudaStream_t,
    ) {
        let (c, kind) = (core()?, copy_kind(kind)?);
        // SAFETY: the caller's host sides stay valid until the copy runs (CUDA's API contract).
        Ok(unsafe { c.memcpy(dst as usize, src as usize, count, kind, stream_id(stream)) }?)
    }
);

/// The argument checks of `cudaMemcpyPeer[Async]`: both devices exist and each pointer is
/// device memory of the device named with it.
fn check_peer_copy(
    c: &Client,
    dst: usize,
    dst_device: c_int,
    src: usize,
    src_device: c_int,
) -> Result<()> {
    let count = c.device_count()?;
    for (what, d) in [("dstDevice", dst_device), ("srcDevice", src_device)] {
        if !(0..count).contains(&d) {
            return Err(RuntimeError::Cuda {
                code: errors::INVALID_DEVICE,
                message: format!("cudaMemcpyPeer: {what} {d}: {count} device(s) visible"),
            });
        }
    }
    for (what, p, d) in [("dst", dst, dst_device), ("src", src, src_device)] {
        let info = c.pointer_info(p)?;
        if info.kind != fake_cuda_abi::MemoryKind::Device as i32 {
            return Err(RuntimeError::invalid(format!(
                "cudaMemcpyPeer: {what} {p:#x} is not device memory"
            )));
        }
        if info.device != d {
            return Err(RuntimeError::invalid(format!(
                "cudaMemcpyPeer: {what} {p:#x} is memory of device {}, not of device {d}",
                info.device
            )));
        }
    }
    Ok(())
}

ffi_fn!(
    fn cudaMemcpyPeer(
        dst: *mut c_void,
        dst_device: c_int,
        src: *const c_void,
        src_device: c_int,
        count: usize,
    ) {
        let (dst, src) = (dst as usize, src as usize);
        check_peer_copy(core()?, dst, dst_device, src, src_device)?;
        on_legacy_and_wait(|c, s| {
            // SAFETY: a device-to-device copy, whose ranges the core checks in full.
            Ok(unsafe { c.memcpy(dst, src, count, 3, s) }?)
        })
    }
);

ffi_fn!(
    fn cudaMemcpyPeerAsync(
        dst: *mut c_void,
        dst_device: c_int,
        src: *const c_void,
        src_device: c_int,
        count: usize,
        stream: cudaStream_t,
    ) {
        let (dst, src) = (dst as usize, src as usize);
        let c = core()?;
        check_peer_copy(c, dst, dst_device, src, src_device)?;
        // SAFETY: a device-to-device copy, whose ranges the core checks in full.
        Ok(unsafe { c.memcpy(dst, src, count, 3, stream_id(stream)) }?)
    }
);

ffi_fn!(
    fn cudaMemcpy2D(
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: c_int,
    ) {
        let kind = copy_kind(kind)?;
        on_legacy_and_wait(|c, s| {
            let (dst, src) = (dst as usize, src as usize);
            // SAFETY: the caller's host sides are valid for every row (CUDA's API contract).
            Ok(unsafe { c.memcpy_2d(dst, dpitch, src, spitch, width, height, kind, s) }?)
        })
    }
);

ffi_fn!(
    fn cudaMemcpy2DAsync(
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: c_int,
        stream: cudaStream_t,
    ) {
        let (c, kind) = (core()?, copy_kind(kind)?);
        let (dst, src, stream) = (dst as usize, src as usize, stream_id(stream));
        // SAFETY: the caller's host sides stay valid for every row until the copy runs (CUDA's
        // API contract).
        Ok(unsafe { c.memcpy_2d(dst, dpitch, src, spitch, width, height, kind, stream) }?)
    }
);

ffi_fn!(
    fn cudaMemset(dev_ptr: *mut c_void, value: c_int, count: usize) {
        on_legacy_and_wait(|c, s| Ok(c.memset(dev_ptr as usize, value, count, s)?))
    }
);

ffi_fn!(
    fn cudaMemsetAsync(dev_ptr: *mut c_void, value: c_int, count: usize, stream: cudaStream_t) {
        Ok(core()?.memset(dev_ptr as usize, value, count, stream_id(stream))?)
    }
);

fn memset_2d(
    ptr: usize,
    pitch: usize,
    value: c_int,
    width: usize,
    height: usize,
    stream: u64,
) -> Result<()> {
    if width > pitch {
        return Err(RuntimeError::invalid(format!(
            "width {width} exceeds pitch {pitch}"
        )));
    }
    let c = core()?;
    for row in 0..height {
        c.memset(ptr + row * pitch, value, width, stream)?;
    }
    Ok(())
}

ffi_fn!(
    fn cudaMemset2D(dev_ptr: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize) {
        on_legacy_and_wait(|_, s| memset_2d(dev_ptr as usize, pitch, value, width, height, s))
    }
);

ffi_fn!(
    fn cudaMemset2DAsync(
        dev_ptr: *mut c_void,
        pitch: usize,
        value: c_int,
        width: usize,
        height: usize,
        stream: cudaStream_t,
    ) {
        memset_2d(
            dev_ptr as usize,
            pitch,
            value,
            width,
            height,
            stream_id(stream),
        )
    }
);

ffi_fn!(
    fn cudaIpcGetMemHandle(handle: *mut cudaIpcHandle, dev_ptr: *mut c_void) {
        let h = core()?.ipc_get_mem_handle(dev_ptr as usize)?;
        write_out(handle, cudaIpcHandle { reserved: h })
    }
);

ffi_fn!(
    fn cudaIpcOpenMemHandle(dev_ptr: *mut *mut c_void, handle: cudaIpcHandle, _flags: c_uint) {
        if dev_ptr.is_null() {
            return Err(RuntimeError::invalid("null devPtr"));
        }
        let p = core()?.ipc_open_mem_handle(&handle.reserved)?;
        write_out(dev_ptr, p as *mut c_void)
    }
);

ffi_fn!(
    fn cudaIpcCloseMemHandle(dev_ptr: *mut c_void) {
        Ok(core()?.ipc_close_mem_handle(dev_ptr as usize)?)
    }
);

ffi_fn!(
    fn cudaIpcGetEventHandle(handle: *mut cudaIpcHandle, event: cudaEvent_t) {
        let h = core()?.ipc_get_event_handle(event as u64)?;
        write_out(handle, cudaIpcHandle { reserved: h })
    }
);

ffi_fn!(
    fn cudaIpcOpenEventHandle(event: *mut cudaEvent_t, handle: cudaIpcHandle) {
        if event.is_null() {
            return Err(RuntimeError::invalid("null event"));
        }
        let e = core()?.ipc_open_event_handle(&handle.reserved)?;
        write_out(event, e as cudaEvent_t)
    }
);

// Device variables (`__device__`, `__constant__`) live in their host shadow copies: the fake
// device shares the host's address space, so a symbol's device address is its host address.

ffi_fn!(
    fn cudaGetSymbolAddress(dev_ptr: *mut *mut c_void, symbol: *const c_void) {
        if symbol.is_null() {
            return Err(RuntimeError::Cuda {
                code: 13,
                message: "null symbol".into(),
            });
        }
        write_out(dev_ptr, symbol as *mut c_void)
    }
);

ffi_fn!(
    fn cudaGetSymbolSize(size: *mut usize, symbol: *const c_void) {
        let s = crate::modules::variable_size(symbol as usize).ok_or(RuntimeError::Cuda {
            code: 13,
            message: format!("{symbol:?} is not a registered variable"),
        })?;
        write_out(size, s)
    }
);

/// `cudaMemcpyToSymbol` / `FromSymbol`: `count` bytes between a registered variable (host
/// memory here) at `offset` and `buf`.
///
/// # Safety
/// `buf` must be valid for `count` bytes: readable when copying to the symbol, writable
/// otherwise.
unsafe fn symbol_copy(
    to_symbol: bool,
    symbol: usize,
    buf: usize,
    count: usize,
    offset: usize,
) -> Result<()> {
    if symbol == 0 || (buf == 0 && count > 0) {
        return Err(RuntimeError::invalid("null symbol or buffer"));
    }
    if let Some(size) = crate::modules::variable_size(symbol) {
        if offset.checked_add(count).is_none_or(|e| e > size) {
            return Err(RuntimeError::invalid(format!(
                "{count} bytes at offset {offset} exceed the {size}-byte symbol"
            )));
        }
    }
    let (dst, src) = if to_symbol {
        (symbol + offset, buf)
    } else {
        (buf, symbol + offset)
    };
    // Host-to-host in the core's view: the symbol is host memory.
    // SAFETY: `buf` is valid for the copy (this function's contract); the symbol's range lies
    // in the registered variable when its size is known, and is otherwise the caller's promise
    // as with the real runtime.
    Ok(unsafe { core()?.memcpy(dst, src, count, 0, LEGACY) }?)
}

ffi_fn!(
    fn cudaMemcpyToSymbol(
        symbol: *const c_void,
        src: *const c_void,
        count: usize,
        offset: usize,
        _kind: c_int,
    ) {
        // SAFETY: `src` holds `count` bytes (CUDA's API contract).
        unsafe { symbol_copy(true, symbol as usize, src as usize, count, offset) }
    }
);

ffi_fn!(
    fn cudaMemcpyToSymbolAsync(
        symbol: *const c_void,
        src: *const c_void,
        count: usize,
        offset: usize,
        _kind: c_int,
        _stream: cudaStream_t,
    ) {
        // SAFETY: `src` holds `count` bytes (CUDA's API contract).
        unsafe { symbol_copy(true, symbol as usize, src as usize, count, offset) }
    }
);

ffi_fn!(
    fn cudaMemcpyFromSymbol(
        dst: *mut c_void,
        symbol: *const c_void,
        count: usize,
        offset: usize,
        _kind: c_int,
    ) {
        // SAFETY: `dst` has room for `count` bytes (CUDA's API contract).
        unsafe { symbol_copy(false, symbol as usize, dst as usize, count, offset) }
    }
);

ffi_fn!(
    fn cudaMemcpyFromSymbolAsync(
        dst: *mut c_void,
        symbol: *const c_void,
        count: usize,
        offset: usize,
        _kind: c_int,
        _stream: cudaStream_t,
    ) {
        // SAFETY: `dst` has room for `count` bytes (CUDA's API contract).
        unsafe { symbol_copy(false, symbol as usize, dst as usize, count, offset) }
    }
);
