//! `libncclsim_cuda.so` carries its file name as SONAME, so a front-end's
//! `dlopen("libncclsim_cuda.so", RTLD_NOLOAD)` finds the core already loaded in the process,
//! from whichever directory it came.
fn main() {
    println!("cargo:rustc-link-arg-cdylib=-Wl,-soname,libncclsim_cuda.so");
}
