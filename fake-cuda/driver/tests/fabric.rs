//! Fabric handle support on GPUs of an NVLink domain spanning nodes: GB200 NVL72 trays report
//! `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED` (128 in the CUDA driver API's
//! `CUdevice_attribute`) as 1, other nodes as 0; allocations with fabric handles are shared
//! between processes of different simulated trays of one rack by their 64-byte handle
//! (`c/fabric.c`), and refused to a tray of another rack.

mod common;

use fake_cuda_test_support as support;
use std::path::Path;

fn run(env: &[(&str, String)]) -> String {
    let dir = support::scratch_dir("driver-fabric");
    support::link_real_names(&dir, &[("libcuda_driver.so", "libcuda.so.1")]);
    support::built("libncclsim_cuda.so");
    // CUmemAllocationProp: type, requestedHandleTypes, location {type, id}, win32 metadata,
    // allocFlags (32 bytes); CU_MEM_HANDLE_TYPE_FABRIC is 8, a granule 2 MiB.
    let script = "import ctypes\n\
                  cu = ctypes.CDLL('libcuda.so.1')\n\
                  assert cu.cuInit(0) == 0\n\
                  v = ctypes.c_int(-1)\n\
                  ra = cu.cuDeviceGetAttribute(ctypes.byref(v), 128, 0)\n\
                  prop = (ctypes.c_int * 8)(1, 8, 1, 0, 0, 0, 0, 0)\n\
                  h = ctypes.c_uint64(0)\n\
                  rc = cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(2 << 20), prop, ctypes.c_uint64(0))\n\
                  print(ra, v.value, rc)\n";
    support::python_with(&dir, script, |c| {
        c.env_remove("NCCLSIM_TOPO")
            .env_remove("NCCL_TOPO_FILE")
            .env_remove("NCCLSIM_NODE")
            .env_remove("NCCLSIM_NVL_DOMAIN")
            .envs(env.iter().map(|(k, v)| (k, v)));
    })
}

#[test]
fn nvl72_trays_report_fabric_handle_support() {
    let tray = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies/gb200-nvl72-tray.xml");
    let tray = tray.display().to_string();
    // A tray: supported, and the allocation is made.
    assert_eq!(run(&[("NCCLSIM_TOPO", tray.clone())]), "0 1 0");
    // The bundled DGX A100 (NVSwitches inside the node): not supported, CUDA_ERROR_NOT_SUPPORTED.
    assert_eq!(run(&[]), "0 0 801");
    // A domain smaller than the tray: the machine cannot be built, so the core refuses to
    // start and both calls fail with CUDA_ERROR_NO_DEVICE.
    let text = run(&[("NCCLSIM_TOPO", tray), ("NCCLSIM_NVL_DOMAIN", "2".into())]);
    assert_eq!(text, "100 -1 100", "both refused with CUDA_ERROR_NO_DEVICE");
}

/// Node 0 of a rack of GB200 trays exports a fabric allocation; node 1 (same rack) imports it
/// from the 64 bytes alone, sees the data and writes its own; node 18 (the next rack) is refused.
#[test]
fn fabric_handles_share_memory_within_one_nvlink_domain() {
    common::run(
        &common::build("fabric"),
        "export",
        Some("gb200-nvl72-tray.xml"),
        &["PASS export", "PASS import", "PASS refused"],
    );
}
