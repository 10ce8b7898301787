//! Every front-end reports the same driver, and it is at least as new as every runtime: a real
//! CUDA runtime loaded next to our `libcuda.so.1` (or a program comparing `cudaDriverGetVersion`
//! with `cudaRuntimeGetVersion`, as torch does) must not conclude the driver is too old.

use fake_cuda_test_support as support;

#[test]
fn driver_versions_agree_and_cover_both_runtimes() {
    let dir = support::scratch_dir("driver-versions");
    support::link_real_names(
        &dir,
        &[
            ("libcuda_driver.so", "libcuda.so.1"),
            ("libcudart12.so", "libcudart.so.12"),
            ("libcudart13.so", "libcudart.so.13"),
            ("libnvidia_ml.so", "libnvidia-ml.so.1"),
        ],
    );
    support::built("libncclsim_cuda.so");
    let script = "import ctypes\n\
                  def get(lib, name):\n\
                  \x20   v = ctypes.c_int(-1)\n\
                  \x20   assert getattr(lib, name)(ctypes.byref(v)) == 0, name\n\
                  \x20   return v.value\n\
                  cu = ctypes.CDLL('libcuda.so.1')\n\
                  assert cu.cuInit(0) == 0\n\
                  nvml = ctypes.CDLL('libnvidia-ml.so.1')\n\
                  assert nvml.nvmlInit_v2() == 0\n\
                  s = ctypes.create_string_buffer(80)\n\
                  assert nvml.nvmlSystemGetDriverVersion(s, 80) == 0\n\
                  n = ctypes.create_string_buffer(80)\n\
                  assert nvml.nvmlSystemGetNVMLVersion(n, 80) == 0\n\
                  rt12 = ctypes.CDLL('libcudart.so.12')\n\
                  rt13 = ctypes.CDLL('libcudart.so.13')\n\
                  print(get(cu, 'cuDriverGetVersion'),\n\
                  \x20     get(nvml, 'nvmlSystemGetCudaDriverVersion'),\n\
                  \x20     get(nvml, 'nvmlSystemGetCudaDriverVersion_v2'),\n\
                  \x20     get(rt12, 'cudaDriverGetVersion'), get(rt13, 'cudaDriverGetVersion'))\n\
                  print(get(rt12, 'cudaRuntimeGetVersion'), get(rt13, 'cudaRuntimeGetVersion'))\n\
                  print(s.value.decode(), n.value.decode())\n";
    let out = support::python(&dir, script);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let drivers: Vec<i32> = lines[0].split(' ').map(|v| v.parse().unwrap()).collect();
    let runtimes: Vec<i32> = lines[1].split(' ').map(|v| v.parse().unwrap()).collect();
    assert_eq!(runtimes, [12090, 13050], "{out}");
    assert!(drivers.iter().all(|&d| d == drivers[0]), "{out}");
    assert!(runtimes.iter().all(|&r| drivers[0] >= r), "{out}");
    // NVML's version string starts with the driver's CUDA major and ends with the driver.
    let (driver, nvml) = lines[2].split_once(' ').unwrap();
    assert_eq!(nvml, format!("{}.{driver}", drivers[0] / 1000), "{out}");
}
