//! `libnvidia-ml.so.1`: NVML over the fake CUDA core's devices.
//!
//! NVML sees every GPU of the node, in the topology's order, whatever `CUDA_VISIBLE_DEVICES`
//! hides (as the real NVML does). Names, UUIDs, PCI ids, memory, NVLinks (state, remote PCI
//! info, remote device type) and the PCI common ancestor of two GPUs all come from the same
//! `DeviceDesc`s the CUDA front-ends report, so the two views agree.
//!
//! Every export is written with [`nvml_fn!`]: panics are caught, errors become `nvmlReturn_t`,
//! and every call but `nvmlInit*`/`nvmlErrorString` fails with `NVML_ERROR_UNINITIALIZED`
//! outside `nvmlInit`/`nvmlShutdown`. A device handle is the device's index + 1.

#![allow(non_snake_case, non_camel_case_types)]

use fake_cuda_abi::error::{CoreError, Status};
use fake_cuda_abi::uuid_string;
use fake_cuda_abi::CDeviceInfo;
use fake_cuda_client::{client, Client};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::mem::size_of;
use std::sync::atomic::{AtomicU32, Ordering};

/// `nvmlReturn_t`.
pub type nvmlReturn_t = c_int;
/// `nvmlDevice_t`: an opaque handle (here the device index + 1).
pub type nvmlDevice_t = *mut c_void;

const SUCCESS: nvmlReturn_t = 0;
const UNINITIALIZED: nvmlReturn_t = 1;
const INVALID_ARGUMENT: nvmlReturn_t = 2;
const NOT_SUPPORTED: nvmlReturn_t = 3;
const NOT_FOUND: nvmlReturn_t = 6;
const INSUFFICIENT_SIZE: nvmlReturn_t = 7;
const DRIVER_NOT_LOADED: nvmlReturn_t = 9;
const UNKNOWN: nvmlReturn_t = 999;

/// The driver version strings and CUDA driver version reported: the core's, shared with
/// `libcuda.so.1` and the runtimes.
const DRIVER_VERSION: &[u8] = fake_cuda_abi::version::DRIVER_VERSION.as_bytes();
const NVML_VERSION: &[u8] = fake_cuda_abi::version::NVML_VERSION.as_bytes();
const CUDA_DRIVER_VERSION: c_int = fake_cuda_abi::version::DRIVER_CUDA_VERSION;

/// Error of the NVML front-end.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// Reported by the core.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Decided here.
    #[error("{message}")]
    Code {
        /// The `nvmlReturn_t`.
        code: nvmlReturn_t,
        /// What was wrong.
        message: String,
    },
}

impl ffi_boundary::FfiError for NvmlError {
    const LIBRARY: ffi_boundary::Library = ffi_boundary::Library::new("libnvidia-ml", UNKNOWN);

    fn code(&self) -> i32 {
        match self {
            NvmlError::Code { code, .. } => *code,
            NvmlError::Core(CoreError::Load(_)) => DRIVER_NOT_LOADED,
            NvmlError::Core(e) => match e.status() {
                Status::Success => SUCCESS,
                Status::InvalidDevice
                | Status::InvalidValue
                | Status::InvalidPointer
                | Status::InvalidHandle => INVALID_ARGUMENT,
                Status::NoDevice => DRIVER_NOT_LOADED,
                Status::NotSupported => NOT_SUPPORTED,
                _ => UNKNOWN,
            },
        }
    }
}

fn err(code: nvmlReturn_t, message: impl Into<String>) -> NvmlError {
    NvmlError::Code {
        code,
        message: message.into(),
    }
}

type Result<T> = std::result::Result<T, NvmlError>;

/// Writes an exported NVML function inside the C boundary ([`ffi_boundary::ffi_fn!`] with
/// [`NvmlError`]): panics caught, errors become `nvmlReturn_t`.
macro_rules! nvml_fn {
    ($($function:tt)*) => {
        ffi_boundary::ffi_fn!(NvmlError; export $($function)*);
    };
}

mod fabric;
mod job;
mod telemetry;
pub use fabric::{nvmlGpuFabricInfo_t, nvmlGpuFabricInfo_v2_t};
pub use telemetry::{nvmlProcessInfo_t, nvmlProcessInfo_v1_t};

/// `nvmlInit` calls not yet balanced by `nvmlShutdown`.
static INIT_COUNT: AtomicU32 = AtomicU32::new(0);

/// The core, if NVML is initialised.
fn core() -> Result<&'static Client> {
    if INIT_COUNT.load(Ordering::SeqCst) == 0 {
        return Err(err(UNINITIALIZED, "nvmlInit has not been called"));
    }
    Ok(client()?)
}

fn write_out<T>(out: *mut T, value: T) -> Result<()> {
    // NVML out-parameters point to a writable `T` when non-null (API contract).
    ffi_boundary::non_null!(*out = value; else err(INVALID_ARGUMENT, "null output pointer"));
    Ok(())
}

fn write_string(buf: *mut c_char, len: c_uint, text: &[u8]) -> Result<()> {
    if buf.is_null() {
        return Err(err(INVALID_ARGUMENT, "null buffer"));
    }
    // SAFETY: the caller provides `len` bytes at `buf` (NVML's buffer contract).
    if !unsafe { ffi_boundary::write_c_string(buf, len as usize, text) } {
        return Err(err(
            INSUFFICIENT_SIZE,
            format!("{len}-byte buffer for {} bytes", text.len() + 1),
        ));
    }
    Ok(())
}

fn handle(index: usize) -> nvmlDevice_t {
    (index + 1) as nvmlDevice_t
}

/// The physical index a handle stands for.
fn index(device: nvmlDevice_t) -> Result<i32> {
    let n = core()?.physical_device_count()?;
    let i = (device as usize).wrapping_sub(1);
    if device.is_null() || i >= n as usize {
        return Err(err(
            INVALID_ARGUMENT,
            format!("{device:?} is not a device handle"),
        ));
    }
    Ok(i as i32)
}

fn info(device: nvmlDevice_t) -> Result<CDeviceInfo> {
    Ok(core()?.physical_device_info(index(device)?)?)
}

fn bus_id_text(pci: [u32; 4]) -> String {
    format!("{:08X}:{:02X}:{:02X}.{:X}", pci[0], pci[1], pci[2], pci[3])
}

/// `nvmlPciInfo_t` (68 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct nvmlPciInfo_t {
    /// `dddd:bb:dd.f` (16 bytes with NUL).
    pub busIdLegacy: [c_char; 16],
    /// PCI domain.
    pub domain: c_uint,
    /// Bus.
    pub bus: c_uint,
    /// Device.
    pub device: c_uint,
    /// Device id << 16 | vendor id.
    pub pciDeviceId: c_uint,
    /// Subsystem device id << 16 | subsystem vendor id.
    pub pciSubSystemId: c_uint,
    /// `dddddddd:bb:dd.f` (32 bytes with NUL).
    pub busId: [c_char; 32],
}

/// `nvmlMemory_t` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlMemory_t {
    /// Total bytes.
    pub total: c_ulonglong,
    /// Free bytes.
    pub free: c_ulonglong,
    /// Used bytes.
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t` (40 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlMemory_v2_t {
    /// Struct version (caller-set).
    pub version: c_uint,
    /// Total bytes.
    pub total: c_ulonglong,
    /// Reserved by the driver.
    pub reserved: c_ulonglong,
    /// Free bytes.
    pub free: c_ulonglong,
    /// Used bytes.
    pub used: c_ulonglong,
}

/// `nvmlUtilization_t` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlUtilization_t {
    /// GPU busy percent.
    pub gpu: c_uint,
    /// Memory busy percent.
    pub memory: c_uint,
}

// Sizes from nvml.h of nvidia-nvml-dev-cu12 12.9.79 (`NVML_API_VERSION` 12, via `sizeof`).
const _: () = {
    assert!(size_of::<nvmlPciInfo_t>() == 68);
    assert!(size_of::<nvmlMemory_t>() == 24);
    assert!(size_of::<nvmlMemory_v2_t>() == 40);
    assert!(size_of::<nvmlUtilization_t>() == 8);
};

fn pci_info(pci: [u32; 4], device_id: u32, subsystem: u32) -> nvmlPciInfo_t {
    let mut p = nvmlPciInfo_t {
        busIdLegacy: [0; 16],
        domain: pci[0],
        bus: pci[1],
        device: pci[2],
        pciDeviceId: if device_id == 0 {
            0
        } else {
            (device_id << 16) | 0x10de
        },
        pciSubSystemId: subsystem,
        busId: [0; 32],
    };
    let legacy = format!("{:04X}:{:02X}:{:02X}.{:X}", pci[0], pci[1], pci[2], pci[3]);
    // SAFETY: our own arrays of 16 and 32 bytes.
    unsafe {
        ffi_boundary::write_c_string(p.busIdLegacy.as_mut_ptr(), 16, legacy.as_bytes());
        ffi_boundary::write_c_string(p.busId.as_mut_ptr(), 32, bus_id_text(pci).as_bytes());
    }
    p
}

// ---- init, system ----------------------------------------------------------------------

fn init() -> Result<()> {
    client()?.physical_device_count()?;
    INIT_COUNT.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

nvml_fn!(
    fn nvmlInit() {
        init()
    }
);
nvml_fn!(
    fn nvmlInit_v2() {
        init()
    }
);
nvml_fn!(
    fn nvmlInitWithFlags(_flags: c_uint) {
        init()
    }
);
nvml_fn!(
    fn nvmlShutdown() {
        INIT_COUNT
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| err(UNINITIALIZED, "nvmlShutdown without nvmlInit"))
    }
);

nvml_fn!(
    /// `nvmlErrorString`.
    fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
        let text: &CStr = match result {
            SUCCESS => c"Success",
            UNINITIALIZED => c"Uninitialized",
            INVALID_ARGUMENT => c"Invalid Argument",
            NOT_SUPPORTED => c"Not Supported",
            NOT_FOUND => c"Not Found",
            INSUFFICIENT_SIZE => c"Insufficient Size",
            DRIVER_NOT_LOADED => c"Driver Not Loaded",
            _ => c"Unknown Error",
        };
        text.as_ptr()
    }
);

nvml_fn!(
    fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) {
        core()?;
        write_string(version, length, DRIVER_VERSION)
    }
);
nvml_fn!(
    fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) {
        core()?;
        write_string(version, length, NVML_VERSION)
    }
);
nvml_fn!(
    fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) {
        core()?;
        write_out(version, CUDA_DRIVER_VERSION)
    }
);
nvml_fn!(
    fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) {
        core()?;
        write_out(version, CUDA_DRIVER_VERSION)
    }
);

// ---- device discovery --------------------------------------------------------------------

nvml_fn!(
    fn nvmlDeviceGetCount(count: *mut c_uint) {
        write_out(count, core()?.physical_device_count()? as c_uint)
    }
);
nvml_fn!(
    fn nvmlDeviceGetCount_v2(count: *mut c_uint) {
        write_out(count, core()?.physical_device_count()? as c_uint)
    }
);

fn by_index(i: c_uint, device: *mut nvmlDevice_t) -> Result<()> {
    let n = core()?.physical_device_count()?;
    if i >= n as c_uint {
        return Err(err(
            INVALID_ARGUMENT,
            format!("device index {i}: {n} devices"),
        ));
    }
    write_out(device, handle(i as usize))
}

nvml_fn!(
    fn nvmlDeviceGetHandleByIndex(i: c_uint, device: *mut nvmlDevice_t) {
        by_index(i, device)
    }
);
nvml_fn!(
    fn nvmlDeviceGetHandleByIndex_v2(i: c_uint, device: *mut nvmlDevice_t) {
        by_index(i, device)
    }
);

/// Finds the device whose property `key` matches `want`.
fn find_device(want: &str, key: impl Fn(&CDeviceInfo) -> bool) -> Result<nvmlDevice_t> {
    let c = core()?;
    for i in 0..c.physical_device_count()? {
        if key(&c.physical_device_info(i)?) {
            return Ok(handle(i as usize));
        }
    }
    Err(err(NOT_FOUND, format!("no device {want}")))
}

/// Parses `[domain:]bus:device.function` (hex, any zero padding) into its four numbers.
fn parse_bus_id(text: &str) -> Option<[u32; 4]> {
    let mut parts: Vec<&str> = text.trim().split(':').collect();
    if parts.len() == 2 {
        parts.insert(0, "0");
    }
    let [domain, bus, rest] = parts[..] else {
        return None;
    };
    let (device, function) = rest.split_once('.').unwrap_or((rest, "0"));
    let h = |s: &str| u32::from_str_radix(s, 16).ok();
    Some([h(domain)?, h(bus)?, h(device)?, h(function)?])
}

fn by_bus_id(bus_id: *const c_char, device: *mut nvmlDevice_t) -> Result<()> {
    if bus_id.is_null() {
        return Err(err(INVALID_ARGUMENT, "null PCI bus id"));
    }
    // SAFETY: non-null C string by the API contract.
    let text = unsafe { CStr::from_ptr(bus_id) }.to_string_lossy();
    let want = parse_bus_id(&text)
        .ok_or_else(|| err(INVALID_ARGUMENT, format!("{text:?} is not a PCI bus id")))?;
    write_out(device, find_device(&text, |d| d.pci == want)?)
}

nvml_fn!(
    fn nvmlDeviceGetHandleByPciBusId(bus_id: *const c_char, device: *mut nvmlDevice_t) {
        by_bus_id(bus_id, device)
    }
);
nvml_fn!(
    fn nvmlDeviceGetHandleByPciBusId_v2(bus_id: *const c_char, device: *mut nvmlDevice_t) {
        by_bus_id(bus_id, device)
    }
);

nvml_fn!(
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) {
        if uuid.is_null() {
            return Err(err(INVALID_ARGUMENT, "null UUID"));
        }
        // SAFETY: non-null C string by the API contract.
        let want = unsafe { CStr::from_ptr(uuid) }.to_string_lossy();
        let found = find_device(&want, |d| uuid_string(&d.uuid).eq_ignore_ascii_case(&want))?;
        write_out(device, found)
    }
);

nvml_fn!(
    fn nvmlDeviceGetIndex(device: nvmlDevice_t, i: *mut c_uint) {
        write_out(i, index(device)? as c_uint)
    }
);
nvml_fn!(
    fn nvmlDeviceGetMinorNumber(device: nvmlDevice_t, minor: *mut c_uint) {
        write_out(minor, index(device)? as c_uint)
    }
);

// ---- properties --------------------------------------------------------------------------

nvml_fn!(
    fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) {
        write_string(
            name,
            length,
            &ffi_boundary::c_array_text(&info(device)?.name),
        )
    }
);
nvml_fn!(
    fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) {
        write_string(uuid, length, uuid_string(&info(device)?.uuid).as_bytes())
    }
);
nvml_fn!(
    fn nvmlDeviceGetCudaComputeCapability(
        device: nvmlDevice_t,
        major: *mut c_int,
        minor: *mut c_int,
    ) {
        let d = info(device)?;
        write_out(major, d.sm_major)?;
        write_out(minor, d.sm_minor)
    }
);

/// (total, used) bytes of a physical device: in an `ncclsim run` job what its processes hold
/// there with their contexts (`job`), else what this process allocated there.
fn memory(device: nvmlDevice_t) -> Result<(u64, u64)> {
    let c = core()?;
    let d = info(device)?;
    if let Some(u) = job::device_usage(index(device)? as usize) {
        return Ok((d.total_memory, u.used.min(d.total_memory)));
    }
    for ordinal in 0..c.device_count()? {
        if c.device_info(ordinal)?.physical_index == d.physical_index {
            let (free, total) = c.mem_info(ordinal)?;
            return Ok((total, total - free));
        }
    }
    // Hidden from this process by CUDA_VISIBLE_DEVICES: it allocated nothing there.
    Ok((d.total_memory, 0))
}

nvml_fn!(
    fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, mem: *mut nvmlMemory_t) {
        let (total, used) = memory(device)?;
        write_out(
            mem,
            nvmlMemory_t {
                total,
                free: total - used,
                used,
            },
        )
    }
);
nvml_fn!(
    fn nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, mem: *mut nvmlMemory_v2_t) {
        if mem.is_null() {
            return Err(err(INVALID_ARGUMENT, "null memory"));
        }
        // SAFETY: non-null; the caller sets `version` before the call.
        let version = unsafe { (*mem).version };
        let (total, used) = memory(device)?;
        write_out(
            mem,
            nvmlMemory_v2_t {
                version,
                total,
                reserved: 0,
                free: total - used,
                used,
            },
        )
    }
);

fn device_pci_info(device: nvmlDevice_t) -> Result<nvmlPciInfo_t> {
    let i = index(device)?;
    let c = core()?;
    let d = c.physical_device_info(i)?;
    let t = c.physical_device_topology(i)?;
    Ok(pci_info(d.pci, t.pci_device_id, t.pci_subsystem_id))
}

nvml_fn!(
    fn nvmlDeviceGetPciInfo(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) {
        write_out(pci, device_pci_info(device)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPciInfo_v2(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) {
        write_out(pci, device_pci_info(device)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) {
        write_out(pci, device_pci_info(device)?)
    }
);

nvml_fn!(
    /// GPU utilization from the virtual timeline (`telemetry::utilization`); memory
    /// utilization is its share of the memory bandwidth, taken as the same.
    fn nvmlDeviceGetUtilizationRates(device: nvmlDevice_t, util: *mut nvmlUtilization_t) {
        let gpu = telemetry::utilization(device)?;
        write_out(util, nvmlUtilization_t { gpu, memory: gpu })
    }
);

// ---- NVLink and topology -------------------------------------------------------------------

/// The NVLink `link` of `device`: (remote PCI, peer kind 0 GPU / 1 switch / 2 CPU, remote GPU).
fn nvlink(device: nvmlDevice_t, link: c_uint) -> Result<fake_cuda_abi::CNvLink> {
    let t = core()?.physical_device_topology(index(device)?)?;
    if link >= t.nvlink_count {
        return Err(err(
            INVALID_ARGUMENT,
            format!("link {link}: the device has {} NVLinks", t.nvlink_count),
        ));
    }
    Ok(t.nvlinks[link as usize])
}

nvml_fn!(
    fn nvmlDeviceGetNvLinkState(device: nvmlDevice_t, link: c_uint, active: *mut c_int) {
        nvlink(device, link)?;
        write_out(active, 1)
    }
);
nvml_fn!(
    fn nvmlDeviceGetNvLinkVersion(device: nvmlDevice_t, link: c_uint, version: *mut c_uint) {
        nvlink(device, link)?;
        // NVML numbers NVLink generations 1..=5 by the compute capability of the board.
        let v = match info(device)?.sm_major {
            ..=6 => 1,
            7 => 2,
            8 => 3,
            9 => 4,
            _ => 5,
        };
        write_out(version, v)
    }
);
nvml_fn!(
    fn nvmlDeviceGetNvLinkCapability(
        device: nvmlDevice_t,
        link: c_uint,
        capability: c_int,
        result: *mut c_uint,
    ) {
        let l = nvlink(device, link)?;
        // P2P, P2P atomics and "valid" hold for every link; system memory access only for
        // links to a CPU; no SLI bridges.
        let yes = match capability {
            0 | 2 | 5 => true,
            1 | 3 => l.peer_kind == 2,
            4 => false,
            _ => return Err(err(INVALID_ARGUMENT, format!("capability {capability}"))),
        };
        write_out(result, c_uint::from(yes))
    }
);

fn remote_pci(device: nvmlDevice_t, link: c_uint) -> Result<nvmlPciInfo_t> {
    let l = nvlink(device, link)?;
    let (device_id, subsystem) = if l.peer_gpu >= 0 {
        let t = core()?.physical_device_topology(l.peer_gpu)?;
        (t.pci_device_id, t.pci_subsystem_id)
    } else {
        (0, 0)
    };
    Ok(pci_info(l.remote_pci, device_id, subsystem))
}

nvml_fn!(
    fn nvmlDeviceGetNvLinkRemotePciInfo(
        device: nvmlDevice_t,
        link: c_uint,
        pci: *mut nvmlPciInfo_t,
    ) {
        write_out(pci, remote_pci(device, link)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
        device: nvmlDevice_t,
        link: c_uint,
        pci: *mut nvmlPciInfo_t,
    ) {
        write_out(pci, remote_pci(device, link)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetNvLinkRemoteDeviceType(device: nvmlDevice_t, link: c_uint, kind: *mut c_int) {
        // NVML_NVLINK_DEVICE_TYPE_GPU 0, _IBMNPU 1 (a CPU), _SWITCH 2.
        let k = match nvlink(device, link)?.peer_kind {
            0 => 0,
            1 => 2,
            _ => 1,
        };
        write_out(kind, k)
    }
);

nvml_fn!(
    fn nvmlDeviceGetTopologyCommonAncestor(a: nvmlDevice_t, b: nvmlDevice_t, level: *mut c_uint) {
        let (ia, ib) = (index(a)?, index(b)?);
        write_out(level, core()?.topology_common_ancestor(ia, ib)?)
    }
);

nvml_fn!(
    fn nvmlDeviceGetP2PStatus(a: nvmlDevice_t, b: nvmlDevice_t, caps: c_int, status: *mut c_int) {
        let (ia, ib) = (index(a)?, index(b)?);
        // NVML_P2P_STATUS_OK 0, _NOT_SUPPORTED 5 (NVML_P2P_STATUS_NOT_SUPPORTED).
        let ok = match caps {
            // Read, write, atomics, PCI: every pair of fake devices can reach each other.
            0 | 1 | 3 | 4 => ia != ib,
            // NVLink: both GPUs have NVLinks to a common switch, or a direct link.
            2 => {
                let c = core()?;
                let (ta, tb) = (
                    c.physical_device_topology(ia)?,
                    c.physical_device_topology(ib)?,
                );
                let links = |t: &fake_cuda_abi::CDeviceTopology| {
                    t.nvlinks[..t.nvlink_count as usize].to_vec()
                };
                let (la, lb) = (links(&ta), links(&tb));
                ia != ib
                    && (la.iter().any(|l| l.peer_gpu == ib)
                        || la
                            .iter()
                            .any(|x| x.peer_kind == 1 && lb.iter().any(|y| y.peer_kind == 1)))
            }
            _ => {
                return Err(err(
                    INVALID_ARGUMENT,
                    format!("P2P capability index {caps}"),
                ))
            }
        };
        write_out(status, if ok { 0 } else { 5 })
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_parse_in_every_form() {
        assert_eq!(parse_bus_id("0000:4e:00.0"), Some([0, 0x4e, 0, 0]));
        assert_eq!(parse_bus_id("00000000:4E:00.0"), Some([0, 0x4e, 0, 0]));
        assert_eq!(parse_bus_id("4e:00.0"), Some([0, 0x4e, 0, 0]));
        assert_eq!(parse_bus_id("zz"), None);
        let p = pci_info([0, 0x4e, 0, 0], 0x20b0, 0x134f10de);
        assert_eq!(p.pciDeviceId, 0x20b010de);
        assert_eq!(
            ffi_boundary::c_array_text(&p.busId),
            b"00000000:4E:00.0".to_vec()
        );
        assert_eq!(
            ffi_boundary::c_array_text(&p.busIdLegacy),
            b"0000:4E:00.0".to_vec()
        );
    }

    #[test]
    fn calls_before_init_are_refused() {
        let mut n = 0;
        // SAFETY: valid out-pointer (a local).
        assert_eq!(unsafe { nvmlDeviceGetCount_v2(&mut n) }, UNINITIALIZED);
        // SAFETY: valid out-pointer (a local).
        assert_eq!(unsafe { nvmlShutdown() }, UNINITIALIZED);
    }
}
