//! `libnvidia-ml.so.1` from C (linked by its real name next to `libcudart.so.12`), its
//! exported names against the checked-in list, and loading through Python's `ctypes`.

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn smoke() -> &'static (PathBuf, PathBuf) {
    static EXE: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = support::scratch_dir("nvml-c");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/nvml_smoke.c");
        let exe = support::build_c(
            &dir,
            &[
                ("libnvidia_ml.so", "libnvidia-ml.so.1"),
                ("libcudart12.so", "libcudart.so.12"),
            ],
            &src,
            &[],
            &[],
            "nvml_smoke",
            0,
        );
        (dir, exe)
    })
}

fn run(scenario: &str, env: &[(&str, &str)]) -> String {
    support::run_ok(
        Command::new(&smoke().1)
            .arg(scenario)
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NCCLSIM_TOPO")
            .env_remove("NCCL_TOPO_FILE")
            .env_remove("NCCLSIM_NODE")
            .env_remove("NCCLSIM_NVL_DOMAIN")
            .envs(env.iter().copied()),
    )
}

#[test]
fn devices_handles_and_properties_agree_with_cuda() {
    let text = run("devices", &[]);
    assert!(text.contains("count 8\n"), "{text}");
    assert!(
        text.contains(
            "nvml 0 NVIDIA A100-SXM4-40GB 00000000:07:00.0 0000:07:00.0 20b010de sm 8.0\n"
        ),
        "{text}"
    );
    assert!(text.contains("nvml 7 NVIDIA A100-SXM4-40GB 00000000:BD:00.0 0000:BD:00.0"));
    assert!(text.contains("cuda 7 = nvml 7\n"));
    // DGX A100: GPUs 0 and 1 share a PCIe switch tree, GPU 2 is on the other CPU; all reach
    // each other over NVSwitch.
    assert!(
        text.contains("ancestor 0-0 0\nancestor 0-1 20\nancestor 0-2 50\n"),
        "{text}"
    );
    assert!(text.contains("p2p nvlink 0-2 0\n"), "{text}");
    assert!(text.contains("PASS devices"));
}

/// The fabric UUID of every GPU of node `node` of GB200 trays (all GPUs of a node agree), and
/// the rest of what they report.
fn tray_fabric(node: &str, domain: Option<&str>) -> (String, String) {
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies/gb200-nvl72-tray.xml");
    let topo = topo.to_str().unwrap();
    let mut env = vec![("NCCLSIM_TOPO", topo), ("NCCLSIM_NODE", node)];
    if let Some(d) = domain {
        env.push(("NCCLSIM_NVL_DOMAIN", d));
    }
    let text = run("fabric", &env);
    assert!(text.contains("PASS fabric"), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("fabric ")).collect();
    assert_eq!(lines.len(), 4, "a tray has 4 GPUs: {text}");
    let field = |l: &str, k: usize| l.split_whitespace().nth(k).unwrap_or("").to_string();
    let uuid = field(lines[0], 3);
    let rest = lines[0].split_once(" clique ").unwrap().1.to_string();
    for l in &lines {
        assert_eq!(field(l, 3), uuid, "{text}");
        assert_eq!(l.split_once(" clique ").unwrap().1, rest, "{text}");
    }
    (uuid, rest)
}

#[test]
fn gb200_trays_report_their_racks_fabric() {
    // The values a GB200 NVL72 rack's GPUs report (NVIDIA/nccl issue #1769: cliqueId 0x7ffe,
    // state 3 = NVML_GPU_FABRIC_STATE_COMPLETED, healthMask 0xaa), status NVML_SUCCESS.
    let (u0, rest) = tray_fabric("0", None);
    assert_eq!(rest, "0x7ffe state 3 status 0 health 0xaa");
    assert_ne!(u0, "0".repeat(32), "the cluster UUID is set");
    // 18 trays of 4 GPUs make a rack: trays 0 and 17 share one, tray 18 is the next rack's.
    let (u17, _) = tray_fabric("17", None);
    let (u18, _) = tray_fabric("18", None);
    assert_eq!(u0, u17);
    assert_ne!(u17, u18);
    // Domains of 8 GPUs (NCCLSIM_NVL_DOMAIN, `ncclsim run --nvl-domain 8`): trays 1 and 2 differ.
    let (a, _) = tray_fabric("1", Some("8"));
    let (b, _) = tray_fabric("2", Some("8"));
    assert_eq!(a, u0);
    assert_ne!(a, b);
    // Nodes without an NVLink fabric spanning hosts: NVML_ERROR_NOT_SUPPORTED on every GPU.
    let text = run("fabric", &[]);
    assert_eq!(text.matches(" none\n").count(), 8, "{text}");
}

#[test]
fn nvml_ignores_cuda_visible_devices() {
    let text = run("devices", &[("CUDA_VISIBLE_DEVICES", "5,3")]);
    assert!(text.contains("count 8\n"), "{text}");
    assert!(
        text.contains("cuda 0 = nvml 5\ncuda 1 = nvml 3\n"),
        "{text}"
    );
}

#[test]
fn nvlinks_lead_to_the_nvswitches() {
    let text = run("nvlinks", &[]);
    assert!(text.contains("links 12\n"), "{text}");
    assert!(
        text.contains("link 0 -> 00000000:C4:00.0 type 2\n"),
        "{text}"
    );
    assert!(
        text.contains("link 11 -> 00000000:C9:00.0 type 2\n"),
        "{text}"
    );
    // A topology with direct GPU-GPU NVLinks reports GPUs at the far end.
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies/dgx1-v100.xml");
    let text = run("nvlinks", &[("NCCLSIM_TOPO", topo.to_str().unwrap())]);
    assert!(text.contains(" type 0\n"), "{text}");
    assert!(text.contains("PASS nvlinks"));
}

#[test]
fn every_listed_name_is_exported() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("symbols/nvml-required.txt");
    support::assert_exports_listed("libnvidia_ml.so", &list, "nvml");
}

#[test]
fn python_ctypes_loads_it_by_its_real_name() {
    let dir = &smoke().0;
    let script = "import ctypes\n\
                  lib = ctypes.CDLL('libnvidia-ml.so.1')\n\
                  n = ctypes.c_uint(0)\n\
                  print(lib.nvmlInit_v2(), lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), n.value)\n";
    assert_eq!(support::python(dir, script), "0 0 8");
}

#[test]
fn telemetry_answers_for_the_board_model() {
    let dir = &smoke().0;
    let h100 = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../topologies/dgx-h100.xml");
    let script = "import ctypes\n\
                  lib = ctypes.CDLL('libnvidia-ml.so.1')\n\
                  assert lib.nvmlInit_v2() == 0\n\
                  h = ctypes.c_void_p()\n\
                  assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0\n\
                  v = ctypes.c_uint(0)\n\
                  out = []\n\
                  for f in ['nvmlDeviceGetPowerUsage', 'nvmlDeviceGetPowerManagementLimit', 'nvmlDeviceGetEnforcedPowerLimit', 'nvmlDeviceGetFanSpeed', 'nvmlDeviceGetPerformanceState']:\n\
                  \x20   r = getattr(lib, f)(h, ctypes.byref(v))\n\
                  \x20   out.append('%s %d %d' % (f[13:], r, v.value if r == 0 else -1))\n\
                  r = lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(v))\n\
                  out.append('Temperature %d %d' % (r, v.value))\n\
                  r = lib.nvmlDeviceGetMaxClockInfo(h, 1, ctypes.byref(v))\n\
                  out.append('MaxSm %d %d' % (r, v.value))\n\
                  n = ctypes.c_uint(0)\n\
                  out.append('Procs %d %d' % (lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None), n.value))\n\
                  print(' / '.join(out))\n";
    let python = |topo: Option<&Path>| {
        let mut cmd = Command::new("python3");
        cmd.arg("-c")
            .arg(script)
            .env("LD_LIBRARY_PATH", dir)
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NCCL_TOPO_FILE")
            .env_remove("NCCLSIM_TOPO");
        if let Some(t) = topo {
            cmd.env("NCCLSIM_TOPO", t);
        }
        support::run_ok(&mut cmd)
    };
    let a100 = python(None);
    // A100-SXM4: 400 W cap, a passive heatsink (no fan), P0, 30-34 C idle, no memory in use.
    assert!(a100.contains("PowerManagementLimit 0 400000"), "{a100}");
    assert!(a100.contains("EnforcedPowerLimit 0 400000"), "{a100}");
    assert!(a100.contains("FanSpeed 3 -1"), "{a100}");
    assert!(a100.contains("PerformanceState 0 0"), "{a100}");
    assert!(a100.contains("MaxSm 0 1410"), "{a100}");
    assert!(a100.contains("Procs 0 0"), "{a100}");
    let temp: u32 = a100
        .split("Temperature 0 ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{a100}"));
    assert!((30..=34).contains(&temp), "{a100}");
    let power: u32 = a100
        .split("PowerUsage 0 ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{a100}"));
    assert!((40_000..100_000).contains(&power), "{a100}");
    let h = python(Some(&h100));
    assert!(h.contains("PowerManagementLimit 0 700000"), "{h}");
}

#[test]
fn the_process_and_its_device_memory_are_listed() {
    let dir = &smoke().0;
    let script = "import ctypes, os\n\
                  lib = ctypes.CDLL('libnvidia-ml.so.1')\n\
                  cudart = ctypes.CDLL('libcudart.so.12')\n\
                  assert lib.nvmlInit_v2() == 0\n\
                  h = ctypes.c_void_p()\n\
                  assert lib.nvmlDeviceGetHandleByIndex_v2(2, ctypes.byref(h)) == 0\n\
                  assert cudart.cudaSetDevice(2) == 0\n\
                  p = ctypes.c_void_p()\n\
                  assert cudart.cudaMalloc(ctypes.byref(p), 1 << 30) == 0\n\
                  n = ctypes.c_uint(0)\n\
                  print('empty', lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None), n.value)\n\
                  class Info(ctypes.Structure):\n\
                  \x20   _fields_ = [('pid', ctypes.c_uint), ('used', ctypes.c_ulonglong), ('gi', ctypes.c_uint), ('ci', ctypes.c_uint)]\n\
                  infos = (Info * 4)()\n\
                  n = ctypes.c_uint(4)\n\
                  rc = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), infos)\n\
                  print('list', rc, n.value, infos[0].pid == os.getpid(), infos[0].used >> 20)\n\
                  other = ctypes.c_void_p()\n\
                  assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(other)) == 0\n\
                  n = ctypes.c_uint(4)\n\
                  print('other', lib.nvmlDeviceGetComputeRunningProcesses_v3(other, ctypes.byref(n), infos), n.value)\n";
    let out = support::python(dir, script);
    // No room: NVML_ERROR_INSUFFICIENT_SIZE (7) with the count; then this process with its
    // 1 GiB on GPU 2, and nothing on GPU 0.
    assert_eq!(out, "empty 7 1\nlist 0 1 True 1024\nother 0 0", "{out}");
}

#[test]
fn utilization_follows_the_work_on_the_virtual_timeline() {
    let dir = &smoke().0;
    let script = "import ctypes\n\
                  lib = ctypes.CDLL('libnvidia-ml.so.1')\n\
                  cudart = ctypes.CDLL('libcudart.so.12')\n\
                  assert lib.nvmlInit_v2() == 0\n\
                  h = [ctypes.c_void_p(), ctypes.c_void_p()]\n\
                  for i in range(2):\n\
                  \x20   assert lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h[i])) == 0\n\
                  u = (ctypes.c_uint * 2)()\n\
                  t = ctypes.c_uint(0)\n\
                  def read(i):\n\
                  \x20   assert lib.nvmlDeviceGetUtilizationRates(h[i], u) == 0\n\
                  \x20   assert lib.nvmlDeviceGetTemperature(h[i], 0, ctypes.byref(t)) == 0\n\
                  \x20   return '%d %d' % (u[0], t.value)\n\
                  before = read(0)\n\
                  p = ctypes.c_void_p()\n\
                  assert cudart.cudaMalloc(ctypes.byref(p), 64 << 20) == 0\n\
                  assert cudart.cudaMemset(p, 1, 64 << 20) == 0\n\
                  assert cudart.cudaDeviceSynchronize() == 0\n\
                  print(before, '/', read(0), '/', read(1))\n";
    let out = support::python(dir, script);
    // Idle, then busy for all the virtual time that passed (GPU 0 reads 30 C idle), while
    // GPU 1 stays idle at its own idle temperature.
    assert_eq!(out, "0 30 / 100 70 / 0 33", "{out}");
}
