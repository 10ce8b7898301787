//! Facts about the simulated devices that the core and the front-ends both state: the kinds of
//! memory a pointer can point into, the driver's memory granularity and handle type, and the
//! text form of a GPU UUID.

/// What kind of memory a pointer points into (`cudaMemoryType` numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum MemoryKind {
    /// Memory the core does not know.
    Unregistered = 0,
    /// Pinned host memory (allocated or registered).
    Host = 1,
    /// Device memory (own or opened through IPC).
    Device = 2,
}

/// Allocation, mapping and reservation granularity (the minimum and recommended value of
/// `cuMemGetAllocationGranularity`, as on A100 and H100).
pub const GRANULARITY: u64 = 2 << 20;

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
pub const HANDLE_TYPE_POSIX_FD: u32 = 1;

/// A GPU UUID in NVIDIA's text form, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_string(uuid: &[u8; 16]) -> String {
    let h: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}
