//! The C header's vtable and the Python package's constants are generated from the Rust
//! declaration (`fake_cuda_abi::describe`, from `core_api!`); the committed files must equal
//! what it gives. `UPDATE_GENERATED=1 cargo test -p ncclsim-cuda --test generated` rewrites
//! them after a change to the vtable.

use std::path::{Path, PathBuf};

const BEGIN: &str = "/* Generated from fake_cuda_abi::core_api! (fake_cuda_abi::describe::c_header_block); \
                     UPDATE_GENERATED=1 cargo test -p ncclsim-cuda --test generated rewrites it. */\n";
const END: &str = "/* End of the generated part. */\n";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn update() -> bool {
    std::env::var_os("UPDATE_GENERATED").is_some_and(|v| v == "1")
}

/// Checks (or with `UPDATE_GENERATED=1` writes) `path`, whose text must be `want`.
fn keep(path: &Path, have: &str, want: &str) {
    if have == want {
        return;
    }
    if update() {
        std::fs::write(path, want).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let line = have
        .lines()
        .zip(want.lines())
        .position(|(a, b)| a != b)
        .map_or(have.lines().count().min(want.lines().count()), |i| i);
    panic!(
        "{} differs from what fake_cuda_abi::describe generates (first at line {}); run \
         UPDATE_GENERATED=1 cargo test -p ncclsim-cuda --test generated",
        path.display(),
        line + 1
    );
}

#[test]
fn the_c_headers_vtable_is_the_declarations() {
    let path = repo().join("fake-cuda/ncclsim-cuda/include/ncclsim_cuda.h");
    let text = std::fs::read_to_string(&path).expect("read the header");
    let start = text
        .find(BEGIN)
        .expect("the header's generated part begins")
        + BEGIN.len();
    let end = text[start..].find(END).expect("and ends") + start;
    let want = format!(
        "{}{}{}",
        &text[..start],
        fake_cuda_abi::describe::c_header_block(),
        &text[end..]
    );
    keep(&path, &text, &want);
}

#[test]
fn the_python_packages_constants_are_the_declarations() {
    let path = repo().join("python/ncclsim/_core_abi.py");
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    keep(&path, &have, &fake_cuda_abi::describe::python_module());
}
