//! `libnvidia-ml.so.1` has no symbol versions (consumers `dlopen` it and `dlsym` plain names),
//! only the SONAME.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
