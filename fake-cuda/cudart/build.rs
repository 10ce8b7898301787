//! Gives the cdylib the SONAME and symbol version node of NVIDIA's CUDA 12 runtime, so programs
//! linked against the real `libcudart.so.12` (which import `cudaMalloc@libcudart.so.12`) load
//! this one without "no version information" warnings. See reference/fake-cuda.md §4: under
//! rust-lld the symbols land in the base version, which glibc accepts because the base version
//! name equals the SONAME.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=cudart.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.12");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/cudart.map");
}
