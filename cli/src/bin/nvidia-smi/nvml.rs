//! The NVML library `nvidia-smi` reports from, loaded at run time as the real tool loads it:
//! `libnvidia-ml.so.1` by its SONAME (under `ncclsim run`, the preloaded fake one, which sees
//! the run's topology and node), else the fake library cargo builds next to this binary.
//!
//! Every reading is an `Option`: a function the library lacks or that answers an error
//! (`NVML_ERROR_NOT_SUPPORTED` for a board without that feature) is `None`, printed "N/A".

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr, CString};
use std::path::PathBuf;

/// `nvmlDevice_t`.
type Device = *mut c_void;

/// The loaded library. The handle is never closed: the process reports and exits.
pub struct Nvml {
    lib: *mut c_void,
}

/// Why NVML could not be used: the text nvidia-smi prints and its exit status.
pub struct LoadError {
    pub message: String,
    pub code: u8,
}

fn dlopen(name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; dlopen has no other preconditions.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    (!h.is_null()).then_some(h)
}

impl Nvml {
    /// Loads the library and calls `nvmlInit_v2`.
    pub fn load() -> Result<Nvml, LoadError> {
        let beside = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("libnvidia_ml.so")))
            .unwrap_or_else(|| PathBuf::from("libnvidia_ml.so"));
        let lib = dlopen("libnvidia-ml.so.1")
            .or_else(|| dlopen(&beside.to_string_lossy()))
            .ok_or_else(|| LoadError {
                message: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.".into(),
                code: 9,
            })?;
        let nvml = Nvml { lib };
        let init: Option<unsafe extern "C" fn() -> c_int> = nvml.sym(c"nvmlInit_v2");
        // SAFETY: nvmlInit_v2 takes no arguments.
        let rc = init.map(|f| unsafe { f() }).unwrap_or(-1);
        if rc != 0 {
            return Err(LoadError {
                message: format!("Failed to initialize NVML: {}", nvml.error_string(rc)),
                code: 255,
            });
        }
        Ok(nvml)
    }

    /// The function `name`, typed as `T` (an `extern "C" fn` pointer type matching NVML's
    /// declaration of that name).
    fn sym<T: Copy>(&self, name: &CStr) -> Option<T> {
        assert_eq!(size_of::<T>(), size_of::<*mut c_void>());
        // SAFETY: a handle dlopen returned and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.lib, name.as_ptr()) };
        // SAFETY: `T` is a function pointer type of pointer size, and `p` the address of the
        // NVML function of that name, whose C signature the caller's `T` states.
        (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    }

    pub fn error_string(&self, rc: c_int) -> String {
        let f: Option<unsafe extern "C" fn(c_int) -> *const c_char> = self.sym(c"nvmlErrorString");
        // SAFETY: nvmlErrorString returns a static NUL-terminated string (or null).
        let p = f.map(|f| unsafe { f(rc) }).unwrap_or(std::ptr::null());
        if p.is_null() {
            return format!("error {rc}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// A system string: `fn(char *, unsigned)`.
    pub fn system_string(&self, name: &CStr) -> Option<String> {
        let f: unsafe extern "C" fn(*mut c_char, c_uint) -> c_int = self.sym(name)?;
        let mut buf = [0 as c_char; 96];
        // SAFETY: a writable buffer of the length passed.
        (unsafe { f(buf.as_mut_ptr(), buf.len() as c_uint) } == 0).then(|| text(&buf))
    }

    pub fn cuda_driver_version(&self) -> Option<i32> {
        let f: unsafe extern "C" fn(*mut c_int) -> c_int =
            self.sym(c"nvmlSystemGetCudaDriverVersion_v2")?;
        let mut v = 0;
        // SAFETY: a valid out-pointer.
        (unsafe { f(&mut v) } == 0).then_some(v)
    }

    pub fn count(&self) -> u32 {
        let f: Option<unsafe extern "C" fn(*mut c_uint) -> c_int> =
            self.sym(c"nvmlDeviceGetCount_v2");
        let mut n = 0;
        // SAFETY: a valid out-pointer.
        match f.map(|f| unsafe { f(&mut n) }) {
            Some(0) => n,
            _ => 0,
        }
    }

    pub fn device(&self, index: u32) -> Option<Device> {
        let f: unsafe extern "C" fn(c_uint, *mut Device) -> c_int =
            self.sym(c"nvmlDeviceGetHandleByIndex_v2")?;
        let mut d = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        (unsafe { f(index, &mut d) } == 0).then_some(d)
    }

    /// `fn(device, char *, unsigned)`.
    pub fn string(&self, name: &CStr, d: Device) -> Option<String> {
        let f: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int = self.sym(name)?;
        let mut buf = [0 as c_char; 96];
        // SAFETY: a writable buffer of the length passed; `d` a handle NVML gave.
        (unsafe { f(d, buf.as_mut_ptr(), buf.len() as c_uint) } == 0).then(|| text(&buf))
    }

    /// `fn(device, T *)` for a plain value `T` (`unsigned`, `int`, `unsigned long long`).
    pub fn value<T: Copy + Default>(&self, name: &CStr, d: Device) -> Option<T> {
        let f: unsafe extern "C" fn(Device, *mut T) -> c_int = self.sym(name)?;
        let mut v = T::default();
        // SAFETY: a valid out-pointer of the type NVML writes for this function.
        (unsafe { f(d, &mut v) } == 0).then_some(v)
    }

    /// `fn(device, unsigned arg, T *)` (clocks by type, temperature by sensor, NVLink by link).
    pub fn value_at<T: Copy + Default>(&self, name: &CStr, d: Device, arg: c_uint) -> Option<T> {
        let f: unsafe extern "C" fn(Device, c_uint, *mut T) -> c_int = self.sym(name)?;
        let mut v = T::default();
        // SAFETY: a valid out-pointer of the type NVML writes for this function.
        (unsafe { f(d, arg, &mut v) } == 0).then_some(v)
    }

    /// `fn(device, T *, T *)` (ECC and MIG modes, utilization pairs, power limit range).
    pub fn pair<T: Copy + Default>(&self, name: &CStr, d: Device) -> Option<(T, T)> {
        let f: unsafe extern "C" fn(Device, *mut T, *mut T) -> c_int = self.sym(name)?;
        let (mut a, mut b) = (T::default(), T::default());
        // SAFETY: valid out-pointers of the type NVML writes for this function.
        (unsafe { f(d, &mut a, &mut b) } == 0).then_some((a, b))
    }

    /// (total, free, used) bytes (`nvmlMemory_t`).
    pub fn memory(&self, d: Device) -> Option<[c_ulonglong; 3]> {
        self.value::<[c_ulonglong; 3]>(c"nvmlDeviceGetMemoryInfo", d)
    }

    /// The `dddddddd:bb:dd.f` bus id of `nvmlPciInfo_t` (bytes 36..68).
    pub fn bus_id(&self, d: Device) -> Option<String> {
        let raw = self.value::<[[u8; 4]; 17]>(c"nvmlDeviceGetPciInfo_v3", d)?;
        let bytes: Vec<u8> = raw.concat()[36..].to_vec();
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }

    /// The compute processes on `d`: (pid, used bytes) of `nvmlProcessInfo_t` (v3).
    pub fn processes(&self, d: Device) -> Vec<(u32, u64)> {
        type F = unsafe extern "C" fn(Device, *mut c_uint, *mut [u64; 3]) -> c_int;
        let Some(f) = self.sym::<F>(c"nvmlDeviceGetComputeRunningProcesses_v3") else {
            return Vec::new();
        };
        let mut room: c_uint = 64;
        let mut infos = vec![[0u64; 3]; 64];
        // SAFETY: `infos` holds `room` 24-byte `nvmlProcessInfo_t`s.
        if unsafe { f(d, &mut room, infos.as_mut_ptr()) } != 0 {
            return Vec::new();
        }
        infos.truncate(room as usize);
        // pid is the first 4 bytes of the first word (little-endian), then usedGpuMemory.
        infos
            .iter()
            .map(|e| ((e[0] & 0xffff_ffff) as u32, e[1]))
            .collect()
    }
}

fn text(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
