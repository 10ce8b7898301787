//! Gives the cdylib NCCL's SONAME, `libnccl.so.2`. rustc's own export list already limits the
//! dynamic symbols to the `#[no_mangle]` functions (`nccl*` and `pnccl*`), unversioned, as in
//! NVIDIA's library.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
    println!("cargo:rerun-if-changed=build.rs");
}
