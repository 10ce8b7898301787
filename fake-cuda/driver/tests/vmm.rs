//! The virtual memory management API from C (`c/vmm.c`), linked against `libcuda.so.1` and
//! `libcudart.so.12` by their real names: one process, then two sharing an allocation through
//! a file descriptor passed over a UNIX socket. Each scenario runs in its own process, so a
//! fault fails the test with its signal.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| common::build("vmm"))
}

/// Runs a scenario with the bundled DGX A100 (8 x A100-SXM4-40GB) and checks it passed.
fn run(scenario: &str, expect: &[&str]) {
    common::run(program(), scenario, None, expect);
}

#[test]
fn create_reserve_map_copy_unmap_free_in_one_process() {
    run("local", &["PASS local"]);
}

#[test]
fn an_exported_allocation_is_shared_through_its_descriptor_and_nothing_else() {
    run("share", &["PASS import", "PASS share"]);
}
