//! The front-ends' side of the fake CUDA core's vtable: finds the process's one core and wraps
//! each entry in a safe method returning [`fake_cuda_abi::error::Result`].
//!
//! The core is the `libncclsim_cuda.so` already loaded in the process (found by its SONAME
//! with `RTLD_NOLOAD`, whichever directory it came from); else the file named by
//! `NCCLSIM_CUDA_CORE`, else `libncclsim_cuda.so` from the directory of the library this code
//! is linked into (found with `dladdr`). So all front-ends share one core whichever is loaded
//! first, even from copies in different directories.
//!
//! This crate holds the `dlopen`/`dlsym` loading and the calls through the vtable's C function
//! pointers. The calls are generated from the one entry list ([`fake_cuda_abi::core_api!`]):
//! a method per entry, named after it, taking its inputs (`&CStr`, `&CHandle` and `bool` where
//! the list says so) and returning its outputs, out-pointers being locals, so that callers stay
//! in safe Rust; a failure comes back as [`CoreError::Reported`] with the core's message.

use fake_cuda_abi::error::{CoreError, Result, Status};
use fake_cuda_abi::{self as abi, *};
use std::ffi::CString;
use std::sync::OnceLock;

/// A loaded core.
pub struct Client {
    api: &'static CoreApiV1,
}

static CLIENT: OnceLock<std::result::Result<Client, String>> = OnceLock::new();

/// The process's core, loaded on first use.
pub fn client() -> Result<&'static Client> {
    CLIENT
        .get_or_init(load)
        .as_ref()
        .map_err(|e| CoreError::Load(e.clone()))
}

/// The run environment as the process's core parsed it (the vtable's `run_environment`): one
/// parse of the process's variables, which every library that asks here shares, so that all
/// see the same job and refuse a bad value alike; the library's own parse of the process's
/// environment when no core can be loaded (code used outside the fake CUDA stack).
pub fn run_env() -> std::result::Result<&'static run_env::RunEnv, &'static run_env::EnvError> {
    type Parsed = std::result::Result<run_env::RunEnv, run_env::EnvError>;
    static ENV: OnceLock<Option<Parsed>> = OnceLock::new();
    let from_core = ENV.get_or_init(|| {
        let c = client().ok()?;
        // SAFETY: a null buffer of capacity 0 is never written.
        let len = unsafe { c.run_environment(std::ptr::null_mut(), 0) }.ok()?;
        let mut text = vec![0u8; len];
        // SAFETY: `text` holds `len` writable bytes.
        let got = unsafe { c.run_environment(text.as_mut_ptr(), len) }.ok()?;
        text.truncate(got.min(len));
        Some(run_env::RunEnv::from_text(&text))
    });
    match from_core {
        Some(parsed) => parsed.as_ref(),
        None => run_env::RunEnv::current(),
    }
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns null or a valid C string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Directory of the shared object (or executable) containing this function.
fn own_directory() -> Option<std::path::PathBuf> {
    // SAFETY: `Dl_info` is plain C data (pointers and integers); all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `own_directory` is code in this object; `info` is a valid out-parameter.
    let found = unsafe { libc::dladdr(own_directory as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr filled a NUL-terminated file name.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    let path = std::fs::canonicalize(&file).unwrap_or_else(|_| file.into());
    path.parent().map(|p| p.to_path_buf())
}

/// The vtable of the core at `path`, opened with `dlopen(path, flags)`.
fn open_core(path: &str, flags: i32) -> std::result::Result<&'static CoreApiV1, String> {
    let c = CString::new(path).map_err(|_| format!("{path:?} contains NUL"))?;
    // SAFETY: valid C string; the core has no load-time side effects beyond its own statics.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        return Err(dlerror_text());
    }
    let sym = CString::new(abi::CORE_SYMBOL).expect("invariant: symbol has no NUL");
    // SAFETY: valid handle and name.
    let f = unsafe { libc::dlsym(h, sym.as_ptr()) };
    if f.is_null() {
        return Err(format!("{path}: no symbol {}", abi::CORE_SYMBOL));
    }
    // SAFETY: the symbol has this type by the contract in `abi`.
    let get: extern "C" fn() -> *const CoreApiV1 = unsafe { std::mem::transmute(f) };
    let api = get();
    if api.is_null() {
        return Err(format!("{path}: {} returned null", abi::CORE_SYMBOL));
    }
    // SAFETY: the core returns a pointer to a static table.
    let api: &'static CoreApiV1 = unsafe { &*api };
    if api.version != abi::CORE_ABI_VERSION || api.size < std::mem::size_of::<CoreApiV1>() {
        return Err(format!(
            "{path}: core ABI version {} size {}, this front-end needs {} / {}",
            api.version,
            api.size,
            abi::CORE_ABI_VERSION,
            std::mem::size_of::<CoreApiV1>()
        ));
    }
    Ok(api)
}

fn load() -> std::result::Result<Client, String> {
    // A core already in the process (found by its SONAME, whichever directory it came from)
    // is the one: a second copy would be a second, disconnected core.
    if let Ok(api) = open_core(
        abi::CORE_LIBRARY,
        libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
    ) {
        return Ok(Client { api });
    }
    // A run environment with a bad value still finds the core, which then reports that value.
    let named = run_env::RunEnv::current()
        .ok()
        .and_then(|e| e.cuda_core.as_ref());
    let candidates: Vec<String> = match named {
        Some(p) => vec![p.to_string_lossy().into_owned()],
        None => own_directory()
            .map(|d| d.join(abi::CORE_LIBRARY).to_string_lossy().into_owned())
            .into_iter()
            .chain([abi::CORE_LIBRARY.to_string()])
            .collect(),
    };
    let mut errors = Vec::new();
    for path in &candidates {
        match open_core(path, libc::RTLD_NOW | libc::RTLD_NODELETE) {
            Ok(api) => return Ok(Client { api }),
            Err(e) => errors.push(e),
        }
    }
    Err(errors.join("; "))
}

impl Client {
    fn check(&self, code: i32) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        let mut buf = [0 as c_char; 512];
        // SAFETY: buffer and length match.
        unsafe { (self.api.last_error_message)(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: the core NUL-terminates within `len`.
        let message = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Err(CoreError::Reported {
            status: Status::from_code(code),
            message,
        })
    }
}

/// A caller's argument as the C entry takes it (`CType as RustType` in the entry list).
trait IntoC<C> {
    fn into_c(self) -> C;
}

impl IntoC<*const c_char> for &CStr {
    fn into_c(self) -> *const c_char {
        self.as_ptr()
    }
}

impl IntoC<*const CHandle> for &CHandle {
    fn into_c(self) -> *const CHandle {
        self
    }
}

impl IntoC<i32> for bool {
    fn into_c(self) -> i32 {
        i32::from(self)
    }
}

/// A method's parameter type: the entry list's `RustType` where it names one, else the C type.
macro_rules! param_ty {
    ($cty:ty as $rty:ty) => {
        $rty
    };
    ($cty:ty) => {
        $cty
    };
}

/// A method's argument as the C entry takes it.
macro_rules! c_arg {
    ($arg:ident: $cty:ty as $rty:ty) => {
        IntoC::<$cty>::into_c($arg)
    };
    ($arg:ident: $cty:ty) => {
        $arg
    };
}

/// A method's result: nothing, one output or a tuple of them.
macro_rules! outputs {
    () => { () };
    ($one:ty) => { $one };
    ($($many:ty),+) => { ($($many),+) };
}

/// Writes a [`Client`] method per entry of the list ([`fake_cuda_abi::core_api!`]).
macro_rules! client_calls {
    ($(
        $(#[$doc:meta])*
        [$($unsafe:ident)?] fn $name:ident($($arg:ident: $cty:ty $(as $rty:ty)?),* $(,)?)
            -> ($($out:ident: $oty:ty),*);
    )*) => {
        // Entries take as many arguments as their C functions do.
        #[allow(clippy::too_many_arguments)]
        impl Client {
            $(
                $(#[$doc])*
                pub $($unsafe)? fn $name(
                    &self,
                    $($arg: param_ty!($cty $(as $rty)?)),*
                ) -> Result<outputs!($($oty),*)> {
                    $(let mut $out = <$oty as Zeroed>::zeroed();)*
                    // SAFETY: the loader checked that the core's table has this entry (`size`);
                    // pointer arguments are borrowed references or the locals above, live for
                    // the call; an `unsafe` method's caller keeps the entry's contract.
                    let code = unsafe {
                        (self.api.$name)($(c_arg!($arg: $cty $(as $rty)?),)* $(&mut $out,)*)
                    };
                    self.check(code)?;
                    Ok(($($out),*))
                }
            )*
        }
    };
}

fake_cuda_abi::core_api!(client_calls);

/// The handle of a graph's node as `cudaGraphGetNodes`/`cuGraphGetNodes` give it: the graph's
/// id and the node's position from 1 (never null). Both runtimes' and the driver's node handles
/// are these, so a node one API reports names the same node in the other.
pub fn graph_node_handle(graph: u64, position: usize) -> usize {
    (graph as usize) << 16 | position
}
