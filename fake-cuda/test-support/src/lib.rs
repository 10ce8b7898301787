//! Helpers shared by the fake CUDA libraries' integration tests.
//!
//! Tests find the shared objects cargo built next to the test executable (`target/<profile>/deps`),
//! give them their real names (`libcudart.so.12`, `libnvidia-ml.so.1`, ...) as symlinks in a
//! scratch directory under the target directory (so nothing is left in the system's temp
//! directory), compile C programs against them with the `cc` crate's compiler, and compare the
//! exported names with the checked-in lists.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// cargo's `target/<profile>/deps`, where test executables and the built libraries live.
pub fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().expect("deps directory").to_path_buf()
}

/// The built file of a cdylib (`libcudart12.so` for `[lib] name = "cudart12"`).
pub fn built(file: &str) -> PathBuf {
    let p = deps_dir().join(file);
    assert!(p.exists(), "{file} not built in {}", deps_dir().display());
    p
}

/// A scratch directory `target/<profile>/ncclsim-tests/<name>`, created empty.
///
/// It lives in the target directory, so test runs leave nothing in the temp directory; each
/// test binary uses its own name, and a later run starts it afresh.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = deps_dir()
        .parent()
        .expect("target/<profile>")
        .join("ncclsim-tests")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// Symlinks each built library (`(built file, real name)`) into `dir` under its real name.
pub fn link_real_names(dir: &Path, libs: &[(&str, &str)]) {
    for (file, real) in libs {
        let link = dir.join(real);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(built(file), &link).expect("symlink a library");
    }
}

/// A test or benchmark program: links the built libraries `libs` (`(built file, real name)`)
/// into `dir` under their real names, checks that the fake CUDA core they load from their own
/// directory is built too, and compiles `source` into `dir/<exe>` against them and the
/// `system` libraries (e.g. `libpthread.so.0`) at optimisation level `opt` (0 for tests, 2 for
/// benchmarks). `includes` as for [`compile_c`].
pub fn build_c(
    dir: &Path,
    libs: &[(&str, &str)],
    source: &Path,
    includes: &[PathBuf],
    system: &[&str],
    exe: &str,
    opt: u32,
) -> PathBuf {
    link_real_names(dir, libs);
    built("libncclsim_cuda.so");
    let mut names: Vec<&str> = libs.iter().map(|&(_, real)| real).collect();
    names.extend_from_slice(system);
    compile_c_at(dir, source, includes, &names, exe, opt)
}

/// Compiles `source` into `dir/<exe>`, linked against the libraries in `dir` by their real
/// names (`-l:libcudart.so.13`) with an rpath to `dir`. `includes` are extra `-I` directories;
/// the source's own directory and this crate's `include/` (`ncclsim_check.h`) are always on
/// the include path.
pub fn compile_c(
    dir: &Path,
    source: &Path,
    includes: &[PathBuf],
    libs: &[&str],
    exe: &str,
) -> PathBuf {
    compile_c_at(dir, source, includes, libs, exe, 0)
}

/// [`compile_c`] with optimisation (`-O2`), for benchmark programs.
pub fn compile_c_opt(
    dir: &Path,
    source: &Path,
    includes: &[PathBuf],
    libs: &[&str],
    exe: &str,
) -> PathBuf {
    compile_c_at(dir, source, includes, libs, exe, 2)
}

fn compile_c_at(
    dir: &Path,
    source: &Path,
    includes: &[PathBuf],
    libs: &[&str],
    exe: &str,
    opt: u32,
) -> PathBuf {
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .opt_level(opt)
        .target(&target)
        .host(&target)
        .get_compiler();
    let out_path = dir.join(exe);
    let mut cmd = compiler.to_command();
    cmd.arg(source);
    if let Some(parent) = source.parent() {
        cmd.arg("-I").arg(parent);
    }
    cmd.arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"));
    for inc in includes {
        cmd.arg("-I").arg(inc);
    }
    cmd.arg("-o")
        .arg(&out_path)
        .arg(format!("-L{}", dir.display()));
    for lib in libs {
        cmd.arg(format!("-l:{lib}"));
    }
    cmd.arg(format!("-Wl,-rpath,{}", dir.display())).arg("-ldl");
    let out = cmd.output().expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out_path
}

/// The names of a checked-in list (one a line; `#` comments and blank lines skipped).
pub fn name_list(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// The names of `names` that `dlsym` does not find in the library at `lib`.
pub fn unresolved(lib: &Path, names: &[String]) -> Vec<String> {
    let path = CString::new(lib.to_string_lossy().as_bytes()).expect("path without NUL");
    // SAFETY: loading one of our own libraries; their initialisers do nothing.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {}", lib.display());
    names
        .iter()
        .filter(|n| {
            let c = CString::new(n.as_str()).expect("name without NUL");
            // SAFETY: valid handle and name.
            unsafe { libc::dlsym(h, c.as_ptr()) }.is_null()
        })
        .cloned()
        .collect()
}

/// Defined dynamic symbols of a library (`nm -D --defined-only`), without version suffixes.
pub fn exported(lib: &Path) -> Vec<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("run nm");
    assert!(out.status.success(), "nm {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

/// The SONAME of a library (`readelf -d`), if it has one.
pub fn soname(lib: &Path) -> Option<String> {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(lib)
        .output()
        .expect("run readelf");
    assert!(out.status.success(), "readelf -d {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("(SONAME)"))
        .and_then(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
}

/// Asserts the built library `file` exports every name of the list at `list` and no function
/// whose name does not start with `prefix` (the library's API prefix).
pub fn assert_exports_listed(file: &str, list: &Path, prefix: &str) {
    let lib = built(file);
    let missing = unresolved(&lib, &name_list(list));
    assert!(missing.is_empty(), "{file} does not export: {missing:?}");
    let foreign: Vec<String> = exported(&lib)
        .into_iter()
        .filter(|n| !n.starts_with(prefix))
        .collect();
    assert!(
        foreign.is_empty(),
        "{file} exports non-{prefix} names: {foreign:?}"
    );
}

/// Runs a test program, asserts it succeeded, and returns its stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run the test program");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Runs `python3 -c script` with `LD_LIBRARY_PATH=dir` and returns its trimmed stdout.
pub fn python(dir: &Path, script: &str) -> String {
    python_with(dir, script, |_| {})
}

/// [`python`] with more environment set (or removed) by `setup`.
pub fn python_with(dir: &Path, script: &str, setup: impl FnOnce(&mut Command)) -> String {
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(script)
        .env("LD_LIBRARY_PATH", dir)
        .env_remove("CUDA_VISIBLE_DEVICES");
    setup(&mut cmd);
    let out = cmd.output().expect("run python3");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Makes `path` reachable by other users: every directory from the root down to `path` gets
/// the search bit for others (`o+x`, nothing else) where it lacks it.
///
/// Tests that check isolation between processes of one user run their programs as an
/// unprivileged user when the suite runs as root (root opens any process's descriptors). Those
/// programs live under the target directory, and a checkout inside a private directory (a
/// `mktemp -d` of mode 700, as CI makes) would hide them from that user.
pub fn reachable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for dir in path.ancestors().filter(|d| d.is_dir()) {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o001))
                .unwrap_or_else(|e| panic!("{}: cannot add o+x: {e}", dir.display()));
        }
    }
}

/// The user isolation probes run as when the suite runs as root (`nobody`).
pub const UNPRIVILEGED_ID: u32 = 65534;

/// Makes `c` run as an unprivileged user ([`UNPRIVILEGED_ID`]) when the tests run as root:
/// root opens any process's descriptors and memory whatever the process does, so isolation
/// between the processes of one user shows only below root, and owner, members and probe then
/// all run as that user. Each path in `reach` is made reachable by that user
/// ([`reachable_by_others`]); each directory in `share`, and the command's `TMPDIR` if it sets
/// one, is also made writable by it (mode 1777), for programs that write there. Run as
/// another user, `c` is left as it is.
pub fn as_one_user(c: &mut Command, reach: &[&Path], share: &[&Path]) {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    for p in reach {
        reachable_by_others(p);
    }
    let tmp = c
        .get_envs()
        .find(|(k, _)| *k == "TMPDIR")
        .and_then(|(_, v)| v)
        .map(PathBuf::from);
    for d in share.iter().copied().chain(tmp.as_deref()) {
        reachable_by_others(d);
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o1777))
            .unwrap_or_else(|e| panic!("{}: cannot chmod 1777: {e}", d.display()));
    }
    c.uid(UNPRIVILEGED_ID).gid(UNPRIVILEGED_ID);
}

/// Runs the shell `script` as the user [`as_one_user`] picks: whether it succeeded, and its
/// stderr.
pub fn probe(script: &str) -> (bool, String) {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    as_one_user(&mut c, &[], &[]);
    let out = c.output().expect("run sh");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`probe`] of opening `path` read-write, then read-only: for each, how it was opened,
/// whether the open succeeded and the shell's error.
pub fn probe_opens(path: &Path) -> [(&'static str, bool, String); 2] {
    let p = path.display();
    ["read-write", "read-only"].map(|how| {
        let redirect = if how == "read-write" { "<>" } else { "<" };
        let (opened, err) = probe(&format!("exec 3{redirect}'{p}'"));
        (how, opened, err)
    })
}
