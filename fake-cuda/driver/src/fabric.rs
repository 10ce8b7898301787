//! Fabric handles (`CU_MEM_HANDLE_TYPE_FABRIC`): physical allocations shared between the
//! processes of one NVLink domain spanning nodes (a GB200/GB300 NVL72 rack), by a 64-byte value
//! rather than a file descriptor.
//!
//! In CUDA a fabric handle is an opaque 64-byte `CUmemFabricHandle` that
//! `cuMemExportToShareableHandle` writes for an allocation created with the fabric handle type,
//! and that `cuMemImportFromShareableHandle` turns back into an allocation handle in any process
//! on a GPU of the same NVLink fabric (IMEX domain), on the same host or another one; the bytes
//! travel however the program likes (MPI, sockets, files). Here the simulated nodes of a domain
//! are processes of one machine, so the handle names the exporting process and an offer of the
//! allocation's memory file in that process's descriptor broker (its key and secret, kept while
//! the allocation lives); the importer fetches the descriptor from the broker (`SCM_RIGHTS`)
//! and hands it to the core's ordinary import, which checks it is an allocation file. The
//! handle also carries the exporter's NVLink domain (cluster UUID and
//! clique id, as NVML's GPU fabric information reports them): a process of another domain, or of
//! a node outside any domain, is refused, as GPUs outside the fabric are. Multicast objects
//! created with the fabric handle type travel the same way (the core's import tells them
//! from allocations by their file).

use crate::{core, DriverError, Result, INVALID_VALUE};
use fake_cuda_abi::HANDLE_TYPE_POSIX_FD;
use std::collections::HashMap;
use std::ffi::c_int;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A memory file offered through this process's descriptor broker.
struct Offer {
    /// Kept open while the allocation may be imported.
    _file: OwnedFd,
    key: u32,
    secret: u64,
}
use std::sync::{Mutex, MutexGuard, OnceLock};

/// `CU_MEM_HANDLE_TYPE_FABRIC`.
pub(crate) const HANDLE_TYPE_FABRIC: c_int = 8;
/// `sizeof(CUmemFabricHandle)`.
pub(crate) const FABRIC_HANDLE_BYTES: usize = 64;
/// `CUDA_ERROR_NOT_PERMITTED`.
pub(crate) const NOT_PERMITTED: crate::CUresult = 800;
/// First bytes of every handle this driver writes.
const MAGIC: &[u8; 8] = b"ncsfab01";

/// Allocations of this process created or imported with the fabric handle type.
struct Fabric {
    /// Handle -> the handle types the caller asked for (fabric, and maybe POSIX descriptors).
    types: HashMap<u64, u32>,
    /// Handle -> its memory file, offered while it may be imported.
    exported: HashMap<u64, Offer>,
}

fn state() -> MutexGuard<'static, Fabric> {
    static S: OnceLock<Mutex<Fabric>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(Fabric {
            types: HashMap::new(),
            exported: HashMap::new(),
        })
    })
    .lock()
    .unwrap_or_else(|e| e.into_inner())
}

/// This process's NVLink domain, as the core built it; a node outside one is refused.
pub(crate) fn domain() -> Result<fake_cuda_abi::CFabricInfo> {
    core()?
        .physical_device_fabric(0)
        .map_err(|e| match e.status() {
            fake_cuda_abi::error::Status::NotSupported => DriverError::Code(crate::NOT_SUPPORTED),
            _ => e.into(),
        })
}

/// `cuMemCreate` with `types` (which include [`HANDLE_TYPE_FABRIC`]): the core's allocation,
/// exportable through its memory file, remembered as a fabric allocation.
pub(crate) fn create(device: c_int, size: u64, types: u32) -> Result<u64> {
    domain()?;
    let h = core()?.mem_create(device, size, HANDLE_TYPE_POSIX_FD)?;
    state().types.insert(h, types);
    Ok(h)
}

/// `cuMulticastCreate` with `types` (which include [`HANDLE_TYPE_FABRIC`]): the core's
/// object, exportable through its memory file, remembered as a fabric object.
pub(crate) fn create_multicast(num_devices: u32, size: u64, types: u32) -> Result<u64> {
    domain()?;
    let h = core()?.mcast_create(num_devices, size, HANDLE_TYPE_POSIX_FD)?;
    state().types.insert(h, types);
    Ok(h)
}

/// The handle types the caller asked for, when `h` is a fabric allocation of this process.
pub(crate) fn requested_types(h: u64) -> Option<u32> {
    state().types.get(&h).copied()
}

/// Forgets `h` once the core no longer knows it (after its last `cuMemRelease`): importers
/// can no longer reach it, as in CUDA once the allocation is gone.
pub(crate) fn released(h: u64) {
    let gone = core().map_or(true, |c| c.mem_handle_info(h).is_err());
    if gone {
        let mut s = state();
        s.types.remove(&h);
        if let Some(offer) = s.exported.remove(&h) {
            if let Ok(c) = core() {
                let _ = c.fd_withdraw(offer.key);
            }
        }
    }
}

/// `cuMemExportToShareableHandle(CU_MEM_HANDLE_TYPE_FABRIC)`: the 64 bytes naming `h`.
pub(crate) fn export(h: u64) -> Result<[u8; FABRIC_HANDLE_BYTES]> {
    let dom = domain()?;
    let types = requested_types(h).ok_or(DriverError::Code(INVALID_VALUE))?;
    if types & HANDLE_TYPE_FABRIC as u32 == 0 {
        return Err(DriverError::Code(INVALID_VALUE));
    }
    let mut s = state();
    if let std::collections::hash_map::Entry::Vacant(slot) = s.exported.entry(h) {
        let fd = core()?.mem_export(h)?;
        if fd < 0 {
            return Err(DriverError::Code(INVALID_VALUE));
        }
        // SAFETY: the core hands the caller a descriptor of its own.
        let file = unsafe { OwnedFd::from_raw_fd(fd) };
        let (key, secret) = core()?.fd_offer(file.as_raw_fd())?;
        slot.insert(Offer {
            _file: file,
            key,
            secret,
        });
    }
    let offer = &s.exported[&h];
    let mut b = [0u8; FABRIC_HANDLE_BYTES];
    b[..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    b[12..16].copy_from_slice(&offer.key.to_le_bytes());
    b[16..24].copy_from_slice(&offer.secret.to_le_bytes());
    b[24..32].copy_from_slice(&dom.cluster_uuid[0].to_le_bytes());
    b[32..40].copy_from_slice(&dom.cluster_uuid[1].to_le_bytes());
    b[40..44].copy_from_slice(&dom.clique_id.to_le_bytes());
    Ok(b)
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("4 bytes"))
}

/// `cuMemImportFromShareableHandle(CU_MEM_HANDLE_TYPE_FABRIC)`: the allocation `b` names,
/// when this process is in the exporter's NVLink domain.
pub(crate) fn import(b: &[u8; FABRIC_HANDLE_BYTES]) -> Result<u64> {
    if &b[..8] != MAGIC || b[44..].iter().any(|&x| x != 0) {
        return Err(DriverError::Code(INVALID_VALUE));
    }
    let dom = domain()?;
    let (uuid, clique) = ([le64(&b[24..32]), le64(&b[32..40])], le32(&b[40..44]));
    if uuid != dom.cluster_uuid || clique != dom.clique_id {
        // Another NVLink domain: its memory is not reachable over this fabric.
        return Err(DriverError::Code(NOT_PERMITTED));
    }
    let (pid, key, secret) = (le32(&b[8..12]), le32(&b[12..16]), le64(&b[16..24]));
    // The exporter's broker passes the memory file to a holder of the offer's secret; an
    // exporter that has exited or released the allocation has nothing to pass.
    let raw = core()?
        .fd_fetch(pid, key, secret)
        .map_err(|_| DriverError::Code(INVALID_VALUE))?;
    if raw < 0 {
        return Err(DriverError::Code(INVALID_VALUE));
    }
    // SAFETY: the core hands the caller a descriptor of its own.
    let file = unsafe { OwnedFd::from_raw_fd(raw) };
    let h = core()?.mem_import(file.as_raw_fd())?;
    state().types.insert(h, HANDLE_TYPE_FABRIC as u32);
    Ok(h)
}
