//! Unmodified PyTorch (`torch.distributed`, NCCL backend, `torchrun`) on these libraries:
//! `scripts/torch-e2e.sh`, which runs `scripts/torch/collectives.py` on 1 node x 2 processes
//! and on 2 simulated nodes x 2 processes, checking every result on the CPU, DDP and FSDP2
//! steps (`scripts/torch/ddp_fsdp.py`), then the first run again with `NCCLSIM_TEST_PERTURB=1`,
//! which must fail.
//!
//! Opt-in, because it needs a torch venv (about 1 GB, downloaded once): make one with
//! `scripts/torch-venv.sh`, then
//! `NCCLSIM_TORCH_VENV=<venv> cargo test -p nccl-shim --test torch -- --ignored`.
//! `cargo test --workspace` lists it as ignored and never downloads anything.

use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "needs a torch venv: scripts/torch-venv.sh, then NCCLSIM_TORCH_VENV=<venv> cargo test -p nccl-shim --test torch -- --ignored"]
fn torchrun_collectives_on_one_and_two_simulated_nodes() {
    let venv = std::env::var("NCCLSIM_TORCH_VENV")
        .expect("NCCLSIM_TORCH_VENV: the venv scripts/torch-venv.sh made");
    assert!(
        Path::new(&venv).join("ncclsim-stubs").is_dir(),
        "{venv} has no ncclsim-stubs/: run scripts/torch-venv.sh {venv}"
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(repo.join("scripts/torch-e2e.sh"))
        // The debug libraries: this test's own build has most of them already.
        .env("NCCLSIM_PROFILE", "dev")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NCCLSIM_NODE")
        .env_remove("NCCLSIM_E2E_PER_NODE")
        .env_remove("NCCLSIM_STUBS")
        .output()
        .expect("run scripts/torch-e2e.sh");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    assert!(text.contains("torch-e2e: PASS"), "{text}\n{err}");
    assert_eq!(text.matches(": PASS 19 checks").count(), 6, "{text}");
    assert!(text.contains("fsdp2 step 2 done"), "{text}");
    assert!(text.contains("rank 1: FAIL all_reduce sum"), "{text}");
}
