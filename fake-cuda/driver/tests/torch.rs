//! PyTorch's caching allocator on these libraries (`tests/torch/memory.py` through
//! `scripts/torch-run.sh`): `torch.OutOfMemoryError` past the 40 GiB A100, copies that read
//! back, and a CUDA tensor shared with another process, with the default allocator and with
//! `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (the driver's `cuMem*` API).
//!
//! Opt-in, because it needs a torch venv: make one with `scripts/torch-venv.sh`, then
//! `NCCLSIM_TORCH_VENV=<venv> cargo test -p fake-cuda-driver --test torch -- --ignored`.

use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "needs a torch venv: scripts/torch-venv.sh, then NCCLSIM_TORCH_VENV=<venv> cargo test -p fake-cuda-driver --test torch -- --ignored"]
fn torch_allocator_oom_copies_and_sharing_with_and_without_expandable_segments() {
    let venv = std::env::var("NCCLSIM_TORCH_VENV")
        .expect("NCCLSIM_TORCH_VENV: the venv scripts/torch-venv.sh made");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = here.join("tests/torch/memory.py");
    for conf in ["", "expandable_segments:True"] {
        let out = Command::new(here.join("../../scripts/torch-run.sh"))
            .arg("python")
            .arg(&script)
            .env("NCCLSIM_TORCH_VENV", &venv)
            .env("NCCLSIM_PROFILE", "dev")
            .env("PYTORCH_CUDA_ALLOC_CONF", conf)
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NCCLSIM_TOPO")
            .env_remove("NCCL_TOPO_FILE")
            .env_remove("NCCLSIM_GPU")
            .env_remove("NCCLSIM_NODE")
            .output()
            .expect("run scripts/torch-run.sh");
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("memory: PASS 11 checks"),
            "PYTORCH_CUDA_ALLOC_CONF={conf:?}: {}\n{text}\n{err}",
            out.status
        );
    }
}
