//! Multicast objects (NVLS) from C (`c/multicast.c`), linked against `libcuda.so.1` and
//! `libcudart.so.12` by their real names: in one process on a GB200 tray and on a DGX H100
//! (GPUs on NVSwitches report `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`), refused on the
//! bundled DGX A100, and between simulated trays of one rack through a fabric handle (refused
//! to a tray of the next rack). Each scenario runs in its own process, so a fault fails the
//! test with its signal.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| common::build("multicast"))
}

fn run(scenario: &str, topo: Option<&str>, expect: &[&str]) {
    common::run(program(), scenario, topo, expect);
}

#[test]
fn a_store_through_the_object_reaches_every_bound_device_of_a_gb200_tray() {
    run("local", Some("gb200-nvl72-tray.xml"), &["PASS local"]);
}

#[test]
fn h100s_on_nvswitches_support_multicast() {
    run("local", Some("dgx-h100.xml"), &["PASS local"]);
}

#[test]
fn a100s_do_not_support_multicast() {
    run("unsupported", None, &["PASS unsupported"]);
}

/// Node 0 of a rack of GB200 trays creates an object with a fabric handle; node 1 (same rack)
/// imports it from the 64 bytes alone, joins and binds its memory; each sees the other's store
/// through the object in its own memory; node 18 (the next rack) is refused.
#[test]
fn a_team_spans_two_trays_of_one_nvlink_domain() {
    run(
        "team",
        Some("gb200-nvl72-tray.xml"),
        &["PASS team", "PASS member", "PASS refused"],
    );
}
