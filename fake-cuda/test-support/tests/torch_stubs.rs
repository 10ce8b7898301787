//! `scripts/torch-stubs.py` on a stand-in for torch's lib/: a shared object that imports a
//! versioned function (`cublasCreate_v2@libcublas.so.13`), an unversioned one from a library
//! without version nodes (`cuFileDriverOpen` from `libcufile.so.0`) and one from a library
//! ncclsim implements (`libnccl.so.2`). The generated stubs must have the SONAMEs and version
//! node, load in place of the originals, fail with each library's status and say so once; the
//! library ncclsim implements must not be stubbed. With `--succeed`, the named library's stubs
//! return 0 instead.

use fake_cuda_test_support as support;
use std::path::Path;
use std::process::Command;

fn cc(args: &[&str], dir: &Path) {
    let out = Command::new("cc")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn stubs_replace_what_the_libraries_import() {
    let dir = support::scratch_dir("torch-stubs");
    for sub in ["originals", "torch", "stubs"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    // Originals to link the stand-in against (the linker records their SONAMEs and versions).
    write(
        "blas.c",
        "int cublasCreate_v2(void **h) { *h = 0; return 0; }\n",
    );
    write(
        "blas.map",
        "libcublas.so.13 { global: cublasCreate_v2; local: *; };\n",
    );
    write("file.c", "int cuFileDriverOpen(void) { return 0; }\n");
    write(
        "nccl.c",
        "int ncclGetVersion(int *v) { *v = 23007; return 0; }\n",
    );
    cc(
        &[
            "-shared",
            "-fPIC",
            "-o",
            "originals/libcublas.so.13",
            "blas.c",
            "-Wl,-soname,libcublas.so.13",
            "-Wl,--version-script,blas.map",
        ],
        &dir,
    );
    cc(
        &[
            "-shared",
            "-fPIC",
            "-o",
            "originals/libcufile.so.0",
            "file.c",
            "-Wl,-soname,libcufile.so.0",
        ],
        &dir,
    );
    cc(
        &[
            "-shared",
            "-fPIC",
            "-o",
            "originals/libnccl.so.2",
            "nccl.c",
            "-Wl,-soname,libnccl.so.2",
        ],
        &dir,
    );
    write(
        "consumer.c",
        "int cublasCreate_v2(void **); int cuFileDriverOpen(void); int ncclGetVersion(int *);\n\
         int call_blas(void) { void *h; return cublasCreate_v2(&h); }\n\
         int call_file(void) { return cuFileDriverOpen(); }\n\
         int call_nccl(void) { int v = 0; ncclGetVersion(&v); return v; }\n",
    );
    cc(
        &[
            "-shared",
            "-fPIC",
            "-o",
            "torch/libtorch_standin.so",
            "consumer.c",
            "-Loriginals",
            "-l:libcublas.so.13",
            "-l:libcufile.so.0",
            "-l:libnccl.so.2",
        ],
        &dir,
    );

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/torch-stubs.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(dir.join("torch"))
        .arg(dir.join("stubs"))
        .output()
        .expect("run torch-stubs.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("libcublas.so.13: 1 functions, nodes ['libcublas.so.13']"),
        "{text}"
    );
    assert!(
        text.contains("libcufile.so.0: 1 functions, nodes ['(none)']"),
        "{text}"
    );
    let stubs = dir.join("stubs");
    assert!(
        !stubs.join("libnccl.so.2").exists(),
        "ncclsim's own library was stubbed"
    );
    for name in ["libcublas.so.13", "libcufile.so.0"] {
        assert_eq!(support::soname(&stubs.join(name)).as_deref(), Some(name));
    }

    // Load the stand-in with only the stubs on the path (the originals are not) and the NCCL
    // original preloaded (ncclsim's libnccl.so.2 in real use).
    let py = format!(
        "import ctypes\n\
         lib = ctypes.CDLL('{}')\n\
         print(lib.call_blas(), lib.call_blas(), lib.call_file(), lib.call_nccl())\n",
        dir.join("torch/libtorch_standin.so").display()
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(&py)
        .env("LD_LIBRARY_PATH", &stubs)
        .env("LD_PRELOAD", dir.join("originals/libnccl.so.2"))
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    // CUBLAS_STATUS_NOT_INITIALIZED twice, CU_FILE_DRIVER_NOT_INITIALIZED, then the real NCCL.
    assert_eq!(stdout.trim(), "1 1 5001 23007", "{stderr}");
    assert_eq!(
        stderr
            .matches("cublasCreate_v2 (libcublas.so.13) is a stub")
            .count(),
        1,
        "{stderr}"
    );

    // --succeed: cuBLAS's stubs return 0 and do nothing; cuFile's still fail.
    let out = Command::new("python3")
        .arg(&script)
        .args(["--succeed", "cublas"])
        .arg(dir.join("torch"))
        .arg(dir.join("stubs-noop"))
        .output()
        .expect("run torch-stubs.py --succeed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(&py)
        .env("LD_LIBRARY_PATH", dir.join("stubs-noop"))
        .env("LD_PRELOAD", dir.join("originals/libnccl.so.2"))
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        "0 0 5001 23007",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
