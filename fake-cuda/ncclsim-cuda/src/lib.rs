//! `libncclsim_cuda.so`: the one fake CUDA core of a process.
//!
//! This shared object owns the process's only [`Core`] and exports `ncclsim_cuda_core_v1`,
//! returning the static vtable of [`fake_cuda_abi`], which every caller uses (the front-ends,
//! `libnccl.so.2`, and ncclsim's Python package through ctypes). Every
//! front-end (`libcudart.so.12`, later `.13`, `libcuda.so.1`, `libnvidia-ml.so.1`,
//! `libnccl.so.2`) `dlopen`s this file from its own directory, and the dynamic loader maps a
//! file once per process, so whichever library a program loads first, they all share this
//! state.
//!
//! The vtable's C entries and its static table are generated from the one entry list
//! ([`fake_cuda_abi::core_api!`]); each entry's body is a plain function in `entries`. Every
//! C entry runs inside the workspace's one C boundary (`ffi_boundary::ffi_fn!`): it catches
//! panics, checks out-pointers, records the calling thread's last error message and returns a
//! [`Status`] code.

use fake_cuda_abi::*;
use fake_cuda_core::{Core, CoreError, Status};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::sync::{Mutex, Once};

mod entries;
mod single;
mod vclock;

static CORE: OnceLock<Result<Core, CoreError>> = OnceLock::new();

/// The process's core, created from the environment on first use. With `NCCLSIM_REPORT=file`
/// a JSON report is written to `file` when the process exits. If the environment names a
/// topology that cannot be used, or if another copy of this library is loaded in the process,
/// every call fails with that error (printed once).
pub fn core() -> Result<&'static Core, CoreError> {
    let core = CORE.get_or_init(|| {
        let others = single::other_cores();
        if !others.is_empty() {
            let e = CoreError::Load(format!(
                "another copy of libncclsim_cuda.so is loaded in this process ({}); two cores \
                 would not know each other's devices and memory, so this one refuses to start \
                 (keep the fake CUDA libraries in one directory)",
                others.join(", ")
            ));
            eprintln!("ncclsim: {e}");
            return Err(e);
        }
        let core = Core::from_env();
        match &core {
            Ok(_) => {
                let env = run_env::RunEnv::current().ok();
                if env.is_some_and(|e| e.report.is_some()) {
                    // SAFETY: registering a plain extern "C" function; this library is never
                    // unloaded (front-ends open it with RTLD_NODELETE).
                    unsafe { libc::atexit(write_report) };
                }
                if env.is_some_and(|e| e.trace.is_some()) {
                    // SAFETY: as above.
                    unsafe { libc::atexit(flush_compute_trace) };
                }
            }
            Err(e) => eprintln!("ncclsim: no fake CUDA devices: {e}"),
        }
        core
    });
    let core = core.as_ref().map_err(Clone::clone)?;
    // The calling thread's sleeps from before the core existed join its clock on the core
    // before its first work there.
    vclock::carry_sleeps(core);
    Ok(core)
}

/// The calls of one entry: a static per entry, counted without a lock (the hot entries run
/// on every stream operation), listed in `CALLS` the first time it counts.
struct CallCount {
    name: &'static str,
    calls: AtomicU64,
    listed: Once,
}

impl CallCount {
    const fn new(name: &'static str) -> CallCount {
        CallCount {
            name,
            calls: AtomicU64::new(0),
            listed: Once::new(),
        }
    }
}

/// Every entry called so far.
static CALLS: Mutex<Vec<&'static CallCount>> = Mutex::new(Vec::new());

fn count_call(c: &'static CallCount) {
    c.calls.fetch_add(1, Ordering::Relaxed);
    if !c.listed.is_completed() {
        c.listed
            .call_once(|| CALLS.lock().unwrap_or_else(|p| p.into_inner()).push(c));
    }
}

/// API calls so far by vtable entry name.
fn call_counts() -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for c in CALLS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        *m.entry(c.name.to_string()).or_default() += c.calls.load(Ordering::Relaxed);
    }
    m
}

/// Named sections other libraries added to the report (`report_section`), by name.
pub(crate) static SECTIONS: Mutex<BTreeMap<String, serde_json::Value>> =
    Mutex::new(BTreeMap::new());

/// Writes the compute trace's last events at exit (a panic ends here; they are then lost).
extern "C" fn flush_compute_trace() {
    ffi_boundary::callback::<VtableError, ()>(
        "flush_compute_trace",
        || (),
        || {
            if let Err(e) = core().and_then(Core::flush_compute_trace) {
                eprintln!("ncclsim: NCCLSIM_TRACE: {e}");
            }
        },
    );
}

/// `NCCLSIM_REPORT`'s file name with `%h` (short host name) and `%p` (process id) replaced, as
/// NCCL does for `NCCL_DEBUG_FILE`.
fn report_path(template: &str) -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` has room for `len` bytes; gethostname NUL-terminates on success.
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr(), buf.len() - 1) } == 0 {
        // SAFETY: NUL-terminated within the buffer (its last byte stays 0).
        let name = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
        // NCCL's host name: up to the first dot.
        name.split('.').next().unwrap_or("localhost").to_string()
    } else {
        "localhost".into()
    };
    template
        .replace("%h", &host)
        .replace("%p", &std::process::id().to_string())
}

/// The report as JSON: the core's figures, the profiler ranges and every added section.
fn report_json() -> Result<serde_json::Value, CoreError> {
    let report = core()?.report(call_counts());
    let mut v = serde_json::to_value(&report)
        .map_err(|e| CoreError::InvalidValue(format!("report: {e}")))?;
    if let Some(o) = v.as_object_mut() {
        let ranges = core()?.profiler(fake_cuda_abi::PROFILER_QUERY).0;
        o.insert("profiler_ranges".into(), ranges.into());
        let marks = core()?.step_mark(fake_cuda_abi::STEP_QUERY)?;
        o.insert("step_marks".into(), marks.into());
        // The core's own figures keep their names whatever a section is called.
        for (name, section) in SECTIONS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            o.entry(name.clone()).or_insert_with(|| section.clone());
        }
    }
    Ok(v)
}

/// Writes the report to `NCCLSIM_REPORT` (if set). Also the body of the `atexit` handler, so a
/// panic ends here (the report is then not written).
pub(crate) fn write_report_now() {
    let Some(template) = run_env::RunEnv::current()
        .ok()
        .and_then(|e| e.report.as_ref())
    else {
        return;
    };
    let path = report_path(&template.to_string_lossy());
    ffi_boundary::callback::<VtableError, ()>(
        "write_report",
        || (),
        || {
            let Ok(v) = report_json() else { return };
            let text = serde_json::to_string_pretty(&v).expect("report serialises");
            // Written whole to a temporary name and renamed, so a reader never sees half a report.
            let tmp = format!("{path}.{}.tmp", std::process::id());
            let written =
                std::fs::write(&tmp, text + "\n").and_then(|_| std::fs::rename(&tmp, &path));
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                eprintln!("ncclsim: cannot write NCCLSIM_REPORT {path}: {e}");
            }
        },
    );
}

extern "C" fn write_report() {
    write_report_now();
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A core error at the vtable's C boundary: its [`Status`] is the code, its text the calling
/// thread's last error message (`last_error_message`).
struct VtableError(CoreError);

impl std::fmt::Display for VtableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl ffi_boundary::FfiError for VtableError {
    /// The front-ends print what the core returns them.
    const LIBRARY: ffi_boundary::Library =
        ffi_boundary::Library::new("libncclsim_cuda", Status::Internal as i32).silent();

    fn code(&self) -> i32 {
        self.0.status() as i32
    }

    /// Failures and panics set the thread's last error message; successes keep it.
    fn record(_function: &'static str, outcome: ffi_boundary::Outcome<'_, Self>) {
        let message = match outcome {
            ffi_boundary::Outcome::Success => return,
            ffi_boundary::Outcome::Failure(e) => e.to_string(),
            ffi_boundary::Outcome::Panic(what) => format!("internal error (panic): {what}"),
        };
        LAST_ERROR.with(|m| *m.borrow_mut() = message);
    }
}

/// Writes through an out-pointer, failing with `InvalidValue` if it is null.
fn put<T>(out: *mut T, value: T) -> Result<(), CoreError> {
    // The caller promises a non-null `out` points to a writable `T`.
    ffi_boundary::non_null!(*out = value; else CoreError::InvalidValue("null output pointer".into()));
    Ok(())
}

/// A C argument as its entry's body takes it (`CType as RustType` in the entry list).
trait FromC<C>: Sized {
    /// # Safety
    /// A non-null pointer `c` points to a live value of its type for the entry's call.
    unsafe fn from_c(c: C) -> Result<Self, CoreError>;
}

impl FromC<*const CHandle> for &CHandle {
    unsafe fn from_c(c: *const CHandle) -> Result<Self, CoreError> {
        Ok(ffi_boundary::non_null!(&*c; else CoreError::InvalidValue("null handle".into())))
    }
}

impl FromC<*const c_char> for &CStr {
    unsafe fn from_c(c: *const c_char) -> Result<Self, CoreError> {
        if c.is_null() {
            return Err(CoreError::InvalidValue("null string".into()));
        }
        // SAFETY: non-null, so a NUL-terminated string live for the call (this fn's contract).
        Ok(unsafe { CStr::from_ptr(c) })
    }
}

impl FromC<i32> for bool {
    unsafe fn from_c(c: i32) -> Result<Self, CoreError> {
        Ok(c != 0)
    }
}

/// An entry body's result (`()`, one value or a tuple) written through the entry's
/// out-pointers, in order.
trait PutOuts<P> {
    fn put_outs(self, outs: P) -> Result<(), CoreError>;
}

impl PutOuts<()> for () {
    fn put_outs(self, (): ()) -> Result<(), CoreError> {
        Ok(())
    }
}

impl<A> PutOuts<(*mut A,)> for A {
    fn put_outs(self, (a,): (*mut A,)) -> Result<(), CoreError> {
        put(a, self)
    }
}

impl<A, B> PutOuts<(*mut A, *mut B)> for (A, B) {
    fn put_outs(self, (a, b): (*mut A, *mut B)) -> Result<(), CoreError> {
        put(a, self.0)?;
        put(b, self.1)
    }
}

impl<A, B, C> PutOuts<(*mut A, *mut B, *mut C)> for (A, B, C) {
    fn put_outs(self, (a, b, c): (*mut A, *mut B, *mut C)) -> Result<(), CoreError> {
        put(a, self.0)?;
        put(b, self.1)?;
        put(c, self.2)
    }
}

impl<A, B, C, D> PutOuts<(*mut A, *mut B, *mut C, *mut D)> for (A, B, C, D) {
    fn put_outs(self, (a, b, c, d): (*mut A, *mut B, *mut C, *mut D)) -> Result<(), CoreError> {
        put(a, self.0)?;
        put(b, self.1)?;
        put(c, self.2)?;
        put(d, self.3)
    }
}

/// An argument of a C entry as its body takes it.
macro_rules! body_arg {
    ($arg:ident: $cty:ty as $rty:ty) => {
        // SAFETY: the vtable's contract: a non-null pointer argument points to a live value
        // of its type for the call.
        unsafe { <$rty as FromC<$cty>>::from_c($arg) }?
    };
    ($arg:ident: $cty:ty) => {
        $arg
    };
}

/// A call of an entry's body; the body of an `unsafe` entry has the entry's contract.
macro_rules! call_body {
    (unsafe $call:expr) => {
        // SAFETY: the body's contract is the entry's, which the C caller keeps.
        unsafe { $call }
    };
    ($call:expr) => {
        $call
    };
}

/// Writes each vtable entry of the list ([`fake_cuda_abi::core_api!`]) inside the C boundary
/// ([`ffi_boundary::ffi_fn!`] with `VtableError`: `unsafe extern "C"`, panic-safe, counted,
/// returning a [`Status`] code): out-pointers checked before anything runs, pointer arguments
/// borrowed, then the body of the same name in [`entries`] and its results written out. Then
/// the static table of them all.
macro_rules! vtable_entries {
    ($(
        $(#[$doc:meta])*
        [$($unsafe:ident)?] fn $name:ident($($arg:ident: $cty:ty $(as $rty:ty)?),* $(,)?)
            -> ($($out:ident: $oty:ty),*);
    )*) => {
        $(
            ffi_boundary::ffi_fn!(VtableError; fn $name($($arg: $cty,)* $($out: *mut $oty,)*) {
                static CALLED: CallCount = CallCount::new(stringify!($name));
                count_call(&CALLED);
                (move || -> Result<(), CoreError> {
                    if [$($out.is_null()),*].contains(&true) {
                        return Err(CoreError::InvalidValue("null output pointer".into()));
                    }
                    $(let $arg = body_arg!($arg: $cty $(as $rty)?);)*
                    let results = call_body!($($unsafe)? entries::$name($($arg),*))?;
                    PutOuts::put_outs(results, ($($out,)*))
                })().map_err(VtableError)
            });
        )*

        static API: CoreApiV1 = CoreApiV1 {
            size: std::mem::size_of::<CoreApiV1>(),
            version: CORE_ABI_VERSION,
            last_error_message,
            $($name,)*
        };
    };
}

ffi_boundary::ffi_fn!(VtableError; fn last_error_message(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR.with(|m| {
        let m = m.borrow();
        if !buf.is_null() && len > 0 {
            let n = m.len().min(len - 1);
            // SAFETY: `buf` has room for `len` bytes by contract; we write n + 1 <= len.
            unsafe {
                std::ptr::copy_nonoverlapping(m.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        m.len()
    })
});

fake_cuda_abi::core_api!(vtable_entries);

ffi_boundary::ffi_fn!(VtableError; export
    /// The core's vtable.
    fn ncclsim_cuda_core_v1() -> *const CoreApiV1 {
        &API
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vtable_reports_errors_with_messages() {
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        let api = unsafe { &*ncclsim_cuda_core_v1() };
        let mut n = 0;
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        assert_eq!(unsafe { (api.device_count)(&mut n) }, 0);
        assert!(n >= 0);
        assert_eq!(
            // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
            unsafe { (api.set_device)(1000) },
            Status::InvalidDevice as i32
        );
        let mut buf = [0 as c_char; 128];
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        let len = unsafe { (api.last_error_message)(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        let msg = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert!(msg.contains("1000"), "{msg}");
        assert_eq!(len, msg.len());
        assert_eq!(
            // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
            unsafe { (api.device_count)(std::ptr::null_mut()) },
            Status::InvalidValue as i32
        );
    }
    #[test]
    fn null_pointers_are_refused_before_the_body_runs() {
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        let api = unsafe { &*ncclsim_cuda_core_v1() };
        let (mut before, mut peak) = (0u64, 0u64);
        // SAFETY: valid out-pointers.
        assert_eq!(unsafe { (api.memory_stats)(0, &mut before, &mut peak) }, 0);
        // SAFETY: a null out-pointer is refused, not written.
        let code = unsafe { (api.malloc)(0, 1 << 20, std::ptr::null_mut()) };
        assert_eq!(code, Status::InvalidValue as i32);
        let mut after = 0u64;
        // SAFETY: valid out-pointers.
        assert_eq!(unsafe { (api.memory_stats)(0, &mut after, &mut peak) }, 0);
        assert_eq!(after, before, "nothing allocated for a null out-pointer");
        let mut ptr = 0usize;
        // SAFETY: a null handle is refused, not read.
        let code = unsafe { (api.ipc_open_mem_handle)(std::ptr::null(), &mut ptr) };
        assert_eq!(code, Status::InvalidValue as i32);
        // SAFETY: a null name is refused, not read.
        let code = unsafe { (api.register_function)(0x10, std::ptr::null()) };
        assert_eq!(code, Status::InvalidValue as i32);
    }

    #[test]
    fn report_sections_join_the_report_and_profiler_ranges_are_counted() {
        // SAFETY: the vtable is static; its entries get valid locals or null as each case says.
        let api = unsafe { &*ncclsim_cuda_core_v1() };
        let section = |name: &CStr, json: &CStr| {
            // SAFETY: valid NUL-terminated strings; no file is written (write_now 0).
            unsafe { (api.report_section)(name.as_ptr(), json.as_ptr(), 0) }
        };
        assert_eq!(section(c"extra", c"{\"n\": 3}"), 0);
        assert_eq!(
            section(c"devices", c"{}"),
            Status::InvalidValue as i32,
            "core key"
        );
        assert_eq!(section(c"bad", c"{not json"), Status::InvalidValue as i32);
        // SAFETY: a null name is refused, not read.
        let null = unsafe { (api.report_section)(std::ptr::null(), c"1".as_ptr(), 0) };
        assert_eq!(null, Status::InvalidValue as i32);
        let (mut ranges, mut active) = (0u64, 0i32);
        for op in [1, 1, 0, 1, -1] {
            // SAFETY: valid out-pointers.
            assert_eq!(unsafe { (api.profiler)(op, &mut ranges, &mut active) }, 0);
        }
        // A start inside an open range does not open another one.
        assert_eq!((ranges, active), (2, 1));
        let v = report_json().expect("report");
        assert_eq!(v["extra"]["n"], 3);
        assert_eq!(v["profiler_ranges"], 2);
        assert!(v["devices"].is_array() && v.get("bad").is_none());
        let mut s = 0;
        // SAFETY: valid out-pointer; no host work runs on this thread.
        let outside = unsafe { (api.host_stream)(&mut s) };
        assert_eq!(outside, Status::InvalidValue as i32);
    }
}
