//! `libcuda.so.1` exports every name of `symbols/libcuda-required.txt` (torch's nvrtc imports,
//! NCCL's mandatory entry points, the runtime's first calls) and loads by its real name.

use fake_cuda_test_support as support;
use std::path::Path;

#[test]
fn every_listed_name_is_exported() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("symbols/libcuda-required.txt");
    support::assert_exports_listed("libcuda_driver.so", &list, "cu");
}

#[test]
fn python_ctypes_loads_it_by_its_real_name() {
    let dir = support::scratch_dir("ctypes-libcuda.so.1");
    support::link_real_names(&dir, &[("libcuda_driver.so", "libcuda.so.1")]);
    let script = "import ctypes\n\
                  lib = ctypes.CDLL('libcuda.so.1')\n\
                  n = ctypes.c_int(0)\n\
                  print(lib.cuInit(0), lib.cuDeviceGetCount(ctypes.byref(n)), n.value)\n";
    assert_eq!(support::python(&dir, script), "0 0 8");
}
