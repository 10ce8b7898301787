//! Errors of the runtime, their `ncclResult_t` codes, the text `ncclGetLastError` returns, and
//! NCCL-style `WARN` / `INFO` logging (`NCCL_DEBUG`, `NCCL_DEBUG_FILE`).

use crate::types::result;
use std::cell::RefCell;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// An error with its NCCL result code and a message naming what is wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct NcclError {
    /// `ncclResult_t`.
    pub code: i32,
    /// What went wrong and where.
    pub message: String,
}

/// This crate's result type.
pub type Result<T> = std::result::Result<T, NcclError>;

impl NcclError {
    /// An error of a given code.
    pub fn new(code: i32, message: impl Into<String>) -> NcclError {
        NcclError {
            code,
            message: message.into(),
        }
    }
    /// `ncclInvalidArgument`.
    pub fn invalid_argument(message: impl Into<String>) -> NcclError {
        NcclError::new(result::INVALID_ARGUMENT, message)
    }
    /// `ncclInvalidUsage`.
    pub fn invalid_usage(message: impl Into<String>) -> NcclError {
        NcclError::new(result::INVALID_USAGE, message)
    }
    /// `ncclSystemError` with the OS error of a call.
    pub fn system(what: &str, e: std::io::Error) -> NcclError {
        NcclError::new(result::SYSTEM_ERROR, format!("{what}: {e}"))
    }
    /// `ncclInternalError`.
    pub fn internal(message: impl Into<String>) -> NcclError {
        NcclError::new(result::INTERNAL_ERROR, message)
    }
    /// `ncclRemoteError`.
    pub fn remote(message: impl Into<String>) -> NcclError {
        NcclError::new(result::REMOTE_ERROR, message)
    }
    /// `ncclUnhandledCudaError` from the fake CUDA core.
    pub fn cuda(what: &str, e: fake_cuda_abi::error::CoreError) -> NcclError {
        NcclError::new(result::UNHANDLED_CUDA_ERROR, format!("{what}: {e}"))
    }
}

impl ffi_boundary::FfiError for NcclError {
    /// `ncclInProgress` is an answer, not a failure.
    const LIBRARY: ffi_boundary::Library =
        ffi_boundary::Library::new("libnccl", result::INTERNAL_ERROR)
            .answering(&[result::IN_PROGRESS]);

    fn code(&self) -> i32 {
        self.code
    }

    /// Failures become the thread's last error ([`record`]).
    fn record(function: &'static str, outcome: ffi_boundary::Outcome<'_, Self>) {
        if let ffi_boundary::Outcome::Failure(e) = outcome {
            record(function, e);
        }
    }
}

thread_local! {
    static LAST: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Remembers `message` as the calling thread's last error (what `ncclGetLastError(NULL)`
/// returns) and prints it as a `WARN` line when `NCCL_DEBUG` asks for warnings.
pub fn record(function: &str, e: &NcclError) {
    LAST.with(|l| *l.borrow_mut() = format!("{function}: {}", e.message));
    if e.code != result::IN_PROGRESS {
        warn(&format!("{function}: {}", e.message));
    }
}

/// The calling thread's last error text.
pub fn last() -> String {
    LAST.with(|l| l.borrow().clone())
}

/// NCCL_DEBUG levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing (default).
    None,
    /// VERSION.
    Version,
    /// WARN.
    Warn,
    /// INFO.
    Info,
    /// TRACE.
    Trace,
}

/// The `NCCL_DEBUG` level.
pub fn level() -> Level {
    static L: OnceLock<Level> = OnceLock::new();
    *L.get_or_init(|| {
        match std::env::var("NCCL_DEBUG")
            .unwrap_or_default()
            .to_ascii_uppercase()
            .as_str()
        {
            "VERSION" => Level::Version,
            "WARN" => Level::Warn,
            "INFO" | "ABORT" => Level::Info,
            "TRACE" => Level::Trace,
            _ => Level::None,
        }
    })
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer and its length match.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    name.split('.').next().unwrap_or("localhost").to_string()
}

/// The kernel's short host name (the `uname` system call, bypassing the C library and any
/// interposer): which real machine this process runs on, whatever name the program is shown
/// (`ncclsim run` gives each simulated node its own `gethostname`).
pub fn machine_name() -> &'static str {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(|| {
        // SAFETY: utsname is plain bytes; all-zero is a valid value.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a writable utsname, which is what the system call fills.
        if unsafe { libc::syscall(libc::SYS_uname, &mut u) } != 0 {
            return hostname();
        }
        let bytes: Vec<u8> = u
            .nodename
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let name = String::from_utf8_lossy(&bytes).into_owned();
        name.split('.').next().unwrap_or("localhost").to_string()
    })
}

/// The short host name NCCL prints.
pub fn host_name() -> &'static str {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(hostname)
}

/// Where log lines go: `NCCL_DEBUG_FILE` (with `%h` host and `%p` pid) or stdout.
fn sink() -> &'static Mutex<Box<dyn Write + Send>> {
    static S: OnceLock<Mutex<Box<dyn Write + Send>>> = OnceLock::new();
    S.get_or_init(|| {
        let out: Box<dyn Write + Send> = match std::env::var("NCCL_DEBUG_FILE") {
            Ok(pattern) => {
                let path = pattern
                    .replace("%h", host_name())
                    .replace("%p", &std::process::id().to_string());
                match std::fs::File::create(&path) {
                    Ok(f) => Box::new(f),
                    Err(_) => Box::new(std::io::stdout()),
                }
            }
            Err(_) => Box::new(std::io::stdout()),
        };
        Mutex::new(out)
    })
}

fn emit(kind: &str, message: &str) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let line = format!(
        "{}:{}:{} [{}] NCCL {kind} {message}\n",
        host_name(),
        std::process::id(),
        tid,
        crate::cuda::current_device_or(-1).max(0)
    );
    if let Ok(mut s) = sink().lock() {
        let _ = s.write_all(line.as_bytes());
        let _ = s.flush();
    }
}

/// Prints a `WARN` line when `NCCL_DEBUG` is WARN or more.
pub fn warn(message: &str) {
    if level() >= Level::Warn {
        emit("WARN", message);
    }
}

/// Prints an `INFO` line when `NCCL_DEBUG` is INFO or more.
pub fn info(message: &str) {
    if level() >= Level::Info {
        emit("INFO", message);
    }
}
