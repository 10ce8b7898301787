//! The virtual host clock (`NCCLSIM_CLOCK=virtual`, `libncclsim_cuda.so` preloaded) as a C
//! program sees it (`c/host_clock.c`): clock reads start at the epoch the launcher gave and move
//! when the program waits for device work, by what the device's events measure, and when it
//! sleeps, by what it slept; CPU-time clocks stay real; absolute deadlines computed from the
//! virtual clock (condition variables, semaphores, `clock_nanosleep`) wait as long in real time
//! as the program asked, and a wait that times out does not move the clock.

use fake_cuda_test_support as support;
use std::path::Path;
use std::process::Command;

#[test]
fn a_program_reads_the_virtual_clock_and_its_timed_waits_keep_real_time() {
    let dir = support::scratch_dir("cudart12-host-clock");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = support::build_c(
        &dir,
        &[("libcudart12.so", "libcudart.so.12")],
        &here.join("tests/c/host_clock.c"),
        &[here.join("../ncclsim-cuda/include")],
        &["libpthread.so.0"],
        "host_clock",
        0,
    );
    let core = support::deps_dir().join("libncclsim_cuda.so");
    // An epoch far from the real clocks, so a clock read that missed the virtual clock shows.
    let out = Command::new(exe)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NCCLSIM_PACE")
        .env_remove("NCCLSIM_TOPO")
        .env_remove("NCCL_TOPO_FILE")
        .env_remove("NCCLSIM_NODE")
        .env("LD_PRELOAD", &core)
        .env("NCCLSIM_TEST_CORE", &core)
        .env("NCCLSIM_CLOCK", "virtual")
        .env("NCCLSIM_CLOCK_EPOCH", "1000000000000000000,5000000000")
        .output()
        .expect("run host_clock");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("PASS host_clock"), "{text}");
}
