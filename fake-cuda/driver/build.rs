//! `libcuda.so.1` has no symbol versions (its consumers import plain names), only the SONAME.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
