//! Unit tests of the core's calls.

use super::*;

fn core_with(visible: &[usize], cap: u64) -> Core {
    let mut devs = device::dgx_a100();
    for d in &mut devs {
        d.memory_bytes = cap;
    }
    Core::new(devs, visible.to_vec(), Config::default())
}

#[test]
fn malloc_copy_memset_round_trip() {
    let core = core_with(&[0, 1], 1 << 30);
    let d = core.malloc(0, 1000).unwrap();
    let src: Vec<u8> = (0..1000).map(|i| i as u8).collect();
    let mut back = vec![0u8; 1000];
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    unsafe { core.memcpy(d, src.as_ptr() as usize, 1000, CopyKind::HostToDevice, 0) }.unwrap();
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    unsafe { core.memcpy(back.as_mut_ptr() as usize, d, 1000, CopyKind::Default, 0) }.unwrap();
    assert_eq!(src, back);
    core.memset(d + 10, 0xee, 20, 0).unwrap();
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    unsafe {
        core.memcpy(
            back.as_mut_ptr() as usize,
            d,
            1000,
            CopyKind::DeviceToHost,
            0,
        )
    }
    .unwrap();
    assert!(back[10..30].iter().all(|&b| b == 0xee));
    assert_eq!(back[30], 30);
    let info = core.pointer_info(d + 5);
    assert_eq!(
        (info.kind, info.device, info.base),
        (MemoryKind::Device, 0, d)
    );
    core.free(d).unwrap();
    assert!(core.free(d).is_err());
    assert_eq!(core.pointer_info(d).kind, MemoryKind::Unregistered);
}

#[test]
fn copies_past_an_allocation_are_rejected() {
    let core = core_with(&[0], 1 << 30);
    let d = core.malloc(0, 4096).unwrap();
    let buf = vec![0u8; 8192];
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    let e = unsafe { core.memcpy(d, buf.as_ptr() as usize, 8192, CopyKind::HostToDevice, 0) }
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidPointer);
    let e = core.memset(buf.as_ptr() as usize, 0, 10, 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidPointer);
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    assert!(unsafe { core.memcpy(0, buf.as_ptr() as usize, 1, CopyKind::HostToHost, 0) }.is_err());
}

#[test]
fn accounting_and_out_of_memory() {
    let core = core_with(&[0, 1], 1 << 20);
    assert_eq!(core.mem_info(0).unwrap(), (1 << 20, 1 << 20));
    let a = core.malloc(0, 600 << 10).unwrap();
    assert_eq!(core.mem_info(0).unwrap().0, (1 << 20) - (600 << 10));
    let e = core.malloc(0, 600 << 10).unwrap_err();
    assert!(matches!(e, CoreError::OutOfMemory { device: 0, .. }), "{e}");
    // Device 1 has its own capacity.
    core.malloc(1, 600 << 10).unwrap();
    core.free(a).unwrap();
    core.malloc(0, 600 << 10).unwrap();
    assert_eq!(core.memory_stats()[0].peak, 600 << 10);
    assert!(core.malloc(0, usize::MAX).is_err());
    assert!(matches!(
        core.malloc(2, 1),
        Err(CoreError::InvalidDevice { ordinal: 2, .. })
    ));
}

#[test]
fn visible_devices_renumber_ordinals() {
    let core = core_with(&[5, 2], 1 << 30);
    assert_eq!(core.device_count(), 2);
    assert_eq!(core.device(0).unwrap().pci.bus, 0x90);
    assert_eq!(core.device(1).unwrap().pci.bus, 0x47);
    assert!(core.set_device(2).is_err());
    core.set_device(1).unwrap();
    assert_eq!(core.current_device(), 1);
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(core.current_device(), 0, "current device is per thread"));
    });
    let p = core.malloc(1, 10).unwrap();
    assert_eq!(core.pointer_info(p).device, 1);
}

#[test]
fn host_memory() {
    let core = core_with(&[0], 1 << 30);
    let h = core.host_alloc(100).unwrap();
    assert_eq!(core.pointer_info(h + 99).kind, MemoryKind::Host);
    core.host_free(h).unwrap();
    assert!(core.host_free(h).is_err());
    let v = [0u8; 64];
    core.host_register(v.as_ptr() as usize, 64).unwrap();
    assert_eq!(
        core.pointer_info(v.as_ptr() as usize).kind,
        MemoryKind::Host
    );
    assert!(core.host_free(v.as_ptr() as usize).is_err());
    core.host_unregister(v.as_ptr() as usize).unwrap();
    assert_eq!(
        core.pointer_info(v.as_ptr() as usize).kind,
        MemoryKind::Unregistered
    );
}

#[test]
fn ipc_in_the_same_process_returns_the_original_pointer() {
    let core = core_with(&[0], 1 << 30);
    let d = core.malloc(0, 5000).unwrap();
    let h = core.ipc_get_mem_handle(d + 100).unwrap();
    assert_eq!(core.ipc_open_mem_handle(&h).unwrap(), d);
    core.ipc_close_mem_handle(d).unwrap();
    core.free(d).unwrap();
    assert_eq!(
        core.ipc_open_mem_handle(&h).unwrap_err().status(),
        Status::InvalidIpcHandle
    );
    let mut forged = h;
    forged[20] ^= 1;
    assert!(core.ipc_open_mem_handle(&forged).is_err());
}

#[test]
fn streams_events_and_elapsed_virtual_time() {
    let core = core_with(&[0], 1 << 30);
    let s = core
        .stream_create(timeline::STREAM_NON_BLOCKING, 0)
        .unwrap();
    let (e0, e1) = (core.event_create(0), core.event_create(0));
    core.event_record(e0, s).unwrap();
    host_work(&core, s, 3_000_000);
    core.event_record(e1, s).unwrap();
    assert_eq!(core.event_elapsed_ms(e0, e1).unwrap(), 3.0);
    core.stream_query(s).unwrap();
    core.stream_synchronize(s).unwrap();
    let d = core.malloc(0, 1 << 20).unwrap();
    let host = vec![1u8; 1 << 20];
    core.event_record(e0, s).unwrap();
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    unsafe {
        core.memcpy(
            d,
            host.as_ptr() as usize,
            1 << 20,
            CopyKind::HostToDevice,
            s,
        )
    }
    .unwrap();
    core.event_record(e1, s).unwrap();
    let ms = core.event_elapsed_ms(e0, e1).unwrap();
    let want = timing::copy_ns(core.device(0).unwrap(), CopyPath::HostLink, 1 << 20);
    assert!((ms - want as f32 / 1e6).abs() < 1e-6, "{ms} ms");
    core.stream_destroy(s).unwrap();
    assert!(core.event_record(e0, s).is_err());
}

/// A core with one DGX A100 GPU and `config`.
fn one_gpu(config: Config) -> Core {
    let mut devs = device::dgx_a100();
    devs.truncate(1);
    Core::new(devs, vec![0], config)
}

#[test]
fn pacing_holds_queries_back() {
    let core = one_gpu(Config {
        pace: true,
        ..Config::default()
    });
    let s = core.stream_create(0, 0).unwrap();
    host_work(&core, s, 50_000_000);
    assert_eq!(core.stream_query(s).unwrap_err(), CoreError::NotReady);
    let t = Instant::now();
    core.stream_synchronize(s).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(30));
    core.stream_query(s).unwrap();
}

/// Polls `query` until it answers done, as a spin loop does; gives the polls it took.
fn spin(query: impl Fn() -> Result<()>) -> usize {
    let mut polls = 1;
    while query() == Err(CoreError::NotReady) {
        polls += 1;
        assert!(polls < 100, "a spin loop did not reach the completion");
    }
    polls
}

#[test]
fn virtual_clock_queries_move_the_host_clock_to_completion() {
    let core = one_gpu(Config {
        virtual_clock: true,
        ..Config::default()
    });
    let s = core.stream_create(0, 0).unwrap();
    let e = core.event_create(0);
    host_work(&core, s, 50_000_000);
    core.event_record(e, s).unwrap();
    host_work(&core, s, 20_000_000);
    // Nothing waited yet: the host is at 0, the work ends at 50 ms and 70 ms.
    assert_eq!(core.host_clock().as_nanos(), 0);
    let t = Instant::now();
    // One query costs the host a microsecond; spinning on it reaches the completion exactly,
    // in a few dozen polls.
    assert_eq!(core.event_query(e).unwrap_err(), CoreError::NotReady);
    assert_eq!(core.host_clock().as_nanos(), crate::POLL_NS);
    let polls = spin(|| core.event_query(e));
    assert!(polls < 40, "{polls}");
    assert_eq!(core.host_clock().as_nanos(), 50_000_000);
    spin(|| core.stream_query(s));
    assert_eq!(core.host_clock().as_nanos(), 70_000_000);
    core.stream_query(s).unwrap();
    // No pacing: answering took no wall time to speak of.
    assert!(t.elapsed() < Duration::from_millis(50));
    // Another thread's clock did not move, and its work is not held back by this thread's
    // polling: a stream of its own starts at 0.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            assert_eq!(core.host_clock().as_nanos(), 0);
            let other = core
                .stream_create(timeline::STREAM_NON_BLOCKING, 0)
                .unwrap();
            let (start, _) = host_work(&core, other, 1_000);
            assert_eq!(start, 0);
        });
    });
    // This thread's later work starts no earlier than its clock, also on an idle stream;
    // synchronising moves the host clock on.
    let idle = core
        .stream_create(timeline::STREAM_NON_BLOCKING, 0)
        .unwrap();
    let (start, _) = host_work(&core, idle, 1_000);
    assert_eq!(start, 70_000_000);
    host_work(&core, s, 1_000);
    core.stream_synchronize(s).unwrap();
    assert_eq!(core.host_clock().as_nanos(), 70_001_000);
}

/// A thread that queries unfinished work and goes on (torch's caching allocator looking at the
/// events of its pending frees before each allocation) is held back by the queries' cost only,
/// not to the work's completion: its next work overlaps the work it asked about.
#[test]
fn a_query_between_launches_costs_the_host_a_poll_not_the_wait() {
    let core = one_gpu(Config {
        virtual_clock: true,
        ..Config::default()
    });
    let comm = core
        .stream_create(timeline::STREAM_NON_BLOCKING, 0)
        .unwrap();
    let compute = core
        .stream_create(timeline::STREAM_NON_BLOCKING, 0)
        .unwrap();
    let e = core.event_create(0);
    host_work(&core, comm, 10_000_000);
    core.event_record(e, comm).unwrap();
    let mut last = 0;
    for i in 0..5 {
        assert_eq!(core.event_query(e).unwrap_err(), CoreError::NotReady);
        core.host_issued(SimDuration::from_nanos(10_000));
        let (start, _) = host_work(&core, compute, 100_000);
        assert!(start < 1_000_000, "launch {i} held back to {start}");
        last = start;
    }
    // Five polls of 1 us and five launches of 10 us: the host is 55 us in.
    assert!(last >= 5 * crate::POLL_NS, "{last}");
}

#[test]
fn capture_records_and_launch_replays() {
    let core = core_with(&[0], 1 << 30);
    let s = core
        .stream_create(timeline::STREAM_NON_BLOCKING, 0)
        .unwrap();
    let d = core.malloc(0, 64).unwrap();
    let src = [7u8; 64];
    core.register_function(0x42, "step");
    assert!(core.begin_capture(0).is_err(), "legacy stream");
    core.begin_capture(s).unwrap();
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    unsafe { core.memcpy(d, src.as_ptr() as usize, 64, CopyKind::HostToDevice, s) }.unwrap();
    core.launch_kernel(0x42, s).unwrap();
    assert_eq!(
        core.stream_synchronize(s).unwrap_err().status(),
        Status::CaptureViolation
    );
    let g = core.end_capture(s).unwrap();
    let mut back = [0u8; 64];
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    unsafe { core.memcpy(back.as_mut_ptr() as usize, d, 64, CopyKind::DeviceToHost, 0) }.unwrap();
    assert_eq!(back, [0; 64], "captured work does not run");
    assert!(core.kernel_launch_counts().is_empty());
    assert_eq!(core.graph_ops(g).unwrap().len(), 2);
    let e = core.graph_instantiate(g).unwrap();
    core.graph_launch(e, s).unwrap();
    core.graph_launch(e, s).unwrap();
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    unsafe { core.memcpy(back.as_mut_ptr() as usize, d, 64, CopyKind::DeviceToHost, 0) }.unwrap();
    assert_eq!(back, [7; 64]);
    assert_eq!(core.kernel_launch_counts()["step"], 2);
}

#[test]
fn host_work_sees_the_stream_it_runs_on_replays_the_launch_stream() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    static SEEN: AtomicU64 = AtomicU64::new(u64::MAX);
    unsafe extern "C" fn look(_: *mut std::ffi::c_void) {
        SEEN.store(Core::host_stream().unwrap_or(u64::MAX - 1), SeqCst);
    }
    let core = core_with(&[0], 1 << 30);
    let flags = timeline::STREAM_NON_BLOCKING;
    let (a, b) = (
        core.stream_create(flags, 0).unwrap(),
        core.stream_create(flags, 0).unwrap(),
    );
    assert_eq!(Core::host_stream(), None);
    // SAFETY: `look` ignores its argument and may run on any thread.
    unsafe { core.enqueue_host(a, 0, Some(look), 0) }.unwrap();
    assert_eq!(SEEN.load(SeqCst), a);
    core.begin_capture(a).unwrap();
    // SAFETY: `look` ignores its argument and may run on any thread.
    unsafe { core.enqueue_host(a, 0, Some(look), 0) }.unwrap();
    let g = core.end_capture(a).unwrap();
    let e = core.graph_instantiate(g).unwrap();
    core.graph_launch(e, b).unwrap();
    assert_eq!(SEEN.load(SeqCst), b, "a replay runs on the launch stream");
    assert_eq!(Core::host_stream(), None);
}

#[test]
fn owned_host_data_lives_as_long_as_its_graphs() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    static RELEASES: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn run(_: *mut std::ffi::c_void) {
        RUNS.fetch_add(1, SeqCst);
    }
    unsafe extern "C" fn release(_: *mut std::ffi::c_void) {
        RELEASES.fetch_add(1, SeqCst);
    }
    let core = core_with(&[0], 1 << 30);
    let s = core
        .stream_create(timeline::STREAM_NON_BLOCKING, 0)
        .unwrap();
    // SAFETY: the functions only count.
    unsafe { core.enqueue_host_owned(s, 0, Some(run), 1, release) }.unwrap();
    assert_eq!((RUNS.load(SeqCst), RELEASES.load(SeqCst)), (1, 1));
    core.begin_capture(s).unwrap();
    // SAFETY: as above.
    unsafe { core.enqueue_host_owned(s, 0, Some(run), 2, release) }.unwrap();
    let g = core.end_capture(s).unwrap();
    let e = core.graph_instantiate(g).unwrap();
    core.graph_destroy(g).unwrap();
    core.graph_launch(e, s).unwrap();
    core.graph_launch(e, s).unwrap();
    assert_eq!((RUNS.load(SeqCst), RELEASES.load(SeqCst)), (3, 1));
    core.graph_exec_destroy(e).unwrap();
    assert_eq!(RELEASES.load(SeqCst), 2, "released with the last graph");
    // A failed enqueue releases at once.
    // SAFETY: as above.
    assert!(unsafe { core.enqueue_host_owned(0xbad, 0, Some(run), 3, release) }.is_err());
    assert_eq!((RUNS.load(SeqCst), RELEASES.load(SeqCst)), (3, 3));
}

#[test]
fn freed_memory_is_cached_up_to_the_limit() {
    let mut devs = device::dgx_a100();
    devs.truncate(2);
    let config = Config {
        cache_limit: 3 << 20,
        ..Config::default()
    };
    let core = Core::new(devs, vec![0, 1], config);
    let a = core.malloc(0, 2 << 20).unwrap();
    core.free(a).unwrap();
    assert_eq!(core.cached_bytes(0).unwrap(), 2 << 20);
    assert_eq!(core.mem_info(0).unwrap().0, 40 << 30, "logically free");
    let b = core.malloc(0, 2 << 20).unwrap();
    assert_eq!((b, core.cached_bytes(0).unwrap()), (a, 0), "reused");
    let c = core.malloc(1, 2 << 20).unwrap();
    core.free(b).unwrap();
    core.free(c).unwrap(); // 4 MiB cached over both devices > 3 MiB: trimmed
    assert_eq!(
        core.cached_bytes(0).unwrap() + core.cached_bytes(1).unwrap(),
        0
    );
    let d = core.malloc(0, 1 << 20).unwrap();
    core.free(d).unwrap();
    assert_eq!(core.trim(0).unwrap(), 1 << 20);
    assert_eq!(core.cached_bytes(0).unwrap(), 0);
}

#[test]
fn device_reset_frees_everything_on_the_device() {
    let core = core_with(&[0, 1], 1 << 30);
    let a = core.malloc(0, 1 << 20).unwrap();
    let b = core.malloc(1, 1 << 20).unwrap();
    core.device_reset(0).unwrap();
    assert_eq!(core.mem_info(0).unwrap(), (1 << 30, 1 << 30));
    assert!(core.free(a).is_err());
    let mut buf = [0u8; 8];
    // SAFETY: the host sides are this test's buffers, alive for the copy and any replay.
    let e =
        unsafe { core.memcpy(buf.as_mut_ptr() as usize, a, 8, CopyKind::Default, 0) }.unwrap_err();
    assert!(e.to_string().contains("cudaDeviceReset"), "{e}");
    core.free(b).unwrap();
    core.malloc(0, 10).unwrap();
}

#[test]
fn kernels_counted_or_refused() {
    let core = core_with(&[0], 1 << 30);
    core.register_function(0x42, "fill");
    core.launch_kernel(0x42, 0).unwrap();
    core.launch_kernel(0x42, 0).unwrap();
    assert_eq!(core.kernel_launch_counts()["fill"], 2);
    let strict = Core::new(
        device::dgx_a100(),
        vec![0],
        Config {
            strict_kernels: true,
            ..Config::default()
        },
    );
    strict.register_function(0x42, "fill");
    assert_eq!(
        strict.launch_kernel(0x42, 0).unwrap_err(),
        CoreError::KernelRefused("fill".into())
    );
}

/// `duration_ns` of modelled host work on `stream`, placed now: its (start, end), ns.
fn host_work(core: &Core, stream: u64, duration_ns: u64) -> (u64, u64) {
    let op = Op::Host {
        func: None,
        data: 0,
        duration_ns,
        owned: None,
    };
    let (start, end) = core.submit_timed(stream, op).unwrap().expect("placed now");
    (start.as_nanos(), end.as_nanos())
}

/// Compute the caller computes itself, placed now: its (start, end), ns.
fn launch(core: &Core, stream: u64, cost: compute_model::KernelCost, name: &str) -> (u64, u64) {
    // SAFETY: no work to call, nothing to release.
    let (start, d) = unsafe { core.launch_compute(stream, cost, name, None, None) }
        .unwrap()
        .expect("placed now");
    (start.as_nanos(), start.as_nanos() + d.as_nanos())
}

static COMPUTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static RELEASED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

unsafe extern "C" fn count_compute(data: *mut std::ffi::c_void) {
    COMPUTED.fetch_add(data as usize, Ordering::SeqCst);
}

unsafe extern "C" fn count_release(_data: *mut std::ffi::c_void) {
    RELEASED.fetch_add(1, Ordering::SeqCst);
}

/// A 4096^3 BF16 matrix product's cost.
fn bf16_gemm_4096() -> compute_model::KernelCost {
    compute_model::KernelCost {
        flops: 2.0 * 4096.0 * 4096.0 * 4096.0,
        bytes: 3.0 * 4096.0 * 4096.0 * 2.0,
        unit: compute_model::Unit::Tensor(compute_model::Precision::Bf16),
        gemm: Some(compute_model::Gemm {
            batch: 1,
            m: 4096,
            n: 4096,
            k: 4096,
        }),
        attention: None,
    }
}

#[test]
fn compute_with_work_is_captured_and_computes_at_each_replay() {
    let core = core_with(&[0], 1 << 30);
    let s = core
        .stream_create(timeline::STREAM_NON_BLOCKING, 0)
        .unwrap();
    let cost = bf16_gemm_4096();
    let model = compute_model::price(&core.devices[0].spec, &cost);
    let work = ComputeWork {
        func: count_compute,
        data: 1,
        release: Some(count_release),
    };
    // Eager: computed now, for the compute model's time, and released.
    let t0 = core.stream_clock(s).unwrap().as_nanos();
    // SAFETY: the work functions ignore their data and are safe to call from any thread.
    let placed = unsafe { core.launch_compute(s, cost, "cublasGemmEx", None, Some(work)) }.unwrap();
    let (start, d) = placed.expect("placed now");
    assert_eq!((start.as_nanos(), d.as_nanos()), (t0, model));
    assert_eq!(
        (
            COMPUTED.load(Ordering::SeqCst),
            RELEASED.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
    // Captured: nothing runs until a replay; each replay computes it and takes its time.
    core.begin_capture(s).unwrap();
    // SAFETY: as above.
    let captured =
        unsafe { core.launch_compute(s, cost, "cublasGemmEx", None, Some(work)) }.unwrap();
    assert_eq!(captured, None);
    // Compute nobody would run at replay is refused while capturing.
    // SAFETY: no work to call.
    let refused = unsafe { core.launch_compute(s, cost, "aten::mm", None, None) };
    assert!(
        matches!(refused, Err(CoreError::CaptureViolation(_))),
        "{refused:?}"
    );
    let g = core.end_capture(s).unwrap();
    assert_eq!(COMPUTED.load(Ordering::SeqCst), 1);
    let exec = core.graph_instantiate(g).unwrap();
    let before = core.stream_clock(s).unwrap().as_nanos();
    core.graph_launch(exec, s).unwrap();
    core.graph_launch(exec, s).unwrap();
    assert_eq!(COMPUTED.load(Ordering::SeqCst), 3);
    assert_eq!(core.stream_clock(s).unwrap().as_nanos(), before + 2 * model);
    core.graph_exec_destroy(exec).unwrap();
    core.graph_destroy(g).unwrap();
    assert_eq!(
        RELEASED.load(Ordering::SeqCst),
        2,
        "released once the graph is gone"
    );
    assert_eq!(core.kernel_launch_counts()["cublasGemmEx"], 3);
}

#[test]
fn compute_is_traced_eagerly_and_at_each_replay() {
    let core = core_with(&[0], 1 << 30);
    let dir = std::env::temp_dir().join(format!("ncclsim-core-trace-{}", std::process::id()));
    core.trace_compute_to(&dir).unwrap();
    let s = core
        .stream_create(timeline::STREAM_NON_BLOCKING, 0)
        .unwrap();
    let cost = compute_model::KernelCost {
        flops: 1e9,
        bytes: 1e6,
        unit: compute_model::Unit::Tensor(compute_model::Precision::F16),
        gemm: None,
        attention: None,
    };
    let (a, b) = launch(&core, s, cost, "aten::mm");
    // The program's optimizer ended a training step: the work after it carries the mark.
    assert_eq!(core.step_mark(crate::abi::STEP_BY_OPTIMIZER).unwrap(), 1);
    assert_eq!(core.step_mark(crate::abi::STEP_QUERY).unwrap(), 1);
    assert!(core.step_mark(7).is_err(), "an unknown marker is refused");
    unsafe extern "C" fn nothing(_: *mut std::ffi::c_void) {}
    let work = ComputeWork {
        func: nothing,
        data: 0,
        release: None,
    };
    core.begin_capture(s).unwrap();
    // SAFETY: the work function does nothing.
    unsafe { core.launch_compute(s, cost, "cublasHgemm", Some(r#"{"m":8}"#), Some(work)) }.unwrap();
    let g = core.end_capture(s).unwrap();
    let exec = core.graph_instantiate(g).unwrap();
    core.graph_launch(exec, s).unwrap();
    core.graph_launch(exec, s).unwrap();
    core.flush_compute_trace().unwrap();
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let events: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let names: Vec<&str> = events.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["aten::mm", "step_end", "cublasHgemm", "cublasHgemm"]
    );
    assert_eq!(events[0]["ts"].as_f64(), Some(a as f64 / 1e3));
    assert_eq!(events[0]["dur"].as_f64(), Some((b - a) as f64 / 1e3));
    assert_eq!(events[0]["args"]["precision"], "f16");
    let marks: Vec<u64> = events
        .iter()
        .map(|e| e["args"]["mark"].as_u64().unwrap())
        .collect();
    assert_eq!(marks, [0, 1, 1, 1]);
    assert_eq!(
        (events[1]["ph"].as_str(), events[1]["args"]["by"].as_str()),
        (Some("i"), Some("optimizer"))
    );
    assert_eq!(
        events[3]["args"]["m"], 8,
        "the caller's detail, also at a replay"
    );
    let end = |e: &serde_json::Value| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
    assert!(events[3]["ts"].as_f64().unwrap() >= end(&events[2]));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kernel_time_table_prices_named_launches_raw_kernels_and_graph_replays() {
    let core = core_with(&[0, 1], 1 << 30);
    let table = kernel_times::parse(
        "kt.csv",
        "Name,Duration (ns)\naten::mm,4000\nstep(float *),900\naten::mm,6000\n",
    )
    .unwrap();
    core.set_kernel_times(Some(kernel_times::KernelTimes::new(
        table,
        kernel_times::MatchBy::Name,
    )));
    let s = core
        .stream_create(timeline::STREAM_NON_BLOCKING, 0)
        .unwrap();
    let cost = compute_model::KernelCost {
        flops: 1e9,
        bytes: 1e6,
        unit: compute_model::Unit::Vector(compute_model::Precision::F32),
        gemm: None,
        attention: None,
    };
    let t0 = core.stream_clock(s).unwrap().as_nanos();
    let (a, b) = launch(&core, s, cost, "aten::mm");
    assert_eq!((a, b), (t0, t0 + 4000));
    let (_, c) = launch(&core, s, cost, "aten::mm");
    assert_eq!(c, b + 6000);
    let (_, d) = launch(&core, s, cost, "aten::mm");
    assert_eq!(
        d,
        c + 4000,
        "the third launch takes the first occurrence again"
    );
    // Not in the table: the compute model's time, what the core prices without a table.
    let (e, f) = launch(&core, s, cost, "aten::relu");
    assert_eq!(f - e, compute_model::price(&core.devices[0].spec, &cost));
    assert!(f - e > 0);
    // A raw kernel by its registered (mangled) name, eagerly and at each graph replay.
    core.register_function(0x42, "_Z4stepPf");
    core.register_function(0x43, "_Z5otherv");
    core.launch_kernel(0x42, s).unwrap();
    assert_eq!(core.stream_clock(s).unwrap().as_nanos(), f + 900);
    core.launch_kernel(0x43, s).unwrap();
    assert_eq!(
        core.stream_clock(s).unwrap().as_nanos(),
        f + 900,
        "unlisted kernels take no time"
    );
    core.begin_capture(s).unwrap();
    core.launch_kernel(0x42, s).unwrap();
    let g = core.end_capture(s).unwrap();
    let exec = core.graph_instantiate(g).unwrap();
    core.graph_launch(exec, s).unwrap();
    core.graph_launch(exec, s).unwrap();
    assert_eq!(core.stream_clock(s).unwrap().as_nanos(), f + 3 * 900);
    // Another device counts its own launches.
    core.set_device(1).unwrap();
    let s1 = core.stream_create(0, 0).unwrap();
    let (a1, b1) = launch(&core, s1, cost, "aten::mm");
    assert_eq!(b1 - a1, 4000);
}

/// Resident bytes of `[addr, addr + len)` (mincore): the pages the host backs.
fn resident_bytes(addr: usize, len: usize) -> usize {
    let page = 4096;
    let mut v = vec![0u8; len.div_ceil(page)];
    // SAFETY: a mapped range of the core's and a vector of one byte per page.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, v.as_mut_ptr()) };
    assert_eq!(r, 0);
    v.iter().filter(|&&b| b & 1 == 1).count() * page
}

/// Bytes the kernel has allocated to device 0's arena memfd (its blocks; fallocated pages
/// count before they are touched), less the header's first page (the only one written when
/// nothing is exported).
fn arena_allocated(core: &Core) -> u64 {
    let fd = core.lock().arenas[0].as_ref().map(Arena::raw_fd).unwrap();
    // SAFETY: an fstat of a live descriptor into a zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
    (st.st_blocks as u64 * 512).saturating_sub(4096)
}

fn core_with_config(cap: u64, config: Config) -> Core {
    let mut devs = device::dgx_a100();
    for d in &mut devs {
        d.memory_bytes = cap;
    }
    Core::new(devs, vec![0], config)
}

#[test]
fn writes_the_host_cannot_back_are_refused_not_touched() {
    // Copies and memsets commit the pages they write first; allocations alone commit nothing.
    let core = core_with_config(
        1 << 30,
        Config {
            host_memory: Some(8 << 20),
            ..Config::default()
        },
    );
    let big = core.malloc(0, 64 << 20).unwrap();
    assert_eq!(resident_bytes(big, 64 << 20), 0);
    core.memset(big, 1, 6 << 20, 0).unwrap();
    assert_eq!(
        resident_bytes(big, 64 << 20),
        6 << 20,
        "committed and written"
    );
    // Rewriting committed pages needs nothing more.
    core.memset(big, 2, 6 << 20, 0).unwrap();
    let e = core.memset(big + (6 << 20), 3, 4 << 20, 0).unwrap_err();
    assert!(matches!(e, CoreError::HostMemory { .. }), "{e}");
    assert_eq!(e.cuda_code(), 2, "cudaErrorMemoryAllocation");
    assert!(e.to_string().contains("NCCLSIM_HOST_MEMORY"), "{e}");
    assert_eq!(
        resident_bytes(big, 64 << 20),
        6 << 20,
        "nothing past the limit touched"
    );
    assert_eq!(arena_allocated(&core), 6 << 20);
    let src = vec![7u8; 4 << 20];
    // SAFETY: the host side is this test's buffer, alive for the copy.
    let e = unsafe {
        core.memcpy(
            big + (32 << 20),
            src.as_ptr() as usize,
            src.len(),
            CopyKind::HostToDevice,
            0,
        )
    }
    .unwrap_err();
    assert!(matches!(e, CoreError::HostMemory { .. }), "{e}");
    // Freed and trimmed pages no longer count.
    core.free(big).unwrap();
    core.trim(0).unwrap();
    let d = core.malloc(0, 8 << 20).unwrap();
    core.memset(d, 4, 7 << 20, 0).unwrap();
}

#[test]
fn direct_writers_commit_first() {
    // The compute layer and collectives write device memory themselves: they commit it first.
    let core = core_with_config(
        1 << 30,
        Config {
            host_memory: Some(16 << 20),
            ..Config::default()
        },
    );
    let a = core.malloc(0, 10 << 20).unwrap();
    let b = core.malloc(0, 10 << 20).unwrap();
    assert_eq!(
        arena_allocated(&core),
        0,
        "allocations alone commit nothing"
    );
    core.commit(a, 10 << 20).unwrap();
    assert_eq!(arena_allocated(&core), 10 << 20);
    core.commit(a + 4096, 4096).unwrap();
    let e = core.commit(b, 10 << 20).unwrap_err();
    assert!(matches!(e, CoreError::HostMemory { .. }), "{e}");
    assert_eq!(arena_allocated(&core), 10 << 20);
    core.commit(b, 4 << 20).unwrap();
    assert_eq!(arena_allocated(&core), 14 << 20);
}

#[test]
fn mapped_physical_allocations_commit_whole() {
    let core = core_with_config(
        1 << 30,
        Config {
            host_memory: Some(12 << 20),
            ..Config::default()
        },
    );
    let g = vmm::GRANULARITY as usize;
    let h1 = core.mem_create(0, 4 * g as u64, 0).unwrap();
    let h2 = core.mem_create(0, 4 * g as u64, 0).unwrap();
    let va = core.mem_address_reserve(8 * g, 0, 0).unwrap();
    core.mem_map(va, 4 * g, 0, h1).unwrap();
    core.mem_map(va + 4 * g, 4 * g, 0, h2).unwrap();
    core.mem_set_access(va, 8 * g, 0, 3).unwrap();
    // One byte of the first allocation commits it (8 MiB); the second does not fit beside it.
    core.commit(va + 5, 1).unwrap();
    let e = core.commit(va + 4 * g, 1).unwrap_err();
    assert!(matches!(e, CoreError::HostMemory { .. }), "{e}");
    core.commit(va + g, 3 * g).unwrap();
    // A memset commits what it writes, and is refused likewise.
    let e = core.memset(va + 3 * g, 1, 2 * g, 0).unwrap_err();
    assert!(matches!(e, CoreError::HostMemory { .. }), "{e}");
    core.memset(va, 1, 4 * g, 0).unwrap();
}

#[test]
fn a_meeting_waits_for_its_start_then_lasts_its_duration() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    static SEEN: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
    static RELEASED: AtomicU64 = AtomicU64::new(0);
    // Starts `data` ns after it is ready; `data` = u64::MAX fails.
    unsafe extern "C" fn meet(data: *mut std::ffi::c_void, stream: u64, ready: u64) -> u64 {
        SEEN[0].store(stream, SeqCst);
        SEEN[1].store(ready, SeqCst);
        match data as u64 {
            u64::MAX => abi::MEETING_FAILED,
            late => ready + late,
        }
    }
    unsafe extern "C" fn release(_: *mut std::ffi::c_void) {
        RELEASED.fetch_add(1, SeqCst);
    }
    let core = core_with(&[0], 1 << 30);
    let flags = timeline::STREAM_NON_BLOCKING;
    let (a, b) = (
        core.stream_create(flags, 0).unwrap(),
        core.stream_create(flags, 0).unwrap(),
    );
    // SAFETY: no work function.
    unsafe { core.enqueue_host(a, 1_000, None, 0) }.unwrap();
    // SAFETY: `meet` and `release` only record; the data is a number.
    let end = unsafe { core.enqueue_meeting(a, 500, 0, meet, 2_000, release) }.unwrap();
    assert_eq!((SEEN[0].load(SeqCst), SEEN[1].load(SeqCst)), (a, 1_000));
    assert_eq!(
        end,
        Some(SimTime::from_nanos(3_500)),
        "ready 1000, waits 2000, lasts 500"
    );
    assert_eq!(core.stream_clock(a).unwrap(), SimTime::from_nanos(3_500));
    // A failed meeting schedules nothing after it.
    // SAFETY: as above.
    let end = unsafe { core.enqueue_meeting(a, 500, 0, meet, u64::MAX as usize, release) }.unwrap();
    assert_eq!(end, None);
    assert_eq!(core.stream_clock(a).unwrap(), SimTime::from_nanos(3_500));
    // Captured, it runs at each launch, on the launch stream, from that stream's ready time.
    core.begin_capture(a).unwrap();
    // SAFETY: as above.
    let end = unsafe { core.enqueue_meeting(a, 500, 0, meet, 100, release) }.unwrap();
    assert_eq!(end, None, "recorded, not run");
    let g = core.end_capture(a).unwrap();
    let e = core.graph_instantiate(g).unwrap();
    core.graph_launch(e, b).unwrap();
    assert_eq!((SEEN[0].load(SeqCst), SEEN[1].load(SeqCst)), (b, 0));
    assert_eq!(core.stream_clock(b).unwrap(), SimTime::from_nanos(600));
    core.graph_launch(e, b).unwrap();
    assert_eq!(SEEN[1].load(SeqCst), 600);
    assert_eq!(core.stream_clock(b).unwrap(), SimTime::from_nanos(1_200));
    assert_eq!(core.stream_clock(a).unwrap(), SimTime::from_nanos(3_500));
    core.graph_destroy(g).unwrap();
    core.graph_exec_destroy(e).unwrap();
    assert_eq!(
        RELEASED.load(SeqCst),
        3,
        "each meeting's data released once"
    );
}

#[test]
fn under_compute_time_large_device_writes_take_time_and_touch_nothing() {
    let core = core_with_config(
        1 << 30,
        Config {
            host_memory: Some(8 << 20),
            shapes_only: true,
            ..Config::default()
        },
    );
    let a = core.malloc(0, 32 << 20).unwrap();
    let b = core.malloc(0, 32 << 20).unwrap();
    let before = core.stream_clock(0).unwrap();
    // 32 MiB memsets, fills and device-to-device copies: past the 8 MiB budget, yet fine.
    core.memset(a, 1, 32 << 20, 0).unwrap();
    // SAFETY: both sides are device buffers of this core.
    unsafe { core.memcpy(b, a, 32 << 20, CopyKind::Default, 0) }.unwrap();
    assert!(
        core.stream_clock(0).unwrap() > before,
        "they take their time"
    );
    assert_eq!(arena_allocated(&core), 0, "nothing committed");
    assert_eq!(resident_bytes(a, 32 << 20) + resident_bytes(b, 32 << 20), 0);
    // Small ones and copies from the host still write: they may carry the host's values.
    core.memset(a, 5, 4096, 0).unwrap();
    let src = vec![7u8; 1 << 20];
    // SAFETY: the host side is this test's buffer, alive for the copy.
    unsafe { core.memcpy(b, src.as_ptr() as usize, 1 << 20, CopyKind::Default, 0) }.unwrap();
    let mut out = [0u8; 2];
    // SAFETY: as above.
    unsafe { core.memcpy(out.as_mut_ptr() as usize, a, 1, CopyKind::Default, 0) }.unwrap();
    // SAFETY: as above.
    unsafe { core.memcpy(out.as_mut_ptr() as usize + 1, b, 1, CopyKind::Default, 0) }.unwrap();
    assert_eq!(out, [5, 7]);
}

/// A GEMM beside an NCCL kernel holding a quarter of the multiprocessors takes 4/3 of its time;
/// a memory-bound kernel beside it takes its own time; after the communication, both run alone.
#[test]
fn compute_beside_communication_has_the_multiprocessors_it_leaves() {
    unsafe extern "C" fn meet(_: *mut std::ffi::c_void, _: u64, ready: u64) -> u64 {
        ready
    }
    unsafe extern "C" fn release(_: *mut std::ffi::c_void) {}
    let core = core_with(&[0], 1 << 30);
    let flags = timeline::STREAM_NON_BLOCKING;
    let (comm, compute) = (
        core.stream_create(flags, 0).unwrap(),
        core.stream_create(flags, 0).unwrap(),
    );
    let spec = core.devices[0].spec;
    let quarter = spec.sms / 4;
    // SAFETY: `meet` and `release` touch nothing.
    unsafe { core.enqueue_meeting(comm, 1_000_000_000, quarter, meet, 0, release) }.unwrap();
    let gemm = bf16_gemm_4096();
    let stream_copy = compute_model::KernelCost {
        flops: 1e6,
        bytes: 1e9,
        unit: compute_model::Unit::Vector(compute_model::Precision::F32),
        gemm: None,
        attention: None,
    };
    let alone = |c: &compute_model::KernelCost| compute_model::price(&spec, c) as f64;
    let took = |c: compute_model::KernelCost| {
        // SAFETY: no work function.
        let (_, d) = unsafe { core.launch_compute(compute, c, "k", None, None) }
            .unwrap()
            .unwrap();
        d.as_nanos() as f64
    };
    let share = f64::from(spec.sms) / f64::from(spec.sms - quarter);
    let g = took(gemm);
    assert!(
        (g / alone(&gemm) - share).abs() < 1e-6,
        "{g} vs {}",
        alone(&gemm)
    );
    assert_eq!(took(stream_copy), alone(&stream_copy));
    // Past the communication's end, alone again.
    core.stream_synchronize(comm).unwrap();
    // SAFETY: no work function.
    unsafe { core.enqueue_host(compute, 1_000_000_000, None, 0) }.unwrap();
    assert_eq!(took(gemm), alone(&gemm));
}
