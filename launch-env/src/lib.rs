//! `libncclsim_launch.so`, preloaded first by `ncclsim run` into every process of a job.
//!
//! Placement: when `ncclsim run` starts an MPI or Slurm launcher once for N simulated nodes
//! (`NCCLSIM_LAUNCHER=mpi|slurm`, `NCCLSIM_NODES=N`), each rank decides its own node before
//! its `main` runs: a constructor reads the launcher's rank variables ([`place`]), sets
//! `NCCLSIM_NODE` (what the fake CUDA core and the NCCL runtime read) and rewrites the
//! launcher's per-host variables the process has (`OMPI_COMM_WORLD_LOCAL_RANK`,
//! `SLURM_LOCALID`, ...) to the simulated node's values. A process that already has
//! `NCCLSIM_NODE` keeps it. A rank the layout cannot place (a job size that does not divide
//! over the nodes) stops with a message naming the variable, before it does anything else.
//!
//! Host names: with `NCCLSIM_HOSTNAMES=1` (`ncclsim run` sets it for more than one node),
//! `gethostname` and `uname` report a name of the simulated node (`host-node<k>`, see
//! [`place::host_name`]), so programs that find their local ranks by host name (nccl-tests
//! hashes the host name and boot id; MPI programs compare `gethostname`) see one host per
//! node. The kernel's name is read with the `uname` system call, so the NCCL runtime, which
//! asks the kernel directly, still finds the processes of one real machine and moves their
//! data through shared memory.
//!
//! Folded jobs: torchrun's workers take the full job's ranks, and those of virtual ranks end
//! before their `main` ([`fold`]).
//!
//! Interpreter exit: threads that CPython ends during finalization wait for the process to end
//! rather than unwind into `std::terminate` ([`finalizing`]).

pub mod finalizing;
pub mod fold;
pub mod place;

use std::ffi::{c_char, c_int};

/// This library's name in logged panics.
const LIBRARY: &str = "launch";

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    // Nothing may unwind out of a constructor.
    ffi_boundary::guard(LIBRARY, "init", || (), setup);
}

fn setup() {
    // Parsed now, not through the process's cached run environment: placing the rank sets
    // `NCCLSIM_NODE`, which every library then reads.
    // A bad value stops a rank that must be placed; any other process goes on, and the fake
    // CUDA core refuses to start naming the same variable.
    let env = match run_env::RunEnv::from_process() {
        Ok(env) => env,
        Err(e) if std::env::var_os(run_env::names::LAUNCHER).is_some() => {
            eprintln!("ncclsim: cannot place this rank on a simulated node: {e}");
            std::process::exit(2);
        }
        Err(_) => return,
    };
    if let Some(f) = &env.fold {
        fold::place_worker(f, env.node);
    }
    let Some(launcher) = env.launcher else {
        return;
    };
    if env.node.is_some() {
        return;
    }
    let placed = place::place(launcher, env.nodes.unwrap_or(1), env.ranks_per_node, |k| {
        std::env::var(k).ok()
    });
    match placed {
        Ok(None) => {}
        Ok(Some(p)) => {
            std::env::set_var(run_env::names::NODE, p.node.to_string());
            for (k, v) in &p.rewrites {
                std::env::set_var(k, v);
            }
        }
        Err(e) => {
            eprintln!("ncclsim: cannot place this rank on a simulated node: {e}");
            std::process::exit(2);
        }
    }
}

/// The kernel's `uname`, bypassing every interposer (this library's included).
fn kernel_uname(buf: *mut libc::utsname) -> c_int {
    // SAFETY: the caller passes a writable utsname (or null, which the kernel refuses with
    // EFAULT).
    unsafe { libc::syscall(libc::SYS_uname, buf) as c_int }
}

fn field_text(f: &[c_char]) -> String {
    let bytes: Vec<u8> = f
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The simulated node's host name, when this process should show one.
fn simulated_name(real: &str, max: usize) -> Option<String> {
    let env = run_env::RunEnv::current().ok()?;
    if !env.hostnames {
        return None;
    }
    Some(place::host_name(real, env.node? as usize, max))
}

/// `uname(2)` with the simulated node's name in `nodename`.
///
/// # Safety
/// `buf` must be null or point to a writable `struct utsname`.
#[no_mangle]
pub unsafe extern "C" fn uname(buf: *mut libc::utsname) -> c_int {
    let rc = kernel_uname(buf);
    if rc != 0 {
        return rc;
    }
    ffi_boundary::guard(
        LIBRARY,
        "uname",
        || (),
        || {
            // SAFETY: the kernel filled `buf`, so it is a valid, writable utsname.
            let node = unsafe { &mut (*buf).nodename };
            if let Some(name) = simulated_name(&field_text(node), node.len() - 1) {
                node.fill(0);
                for (d, s) in node.iter_mut().zip(name.bytes()) {
                    *d = s as c_char;
                }
            }
        },
    );
    0
}

/// `gethostname(2)` as glibc implements it (the `uname` node name copied into `name`; a
/// name of `len` bytes or more is copied without its NUL and fails with `ENAMETOOLONG`), with
/// the simulated node's name.
///
/// # Safety
/// `name` must point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gethostname(name: *mut c_char, len: libc::size_t) -> c_int {
    // SAFETY: utsname is plain bytes; all-zero is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if kernel_uname(&mut u) != 0 {
        return -1;
    }
    let real = field_text(&u.nodename);
    let host = ffi_boundary::guard(
        LIBRARY,
        "gethostname",
        || None,
        || simulated_name(&real, u.nodename.len() - 1),
    )
    .unwrap_or(real);
    let mut bytes = host.into_bytes();
    bytes.push(0);
    let n = bytes.len().min(len);
    // SAFETY: the caller's buffer holds `len` bytes and `n <= len`; `bytes` holds `n` or more.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), name, n) };
    if bytes.len() > len {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::ENAMETOOLONG };
        return -1;
    }
    0
}
