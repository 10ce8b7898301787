//! Unit tests of the virtual memory management API over a two-device core.

use super::*;
use crate::{device, Config, CopyKind, MemoryKind};

fn core_with(mem: u64) -> Core {
    let mut devs = device::dgx_a100();
    devs.truncate(2);
    for d in &mut devs {
        d.memory_bytes = mem;
    }
    Core::new(devs, vec![0, 1], Config::default())
}

const G: usize = GRANULARITY as usize;

#[test]
fn create_reserve_map_copy_unmap_free() {
    let core = core_with(64 << 20);
    let h = core.mem_create(0, 4 * GRANULARITY, 0).unwrap();
    assert_eq!(core.mem_info(0).unwrap().0, (64 << 20) - 4 * GRANULARITY);
    let va = core.mem_address_reserve(8 * G, 0, 0).unwrap();
    assert_eq!(va % G, 0);
    core.mem_map(va, 2 * G, 0, h).unwrap();
    core.mem_map(va + 2 * G, 2 * G, 2 * GRANULARITY, h).unwrap();
    let src = vec![5u8; 3 * G];
    // SAFETY: the host sides are this test's buffers, alive for the copy.
    let err =
        unsafe { core.memcpy(va, src.as_ptr() as usize, 8, CopyKind::Default, 0) }.unwrap_err();
    assert!(err.to_string().contains("cuMemSetAccess"), "{err}");
    core.mem_set_access(va, 4 * G, 1, ACCESS_READWRITE).unwrap();
    assert_eq!(core.mem_get_access(va, 1).unwrap(), ACCESS_READWRITE);
    assert_eq!(core.mem_get_access(va, 0).unwrap(), 0);
    // One copy across the two mappings.
    // SAFETY: the host sides are this test's buffers, alive for the copy.
    unsafe {
        core.memcpy(
            va + 4096,
            src.as_ptr() as usize,
            3 * G,
            CopyKind::HostToDevice,
            0,
        )
    }
    .unwrap();
    let info = core.pointer_info(va + 3 * G);
    assert_eq!(info.kind, MemoryKind::Device);
    assert_eq!((info.device, info.base, info.size), (0, va + 2 * G, 2 * G));
    let mut back = vec![0u8; 3 * G];
    // SAFETY: the host sides are this test's buffers, alive for the copy.
    unsafe {
        core.memcpy(
            back.as_mut_ptr() as usize,
            va + 4096,
            3 * G,
            CopyKind::DeviceToHost,
            0,
        )
    }
    .unwrap();
    assert!(back.iter().all(|&b| b == 5));
    // Beyond the mapped part of the reservation.
    // SAFETY: the host sides are this test's buffers, alive for the copy.
    assert!(unsafe {
        core.memcpy(
            va + 3 * G,
            src.as_ptr() as usize,
            2 * G,
            CopyKind::Default,
            0,
        )
    }
    .is_err());
    core.mem_release(h).unwrap();
    assert!(core.mem_release(h).is_err(), "released twice");
    assert_eq!(
        core.mem_info(0).unwrap().0,
        (64 << 20) - 4 * GRANULARITY,
        "still mapped"
    );
    assert!(core.mem_address_free(va, 8 * G).is_err(), "mappings left");
    assert!(core.mem_unmap(va, G).is_err(), "cuts a mapping");
    core.mem_unmap(va, 4 * G).unwrap();
    assert_eq!(core.mem_info(0).unwrap().0, 64 << 20);
    assert!(
        // SAFETY: the host sides are this test's buffers, alive for the copy.
        unsafe { core.memcpy(back.as_mut_ptr() as usize, va, 8, CopyKind::Default, 0) }
            .unwrap_err()
            .to_string()
            .contains("not mapped")
    );
    core.mem_address_free(va, 8 * G).unwrap();
    assert!(
        // SAFETY: the host sides are this test's buffers, alive for the copy.
        unsafe { core.memcpy(back.as_mut_ptr() as usize, va, 8, CopyKind::Default, 0) }
            .unwrap_err()
            .to_string()
            .contains("cuMemAddressFree")
    );
}

#[test]
fn allocations_and_malloc_share_the_device_memory() {
    let core = core_with(16 << 20);
    let a = core.malloc(0, 10 << 20).unwrap();
    assert_eq!(
        core.mem_create(0, 4 * GRANULARITY, 0).unwrap_err().status(),
        crate::Status::OutOfMemory
    );
    let h = core.mem_create(0, 2 * GRANULARITY, 0).unwrap();
    assert!(core.malloc(0, 4 << 20).is_err());
    core.mem_release(h).unwrap();
    core.malloc(0, 4 << 20).unwrap();
    core.free(a).unwrap();
    assert!(core.mem_create(0, GRANULARITY + 1, 0).is_err());
    assert!(
        core.mem_create(0, GRANULARITY, 8).is_err(),
        "fabric handles"
    );
}

#[test]
fn read_only_mappings_refuse_writes_and_retain_finds_the_handle() {
    let core = core_with(64 << 20);
    let h = core
        .mem_create(1, GRANULARITY, HANDLE_TYPE_POSIX_FD)
        .unwrap();
    let va = core.mem_address_reserve(G, 1 << 30, 0).unwrap();
    assert_eq!(va % (1 << 30), 0);
    core.mem_map(va, G, 0, h).unwrap();
    core.mem_set_access(va, G, 0, ACCESS_READ).unwrap();
    let mut buf = [0u8; 16];
    // SAFETY: the host sides are this test's buffers, alive for the copy.
    unsafe { core.memcpy(buf.as_mut_ptr() as usize, va, 16, CopyKind::Default, 0) }.unwrap();
    assert!(core.memset(va, 1, 16, 0).is_err());
    assert_eq!(core.mem_retain(va + 100).unwrap(), h);
    let info = core.mem_handle_info(h).unwrap();
    assert_eq!((info.physical, info.size), (1, GRANULARITY));
    core.mem_release(h).unwrap();
    core.mem_release(h).unwrap();
    assert!(core.mem_handle_info(h).is_err());
    core.mem_unmap(va, G).unwrap();
    core.mem_address_free(va, G).unwrap();
}

#[test]
fn export_import_shares_exactly_the_allocation() {
    let core = core_with(64 << 20);
    let h = core
        .mem_create(0, GRANULARITY, HANDLE_TYPE_POSIX_FD)
        .unwrap();
    let fd = core.mem_export(h).unwrap();
    let h2 = core.mem_import(fd.as_raw_fd()).unwrap();
    let va = core.mem_address_reserve(2 * G, 0, 0).unwrap();
    core.mem_map(va, G, 0, h).unwrap();
    core.mem_map(va + G, G, 0, h2).unwrap();
    core.mem_set_access(va, 2 * G, 0, ACCESS_READWRITE).unwrap();
    core.memset(va + 8, 0x3c, 4, 0).unwrap();
    let mut b = [0u8; 4];
    // SAFETY: the host sides are this test's buffers, alive for the copy.
    unsafe { core.memcpy(b.as_mut_ptr() as usize, va + G + 8, 4, CopyKind::Default, 0) }.unwrap();
    assert_eq!(b, [0x3c; 4], "both mappings show the same memory");
    assert_eq!(
        core.mem_info(0).unwrap().0,
        (64 << 20) - GRANULARITY,
        "counted once"
    );
    // Unexportable allocations and foreign descriptors are refused.
    let plain = core.mem_create(0, GRANULARITY, 0).unwrap();
    assert!(core.mem_export(plain).is_err());
    let file = std::fs::File::open("/proc/self/maps").unwrap();
    assert!(core.mem_import(file.as_raw_fd()).is_err());
    assert!(core.mem_import(-1).is_err());
    core.mem_unmap(va, 2 * G).unwrap();
    for x in [h, h2, plain] {
        core.mem_release(x).unwrap();
    }
    assert_eq!(core.mem_info(0).unwrap().0, 64 << 20);
}

#[test]
fn fill_writes_words() {
    let core = core_with(64 << 20);
    let d = core.malloc(0, 64).unwrap();
    core.memset_pattern(d, 0x1122_3344, 4, 3, 0).unwrap();
    core.memset_pattern(d + 12, 0xabcd, 2, 1, 0).unwrap();
    let mut b = [0u8; 16];
    // SAFETY: the host sides are this test's buffers, alive for the copy.
    unsafe { core.memcpy(b.as_mut_ptr() as usize, d, 16, CopyKind::Default, 0) }.unwrap();
    assert_eq!(&b[..4], &0x1122_3344u32.to_ne_bytes());
    assert_eq!(&b[8..12], &0x1122_3344u32.to_ne_bytes());
    assert_eq!(&b[12..14], &0xabcdu16.to_ne_bytes());
    assert!(
        core.memset_pattern(d + 1, 1, 4, 1, 0).is_err(),
        "misaligned"
    );
    assert!(core.memset_pattern(d, 1, 3, 1, 0).is_err(), "element size");
    assert!(
        core.memset_pattern(d, 1, 4, 1025, 0).is_err(),
        "past the end"
    );
}
