//! The built runtime exports exactly the names of the real one and loads by its real name from
//! Python's `ctypes`. Shared by `libcudart.so.12` and `libcudart.so.13`: the package's
//! `cudart.map` and `symbols/cudart-*.txt` say which library and which list.

use fake_cuda_test_support as support;
use std::path::{Path, PathBuf};

/// (real name, built file, name list) of the package under test.
fn package() -> (String, String, PathBuf) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(dir.join("cudart.map")).expect("read cudart.map");
    let real = map
        .split_whitespace()
        .next()
        .expect("version node")
        .to_string();
    let major = real.rsplit('.').next().expect("libcudart.so.N").to_string();
    let list = std::fs::read_dir(dir.join("symbols"))
        .expect("read symbols/")
        .map(|e| e.expect("dir entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "txt"))
        .expect("a name list");
    (real, format!("libcudart{major}.so"), list)
}

#[test]
fn every_listed_name_resolves() {
    let (real, file, list) = package();
    let names = support::name_list(&list);
    // 435 functions in NVIDIA's 12.9 runtime, 458 in 13.5.
    let expected = if real.ends_with(".12") { 435 } else { 458 };
    assert_eq!(names.len(), expected, "{}", list.display());
    let missing = support::unresolved(&support::built(&file), &names);
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

#[test]
fn nothing_beyond_the_list_is_exported() {
    let (real, file, list) = package();
    let listed = support::name_list(&list);
    let extra: Vec<String> = support::exported(&support::built(&file))
        .into_iter()
        .filter(|n| *n != real && !listed.contains(n))
        .collect();
    assert!(extra.is_empty(), "exported but not in the list: {extra:?}");
}

#[test]
fn python_ctypes_loads_it_by_its_real_name() {
    let (real, file, _) = package();
    let dir = support::scratch_dir(&format!("ctypes-{real}"));
    support::link_real_names(&dir, &[(&file, &real)]);
    let script = format!(
        "import ctypes\n\
         lib = ctypes.CDLL('{real}')\n\
         n = ctypes.c_int(-1)\n\
         v = ctypes.c_int(-1)\n\
         rc = lib.cudaGetDeviceCount(ctypes.byref(n))\n\
         lib.cudaRuntimeGetVersion(ctypes.byref(v))\n\
         print(rc, n.value, v.value // 1000)\n"
    );
    let major = real.rsplit('.').next().unwrap();
    assert_eq!(support::python(&dir, &script), format!("0 8 {major}"));
}
