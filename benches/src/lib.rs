//! What the benchmarks in `benches/` share: the allocator they measure with and where the bundled
//! topologies are.

/// The allocator the `ncclsim` binary uses; `--features system-alloc` measures with the system
/// allocator instead. Declared here, it serves every benchmark binary (each links this library).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The path of a bundled topology file (`topologies/<name>`).
pub fn topology_file(name: &str) -> String {
    format!("{}/../topologies/{name}", env!("CARGO_MANIFEST_DIR"))
}
