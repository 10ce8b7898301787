//! Embeds the Python package (`python/` at the repository root) in the binary: `ncclsim run`
//! writes it out and puts it on the program's `PYTHONPATH` (`src/python.rs`), so the command
//! needs nothing beside it at run time.

use std::path::{Path, PathBuf};

fn collect(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Not what pip's in-tree build leaves (`ncclsim.egg-info/`, with its own entry points),
        // nor the package's unit tests (`python/tests`, run by the suite, not by programs).
        let tests = dir == root && name == "tests";
        if name.starts_with('.') || name == "__pycache__" || name.ends_with(".egg-info") || tests {
            continue;
        }
        if p.is_dir() {
            collect(&p, root, out);
        } else if name.ends_with(".py") || name == "METADATA" || name == "entry_points.txt" {
            out.push(p.strip_prefix(root).expect("under root").to_path_buf());
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.join("../python");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    let mut src = String::from(
        "/// (path under the package directory, contents)\npub const FILES: &[(&str, &str)] = &[\n",
    );
    for f in &files {
        let abs = root.join(f);
        println!("cargo:rerun-if-changed={}", abs.display());
        src.push_str(&format!(
            "    ({:?}, include_str!({:?})),\n",
            f.display().to_string(),
            abs.display().to_string()
        ));
    }
    src.push_str("];\n");
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("python_files.rs");
    std::fs::write(&out, src).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}
