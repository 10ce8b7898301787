//! Threads that Python ends at interpreter exit wait for the process to end instead.
//!
//! CPython before 3.14 ends a thread that tries to take the GIL once finalization has begun
//! with `pthread_exit` (`PyThread_exit_thread` in `take_gil`, Python/ceval_gil.c).
//! `pthread_exit` unwinds the thread's stack, and when the thread is inside C++ code that
//! released the GIL — a daemon thread running a torch op, whose GIL guard takes the GIL back in
//! its destructor — the unwind reaches a frame that may not throw and the C++ runtime calls
//! `std::terminate`: the process aborts ("terminate called without an active exception",
//! SIGABRT) after the program's last line, before its exit handlers write the run's report and
//! trace. CPython 3.14 hangs such threads until the process exits instead
//! (`PyThread_hang_thread`); this interposer gives older Pythons the same behaviour: a
//! `pthread_exit` called while the process's Python is finalizing, from a thread other than the
//! main one, parks that thread for good (the process's exit ends it); any other call goes to
//! the C library's `pthread_exit`.

use std::ffi::{c_int, c_void, CStr};

type PthreadExit = unsafe extern "C-unwind" fn(*mut c_void) -> !;
type IsFinalizing = unsafe extern "C" fn() -> c_int;

/// Whether the Python interpreter of this process (if any) is finalizing.
fn python_finalizing() -> bool {
    // `Py_IsFinalizing` is public from 3.13, `_Py_IsFinalizing` before.
    for name in [c"Py_IsFinalizing", c"_Py_IsFinalizing"] {
        if let Some(f) = lookup::<IsFinalizing>(libc::RTLD_DEFAULT, name) {
            // SAFETY: CPython's `int (void)` query of an atomic runtime flag, callable without
            // the GIL.
            return unsafe { f() } != 0;
        }
    }
    false
}

/// `name` in `handle`'s scope as a function of type `F`.
fn lookup<F: Copy>(handle: *mut c_void, name: &CStr) -> Option<F> {
    // SAFETY: a NUL-terminated name; dlsym has no other precondition.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    // SAFETY: a non-null symbol of the named function, whose C type the caller names as `F`
    // (a function pointer, the size of a data pointer).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn is_main_thread() -> bool {
    // SAFETY: plain system calls without arguments.
    unsafe { libc::gettid() == libc::getpid() }
}

/// `pthread_exit`, interposed (see the module documentation). "C-unwind": the real
/// `pthread_exit` unwinds through this frame, which holds nothing to drop.
///
/// # Safety
/// As the C library's `pthread_exit`.
#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_exit(retval: *mut c_void) -> ! {
    if !is_main_thread() && python_finalizing() {
        loop {
            // SAFETY: waits for a signal; the loop waits again after each handler.
            unsafe { libc::pause() };
        }
    }
    match lookup::<PthreadExit>(libc::RTLD_NEXT, c"pthread_exit") {
        // SAFETY: the C library's pthread_exit, with the caller's argument.
        Some(real) => unsafe { real(retval) },
        // No C library behind this one: a thread cannot end another way.
        None => std::process::abort(),
    }
}
