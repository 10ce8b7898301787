//! The built `libnccl.so.2` exports every `nccl*` function of NCCL 2.30.7 and its `pnccl*`
//! twin, with NCCL's SONAME, and nothing else.

use fake_cuda_test_support as support;
use std::path::Path;

#[test]
fn every_nccl_2_30_function_and_its_twin() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("symbols/nccl-2.30.txt");
    let names = support::name_list(&list);
    let twins: Vec<String> = names.iter().map(|n| format!("p{n}")).collect();
    let lib = support::built("libnccl.so");
    let missing = support::unresolved(&lib, &names);
    assert!(missing.is_empty(), "missing: {missing:?}");
    let missing = support::unresolved(&lib, &twins);
    assert!(missing.is_empty(), "missing: {missing:?}");
    let exported = support::exported(&lib);
    let extra: Vec<&String> = exported
        .iter()
        .filter(|e| !names.contains(e) && !twins.contains(e))
        .collect();
    assert!(extra.is_empty(), "exports outside NCCL's API: {extra:?}");
    let out = std::process::Command::new("readelf")
        .args(["-d"])
        .arg(&lib)
        .output()
        .expect("readelf");
    assert!(String::from_utf8_lossy(&out.stdout).contains("[libnccl.so.2]"));
}

#[test]
fn what_torch_and_nccl_tests_import_is_exported() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("symbols/clients.txt");
    let lib = support::built("libnccl.so");
    let missing = support::unresolved(&lib, &support::name_list(&list));
    assert!(missing.is_empty(), "missing: {missing:?}");
}
