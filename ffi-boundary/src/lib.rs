//! The C boundary of every ncclsim library (`libcudart`, `libcuda`, `libnvidia-ml`,
//! `libncclsim_cuda`'s vtable, `libnccl`): one macro, [`ffi_fn!`], writes each C function so
//! that
//!
//! - no panic crosses into C: the body runs under `catch_unwind`, and a panic returns the
//!   library's panic code ([`Library`]; functions returning a C code) or a value chosen by the
//!   return type ([`PanicOrDefault`], overridable with `panic = expr`);
//! - a body returns `Result<(), E>` and the error's own [`FfiError::code`] becomes the C code;
//! - the library keeps its "last error" through [`FfiError::record`], called after every call;
//! - with `NCCLSIM_DEBUG` set (and not `0`) failures and panics are printed on stderr as
//!   `ncclsim <library>: <function>: <message>`.
//!
//! C callbacks a library hands to others (`atexit` handlers, host work the CUDA core runs)
//! have no C code to return; their bodies run under [`callback`] (or [`guard`], for a library
//! without an error type), which also keeps panics from crossing into C. No other library crate calls `catch_unwind`.
//!
//! [`non_null!`] writes through (or reads from) a C pointer after checking it is not null,
//! returning the caller's error otherwise; [`write_c_string`] fills C string buffers.
//!
//! This crate knows nothing of CUDA or NCCL: each library supplies its error type, its codes
//! and its bookkeeping through [`FfiError`] and its [`Library`]. Modelled on rustls-ffi's
//! `ffi_panic_boundary!` and `PanicOrDefault`, and hyper's `non_null!`.

use std::any::Any;
use std::ffi::c_char;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};

/// What the boundary knows of a C library besides its error type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Library {
    /// The name in `NCCLSIM_DEBUG` lines (`ncclsim <name>: <function>: ...`).
    pub name: &'static str,
    /// The code a function returning a C code returns when its body panicked.
    pub panic_code: i32,
    /// Codes that answer the caller rather than fail (e.g. "not ready", "in progress"): not
    /// printed.
    pub answers: &'static [i32],
    /// Whether failures and panics are printed when `NCCLSIM_DEBUG` is set.
    pub debug_log: bool,
}

impl Library {
    /// A library named `name` whose panics return `panic_code`; every error is printed.
    pub const fn new(name: &'static str, panic_code: i32) -> Library {
        Library {
            name,
            panic_code,
            answers: &[],
            debug_log: true,
        }
    }

    /// The same, with `answers` not printed.
    pub const fn answering(self, answers: &'static [i32]) -> Library {
        Library { answers, ..self }
    }

    /// The same, printing nothing (its callers print what it returns them).
    pub const fn silent(self) -> Library {
        Library {
            debug_log: false,
            ..self
        }
    }
}

/// The error type of one C library: its C code, and what the library does with a failure.
pub trait FfiError: Display + Sized {
    /// The library this is the error type of.
    const LIBRARY: Library;

    /// The C code of this error (never the success code).
    fn code(&self) -> i32;

    /// What `NCCLSIM_DEBUG` prints for this failure. Default: `error <code>: <self>`.
    fn debug_text(&self) -> String {
        format!("error {}: {self}", self.code())
    }

    /// Called after every call of a function returning a C code, with how it ended: the
    /// library's "last error" bookkeeping. Default: nothing.
    fn record(_function: &'static str, _outcome: Outcome<'_, Self>) {}
}

/// How a call of a function returning a C code ended.
#[derive(Debug)]
pub enum Outcome<'a, E> {
    /// The body returned `Ok(())`; the function returns 0.
    Success,
    /// The body returned this error; the function returns its code.
    Failure(&'a E),
    /// The body panicked with this message; the function returns [`Library::panic_code`].
    Panic(&'a str),
}

/// The value a C function returns when its body panicked, chosen by the return type: null for
/// pointers, 0 for integers, nothing for `()`, `Default` for the types that opt in.
pub trait PanicOrDefault {
    /// The fallback value.
    fn panic_value() -> Self;
}

impl PanicOrDefault for () {
    fn panic_value() {}
}

impl<T> PanicOrDefault for *mut T {
    fn panic_value() -> Self {
        std::ptr::null_mut()
    }
}

impl<T> PanicOrDefault for *const T {
    fn panic_value() -> Self {
        std::ptr::null()
    }
}

macro_rules! zero_on_panic {
    ($($t:ty)*) => {$(
        impl PanicOrDefault for $t {
            fn panic_value() -> Self {
                0 as $t
            }
        }
    )*};
}
zero_on_panic!(i8 u8 i16 u16 i32 u32 i64 u64 isize usize f32 f64);

/// Whether `NCCLSIM_DEBUG` asks for failures to be printed (set and not `0`).
pub fn debug_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("NCCLSIM_DEBUG").is_ok_and(|v| v != "0"))
}

/// Prints `ncclsim <library>: <function>: <message>` on stderr when `NCCLSIM_DEBUG` is set.
pub fn log_failure(library: &str, function: &str, message: &str) {
    if debug_enabled() {
        eprintln!("ncclsim {library}: {function}: {message}");
    }
}

/// The message of a caught panic (its `&str` or `String` payload).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

const PANIC_LOG: &str = "panic caught at the C boundary";

/// Runs the body of a function returning a C code: 0 on success, the error's code on failure,
/// [`Library::panic_code`] if it panicked; records the outcome and logs failures. What
/// [`ffi_fn!`] expands to.
pub fn call<E: FfiError>(function: &'static str, body: impl FnOnce() -> Result<(), E>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            E::record(function, Outcome::Success);
            0
        }
        Ok(Err(e)) => {
            E::record(function, Outcome::Failure(&e));
            let code = e.code();
            if E::LIBRARY.debug_log && !E::LIBRARY.answers.contains(&code) {
                log_failure(E::LIBRARY.name, function, &e.debug_text());
            }
            code
        }
        Err(payload) => {
            E::record(function, Outcome::Panic(&panic_message(payload.as_ref())));
            if E::LIBRARY.debug_log {
                log_failure(E::LIBRARY.name, function, PANIC_LOG);
            }
            E::LIBRARY.panic_code
        }
    }
}

/// Runs the body of a function returning a value: the body's value, or `fallback()` if it
/// panicked (logged as [`call`] logs). Nothing is recorded. What [`ffi_fn!`] expands to for
/// `-> T` functions.
pub fn call_value<E: FfiError, T>(
    function: &'static str,
    fallback: impl FnOnce() -> T,
    body: impl FnOnce() -> T,
) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        if E::LIBRARY.debug_log {
            log_failure(E::LIBRARY.name, function, PANIC_LOG);
        }
        fallback()
    })
}

/// Runs the body of a C callback of the library of `E` (an `atexit` handler, host work handed to
/// the CUDA core): there is no C code to map, so a panic yields `fallback()` instead of the
/// body's value. The first panic of each callback is printed when `NCCLSIM_DEBUG` is set (also
/// for a library whose callers print its errors, since a callback has no caller to tell), as
/// `ncclsim <library>: <callback>: panic caught at the C boundary: <message>`; later ones are
/// not, so a callback that runs per operation does not flood the log.
pub fn callback<E: FfiError, T>(
    function: &'static str,
    fallback: impl FnOnce() -> T,
    body: impl FnOnce() -> T,
) -> T {
    guard(E::LIBRARY.name, function, fallback, body)
}

/// [`callback`] for a library without an error type (a constructor in `.init_array`, an
/// interposed libc function): runs `body`, and after a panic yields `fallback()`, printing the
/// first panic of each `function` of `library` when `NCCLSIM_DEBUG` is set.
pub fn guard<T>(
    library: &'static str,
    function: &'static str,
    fallback: impl FnOnce() -> T,
    body: impl FnOnce() -> T,
) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        if first_panic_of(library, function) {
            let message = format!("{PANIC_LOG}: {}", panic_message(payload.as_ref()));
            log_failure(library, function, &message);
        }
        fallback()
    })
}

/// Whether this is the first panic of `function` of `library` in this process.
fn first_panic_of(library: &'static str, function: &'static str) -> bool {
    static SEEN: Mutex<Vec<(&str, &str)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if seen.contains(&(library, function)) {
        return false;
    }
    seen.push((library, function));
    true
}

/// Writes a C function whose body runs inside the boundary.
///
/// The first argument is the library's [`FfiError`] type; then one function:
///
/// - `export fn name(args) { body }`: `#[no_mangle] pub unsafe extern "C" fn name(args) -> i32`;
///   `body` yields `Result<(), E>` and the function returns 0, the error's code, or
///   `E::LIBRARY.panic_code` after a panic (see [`call`]).
/// - `export fn name(args) -> T { body }`: returns `body`'s `T`, or after a panic
///   [`PanicOrDefault::panic_value`] of `T`; `export fn name(args) -> T, panic = v; { body }`
///   returns `v` instead. Nothing is recorded (see [`call_value`]).
/// - without `export`: the same function, private and not `#[no_mangle]` (vtable entries).
/// - `... fn name(args) as label { body }`: `label` names the function in logs and records
///   (an export whose body serves a twin).
///
/// Attributes (doc comments) before `export` or between it and `fn` are kept.
#[macro_export]
macro_rules! ffi_fn {
    ($err:ty; $(#[$meta:meta])* export fn $($rest:tt)*) => {
        $crate::ffi_fn!(@fn $err; [$(#[$meta])* #[unsafe(no_mangle)] pub] $($rest)*);
    };
    ($err:ty; export $(#[$meta:meta])* fn $($rest:tt)*) => {
        $crate::ffi_fn!(@fn $err; [$(#[$meta])* #[unsafe(no_mangle)] pub] $($rest)*);
    };
    ($err:ty; $(#[$meta:meta])* fn $($rest:tt)*) => {
        $crate::ffi_fn!(@fn $err; [$(#[$meta])*] $($rest)*);
    };
    (@fn $err:ty; [$($pre:tt)*] $name:ident($($arg:ident: $ty:ty),* $(,)?) $(as $label:ident)?
     $body:block) => {
        #[allow(clippy::missing_safety_doc)]
        $($pre)* unsafe extern "C" fn $name($($arg: $ty),*) -> i32 {
            $crate::call::<$err>(
                $crate::ffi_fn!(@label $name $($label)?),
                move || -> ::std::result::Result<(), $err> { $body },
            )
        }
    };
    (@fn $err:ty; [$($pre:tt)*] $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty
     $(, panic = $fallback:expr;)? $body:block) => {
        #[allow(clippy::missing_safety_doc)]
        $($pre)* unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $crate::call_value::<$err, $ret>(
                stringify!($name),
                || $crate::ffi_fn!(@fallback $ret $(, $fallback)?),
                move || -> $ret { $body },
            )
        }
    };
    (@label $name:ident) => { stringify!($name) };
    (@label $name:ident $label:ident) => { stringify!($label) };
    (@fallback $ret:ty) => { <$ret as $crate::PanicOrDefault>::panic_value() };
    (@fallback $ret:ty, $fallback:expr) => { $fallback };
}

/// Checks a C pointer before using it; if it is null, returns `Err(err.into())` from the
/// enclosing function.
///
/// - `non_null!(*out = value; else err)`: writes `value` through the out-pointer `out`.
/// - `non_null!(&*ptr; else err)`: a shared reference to what `ptr` points to.
///
/// A non-null pointer is trusted to be valid for its type: the contract of every C argument
/// of the libraries using this crate, passed on from their callers.
#[macro_export]
macro_rules! non_null {
    (*$ptr:ident = $value:expr; else $err:expr) => {{
        let (ptr, value) = ($ptr, $value);
        if ptr.is_null() {
            return ::std::result::Result::Err(::std::convert::From::from($err));
        }
        // SAFETY: not null, and by the C API's contract it points to writable memory for one
        // value of its type.
        unsafe { ptr.write(value) }
    }};
    (&*$ptr:ident; else $err:expr) => {{
        let ptr = $ptr;
        if ptr.is_null() {
            return ::std::result::Result::Err(::std::convert::From::from($err));
        }
        // SAFETY: not null, and by the C API's contract it points to a valid value of its type
        // that nothing writes while the call runs.
        unsafe { &*ptr }
    }};
}

/// Copies `text` and a NUL into the C buffer `buf` of `len` bytes. Returns false (writing
/// nothing) if `buf` is null or too small.
///
/// # Safety
/// A non-null `buf` must point to `len` writable bytes.
pub unsafe fn write_c_string(buf: *mut c_char, len: usize, text: &[u8]) -> bool {
    if buf.is_null() || len <= text.len() {
        return false;
    }
    // SAFETY: `len` writable bytes by the contract above; we write text.len() + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    true
}

/// The bytes of a NUL-terminated string held in a fixed C array (up to the first NUL).
pub fn c_array_text(name: &[c_char]) -> Vec<u8> {
    name.iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[derive(Debug)]
    struct E(i32);
    impl Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "e{}", self.0)
        }
    }
    thread_local! {
        static LAST: RefCell<String> = const { RefCell::new(String::new()) };
    }
    impl FfiError for E {
        const LIBRARY: Library = Library::new("libtest", 999).answering(&[1]);
        fn code(&self) -> i32 {
            self.0
        }
        fn record(function: &'static str, outcome: Outcome<'_, Self>) {
            let text = match outcome {
                Outcome::Success => format!("{function}: ok"),
                Outcome::Failure(e) => format!("{function}: {e}"),
                Outcome::Panic(m) => format!("{function}: panic {m}"),
            };
            LAST.with(|l| *l.borrow_mut() = text);
        }
    }

    fn last() -> String {
        LAST.with(|l| l.borrow().clone())
    }

    ffi_fn!(E; fn set(out: *mut i32, v: i32) {
        if v < 0 {
            return Err(E(v));
        }
        if v == 13 {
            panic!("unlucky");
        }
        non_null!(*out = v; else E(7));
        Ok(())
    });

    ffi_fn!(E; fn named() as other { Ok(()) });

    ffi_fn!(E; fn read(p: *const i32) -> i32 {
        if p.is_null() {
            panic!("null")
        }
        // SAFETY: the tests pass a valid pointer or null.
        unsafe { *p }
    });

    ffi_fn!(E; fn read_or(p: *const i32) -> i32, panic = -1; { if p.is_null() { panic!("null") } else { 1 } });

    ffi_fn!(E; fn ptr() -> *const u8 { panic!("no pointer") });

    fn deref(p: *const i32) -> Result<i32, E> {
        Ok(*non_null!(&*p; else E(3)))
    }

    #[test]
    fn codes_outcomes_and_panics() {
        let mut x = 0;
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert_eq!(unsafe { set(&mut x, 5) }, 0);
        assert_eq!(x, 5);
        assert_eq!(last(), "set: ok");
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert_eq!(unsafe { set(&mut x, -4) }, -4);
        assert_eq!(last(), "set: e-4");
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert_eq!(unsafe { set(std::ptr::null_mut(), 1) }, 7);
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert_eq!(unsafe { set(&mut x, 13) }, 999);
        assert_eq!(last(), "set: panic unlucky");
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert_eq!(unsafe { named() }, 0);
        assert_eq!(last(), "other: ok");
    }

    #[test]
    fn values_fall_back_by_type_or_as_told() {
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert_eq!(unsafe { read(&3) }, 3);
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert_eq!(unsafe { read(std::ptr::null()) }, 0);
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert_eq!(unsafe { read_or(std::ptr::null()) }, -1);
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert!(unsafe { ptr() }.is_null());
        assert_eq!(deref(&8).ok(), Some(8));
        assert_eq!(deref(std::ptr::null()).err().map(|e| e.0), Some(3));
    }

    #[test]
    fn callbacks_return_their_value_or_the_fallback() {
        assert_eq!(callback::<E, i32>("cb", || -1, || 4), 4);
        assert_eq!(callback::<E, i32>("cb", || -1, || panic!("cb failed")), -1);
        assert!(!first_panic_of("libtest", "cb"), "the panic above was seen");
        assert_eq!(callback::<E, i32>("cb", || -2, || panic!("again")), -2);
        assert!(first_panic_of("libtest", "other callback"));
    }

    #[test]
    fn strings_fit_or_are_refused() {
        let mut buf = [1 as c_char; 6];
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert!(!unsafe { write_c_string(buf.as_mut_ptr(), 6, b"abcdef") });
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert!(unsafe { write_c_string(buf.as_mut_ptr(), 6, b"abcde") });
        assert_eq!(c_array_text(&buf), b"abcde");
        // SAFETY: test calls with valid pointers or null, as each case says.
        assert!(!unsafe { write_c_string(std::ptr::null_mut(), 6, b"a") });
    }
}
