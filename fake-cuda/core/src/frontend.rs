//! What every C front-end (`libcudart`, `libcuda`, `libnvidia-ml`) does at its boundary: catch
//! panics, turn errors into the library's return code, log failures with `NCCLSIM_DEBUG=1`, and
//! write through C out-pointers and string buffers safely.

use std::sync::OnceLock;

/// An error a front-end can return as its C code (`cudaError_t`, `CUresult`, `nvmlReturn_t`).
pub trait ApiError: std::fmt::Display {
    /// The C return code.
    fn code(&self) -> i32;
}

/// Whether `NCCLSIM_DEBUG` asks for failures to be printed.
pub fn debug_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("NCCLSIM_DEBUG").is_ok_and(|v| v != "0"))
}

/// Prints `library: function: message` to stderr when `NCCLSIM_DEBUG` is set.
pub fn log_failure(library: &str, function: &str, message: &str) {
    if debug_enabled() {
        eprintln!("ncclsim {library}: {function}: {message}");
    }
}

/// Runs an exported function's body: returns 0 on success, the error's code on failure, and
/// `panic_code` if the body panicked. Failures other than codes in `quiet` (e.g. "not ready")
/// are logged.
pub fn boundary<E: ApiError>(
    library: &str,
    function: &str,
    panic_code: i32,
    quiet: &[i32],
    body: impl FnOnce() -> Result<(), E>,
) -> i32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            let code = e.code();
            if !quiet.contains(&code) {
                log_failure(library, function, &format!("error {code}: {e}"));
            }
            code
        }
        Err(_) => {
            log_failure(library, function, "panic caught at the C boundary");
            panic_code
        }
    }
}

/// Writes `value` through a C out-pointer; `Err(null())` if the pointer is null.
///
/// # Safety
/// A non-null `out` must point to writable memory for a `T`: the contract of every CUDA,
/// driver and NVML out-parameter, which front-ends pass on from their C callers.
pub unsafe fn write_out<T, E>(out: *mut T, value: T, null: impl FnOnce() -> E) -> Result<(), E> {
    if out.is_null() {
        return Err(null());
    }
    // SAFETY: non-null, and valid by the contract above.
    unsafe { out.write(value) };
    Ok(())
}

/// Copies `text` and a NUL into the C buffer `buf` of `len` bytes. Returns false (writing
/// nothing) if `buf` is null or too small.
///
/// # Safety
/// A non-null `buf` must point to `len` writable bytes.
pub unsafe fn write_c_string(buf: *mut std::ffi::c_char, len: usize, text: &[u8]) -> bool {
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

/// The bytes of a NUL-terminated name held in a fixed C array (up to the first NUL).
pub fn c_array_text(name: &[std::ffi::c_char]) -> Vec<u8> {
    name.iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct E(i32);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "e{}", self.0)
        }
    }
    impl ApiError for E {
        fn code(&self) -> i32 {
            self.0
        }
    }

    #[test]
    fn boundary_maps_results_and_panics() {
        assert_eq!(boundary::<E>("t", "f", 999, &[], || Ok(())), 0);
        assert_eq!(boundary("t", "f", 999, &[], || Err(E(7))), 7);
        assert_eq!(boundary::<E>("t", "f", 999, &[], || panic!("boom")), 999);
    }

    #[test]
    fn strings_fit_or_are_refused() {
        let mut buf = [1 as std::ffi::c_char; 6];
        assert!(!unsafe { write_c_string(buf.as_mut_ptr(), 6, b"abcdef") });
        assert!(unsafe { write_c_string(buf.as_mut_ptr(), 6, b"abcde") });
        assert_eq!(c_array_text(&buf), b"abcde");
        let mut x = 0;
        assert!(unsafe { write_out(&mut x, 5, || E(1)) }.is_ok());
        assert_eq!(x, 5);
        assert!(unsafe { write_out(std::ptr::null_mut::<i32>(), 5, || E(1)) }.is_err());
    }
}
