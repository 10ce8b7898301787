//! The exported C API: every `nccl*` function of NCCL 2.30.7 (`src/nccl.h.in`,
//! `src/include/nccl_device/core.h`) and its `pnccl*` twin. Each export only checks and
//! converts its arguments and calls into the runtime; the panic boundary, the mapping of
//! errors to `ncclResult_t` and the thread's last-error text are in [`api_fn!`] (the
//! workspace's one C boundary, `ffi_boundary::ffi_fn!`, with [`NcclError`]).

#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::comm::{self, Joining};
use crate::error::{self, NcclError, Result};
use crate::group;
use crate::ops::{Coll, Op, P2p};
use crate::types::{
    result, Collective, CommConfig, CommProperties, DataType, RawConfig, Team, UniqueId,
    NCCL_VERSION_CODE,
};
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type Comm = usize;
type Stream = u64;

/// `ncclSimInfo_t` (2.22+).
#[repr(C)]
pub struct SimInfo {
    /// sizeof the struct.
    pub size: usize,
    /// `SIM_INFO_MAGIC`.
    pub magic: u32,
    /// NCCL_VERSION_CODE of the caller's headers.
    pub version: u32,
    /// Estimated time of the group, microseconds.
    pub estimated_time: f32,
}

/// The magic of `NCCL_SIM_INFO_INITIALIZER`.
pub const SIM_INFO_MAGIC: u32 = 0x7468_5283;

/// Defines `pnccl<Name>` with the body inside the C boundary ([`ffi_boundary::ffi_fn!`] with
/// [`NcclError`], named `nccl<Name>` in logs and last errors) and `nccl<Name>` calling it.
macro_rules! api_fn {
    ($(fn $name:ident | $pname:ident ($($arg:ident: $ty:ty),* $(,)?) $body:block)*) => {$(
        ffi_boundary::ffi_fn!(NcclError; export fn $pname($($arg: $ty),*) as $name $body);
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> i32 {
            // SAFETY: same contract as the twin.
            unsafe { $pname($($arg),*) }
        }
    )*};
}

/// Writes an out-parameter; `ncclInvalidArgument` naming it if null.
fn out<T>(p: *mut T, v: T, what: &str) -> Result<()> {
    // The caller's out-parameter: valid for a `T` when not null (NCCL's API contract).
    ffi_boundary::non_null!(*p = v; else NcclError::invalid_argument(format!("{what} is NULL")));
    Ok(())
}

fn not_implemented(name: &str) -> Result<()> {
    Err(NcclError::invalid_usage(format!(
        "{name} is not implemented by ncclsim's libnccl.so.2"
    )))
}

/// Checks that `elems` elements of `dtype` from `ptr` lie in one buffer of device `dev`: the
/// allocation `ptr` points into as the program made it (a `cudaMalloc` allocation up to the
/// size asked for, or the mappings `cuMemMap` put side by side in one reserved range, as
/// PyTorch's expandable segments do), never the allocation granule's slack or an adjacent
/// allocation. A buffer the operation writes (`write`) is committed against the host's memory
/// first, so a host that cannot back it gives an error rather than the OOM killer.
fn device_buffer(
    ptr: usize,
    elems: usize,
    dtype: DataType,
    what: &str,
    dev: i32,
    write: bool,
) -> Result<()> {
    if elems == 0 {
        return Ok(());
    }
    if ptr == 0 {
        return Err(NcclError::invalid_argument(format!("{what} is NULL")));
    }
    // A buffer the call writes is committed against the host's memory in the same call when
    // the elements fit in it; they are checked below.
    let size = dtype.size();
    let bytes = elems.checked_mul(size);
    let b = match bytes {
        Some(need) if write => crate::cuda::buffer_extent_commit(ptr, need)?,
        _ => crate::cuda::buffer_extent(ptr)?,
    };
    if b.kind == fake_cuda_abi::BUFFER_NONE {
        return Err(NcclError::invalid_argument(format!(
            "{what} {ptr:#x} is not device memory"
        )));
    }
    if b.device != dev {
        return Err(NcclError::invalid_argument(format!(
            "{what} {ptr:#x} is allocated on CUDA device {}, not on the communicator's CUDA device {dev}",
            b.device
        )));
    }
    let need = bytes
        .ok_or_else(|| NcclError::invalid_argument(format!("{what}: count {elems} overflows")))?;
    let end = ptr
        .checked_add(need)
        .ok_or_else(|| NcclError::invalid_argument(format!("{what} {ptr:#x}: count overflows")))?;
    if end > b.end {
        let kind = match b.kind {
            fake_cuda_abi::BUFFER_MAPPED => "mapped range",
            fake_cuda_abi::BUFFER_IMPORTED => "IPC-opened allocation",
            _ => "allocation",
        };
        let into = if ptr > b.base {
            format!(" (starting {} bytes into it)", ptr - b.base)
        } else {
            String::new()
        };
        return Err(NcclError::invalid_argument(format!(
            "{what} {ptr:#x}: {elems} elements of {size} bytes, {need} bytes needed, overrun its {kind} {:#x} of {} bytes{into} by {} bytes",
            b.base,
            b.end - b.base,
            end - b.end
        )));
    }
    Ok(())
}

/// An `ncclDataType_t` argument; `ncclInvalidArgument` naming the value otherwise.
fn data_type(value: i32) -> Result<DataType> {
    DataType::try_from(value).map_err(|e| NcclError::invalid_argument(e.to_string()))
}

#[allow(clippy::too_many_arguments)]
fn collective(
    kind: Collective,
    send: usize,
    recv: usize,
    count: usize,
    dtype: i32,
    op: i32,
    root: i32,
    comm: Comm,
    stream: Stream,
) -> Result<()> {
    let c = group::comm(comm)?;
    let dtype = data_type(dtype)?;
    if kind.rooted() && (root < 0 || root as usize >= c.nranks) {
        return Err(NcclError::invalid_argument(format!(
            "root {root} is not a rank of this communicator (0..{})",
            c.nranks
        )));
    }
    let root = if kind.rooted() { root as usize } else { 0 };
    let reducing = kind.reduces();
    let red = if reducing {
        c.redops
            .lock()
            .map_err(|_| NcclError::internal("redop lock poisoned"))?
            .resolve(op, dtype, c.nranks)?
    } else {
        crate::types::Reduction::SUM
    };
    // In a folded communicator the representative of a virtual root sends as that root does.
    let sender = match &c.fold {
        Some(f) if kind.rooted() && f.rep[root] == c.rank => root,
        _ => c.rank,
    };
    let (se, _) = kind.extents(count, c.nranks, sender, root);
    let (_, re) = kind.extents(count, c.nranks, c.rank, root);
    device_buffer(send, se, dtype, "sendbuff", c.cuda_dev, false)?;
    // Under `--compute time` a large call writes nothing, so nothing is committed.
    let writes = crate::sim::moves_data(crate::sim::largest_buffer(kind, count, dtype, c.nranks));
    device_buffer(recv, re, dtype, "recvbuff", c.cuda_dev, writes)?;
    let coll = Coll {
        kind,
        dtype,
        red,
        op: if reducing { op } else { 0 },
        root,
        count,
        send: if se > 0 { send } else { 0 },
        recv: if re > 0 { recv } else { 0 },
    };
    group::op(c, stream, Op::Coll(coll))
}

fn p2p(
    send: bool,
    buf: usize,
    count: usize,
    dtype: i32,
    peer: i32,
    comm: Comm,
    stream: Stream,
) -> Result<()> {
    let c = group::comm(comm)?;
    let dtype = data_type(dtype)?;
    if peer < 0 || peer as usize >= c.nranks {
        return Err(NcclError::invalid_argument(format!(
            "peer {peer} is not a rank of this communicator (0..{})",
            c.nranks
        )));
    }
    device_buffer(
        buf,
        count,
        dtype,
        if send { "sendbuff" } else { "recvbuff" },
        c.cuda_dev,
        !send && crate::sim::moves_data(count.saturating_mul(dtype.size())),
    )?;
    group::op(
        c,
        stream,
        Op::P2p(P2p {
            send,
            peer: peer as usize,
            bytes: count * dtype.size(),
            buf,
        }),
    )
}

/// Sets a handle's outcome: its communicator, none (`NCCL_SPLIT_NOCOLOR`: the rank took part
/// and gets no communicator, which is not a failure; using the handle says so), or the error,
/// which is returned.
fn settle(slot: &group::Slot, r: Result<Option<comm::Comm>>) -> Result<()> {
    match r {
        Ok(Some(c)) => {
            slot.finish(Ok(c));
            Ok(())
        }
        Ok(None) => {
            slot.finish(Err(NcclError::invalid_usage(
                "NCCL_SPLIT_NOCOLOR: no communicator",
            )));
            Ok(())
        }
        Err(e) => {
            slot.finish(Err(e.clone()));
            Err(e)
        }
    }
}

/// Creates a communicator in the background (`f` runs at the group's end, or now, or in a
/// thread for non-blocking configs). Returns `ncclInProgress` for non-blocking ones.
/// `f` gets the abort flag and the new communicator's handle, and returns the communicator
/// (None for a split with `NCCL_SPLIT_NOCOLOR`).
fn create(
    out_comm: *mut Comm,
    config: &CommConfig,
    f: impl FnOnce(Arc<AtomicBool>, usize) -> Result<Option<comm::Comm>> + Send + 'static,
) -> Result<()> {
    if out_comm.is_null() {
        return Err(NcclError::invalid_argument("newcomm is NULL"));
    }
    let (h, slot) = group::new_handle();
    // SAFETY: non-null out-parameter of the caller.
    unsafe { *out_comm = h };
    let abort = slot.abort.clone();
    if !config.blocking {
        let s2 = slot.clone();
        let t = std::thread::Builder::new()
            .name("NCCL CommInit".into())
            .spawn(move || {
                let _ = settle(&s2, f(abort, h));
            })
            .map_err(|e| NcclError::system("spawning the init thread", e))?;
        *slot.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        return Err(NcclError::new(
            result::IN_PROGRESS,
            "communicator is initializing",
        ));
    }
    let in_group = group::in_group();
    let s2 = slot.clone();
    // In a group the init runs at the outermost ncclGroupEnd, which returns its error (the
    // handle stays, failed, until destroyed or aborted, as in NCCL); outside one it runs now.
    let done = group::init_job(slot.clone(), Box::new(move || settle(&s2, f(abort, h))));
    if in_group {
        return Ok(());
    }
    if let Err(e) = done {
        let _ = group::remove(h);
        // SAFETY: as above.
        unsafe { *out_comm = 0 };
        return Err(e);
    }
    Ok(())
}

fn init_rank(
    api: &'static str,
    out_comm: *mut Comm,
    nranks: i32,
    id: UniqueId,
    rank: i32,
    config: *const RawConfig,
) -> Result<()> {
    // SAFETY: the API's contract for a non-null config.
    let cfg = unsafe { CommConfig::read(config, &CommConfig::default())? };
    if nranks <= 0 || rank < 0 || rank >= nranks {
        // The job cannot form: a root this process runs for the id tells the ranks now.
        if let Ok((magic, _)) = crate::bootstrap::decode_id(&id) {
            crate::bootstrap::stop_root(magic);
        }
        return Err(NcclError::invalid_argument(format!(
            "rank {rank} / nranks {nranks}: need 0 <= rank < nranks"
        )));
    }
    let dev = crate::cuda::current_device()?;
    let c2 = cfg.clone();
    create(out_comm, &cfg, move |abort, handle| {
        comm::init_rank(
            &id,
            Joining {
                rank: rank as usize,
                nranks: nranks as usize,
                cuda_dev: dev,
                config: c2,
                abort,
                handle,
                api,
            },
        )
        .map(Some)
    })
}

/// A blocking split outside a group: the child's handle exists first (its init lines name
/// it) and is kept only when this rank gets a communicator.
fn split_now(
    parent: &comm::Comm,
    color: i32,
    key: i32,
    cfg: CommConfig,
    newcomm: *mut Comm,
    api: &'static str,
) -> Result<()> {
    let (h, slot) = group::new_handle();
    match comm::split(parent, color, key, cfg, Default::default(), (h, api)) {
        Ok(Some(c)) => {
            slot.finish(Ok(c));
            // SAFETY: the callers checked newcomm is not null; it points to the caller's
            // ncclComm_t.
            unsafe { *newcomm = h };
            Ok(())
        }
        other => {
            let _ = group::remove(h);
            other.map(|_| ())
        }
    }
}

api_fn! {
fn ncclGetVersion | pncclGetVersion(version: *mut i32) {
    out(version, NCCL_VERSION_CODE, "version")
}
fn ncclGetUniqueId | pncclGetUniqueId(unique_id: *mut UniqueId) {
    let id = match crate::bootstrap::comm_id_env()? {
        Some(at) => crate::bootstrap::encode_id(crate::bootstrap::NCCL_MAGIC, at),
        None => {
            let l = crate::bootstrap::listen(None)?;
            let magic = crate::bootstrap::random_u64();
            let id = crate::bootstrap::encode_id(magic, crate::bootstrap::local_addr(&l)?);
            crate::bootstrap::spawn_root(l, magic);
            id
        }
    };
    out(unique_id, id, "uniqueId")
}
fn ncclCommInitRank | pncclCommInitRank(newcomm: *mut Comm, nranks: i32, comm_id: UniqueId, rank: i32) {
    init_rank("ncclCommInitRank", newcomm, nranks, comm_id, rank, std::ptr::null())
}
fn ncclCommInitRankConfig | pncclCommInitRankConfig(newcomm: *mut Comm, nranks: i32, comm_id: UniqueId, rank: i32, config: *const RawConfig) {
    init_rank("ncclCommInitRankConfig", newcomm, nranks, comm_id, rank, config)
}
fn ncclCommInitRankScalable | pncclCommInitRankScalable(newcomm: *mut Comm, nranks: i32, myrank: i32, n_id: i32, ids: *const UniqueId, config: *const RawConfig) {
    if n_id < 1 || ids.is_null() {
        return Err(NcclError::invalid_argument(format!("nId {n_id} / commIds: need at least one id")));
    }
    // Every rank gets all ids; the first one's root serves everyone here (one root suffices
    // for the rank counts a host can run).
    // SAFETY: not null (checked above) and, by NCCL's contract, `nId` ids long.
    let id = unsafe { *ids };
    init_rank("ncclCommInitRankScalable", newcomm, nranks, id, myrank, config)
}
fn ncclCommInitAll | pncclCommInitAll(comms: *mut Comm, ndev: i32, devlist: *const i32) {
    if comms.is_null() {
        return Err(NcclError::invalid_argument("comms is NULL"));
    }
    if ndev <= 0 {
        return Err(NcclError::invalid_argument(format!("ndev {ndev} must be positive")));
    }
    let n = ndev as usize;
    // SAFETY: a non-null devlist holds ndev ints (NCCL's contract for ncclCommInitAll).
    let devs: Vec<i32> = if devlist.is_null() { (0..ndev).collect() } else { unsafe { std::slice::from_raw_parts(devlist, n) }.to_vec() };
    let count = crate::cuda::device_count()?;
    if let Some(d) = devs.iter().find(|&&d| d < 0 || d >= count) {
        return Err(NcclError::invalid_argument(format!("devlist has device {d}; {count} devices are visible")));
    }
    let l = crate::bootstrap::listen(Some(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0)))?;
    let magic = crate::bootstrap::random_u64();
    let id = crate::bootstrap::encode_id(magic, crate::bootstrap::local_addr(&l)?);
    crate::bootstrap::spawn_root(l, magic);
    // The handles exist first, so each rank's init lines name the communicator it returns.
    let handles: Vec<_> = (0..n).map(|_| group::new_handle()).collect();
    let results: Vec<Result<comm::Comm>> = std::thread::scope(|s| {
        let hs: Vec<_> = devs.iter().zip(&handles).enumerate().map(|(r, (&dev, &(handle, _)))| s.spawn(move || {
            comm::init_rank(&id, Joining { rank: r, nranks: n, cuda_dev: dev, config: CommConfig::default(), abort: Default::default(), handle, api: "ncclCommInitAll" })
        })).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(NcclError::internal("init thread panicked")))).collect()
    });
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        for (h, _) in &handles {
            let _ = group::remove(*h);
        }
        return Err(e.clone());
    }
    for (r, (c, (h, slot))) in results.into_iter().zip(handles).enumerate() {
        slot.finish(c);
        // SAFETY: comms holds ndev handles (checked non-null above; NCCL's contract).
        unsafe { *comms.add(r) = h };
    }
    Ok(())
}
fn ncclCommSplit | pncclCommSplit(comm: Comm, color: i32, key: i32, newcomm: *mut Comm, config: *const RawConfig) {
    let parent = group::comm(comm)?;
    // SAFETY: config is null or an ncclConfig_t the caller initialised (read no further than its size).
    let cfg = unsafe { CommConfig::read(config, &parent.config)? };
    if newcomm.is_null() {
        return Err(NcclError::invalid_argument("newcomm is NULL"));
    }
    // SAFETY: newcomm is not null (checked above) and points to the caller's ncclComm_t.
    unsafe { *newcomm = 0 };
    if group::in_group() || !cfg.blocking {
        let c2 = cfg.clone();
        return create(newcomm, &cfg, move |abort, h| comm::split(&parent, color, key, c2, abort, (h, "ncclCommSplit")));
    }
    split_now(&parent, color, key, cfg, newcomm, "ncclCommSplit")
}
fn ncclCommShrink | pncclCommShrink(comm: Comm, exclude: *const i32, nexclude: i32, newcomm: *mut Comm, config: *const RawConfig, _flags: i32) {
    let parent = group::comm(comm)?;
    // SAFETY: config is null or an ncclConfig_t the caller initialised (read no further than its size).
    let cfg = unsafe { CommConfig::read(config, &parent.config)? };
    if nexclude < 0 || (nexclude > 0 && exclude.is_null()) {
        return Err(NcclError::invalid_argument("excludeRanksList / excludeRanksCount"));
    }
    // SAFETY: exclude is not null and holds nexclude ranks (checked above; NCCL's contract).
    let ex = if nexclude == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(exclude, nexclude as usize) } };
    if newcomm.is_null() {
        return Err(NcclError::invalid_argument("newcomm is NULL"));
    }
    // SAFETY: newcomm is not null (checked above) and points to the caller's ncclComm_t.
    unsafe { *newcomm = 0 };
    let color = if ex.contains(&(parent.rank as i32)) { -1 } else { 0 };
    split_now(&parent, color, parent.rank as i32, cfg, newcomm, "ncclCommShrink")
}
fn ncclCommFinalize | pncclCommFinalize(comm: Comm) {
    let c = group::wait_ready(comm)?;
    // Finalizing waits for the communicator's operations to complete: the host clock too.
    crate::cuda::host_wait(c.done.get())?;
    crate::report::comm_ended(c.magic, c.rank, false);
    Ok(())
}
fn ncclCommDestroy | pncclCommDestroy(comm: Comm) {
    if comm == 0 {
        return Ok(());
    }
    if let Ok(c) = group::wait_ready(comm) {
        // Destroying without finalizing finalizes: the host waits for the operations. Without
        // a core there is no clock to move, and the communicator goes all the same.
        let _ = crate::cuda::host_wait(c.done.get());
        crate::report::comm_ended(c.magic, c.rank, true);
    }
    group::remove(comm).map(|_| ())
}
fn ncclCommAbort | pncclCommAbort(comm: Comm) {
    if comm == 0 {
        return Ok(());
    }
    // Stops the communicator's waits (an init in progress included), then forgets it.
    let s = group::slot(comm)?;
    s.abort.store(true, Ordering::Relaxed);
    if let group::SlotState::Ready(c) = &*s.state.lock().unwrap_or_else(|e| e.into_inner()) {
        c.abort.store(true, Ordering::Relaxed);
    }
    group::remove(comm).map(|_| ())
}
fn ncclCommRevoke | pncclCommRevoke(comm: Comm, _flags: i32) {
    let c = group::comm(comm)?;
    c.abort.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}
fn ncclCommGetAsyncError | pncclCommGetAsyncError(comm: Comm, async_error: *mut i32) {
    let s = group::slot(comm)?;
    let code = match &*s.state.lock().unwrap_or_else(|e| e.into_inner()) {
        group::SlotState::Pending => result::IN_PROGRESS,
        group::SlotState::Failed(e) => e.code,
        group::SlotState::Ready(c) => c.async_error.load(std::sync::atomic::Ordering::Relaxed),
    };
    out(async_error, code, "asyncError")
}
fn ncclCommCount | pncclCommCount(comm: Comm, count: *mut i32) {
    let c = group::comm(comm)?;
    out(count, c.nranks as i32, "count")
}
fn ncclCommCuDevice | pncclCommCuDevice(comm: Comm, device: *mut i32) {
    let c = group::comm(comm)?;
    out(device, c.cuda_dev, "device")
}
fn ncclCommUserRank | pncclCommUserRank(comm: Comm, rank: *mut i32) {
    let c = group::comm(comm)?;
    out(rank, c.rank as i32, "rank")
}
fn ncclCommRegister | pncclCommRegister(comm: Comm, buff: *mut c_void, size: usize, handle: *mut *mut c_void) {
    let c = group::comm(comm)?;
    device_buffer(buff as usize, size, DataType::Uint8, "buff", c.cuda_dev, false)?;
    let h = Box::into_raw(Box::new((buff as usize, size))) as *mut c_void;
    out(handle, h, "handle")
}
fn ncclCommDeregister | pncclCommDeregister(comm: Comm, handle: *mut c_void) {
    group::comm(comm)?;
    if handle.is_null() {
        return Err(NcclError::invalid_argument("handle is NULL"));
    }
    // SAFETY: handles come from ncclCommRegister (API contract).
    drop(unsafe { Box::from_raw(handle as *mut (usize, usize)) });
    Ok(())
}
fn ncclCommWindowRegister | pncclCommWindowRegister(comm: Comm, buff: *mut c_void, size: usize, win: *mut *mut c_void, _flags: i32) {
    let c = group::comm(comm)?;
    device_buffer(buff as usize, size, DataType::Uint8, "buff", c.cuda_dev, false)?;
    let h = Box::into_raw(Box::new((buff as usize, size))) as *mut c_void;
    out(win, h, "win")
}
fn ncclCommWindowDeregister | pncclCommWindowDeregister(comm: Comm, win: *mut c_void) {
    group::comm(comm)?;
    if win.is_null() {
        return Err(NcclError::invalid_argument("win is NULL"));
    }
    // SAFETY: windows come from ncclCommWindowRegister (API contract).
    drop(unsafe { Box::from_raw(win as *mut (usize, usize)) });
    Ok(())
}
fn ncclWinGetUserPtr | pncclWinGetUserPtr(comm: Comm, win: *mut c_void, user_ptr: *mut *mut c_void) {
    group::comm(comm)?;
    if win.is_null() {
        return Err(NcclError::invalid_argument("win is NULL"));
    }
    // SAFETY: windows come from ncclCommWindowRegister.
    let (p, _) = unsafe { *(win as *const (usize, usize)) };
    out(user_ptr, p as *mut c_void, "outUserPtr")
}
fn ncclCommSuspend | pncclCommSuspend(comm: Comm, _flags: i32) {
    group::comm(comm).map(|_| ())
}
fn ncclCommResume | pncclCommResume(comm: Comm) {
    group::comm(comm).map(|_| ())
}
fn ncclCommMemStats | pncclCommMemStats(comm: Comm, _stat: i32, value: *mut u64) {
    let c = group::comm(comm)?;
    out(value, c.group.segment.len() as u64, "value")
}
fn ncclCommQueryProperties | pncclCommQueryProperties(comm: Comm, props: *mut CommProperties) {
    let c = group::comm(comm)?;
    if props.is_null() {
        return Err(NcclError::invalid_argument("props is NULL"));
    }
    // SAFETY: props is not null (checked above) and points to the caller's ncclCommProperties_t.
    let size = unsafe { (*props).size }.min(std::mem::size_of::<CommProperties>());
    // SAFETY: as above.
    let (size_in, magic, version) = unsafe { ((*props).size, (*props).magic, (*props).version) };
    let p = CommProperties {
        size: size_in,
        magic,
        version,
        rank: c.rank as i32,
        n_ranks: c.nranks as i32,
        cuda_dev: c.cuda_dev,
        nvml_dev: c.members[c.rank].device.physical,
        n_lsa_teams: 1,
        ..Default::default()
    };
    // SAFETY: writes no more than the caller's struct size.
    unsafe { std::ptr::copy_nonoverlapping((&p as *const CommProperties).cast::<u8>(), props.cast::<u8>(), size) };
    Ok(())
}
fn ncclMemAlloc | pncclMemAlloc(ptr: *mut *mut c_void, size: usize) {
    let dev = crate::cuda::current_device()?;
    let p = crate::cuda::malloc(dev, size)?;
    out(ptr, p as *mut c_void, "ptr")
}
fn ncclMemFree | pncclMemFree(ptr: *mut c_void) {
    if ptr.is_null() {
        return Ok(());
    }
    crate::cuda::free(ptr as usize)
}
fn ncclRedOpCreatePreMulSum | pncclRedOpCreatePreMulSum(op: *mut i32, scalar: *mut c_void, datatype: i32, residence: i32, comm: Comm) {
    let c = group::comm(comm)?;
    let dtype = data_type(datatype)?;
    let mut ops = c.redops.lock().map_err(|_| NcclError::internal("redop lock poisoned"))?;
    // SAFETY: a host-immediate scalar points to one element of `datatype` (NCCL's API contract).
    let id = unsafe { ops.create(dtype, scalar as usize, residence) }?;
    drop(ops);
    out(op, id, "op")
}
fn ncclRedOpDestroy | pncclRedOpDestroy(op: i32, comm: Comm) {
    let c = group::comm(comm)?;
    let r = c.redops.lock().map_err(|_| NcclError::internal("redop lock poisoned"))?.destroy(op);
    r
}
fn ncclAllReduce | pncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: i32, op: i32, comm: Comm, stream: Stream) {
    group::error_check(collective(Collective::AllReduce, sendbuff as usize, recvbuff as usize, count, datatype, op, 0, comm, stream))
}
fn ncclReduce | pncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: i32, op: i32, root: i32, comm: Comm, stream: Stream) {
    group::error_check(collective(Collective::Reduce, sendbuff as usize, recvbuff as usize, count, datatype, op, root, comm, stream))
}
fn ncclBroadcast | pncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: i32, root: i32, comm: Comm, stream: Stream) {
    group::error_check(collective(Collective::Broadcast, sendbuff as usize, recvbuff as usize, count, datatype, 0, root, comm, stream))
}
fn ncclBcast | pncclBcast(buff: *mut c_void, count: usize, datatype: i32, root: i32, comm: Comm, stream: Stream) {
    group::error_check(collective(Collective::Broadcast, buff as usize, buff as usize, count, datatype, 0, root, comm, stream))
}
fn ncclAllGather | pncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: i32, comm: Comm, stream: Stream) {
    group::error_check(collective(Collective::AllGather, sendbuff as usize, recvbuff as usize, sendcount, datatype, 0, 0, comm, stream))
}
fn ncclReduceScatter | pncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: i32, op: i32, comm: Comm, stream: Stream) {
    group::error_check(collective(Collective::ReduceScatter, sendbuff as usize, recvbuff as usize, recvcount, datatype, op, 0, comm, stream))
}
fn ncclAlltoAll | pncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: i32, comm: Comm, stream: Stream) {
    group::error_check(collective(Collective::AlltoAll, sendbuff as usize, recvbuff as usize, count, datatype, 0, 0, comm, stream))
}
fn ncclGather | pncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: i32, root: i32, comm: Comm, stream: Stream) {
    group::error_check(collective(Collective::Gather, sendbuff as usize, recvbuff as usize, count, datatype, 0, root, comm, stream))
}
fn ncclScatter | pncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: i32, root: i32, comm: Comm, stream: Stream) {
    group::error_check(collective(Collective::Scatter, sendbuff as usize, recvbuff as usize, count, datatype, 0, root, comm, stream))
}
fn ncclSend | pncclSend(sendbuff: *const c_void, count: usize, datatype: i32, peer: i32, comm: Comm, stream: Stream) {
    group::error_check(p2p(true, sendbuff as usize, count, datatype, peer, comm, stream))
}
fn ncclRecv | pncclRecv(recvbuff: *mut c_void, count: usize, datatype: i32, peer: i32, comm: Comm, stream: Stream) {
    group::error_check(p2p(false, recvbuff as usize, count, datatype, peer, comm, stream))
}
fn ncclGroupStart | pncclGroupStart() {
    group::start();
    Ok(())
}
fn ncclGroupEnd | pncclGroupEnd() {
    group::end()
}
fn ncclGroupSimulateEnd | pncclGroupSimulateEnd(sim_info: *mut SimInfo) {
    let ops = group::end_simulated()?;
    let group: Vec<_> = ops
        .iter()
        .map(|(c, o)| (std::sync::Arc::as_ptr(c) as usize, c.sim.as_deref(), o))
        .collect();
    let t = crate::sim::simulate_group(&group)?;
    if !sim_info.is_null() {
        // SAFETY: not null (checked above); the caller's ncclSimInfo_t, not aliased during the call.
        let info = unsafe { &mut *sim_info };
        if info.magic != SIM_INFO_MAGIC {
            return Err(NcclError::invalid_argument(format!(
                "simInfo: magic {:#x} is not NCCL_SIM_INFO_INITIALIZER's", info.magic
            )));
        }
        info.estimated_time = t as f32;
    }
    Ok(())
}
fn ncclCommGetUniqueId | pncclCommGetUniqueId(_comm: Comm, _id: *mut UniqueId) { not_implemented("ncclCommGetUniqueId") }
fn ncclCommGrow | pncclCommGrow(_comm: Comm, _n: i32, _id: *const UniqueId, _rank: i32, _newcomm: *mut Comm, _config: *const RawConfig) { not_implemented("ncclCommGrow") }
fn ncclPutSignal | pncclPutSignal(_b: *const c_void, _count: usize, _t: i32, _peer: i32, _win: *mut c_void, _off: usize, _sig: i32, _ctx: i32, _flags: u32, _comm: Comm, _stream: Stream) { not_implemented("ncclPutSignal") }
fn ncclSignal | pncclSignal(_peer: i32, _sig: i32, _ctx: i32, _flags: u32, _comm: Comm, _stream: Stream) { not_implemented("ncclSignal") }
fn ncclWaitSignal | pncclWaitSignal(_n: i32, _descs: *mut c_void, _comm: Comm, _stream: Stream) { not_implemented("ncclWaitSignal") }
fn ncclDevCommCreate | pncclDevCommCreate(_comm: Comm, _reqs: *const c_void, _out: *mut c_void) { not_implemented("ncclDevCommCreate (the device API needs GPU kernels)") }
fn ncclDevCommDestroy | pncclDevCommDestroy(_comm: Comm, _dev: *const c_void) { not_implemented("ncclDevCommDestroy") }
fn ncclGetLsaMultimemDevicePointer | pncclGetLsaMultimemDevicePointer(_w: *mut c_void, _off: usize, _out: *mut *mut c_void) { not_implemented("ncclGetLsaMultimemDevicePointer") }
fn ncclGetMultimemDevicePointer | pncclGetMultimemDevicePointer(_w: *mut c_void, _off: usize, _h: *mut c_void, _out: *mut *mut c_void) { not_implemented("ncclGetMultimemDevicePointer") }
fn ncclGetLsaDevicePointer | pncclGetLsaDevicePointer(_w: *mut c_void, _off: usize, _r: i32, _out: *mut *mut c_void) { not_implemented("ncclGetLsaDevicePointer") }
fn ncclGetPeerDevicePointer | pncclGetPeerDevicePointer(_w: *mut c_void, _off: usize, _peer: i32, _out: *mut *mut c_void) { not_implemented("ncclGetPeerDevicePointer") }
fn ncclGinBarrierCreateRequirement | pncclGinBarrierCreateRequirement(_comm: Comm, _team: Team, _n: i32, _h: *mut c_void, _r: *mut c_void) { not_implemented("ncclGinBarrierCreateRequirement") }
fn ncclGinOutboxCreateRequirement | pncclGinOutboxCreateRequirement(_n: i32, _l: i32, _h: *mut c_void, _r: *mut c_void) { not_implemented("ncclGinOutboxCreateRequirement") }
fn ncclGinInboxA2ACreateRequirement | pncclGinInboxA2ACreateRequirement(_team: Team, _n: i32, _l: i32, _h: *mut c_void, _r: *mut c_void) { not_implemented("ncclGinInboxA2ACreateRequirement") }
fn ncclLLA2ACreateRequirement | pncclLLA2ACreateRequirement(_n: i32, _s: i32, _h: *mut c_void, _r: *mut c_void) { not_implemented("ncclLLA2ACreateRequirement") }
fn ncclLsaBarrierCreateRequirement | pncclLsaBarrierCreateRequirement(_team: Team, _n: i32, _h: *mut c_void, _r: *mut c_void) { not_implemented("ncclLsaBarrierCreateRequirement") }
fn ncclParamBind | pncclParamBind(_out: *mut *mut c_void, _key: *const c_char) { not_implemented("ncclParamBind") }
fn ncclParamGetI8 | pncclParamGetI8(_h: *mut c_void, _out: *mut i8) { not_implemented("ncclParamGetI8") }
fn ncclParamGetI16 | pncclParamGetI16(_h: *mut c_void, _out: *mut i16) { not_implemented("ncclParamGetI16") }
fn ncclParamGetI32 | pncclParamGetI32(_h: *mut c_void, _out: *mut i32) { not_implemented("ncclParamGetI32") }
fn ncclParamGetI64 | pncclParamGetI64(_h: *mut c_void, _out: *mut i64) { not_implemented("ncclParamGetI64") }
fn ncclParamGetU8 | pncclParamGetU8(_h: *mut c_void, _out: *mut u8) { not_implemented("ncclParamGetU8") }
fn ncclParamGetU16 | pncclParamGetU16(_h: *mut c_void, _out: *mut u16) { not_implemented("ncclParamGetU16") }
fn ncclParamGetU32 | pncclParamGetU32(_h: *mut c_void, _out: *mut u32) { not_implemented("ncclParamGetU32") }
fn ncclParamGetU64 | pncclParamGetU64(_h: *mut c_void, _out: *mut u64) { not_implemented("ncclParamGetU64") }
fn ncclParamGetStr | pncclParamGetStr(_h: *mut c_void, _out: *mut *const c_char) { not_implemented("ncclParamGetStr") }
fn ncclParamGet | pncclParamGet(_h: *mut c_void, _out: *mut c_void, _max: i32, _len: *mut i32) { not_implemented("ncclParamGet") }
fn ncclParamGetParameter | pncclParamGetParameter(_key: *const c_char, _v: *mut *const c_char, _len: *mut i32) { not_implemented("ncclParamGetParameter") }
fn ncclParamGetAllParameterKeys | pncclParamGetAllParameterKeys(_t: *mut *mut *const c_char, _len: *mut i32) { not_implemented("ncclParamGetAllParameterKeys") }
}

/// Defines value-returning `pnccl<Name>` and `nccl<Name>` exports with the same body, each
/// inside the C boundary ([`ffi_boundary::ffi_fn!`]: after a panic they return `panic = v`, or
/// the return type's [`ffi_boundary::PanicOrDefault`] value).
macro_rules! api_value_fn {
    ($($(#[$meta:meta])* fn $name:ident | $pname:ident ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty
       $(, panic = $fallback:expr;)? $body:block)*) => {$(
        ffi_boundary::ffi_fn!(NcclError; export $(#[$meta])*
            fn $pname($($arg: $ty),*) -> $ret $(, panic = $fallback;)? $body);
        ffi_boundary::ffi_fn!(NcclError; export $(#[$meta])*
            fn $name($($arg: $ty),*) -> $ret $(, panic = $fallback;)? $body);
    )*};
}

thread_local! {
    static LAST_C: std::cell::RefCell<std::ffi::CString> = std::cell::RefCell::new(std::ffi::CString::default());
}

impl ffi_boundary::PanicOrDefault for Team {
    /// An empty team.
    fn panic_value() -> Team {
        Team::default()
    }
}

fn team_of(comm: Comm, which: u8) -> Team {
    let Ok(c) = group::comm(comm) else {
        return Team::default();
    };
    match which {
        0 => Team {
            n_ranks: c.nranks as i32,
            rank: c.rank as i32,
            stride: 1,
        },
        1 => Team {
            n_ranks: c.group.ranks.len() as i32,
            rank: c.group.index as i32,
            stride: 1,
        },
        _ => Team {
            n_ranks: c.host_count() as i32,
            rank: 0,
            stride: c.group.ranks.len() as i32,
        },
    }
}

/// World rank of `rank` in `team` relative to this rank, or -1.
fn rank_to_world(comm: Comm, team: Team, rank: i32) -> i32 {
    let me = group::comm(comm).map(|c| c.rank as i32).unwrap_or(-1);
    if me < 0 {
        -1
    } else {
        me + (rank - team.rank) * team.stride
    }
}

api_value_fn! {
/// `ncclGetErrorString`.
fn ncclGetErrorString | pncclGetErrorString(code: i32) -> *const c_char,
    panic = crate::types::error_string(result::INTERNAL_ERROR).as_ptr(); {
    crate::types::error_string(code).as_ptr()
}
/// `ncclGetLastError`: the calling thread's last error text (valid until its next call).
fn ncclGetLastError | pncclGetLastError(_comm: Comm) -> *const c_char, panic = c"".as_ptr(); {
    let text = error::last().replace('\0', " ");
    LAST_C.with(|c| {
        *c.borrow_mut() = std::ffi::CString::new(text).unwrap_or_default();
        c.borrow().as_ptr()
    })
}
/// `ncclResetDebugInit` (deprecated; nothing to reset).
fn ncclResetDebugInit | pncclResetDebugInit() -> () {}
/// `ncclParamDumpAll` (no parameter registry here).
fn ncclParamDumpAll | pncclParamDumpAll() -> () {}
/// `ncclTeamWorld`: every rank.
fn ncclTeamWorld | pncclTeamWorld(comm: Comm) -> Team { team_of(comm, 0) }
/// `ncclTeamLsa`: the ranks sharing memory with this one (its host).
fn ncclTeamLsa | pncclTeamLsa(comm: Comm) -> Team { team_of(comm, 1) }
/// `ncclTeamRail`: one rank per host.
fn ncclTeamRail | pncclTeamRail(comm: Comm) -> Team { team_of(comm, 2) }
/// `ncclTeamRankToWorld`: world rank of `rank` in `team` relative to this rank.
fn ncclTeamRankToWorld | pncclTeamRankToWorld(comm: Comm, team: Team, rank: i32) -> i32, panic = -1; {
    rank_to_world(comm, team, rank)
}
/// `ncclTeamRankToLsa`.
fn ncclTeamRankToLsa | pncclTeamRankToLsa(comm: Comm, team: Team, rank: i32) -> i32, panic = -1; {
    let lsa = team_of(comm, 1);
    let world = rank_to_world(comm, team, rank);
    let me = rank_to_world(comm, team, team.rank);
    if world < 0 || me < 0 {
        -1
    } else {
        lsa.rank + (world - me)
    }
}
/// `ncclLLA2ACalcSlots` (device API; no slots here).
fn ncclLLA2ACalcSlots | pncclLLA2ACalcSlots(_max_elts: i32, _max_elt_size: i32) -> i32 { 0 }
}
