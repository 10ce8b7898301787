//! Stream capture, CUDA graphs and user objects through the driver API, from C (`c/graphs.c`),
//! linked against `libcuda.so.1` and `libcudart.so.12` by their real names. Each scenario runs
//! in its own process, so a fault fails the test with its signal.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| common::build("graphs"))
}

#[test]
fn captured_work_runs_at_each_launch_and_updates_take_only_the_same_shape() {
    common::run(program(), "capture", None, &["PASS capture"]);
}

#[test]
fn a_user_objects_destructor_runs_once_when_its_last_reference_goes() {
    common::run(program(), "objects", None, &["PASS objects"]);
}

#[test]
fn plain_names_resolve_to_the_abi_of_the_callers_version() {
    common::run(program(), "versions", None, &["PASS versions"]);
}
