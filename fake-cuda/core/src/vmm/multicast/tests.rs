//! Unit tests of multicast objects over a two-device core: broadcast stores, the team, the
//! misuse the driver API refuses, unbinding, sharing and release.

use super::super::{ACCESS_READWRITE, GRANULARITY};
use crate::error::CoreError;
use crate::{device, Config, CopyKind, Core};
use std::os::fd::AsRawFd;

const G: usize = GRANULARITY as usize;

fn core2() -> Core {
    let mut devs = device::dgx_a100();
    devs.truncate(2);
    for d in &mut devs {
        d.memory_bytes = 256 << 20;
    }
    Core::new(devs, vec![0, 1], Config::default())
}

/// Reserves, maps `handle` (`len` bytes from 0) and gives `device` read-write access.
fn map(core: &Core, handle: u64, len: usize, device: i32) -> usize {
    let va = core.mem_address_reserve(len, 0, 0).unwrap();
    core.mem_map(va, len, 0, handle).unwrap();
    core.mem_set_access(va, len, device, ACCESS_READWRITE)
        .unwrap();
    va
}

fn put(core: &Core, dst: usize, bytes: &[u8]) {
    // SAFETY: the host side is the caller's buffer, alive for the copy.
    unsafe {
        core.memcpy(
            dst,
            bytes.as_ptr() as usize,
            bytes.len(),
            CopyKind::HostToDevice,
            0,
        )
    }
    .unwrap();
}

fn get(core: &Core, src: usize, len: usize) -> Vec<u8> {
    let mut back = vec![0u8; len];
    // SAFETY: the host side is this function's buffer, alive for the copy.
    unsafe {
        core.memcpy(
            back.as_mut_ptr() as usize,
            src,
            len,
            CopyKind::DeviceToHost,
            0,
        )
    }
    .unwrap();
    back
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn is_invalid(r: crate::error::Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(e @ CoreError::InvalidValue(_)) => e.to_string(),
        other => panic!("expected an invalid value, got {other:?}"),
    }
}

#[test]
fn a_store_through_the_multicast_mapping_reaches_every_bound_device() {
    let core = core2();
    let mc = core.mcast_create(2, 4 * GRANULARITY, 0).unwrap();
    core.mcast_add_device(mc, 0).unwrap();
    core.mcast_add_device(mc, 1).unwrap();
    let a0 = core.mem_create(0, 4 * GRANULARITY, 0).unwrap();
    let a1 = core.mem_create(1, 4 * GRANULARITY, 0).unwrap();
    // Device 0's allocation is mapped before the bind, device 1's after.
    let v0 = map(&core, a0, 4 * G, 0);
    put(&core, v0, &[0xee; 64]);
    core.mcast_bind_mem(mc, 0, a0, 0, 4 * GRANULARITY).unwrap();
    core.mcast_bind_addr(mc, 0, 0, 0).unwrap_err();
    core.mcast_bind_addr(mc, 0, v0, u64::MAX).unwrap_err();
    let v1 = map(&core, a1, 4 * G, 1);
    core.mcast_bind_addr(mc, 0, v1, 4 * GRANULARITY).unwrap();
    let vm = map(&core, mc, 4 * G, 0);

    let data = pattern(4 * G, 7);
    put(&core, vm, &data);
    assert!(get(&core, v0, 4 * G) == data, "device 0's copy");
    assert!(get(&core, v1, 4 * G) == data, "device 1's copy");
    // A load through the multicast mapping returns the stored value.
    assert!(get(&core, vm + G, 100) == data[G..G + 100]);
    // The multicast mapping is device memory for the rest of the core.
    assert_eq!(core.pointer_info(vm + 5).kind, crate::MemoryKind::Device);
}

#[test]
fn part_of_an_allocation_binds_at_an_offset() {
    let core = core2();
    let mc = core.mcast_create(1, 2 * GRANULARITY, 0).unwrap();
    core.mcast_add_device(mc, 1).unwrap();
    let a = core.mem_create(1, 4 * GRANULARITY, 0).unwrap();
    // Allocation bytes [2G, 3G) bound at object offset G.
    core.mcast_bind_mem(mc, GRANULARITY, a, 2 * GRANULARITY, GRANULARITY)
        .unwrap();
    let va = map(&core, a, 4 * G, 1);
    let vm = map(&core, mc, 2 * G, 1);
    put(&core, va, &vec![1u8; 4 * G]);
    put(&core, vm, &vec![9u8; 2 * G]);
    let back = get(&core, va, 4 * G);
    assert!(back[..2 * G].iter().all(|&b| b == 1));
    assert!(back[2 * G..3 * G].iter().all(|&b| b == 9), "the bound part");
    assert!(back[3 * G..].iter().all(|&b| b == 1));
    // The allocation's own pages under the binding are never committed: its file holds the
    // header page and the three unbound granules only.
    let st = core.lock();
    let p = &st.vmm.handles[&a];
    assert_eq!(
        super::unbound(p),
        vec![(0, 2 * GRANULARITY), (3 * GRANULARITY, GRANULARITY)]
    );
    // SAFETY: `libc::stat` is plain C data; all zeroes is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor the core holds, a valid out-pointer.
    assert_eq!(unsafe { libc::fstat(p.fd.as_raw_fd(), &mut stat) }, 0);
    assert_eq!(stat.st_blocks as u64 * 512, 3 * GRANULARITY + 4096);
}

#[test]
fn misuse_is_refused_with_invalid_values() {
    let core = core2();
    is_invalid(core.mcast_create(0, GRANULARITY, 0));
    is_invalid(core.mcast_create(2, GRANULARITY + 4096, 0));
    is_invalid(core.mcast_create(2, 0, 0));
    assert!(
        core.mcast_create(2, GRANULARITY, 8).is_err(),
        "fabric is the driver's"
    );
    let mc = core.mcast_create(2, 2 * GRANULARITY, 1).unwrap();
    let fd = core.mem_export(mc).unwrap();
    let again = core
        .mem_import(std::os::fd::AsRawFd::as_raw_fd(&fd))
        .unwrap();
    let a0 = core.mem_create(0, 4 * GRANULARITY, 0).unwrap();
    // Memory of a device that did not join.
    is_invalid(core.mcast_bind_mem(mc, 0, a0, 0, GRANULARITY));
    core.mcast_add_device(mc, 0).unwrap();
    is_invalid(core.mcast_add_device(mc, 0));
    core.mcast_add_device(mc, 1).unwrap();
    // Not granular, beyond the object, beyond the allocation, zero, or swapped handles.
    is_invalid(core.mcast_bind_mem(mc, 0, a0, 0, 4096));
    is_invalid(core.mcast_bind_mem(mc, 4096, a0, 0, GRANULARITY));
    is_invalid(core.mcast_bind_mem(mc, 0, a0, 4096, GRANULARITY));
    is_invalid(core.mcast_bind_mem(mc, GRANULARITY, a0, 0, 2 * GRANULARITY));
    is_invalid(core.mcast_bind_mem(mc, 0, a0, 3 * GRANULARITY, 2 * GRANULARITY));
    is_invalid(core.mcast_bind_mem(mc, 0, a0, 0, 0));
    is_invalid(core.mcast_bind_mem(a0, 0, mc, 0, GRANULARITY));
    is_invalid(core.mcast_bind_mem(mc, 0, mc, 0, GRANULARITY));
    core.mcast_bind_mem(mc, 0, a0, 0, GRANULARITY).unwrap();
    // The object's range for this device, and the allocation's range, are taken.
    is_invalid(core.mcast_bind_mem(mc, 0, a0, GRANULARITY, GRANULARITY));
    is_invalid(core.mcast_bind_mem(mc, GRANULARITY, a0, 0, GRANULARITY));
    // The team is complete (and memory bound): no device joins any more, from any handle.
    let e = is_invalid(core.mcast_add_device(again, 1));
    assert!(e.contains("all 2 devices"), "{e}");
    // Unbinding needs whole, granular bindings inside the object.
    is_invalid(core.mcast_unbind(mc, 0, 0, 4096));
    is_invalid(core.mcast_unbind(mc, 0, GRANULARITY, 2 * GRANULARITY));
    assert!(
        core.mcast_unbind(mc, 7, 0, GRANULARITY).is_err(),
        "no device 7"
    );
    core.mcast_unbind(mc, 0, 0, GRANULARITY).unwrap();
    assert!(matches!(
        core.mcast_add_device(a0, 0),
        Err(CoreError::InvalidValue(_))
    ));
}

#[test]
fn unbinding_keeps_what_was_written_and_separates_the_copies() {
    let core = core2();
    let mc = core.mcast_create(2, GRANULARITY, 0).unwrap();
    core.mcast_add_device(mc, 0).unwrap();
    core.mcast_add_device(mc, 1).unwrap();
    let a0 = core.mem_create(0, GRANULARITY, 0).unwrap();
    let a1 = core.mem_create(1, GRANULARITY, 0).unwrap();
    core.mcast_bind_mem(mc, 0, a0, 0, GRANULARITY).unwrap();
    core.mcast_bind_mem(mc, 0, a1, 0, GRANULARITY).unwrap();
    let (v0, v1, vm) = (
        map(&core, a0, G, 0),
        map(&core, a1, G, 1),
        map(&core, mc, G, 0),
    );
    let first = pattern(G, 3);
    put(&core, vm, &first);
    core.mcast_unbind(mc, 0, 0, GRANULARITY).unwrap();
    assert!(get(&core, v0, G) == first, "kept after the unbind");
    let second = pattern(G, 99);
    put(&core, vm, &second);
    assert!(get(&core, v0, G) == first, "no longer bound");
    assert!(get(&core, v1, G) == second, "still bound");
    // Device 0 may bind again.
    core.mcast_bind_mem(mc, 0, a0, 0, GRANULARITY).unwrap();
    assert!(get(&core, v0, G) == second);
}

#[test]
fn an_imported_object_shares_the_team_and_the_memory() {
    let core = core2();
    let mc = core.mcast_create(2, GRANULARITY, 1).unwrap();
    let fd = core.mem_export(mc).unwrap();
    let other = core
        .mem_import(std::os::fd::AsRawFd::as_raw_fd(&fd))
        .unwrap();
    drop(fd);
    assert_ne!(other, mc);
    core.mcast_add_device(mc, 0).unwrap();
    // The second device joins through the other handle, in another thread a little later:
    // mapping the object waits for it.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            core.mcast_add_device(other, 1).unwrap();
        });
        let vm = map(&core, mc, G, 0);
        let a1 = core.mem_create(1, GRANULARITY, 0).unwrap();
        let v1 = map(&core, a1, G, 1);
        core.mcast_bind_mem(other, 0, a1, 0, GRANULARITY).unwrap();
        put(&core, vm, b"multicast");
        assert_eq!(get(&core, v1, 9), b"multicast");
    });
    // An object not created exportable has no descriptor.
    let plain = core.mcast_create(1, GRANULARITY, 0).unwrap();
    assert!(core.mem_export(plain).is_err());
}

#[test]
fn a_released_object_lives_while_memory_is_bound_to_it() {
    let core = core2();
    let mc = core.mcast_create(1, GRANULARITY, 0).unwrap();
    core.mcast_add_device(mc, 0).unwrap();
    let a = core.mem_create(0, GRANULARITY, 0).unwrap();
    core.mcast_bind_mem(mc, 0, a, 0, GRANULARITY).unwrap();
    let va = map(&core, a, G, 0);
    core.mem_release(mc).unwrap();
    assert!(core.mem_release(mc).is_err(), "no reference left");
    put(&core, va, b"still bound");
    assert_eq!(get(&core, va, 11), b"still bound");
    // Device memory counts the allocation only: the object is not device memory.
    assert_eq!(core.mem_info(0).unwrap().0, (256 << 20) - GRANULARITY);
    core.mem_unmap(va, G).unwrap();
    core.mem_release(a).unwrap();
    assert_eq!(core.mem_info(0).unwrap().0, 256 << 20);
    let st = core.lock();
    assert!(
        st.vmm.handles.is_empty(),
        "the object went with the allocation"
    );
}

#[test]
fn binding_and_mapping_wait_for_the_team_a_bounded_time() {
    let mut devs = device::dgx_a100();
    devs.truncate(2);
    let config = Config {
        team_wait: std::time::Duration::from_millis(100),
        ..Config::default()
    };
    let core = Core::new(devs, vec![0, 1], config);
    let mc = core.mcast_create(2, GRANULARITY, 0).unwrap();
    core.mcast_add_device(mc, 0).unwrap();
    let a = core.mem_create(0, GRANULARITY, 0).unwrap();
    // The second device never joins.
    let e = is_invalid(core.mcast_bind_mem(mc, 0, a, 0, GRANULARITY));
    assert!(e.contains("1 of its 2 devices"), "{e}");
    let va = core.mem_address_reserve(G, 0, 0).unwrap();
    let e = is_invalid(core.mem_map(va, G, 0, mc));
    assert!(e.contains("1 of its 2 devices"), "{e}");
    // Nothing was bound or mapped.
    core.mem_map(va, G, 0, a).unwrap();
    core.mem_unmap(va, G).unwrap();
    core.mcast_add_device(mc, 1).unwrap();
    core.mcast_bind_mem(mc, 0, a, 0, GRANULARITY).unwrap();
}
