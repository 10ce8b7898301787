//! The exported clock and timed-wait functions. Each export is a two-instruction trampoline
//! that passes its caller's return address as one more argument to the body (a private
//! `ffi_fn!` function, so panics stop at the C boundary): the body answers from the virtual
//! clock, or moves an absolute deadline onto the real clock, and otherwise calls the C
//! library's definition (`dlsym(RTLD_NEXT)`, resolved when this library is loaded).
//!
//! Only x86-64 and AArch64 are interposed (the trampolines are per architecture); elsewhere the
//! virtual clock is refused by `ncclsim run` and the program's clocks stay real.

use super::{expired, ns_ts, real_deadline, slept, slept_until, ts_ns, virtual_ns};
use crate::VtableError;
use libc::{c_int, c_void, clockid_t, time_t, timespec, timeval};
use std::sync::OnceLock;

/// The C library's definitions this library stands in front of (0 where it has none).
struct Real {
    clock_gettime: usize,
    gettimeofday: usize,
    time: usize,
    cond_timedwait: usize,
    cond_clockwait: usize,
    sem_timedwait: usize,
    sem_clockwait: usize,
    mutex_timedlock: usize,
    mutex_clocklock: usize,
    clock_nanosleep: usize,
    nanosleep: usize,
    usleep: usize,
    sleep: usize,
}

fn real() -> &'static Real {
    static REAL: OnceLock<Real> = OnceLock::new();
    REAL.get_or_init(|| Real {
        clock_gettime: super::next(c"clock_gettime"),
        gettimeofday: super::next(c"gettimeofday"),
        time: super::next(c"time"),
        cond_timedwait: super::next(c"pthread_cond_timedwait"),
        cond_clockwait: super::next(c"pthread_cond_clockwait"),
        sem_timedwait: super::next(c"sem_timedwait"),
        sem_clockwait: super::next(c"sem_clockwait"),
        mutex_timedlock: super::next(c"pthread_mutex_timedlock"),
        mutex_clocklock: super::next(c"pthread_mutex_clocklock"),
        clock_nanosleep: super::next(c"clock_nanosleep"),
        nanosleep: super::next(c"nanosleep"),
        usleep: super::next(c"usleep"),
        sleep: super::next(c"sleep"),
    })
}

/// Resolves the C library's definitions while the library loads, so no later clock read
/// calls the loader (a program's allocator may read the clock inside `dlsym`'s allocation).
extern "C" fn resolve_at_load() {
    if super::enabled() {
        real();
        super::real_clock_gettime();
    }
}

#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_at_load;

/// Calls the C library's `$field` as `$ty`, or returns `$missing` if it has none.
macro_rules! call_real {
    ($field:ident as $ty:ty, $missing:expr; $($arg:expr),*) => {{
        let f = real().$field;
        if f == 0 {
            $missing
        } else {
            // SAFETY: the address dlsym returned for this function, which has type `$ty`; the
            // arguments are the caller's, passed on unchanged or with a moved deadline.
            unsafe { std::mem::transmute::<usize, $ty>(f)($($arg),*) }
        }
    }};
}

/// After a timed wait with virtual deadline `deadline`: if it timed out, the thread's next
/// clock reads answer at least the deadline (`expired`).
fn timed_out_if(timed_out: bool, deadline: Option<i128>) {
    if timed_out {
        expired(deadline);
    }
}

fn set_errno(e: c_int) -> c_int {
    // SAFETY: the calling thread's errno location.
    unsafe { *libc::__errno_location() = e };
    -1
}

/// The trampoline of an export: moves the return address into the argument register after
/// the export's own arguments and jumps to the body. The second form takes each
/// architecture's instructions whole, for an export whose return address goes on the stack.
macro_rules! trampoline {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty => $body:ident,
     x86_64: $x86:literal, aarch64: $arm:literal) => {
        trampoline!(
            $(#[$doc])* $name($($arg: $ty),*) -> $ret => $body,
            x86_64 asm: [concat!("mov ", $x86, ", qword ptr [rsp]"), "jmp {body}"],
            aarch64 asm: [concat!("mov ", $arm, ", x30"), "b {body}"]
        );
    };
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty => $body:ident,
     x86_64 asm: [$($x86:tt)*], aarch64 asm: [$($arm:tt)*]) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!($($x86)*, body = sym $body)
        }
        $(#[$doc])*
        #[cfg(target_arch = "aarch64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!($($arm)*, body = sym $body)
        }
    };
}

type ClockGettime = unsafe extern "C" fn(clockid_t, *mut timespec) -> c_int;
type Gettimeofday = unsafe extern "C" fn(*mut timeval, *mut c_void) -> c_int;
type Time = unsafe extern "C" fn(*mut time_t) -> time_t;
type CondTimedwait = unsafe extern "C" fn(*mut c_void, *mut c_void, *const timespec) -> c_int;
type CondClockwait =
    unsafe extern "C" fn(*mut c_void, *mut c_void, clockid_t, *const timespec) -> c_int;
type Timed = unsafe extern "C" fn(*mut c_void, *const timespec) -> c_int;
type Clocked = unsafe extern "C" fn(*mut c_void, clockid_t, *const timespec) -> c_int;
type ClockNanosleep =
    unsafe extern "C" fn(clockid_t, c_int, *const timespec, *mut timespec) -> c_int;
type Nanosleep = unsafe extern "C" fn(*const timespec, *mut timespec) -> c_int;
type Usleep = unsafe extern "C" fn(libc::useconds_t) -> c_int;
type Sleep = unsafe extern "C" fn(libc::c_uint) -> libc::c_uint;

/// The time a relative sleep of `req` slept: all of it, or on an interruption (`interrupted`)
/// what `rem` says was left.
fn relative_sleep(req: *const timespec, rem: *mut timespec, interrupted: bool) -> i128 {
    if req.is_null() {
        return 0;
    }
    // SAFETY: the caller's non-null request.
    let asked = ts_ns(unsafe { &*req });
    if !interrupted {
        return asked;
    }
    if rem.is_null() {
        return 0;
    }
    // SAFETY: the caller's non-null remainder, which the C library filled.
    asked - ts_ns(unsafe { &*rem })
}

trampoline!(
    /// `clock_gettime`: the virtual clock for the program's realtime, monotonic, raw and
    /// boot-time clocks.
    clock_gettime(clk: clockid_t, ts: *mut timespec) -> c_int => vclock_gettime,
    x86_64: "rdx", aarch64: "x2"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_gettime(clk: clockid_t, ts: *mut timespec, caller: usize) -> c_int, panic = -1; {
        match virtual_ns(clk, caller) {
            Some(ns) if !ts.is_null() => {
                // SAFETY: the caller's non-null out-pointer.
                unsafe { *ts = ns_ts(ns) };
                0
            }
            _ => call_real!(clock_gettime as ClockGettime, set_errno(libc::ENOSYS); clk, ts),
        }
    }
);

trampoline!(
    /// `gettimeofday`: the virtual realtime clock in microseconds.
    gettimeofday(tv: *mut timeval, tz: *mut c_void) -> c_int => vclock_gettimeofday,
    x86_64: "rdx", aarch64: "x2"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_gettimeofday(tv: *mut timeval, tz: *mut c_void, caller: usize) -> c_int,
        panic = -1; {
        match virtual_ns(libc::CLOCK_REALTIME, caller) {
            Some(ns) if !tv.is_null() => {
                let t = ns_ts(ns);
                // SAFETY: the caller's non-null out-pointer.
                unsafe {
                    *tv = timeval {
                        tv_sec: t.tv_sec,
                        tv_usec: t.tv_nsec / 1000,
                    }
                };
                if !tz.is_null() {
                    // SAFETY: a `struct timezone` (two ints) the caller asked to be filled.
                    unsafe { std::ptr::write_bytes(tz as *mut u8, 0, 2 * size_of::<c_int>()) };
                }
                0
            }
            _ => call_real!(gettimeofday as Gettimeofday, set_errno(libc::ENOSYS); tv, tz),
        }
    }
);

trampoline!(
    /// `time`: the virtual realtime clock in seconds.
    time(t: *mut time_t) -> time_t => vclock_time,
    x86_64: "rsi", aarch64: "x1"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_time(t: *mut time_t, caller: usize) -> time_t, panic = -1; {
        match virtual_ns(libc::CLOCK_REALTIME, caller) {
            Some(ns) => {
                let secs = ns_ts(ns).tv_sec;
                if !t.is_null() {
                    // SAFETY: the caller's non-null out-pointer.
                    unsafe { *t = secs };
                }
                secs
            }
            None => call_real!(time as Time, set_errno(libc::ENOSYS) as time_t; t),
        }
    }
);

trampoline!(
    /// `pthread_cond_timedwait`: the deadline moved onto the real clock.
    pthread_cond_timedwait(c: *mut c_void, m: *mut c_void, abs: *const timespec) -> c_int
        => vclock_cond_timedwait,
    x86_64: "rcx", aarch64: "x3"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_cond_timedwait(c: *mut c_void, m: *mut c_void, abs: *const timespec, caller: usize)
        -> c_int, panic = libc::EINVAL; {
        let mut moved = ns_ts(0);
        let (abs, deadline) = real_deadline(abs, None, caller, &mut moved);
        let r = call_real!(cond_timedwait as CondTimedwait, libc::ENOSYS; c, m, abs);
        timed_out_if(r == libc::ETIMEDOUT, deadline);
        r
    }
);

trampoline!(
    /// `pthread_cond_clockwait`: the deadline moved onto the real clock.
    pthread_cond_clockwait(c: *mut c_void, m: *mut c_void, clk: clockid_t, abs: *const timespec)
        -> c_int => vclock_cond_clockwait,
    x86_64: "r8", aarch64: "x4"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_cond_clockwait(
        c: *mut c_void,
        m: *mut c_void,
        clk: clockid_t,
        abs: *const timespec,
        caller: usize,
    ) -> c_int, panic = libc::EINVAL; {
        let mut moved = ns_ts(0);
        let (abs, deadline) = real_deadline(abs, Some(clk), caller, &mut moved);
        let r = call_real!(cond_clockwait as CondClockwait, libc::ENOSYS; c, m, clk, abs);
        timed_out_if(r == libc::ETIMEDOUT, deadline);
        r
    }
);

trampoline!(
    /// `sem_timedwait`: the deadline moved onto the real clock.
    sem_timedwait(s: *mut c_void, abs: *const timespec) -> c_int => vclock_sem_timedwait,
    x86_64: "rdx", aarch64: "x2"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_sem_timedwait(s: *mut c_void, abs: *const timespec, caller: usize) -> c_int,
        panic = -1; {
        let mut moved = ns_ts(0);
        let (abs, deadline) = real_deadline(abs, Some(libc::CLOCK_REALTIME), caller, &mut moved);
        let r = call_real!(sem_timedwait as Timed, set_errno(libc::ENOSYS); s, abs);
        // SAFETY: the calling thread's errno location.
        timed_out_if(r == -1 && unsafe { *libc::__errno_location() } == libc::ETIMEDOUT, deadline);
        r
    }
);

trampoline!(
    /// `sem_clockwait`: the deadline moved onto the real clock.
    sem_clockwait(s: *mut c_void, clk: clockid_t, abs: *const timespec) -> c_int
        => vclock_sem_clockwait,
    x86_64: "rcx", aarch64: "x3"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_sem_clockwait(s: *mut c_void, clk: clockid_t, abs: *const timespec, caller: usize)
        -> c_int, panic = -1; {
        let mut moved = ns_ts(0);
        let (abs, deadline) = real_deadline(abs, Some(clk), caller, &mut moved);
        let r = call_real!(sem_clockwait as Clocked, set_errno(libc::ENOSYS); s, clk, abs);
        // SAFETY: the calling thread's errno location.
        timed_out_if(r == -1 && unsafe { *libc::__errno_location() } == libc::ETIMEDOUT, deadline);
        r
    }
);

trampoline!(
    /// `pthread_mutex_timedlock`: the deadline moved onto the real clock.
    pthread_mutex_timedlock(m: *mut c_void, abs: *const timespec) -> c_int
        => vclock_mutex_timedlock,
    x86_64: "rdx", aarch64: "x2"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_mutex_timedlock(m: *mut c_void, abs: *const timespec, caller: usize) -> c_int,
        panic = libc::EINVAL; {
        let mut moved = ns_ts(0);
        let (abs, deadline) = real_deadline(abs, Some(libc::CLOCK_REALTIME), caller, &mut moved);
        let r = call_real!(mutex_timedlock as Timed, libc::ENOSYS; m, abs);
        timed_out_if(r == libc::ETIMEDOUT, deadline);
        r
    }
);

trampoline!(
    /// `pthread_mutex_clocklock`: the deadline moved onto the real clock.
    pthread_mutex_clocklock(m: *mut c_void, clk: clockid_t, abs: *const timespec) -> c_int
        => vclock_mutex_clocklock,
    x86_64: "rcx", aarch64: "x3"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_mutex_clocklock(m: *mut c_void, clk: clockid_t, abs: *const timespec, caller: usize)
        -> c_int, panic = libc::EINVAL; {
        let mut moved = ns_ts(0);
        let (abs, deadline) = real_deadline(abs, Some(clk), caller, &mut moved);
        let r = call_real!(mutex_clocklock as Clocked, libc::ENOSYS; m, clk, abs);
        timed_out_if(r == libc::ETIMEDOUT, deadline);
        r
    }
);

trampoline!(
    /// `clock_nanosleep`: an absolute (`TIMER_ABSTIME`) wake-up time moved onto the real
    /// clock; relative sleeps are real time already. The thread's clock then moves by the
    /// sleep.
    clock_nanosleep(clk: clockid_t, flags: c_int, req: *const timespec, rem: *mut timespec)
        -> c_int => vclock_clock_nanosleep,
    x86_64: "r8", aarch64: "x4"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_clock_nanosleep(
        clk: clockid_t,
        flags: c_int,
        req: *const timespec,
        rem: *mut timespec,
        caller: usize,
    ) -> c_int, panic = libc::EINVAL; {
        let mut moved = ns_ts(0);
        let absolute = flags & libc::TIMER_ABSTIME != 0;
        let asked = req;
        let req = if absolute {
            real_deadline(req, Some(clk), caller, &mut moved).0
        } else {
            req
        };
        let rc = call_real!(clock_nanosleep as ClockNanosleep, libc::ENOSYS; clk, flags, req, rem);
        if absolute && rc == 0 && !asked.is_null() {
            // SAFETY: the caller's non-null wake-up time.
            slept_until(clk, ts_ns(unsafe { &*asked }), caller);
        } else if !absolute && (rc == 0 || rc == libc::EINTR) && super::virtualised(clk, caller) {
            slept(relative_sleep(asked, rem, rc == libc::EINTR), caller);
        }
        rc
    }
);

trampoline!(
    /// `nanosleep`: real time; the thread's clock then moves by the sleep.
    nanosleep(req: *const timespec, rem: *mut timespec) -> c_int => vclock_nanosleep,
    x86_64: "rdx", aarch64: "x2"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_nanosleep(req: *const timespec, rem: *mut timespec, caller: usize) -> c_int,
        panic = -1; {
        let rc = call_real!(nanosleep as Nanosleep, set_errno(libc::ENOSYS); req, rem);
        // SAFETY: the calling thread's errno location.
        let interrupted = rc != 0 && unsafe { *libc::__errno_location() } == libc::EINTR;
        if rc == 0 || interrupted {
            slept(relative_sleep(req, rem, interrupted), caller);
        }
        rc
    }
);

trampoline!(
    /// `usleep`: real time; the thread's clock then moves by the sleep.
    usleep(us: libc::useconds_t) -> c_int => vclock_usleep,
    x86_64: "rsi", aarch64: "x1"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_usleep(us: libc::useconds_t, caller: usize) -> c_int, panic = -1; {
        let rc = call_real!(usleep as Usleep, set_errno(libc::ENOSYS); us);
        if rc == 0 {
            slept(i128::from(us) * 1000, caller);
        }
        rc
    }
);

trampoline!(
    /// `sleep`: real time; the thread's clock then moves by the seconds slept.
    sleep(secs: libc::c_uint) -> libc::c_uint => vclock_sleep,
    x86_64: "rsi", aarch64: "x1"
);
ffi_boundary::ffi_fn!(VtableError;
    fn vclock_sleep(secs: libc::c_uint, caller: usize) -> libc::c_uint, panic = secs; {
        let left = call_real!(sleep as Sleep, secs; secs);
        slept(i128::from(secs.saturating_sub(left)) * 1_000_000_000, caller);
        left
    }
);

/// The C library's `syscall`, resolved on first use without a lock: a waiting lock of this
/// library itself reaches `syscall` (Rust's futex waits), so its resolution may not wait.
fn real_syscall() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SYSCALL: AtomicUsize = AtomicUsize::new(0);
    let f = SYSCALL.load(Ordering::Relaxed);
    if f != 0 {
        return f;
    }
    let f = super::next(c"syscall");
    SYSCALL.store(f, Ordering::Relaxed);
    f
}

type Syscall = unsafe extern "C" fn(
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
) -> libc::c_long;

trampoline!(
    /// `syscall`: a futex wait with an absolute deadline (`FUTEX_WAIT_BITSET`, on
    /// `CLOCK_MONOTONIC` or with `FUTEX_CLOCK_REALTIME` on `CLOCK_REALTIME`) has its deadline
    /// moved onto the real clock, as the C library's timed waits do; libstdc++ waits so in
    /// `std::future::wait_for`/`wait_until` and its semaphores and atomic waits. Every other
    /// call goes to the C library unchanged. The C declaration is variadic; its integer
    /// arguments are passed as six fixed ones are (x86-64 System V: registers, then the stack;
    /// AArch64: x1-x6), so the export takes six and hands all six on (the kernel ignores those
    /// a call does not use). On x86-64 the sixth is on the stack above the return address: the
    /// body gets it and the return address as its seventh and eighth arguments, in a frame of
    /// its own (aligned to 16); on AArch64 the return address goes in x7.
    syscall(
        n: libc::c_long,
        a1: libc::c_long,
        a2: libc::c_long,
        a3: libc::c_long,
        a4: libc::c_long,
        a5: libc::c_long,
        a6: libc::c_long
    ) -> libc::c_long => vclock_syscall,
    x86_64 asm: [
        "mov r11, qword ptr [rsp]",
        "mov r10, qword ptr [rsp + 8]",
        "sub rsp, 24",
        "mov qword ptr [rsp], r10",
        "mov qword ptr [rsp + 8], r11",
        "call {body}",
        "add rsp, 24",
        "ret"
    ],
    aarch64 asm: ["mov x7, x30", "b {body}"]
);

#[allow(clippy::too_many_arguments)]
extern "C" fn vclock_syscall(
    n: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
    caller: usize,
) -> libc::c_long {
    let f = real_syscall();
    if f == 0 {
        return set_errno(libc::ENOSYS) as libc::c_long;
    }
    // SAFETY: the address dlsym returned for `syscall`, called with the caller's arguments.
    let call = |a4| unsafe { std::mem::transmute::<usize, Syscall>(f)(n, a1, a2, a3, a4, a5, a6) };
    let op = a2 as c_int;
    // Everything but an absolute-deadline futex wait, first and without any lock: the waits of
    // this library's own locks come here.
    if n != libc::SYS_futex || op & libc::FUTEX_CMD_MASK != libc::FUTEX_WAIT_BITSET || a4 == 0 {
        return call(a4);
    }
    // No panic may unwind out of this body (it is not an `ffi_fn!`: it has eight arguments and
    // locks of its own come through it); the deadline's move is caught here.
    let clk = if op & libc::FUTEX_CLOCK_REALTIME != 0 {
        libc::CLOCK_REALTIME
    } else {
        libc::CLOCK_MONOTONIC
    };
    let mut moved = ns_ts(0);
    let abs = a4 as *const timespec;
    let Ok((abs, deadline)) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        real_deadline(abs, Some(clk), caller, &mut moved)
    })) else {
        return call(a4);
    };
    let r = call(abs as libc::c_long);
    // SAFETY: the calling thread's errno location.
    if r == -1 && unsafe { *libc::__errno_location() } == libc::ETIMEDOUT {
        let _ = std::panic::catch_unwind(|| timed_out_if(true, deadline));
    }
    r
}
