//! The virtual host clock (`NCCLSIM_CLOCK=virtual`): what the program's clock reads return.
//!
//! When this library is preloaded (`ncclsim run --clock virtual`), its exports `clock_gettime`,
//! `gettimeofday` and `time` come before the C library's, so every dynamically linked caller
//! in the process reaches them (`interpose`). For the program they answer from the host's
//! virtual clock: the job's epoch (`NCCLSIM_CLOCK_EPOCH`, the launcher's real `CLOCK_REALTIME`
//! and `CLOCK_MONOTONIC` when it started the job, so every rank agrees) plus the virtual time
//! the calling thread has waited for on this process's core (synchronisations of any thread,
//! queries of its own: [`fake_cuda_core::Core::host_clock`]).
//! Host work between calls takes no virtual time: the clock moves only when the host waits for
//! device work (synchronisations, queries that find work incomplete).
//!
//! Calls made from ncclsim's own libraries (any object loaded from the directory this library
//! was loaded from, resolved through symbolic links) read the real clocks: their deadlines,
//! timeouts and waits keep real time. The caller is told apart by its return address.
//!
//! Timed waits whose deadline is absolute (`pthread_cond_timedwait`, `pthread_cond_clockwait`,
//! `sem_timedwait`, `sem_clockwait`, `pthread_mutex_timedlock`, `pthread_mutex_clocklock`,
//! `clock_nanosleep` with `TIMER_ABSTIME`, a `FUTEX_WAIT_BITSET` futex wait through
//! `syscall`) take a deadline the program computed from the virtual clock; it is moved onto
//! the real clock by the real clock's lead over the virtual one, so the wait lasts as long as
//! the program asked. Relative waits (`nanosleep`, `poll`,
//! `select`, `epoll_wait`, relative `clock_nanosleep`) are real time already and untouched.
//!
//! Sleeping is host time passing: after a sleep of the program (`nanosleep`, `usleep`, `sleep`,
//! `clock_nanosleep`, relative or absolute) the sleeping thread's clock has moved by the time
//! it slept (to the wake-up time it asked for), as on a real machine, so a loop that sleeps
//! until its clock passes a timeout ends (libraries probing hardware at start-up do this:
//! OpenMPI's PSM2 transport waits for its device so). Only that thread moves: a thread that
//! sleeps in a loop beside the program's work does not move the program's clock. Once the
//! process's core exists the sleep moves the thread on the core (`Core::host_thread_slept`),
//! so the work the thread submits next starts no earlier, as a late rank delays a collective
//! on a real cluster; sleeps before it are carried onto the core when the thread first uses
//! the core or reads its clock after it exists (its readings never jump back, and stay on the
//! job's one timeline). Timed waits that time out do not move the clock (a watchdog's heartbeat waits would otherwise run
//! its clock ahead of the work it times, and a thread waiting on a slow simulated peer would
//! take the simulation's slowness as its own time); but the waiting thread's next
//! [`EXPIRED_READS`] clock reads answer at least the deadline it waited for, so code that waits
//! until a deadline and then compares the clock with it (libstdc++'s
//! `condition_variable::wait_until` and `wait_for`, which read the clock once or twice after
//! the wait; gloo's receive timeouts) sees the timeout instead of waiting again forever. A
//! deadline the program computes from such a read is moved onto the real clock from what the
//! read answered, so a wait in a loop lasts what it asks (those reads run further ahead only
//! while each deadline is computed from the previous one's).

use libc::{c_int, c_void, clockid_t, timespec};
use std::path::PathBuf;
use std::sync::{OnceLock, RwLock};

mod interpose;

/// `dlsym(RTLD_NEXT, name)`: the definition this library's export stands in front of.
fn next(name: &std::ffi::CStr) -> usize {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT searches the objects after this one.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

type ClockGettime = unsafe extern "C" fn(clockid_t, *mut timespec) -> c_int;

/// The C library's `clock_gettime` (the real clocks).
fn real_clock_gettime() -> Option<ClockGettime> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let f = *REAL.get_or_init(|| next(c"clock_gettime"));
    // SAFETY: a non-null address dlsym returned for `clock_gettime`, which has this signature.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, ClockGettime>(f) })
}

/// The real value of clock `clk` in ns, if the clock can be read.
pub(crate) fn real_ns(clk: clockid_t) -> Option<i128> {
    let f = real_clock_gettime()?;
    let mut ts = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    (unsafe { f(clk, &mut ts) } == 0).then(|| ts_ns(&ts))
}

/// A `timespec` in ns.
pub(crate) fn ts_ns(ts: &timespec) -> i128 {
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// ns as a `timespec` (negative times as 0).
pub(crate) fn ns_ts(ns: i128) -> timespec {
    let ns = ns.max(0);
    timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Whether this process reads the virtual clock (`NCCLSIM_CLOCK=virtual`, and not a process of
/// the launcher itself: `RunEnv::virtual_host_clock`), read once.
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| run_env::RunEnv::current().is_ok_and(|e| e.virtual_host_clock()))
}

/// The job's epoch: the real value of each virtualised clock at virtual time 0.
struct Epoch {
    realtime: i128,
    monotonic: i128,
    raw: i128,
    boottime: i128,
}

/// `NCCLSIM_CLOCK_EPOCH` = `<CLOCK_REALTIME ns>,<CLOCK_MONOTONIC ns>` as the launcher read them;
/// without it this process's own clocks when it first reads the virtual clock (a value that
/// does not parse leaves the run environment unusable: the core refuses to start, naming it). `CLOCK_MONOTONIC_RAW` and `CLOCK_BOOTTIME` keep their real
/// distance from `CLOCK_MONOTONIC`.
fn epoch() -> &'static Epoch {
    static EPOCH: OnceLock<Epoch> = OnceLock::new();
    EPOCH.get_or_init(|| {
        let mono_now = real_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
        let own = (real_ns(libc::CLOCK_REALTIME).unwrap_or(0), mono_now);
        let (realtime, monotonic) = run_env::RunEnv::current()
            .ok()
            .and_then(|e| e.clock_epoch)
            .map_or(own, |e| (e.realtime_ns, e.monotonic_ns));
        let offset = |clk| real_ns(clk).map_or(0, |t| t - mono_now);
        Epoch {
            realtime,
            monotonic,
            raw: monotonic + offset(libc::CLOCK_MONOTONIC_RAW),
            boottime: monotonic + offset(libc::CLOCK_BOOTTIME),
        }
    })
}

/// The epoch of a virtualised clock; `None` for the clocks that stay real (CPU-time clocks,
/// `CLOCK_TAI`, alarms, dynamic clocks).
fn epoch_of(clk: clockid_t) -> Option<i128> {
    let e = epoch();
    match clk {
        libc::CLOCK_REALTIME | libc::CLOCK_REALTIME_COARSE => Some(e.realtime),
        libc::CLOCK_MONOTONIC | libc::CLOCK_MONOTONIC_COARSE => Some(e.monotonic),
        libc::CLOCK_MONOTONIC_RAW => Some(e.raw),
        libc::CLOCK_BOOTTIME => Some(e.boottime),
        _ => None,
    }
}

thread_local! {
    /// How far this thread's sleeps before the core existed have moved its clock, ns.
    static SLEPT: std::cell::Cell<i128> = const { std::cell::Cell::new(0) };
    /// The deadline (virtual ns since the epoch) of this thread's last timed wait that timed
    /// out, and how many more clock reads answer no earlier than it.
    static EXPIRED: std::cell::Cell<Option<(i128, u32)>> = const { std::cell::Cell::new(None) };
    /// How far ahead of the thread's clock its last clock read answered (an expired deadline),
    /// ns; 0 when it answered the clock.
    static AHEAD: std::cell::Cell<i128> = const { std::cell::Cell::new(0) };
}

/// How many clock reads after a timed-out wait answer at least its deadline: libstdc++'s
/// `wait_until` on the steady clock reads the system clock and then the steady clock.
const EXPIRED_READS: u32 = 2;

/// The program's timed wait with virtual deadline `deadline` (from [`real_deadline`]) timed
/// out: the thread's next [`EXPIRED_READS`] clock reads answer no earlier than it.
pub(crate) fn expired(deadline: Option<i128>) {
    if let Some(d) = deadline {
        EXPIRED.set(Some((d, EXPIRED_READS)));
    }
}

/// The calling thread's clock as its next read answers it (counting the read): the clock, or
/// an expired deadline ahead of it.
fn read_host_ns() -> i128 {
    let host = host_ns();
    let answer = match EXPIRED.take() {
        Some((d, n)) => {
            if n > 1 {
                EXPIRED.set(Some((d, n - 1)));
            }
            host.max(d)
        }
        None => host,
    };
    AHEAD.set(answer - host);
    answer
}

/// The calling thread's virtual clock since the epoch: its clock on this process's core, or
/// before the core exists (reading the clock never creates it) the thread's sleeps. Sleeps
/// from before the core existed are carried onto it when the thread first uses the core or
/// reads its clock once it exists (`carry_sleeps`), so every thread's readings stay on the
/// job's one timeline (after a collective ranks agree on what time it is, whatever each slept
/// before its first CUDA call).
fn host_ns() -> i128 {
    match crate::CORE.get().and_then(|c| c.as_ref().ok()) {
        Some(core) => {
            carry_sleeps(core);
            core.host_clock().as_nanos() as i128
        }
        None => SLEPT.get(),
    }
}

/// Whether any thread slept before the core existed: until one has, [`carry_sleeps`] (on every
/// entry of the vtable) reads no thread-local.
static SLEPT_BEFORE_CORE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Moves the calling thread on `core` by its sleeps from before the core existed (once).
#[inline]
pub(crate) fn carry_sleeps(core: &fake_cuda_core::Core) {
    // A thread's own sleep set the flag before its own later reads (program order).
    if !SLEPT_BEFORE_CORE.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let before = SLEPT.get();
    if before > 0 {
        SLEPT.set(0);
        core.host_thread_slept(fake_cuda_core::SimDuration::from_nanos(
            u64::try_from(before).unwrap_or(u64::MAX),
        ));
    }
}

/// The program's thread slept `ns` (called after the sleep, from `caller`).
pub(crate) fn slept(ns: i128, caller: usize) {
    if ns <= 0 || !enabled() || is_ours(caller) {
        return;
    }
    match crate::CORE.get().and_then(|c| c.as_ref().ok()) {
        Some(core) => core.host_thread_slept(fake_cuda_core::SimDuration::from_nanos(
            u64::try_from(ns).unwrap_or(u64::MAX),
        )),
        None => {
            SLEPT.set(SLEPT.get().saturating_add(ns));
            SLEPT_BEFORE_CORE.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The program's thread slept until `deadline` on clock `clk` (an absolute sleep, called
/// after it from `caller`): its clock is moved to the deadline if short of it.
pub(crate) fn slept_until(clk: clockid_t, deadline: i128, caller: usize) {
    if let Some(now) = virtual_ns(clk, caller) {
        slept(deadline - now, caller);
    }
}

/// Whether the program's reads of clock `clk` from `caller` answer from the virtual clock.
pub(crate) fn virtualised(clk: clockid_t, caller: usize) -> bool {
    enabled() && !is_ours(caller) && epoch_of(clk).is_some()
}

/// What the program reads from clock `clk`, called from `caller`: `None` when the real clock
/// answers (virtual clock off, a clock that stays real, or a caller in ncclsim's libraries).
pub(crate) fn virtual_ns(clk: clockid_t, caller: usize) -> Option<i128> {
    if !enabled() || is_ours(caller) {
        return None;
    }
    let epoch = epoch_of(clk)?;
    Some(epoch + read_host_ns())
}

/// An absolute deadline on `clk` from the program, moved onto the real clock: `out` holds the
/// moved deadline and is returned, or `abs` itself when nothing moves; with the deadline in
/// virtual ns since the epoch when it moved (for [`expired`]). `None` is a condition
/// variable's clock, realtime or monotonic by its attributes: the virtual clock the deadline is
/// nearer to.
pub(crate) fn real_deadline(
    abs: *const timespec,
    clk: Option<clockid_t>,
    caller: usize,
    out: &mut timespec,
) -> (*const timespec, Option<i128>) {
    if abs.is_null() || !enabled() || is_ours(caller) {
        return (abs, None);
    }
    // SAFETY: a non-null deadline pointer from the caller of a timed wait.
    let t = ts_ns(unsafe { &*abs });
    // A new wait ends what is left of an expired one; the clock as the program last read it
    // (ahead of the thread's clock if that read answered an expired deadline).
    EXPIRED.set(None);
    let ahead = AHEAD.get();
    let host = host_ns() + ahead;
    let clk = clk.unwrap_or_else(|| {
        let e = epoch();
        let (rt, mono) = (e.realtime + host, e.monotonic + host);
        if (t - rt).abs() < (t - mono).abs() {
            libc::CLOCK_REALTIME
        } else {
            libc::CLOCK_MONOTONIC
        }
    });
    let (Some(epoch), Some(real)) = (epoch_of(clk), real_ns(clk)) else {
        return (abs, None);
    };
    // The real clock's lead over the virtual one.
    let lead = real - (epoch + host);
    *out = ns_ts(t.saturating_add(lead));
    (out as *const timespec, Some(t - epoch))
}

/// An executable range of a loaded object and whether the object is one of ncclsim's.
struct Span {
    start: usize,
    end: usize,
    ours: bool,
}

static SPANS: RwLock<Vec<Span>> = RwLock::new(Vec::new());

/// Whether code at `addr` belongs to one of ncclsim's libraries (an object whose file lies in
/// this library's directory). Objects are looked up once and remembered.
pub(crate) fn is_ours(addr: usize) -> bool {
    let known = |spans: &[Span]| {
        spans
            .iter()
            .find(|s| s.start <= addr && addr < s.end)
            .map(|s| s.ours)
    };
    if let Some(o) = known(&SPANS.read().unwrap_or_else(|p| p.into_inner())) {
        return o;
    }
    let Some((ranges, file)) = object_at(addr) else {
        return false;
    };
    let ours = file.is_some_and(|f| dir_of(&f).is_some_and(|d| Some(d) == own_dir()));
    let mut spans = SPANS.write().unwrap_or_else(|p| p.into_inner());
    if known(&spans).is_none() {
        spans.extend(
            ranges
                .into_iter()
                .map(|(start, end)| Span { start, end, ours }),
        );
    }
    ours
}

/// The canonical directory of a loaded object's file.
fn dir_of(file: &std::path::Path) -> Option<PathBuf> {
    std::fs::canonicalize(file)
        .ok()?
        .parent()
        .map(PathBuf::from)
}

/// The directory this library was loaded from.
fn own_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let (_, file) = object_at(own_dir as *const () as usize)?;
        dir_of(&file?)
    })
    .clone()
}

/// A loaded object: its loadable segments' address ranges and its file (`None` for the main
/// program, whose name the loader leaves empty).
type Object = (Vec<(usize, usize)>, Option<PathBuf>);

/// The loaded object containing `addr`.
fn object_at(addr: usize) -> Option<Object> {
    struct Search {
        addr: usize,
        found: Option<Object>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid info for the duration of the callback; `data` is
        // the `Search` handed to dl_iterate_phdr below.
        let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
        let base = info.dlpi_addr as usize;
        let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
            &[]
        } else {
            // SAFETY: the loader's program header table of `dlpi_phnum` entries.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
        };
        let ranges: Vec<(usize, usize)> = phdrs
            .iter()
            .filter(|p| p.p_type == libc::PT_LOAD)
            .map(|p| {
                let start = base + p.p_vaddr as usize;
                (start, start + p.p_memsz as usize)
            })
            .collect();
        if !ranges
            .iter()
            .any(|&(s, e)| s <= search.addr && search.addr < e)
        {
            return 0;
        }
        let name = if info.dlpi_name.is_null() {
            None
        } else {
            // SAFETY: the loader's NUL-terminated file name.
            let n = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) };
            (!n.is_empty()).then(|| {
                use std::os::unix::ffi::OsStrExt;
                PathBuf::from(std::ffi::OsStr::from_bytes(n.to_bytes()))
            })
        };
        search.found = Some((ranges, name));
        1
    }
    let mut search = Search { addr, found: None };
    // SAFETY: `visit` only reads what the loader passes and writes `search`, which outlives
    // the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    search.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timespec_round_trip() {
        let t = ns_ts(3_000_000_123);
        assert_eq!((t.tv_sec, t.tv_nsec), (3, 123));
        assert_eq!(ts_ns(&t), 3_000_000_123);
        assert_eq!(ts_ns(&ns_ts(-5)), 0);
    }
}
