//! Fake CUDA core speed: what device memory costs on first touch and after reuse, steady-state
//! copy throughput against plain `memcpy` in the same run, and legacy-stream work with many
//! streams and while publishing the telemetry record. The core is used in-process (`Core::new`
//! over the bundled DGX A100), as `libncclsim_cuda.so` does; `cudaMemcpy` is `Core::memcpy` on
//! the legacy stream.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fake_cuda_core::{device, Config, CopyKind, Core};
use std::hint::black_box;
use std::time::{Duration, Instant};

const N: usize = 256 << 20;

fn core() -> Core {
    Core::new(device::dgx_a100(), (0..8).collect(), Config::default())
}

/// Allocate, touch (memset), free, allocate, touch 256 MiB: freed pages kept (what the core
/// does) and given back at each free (what it did before: `MADV_REMOVE` on free).
fn reuse(c: &mut Criterion) {
    let mut g = c.benchmark_group("fake_cuda/alloc-touch-free-alloc-touch 256 MiB");
    g.sample_size(10)
        .throughput(Throughput::Bytes(2 * N as u64));
    for (name, trim_on_free) in [
        ("pages kept on free", false),
        ("pages given back on free", true),
    ] {
        let core = core();
        g.bench_function(name, |b| {
            b.iter(|| {
                for _ in 0..2 {
                    let p = core.malloc(0, N).unwrap();
                    core.memset(p, 1, N, 0).unwrap();
                    core.free(p).unwrap();
                    if trim_on_free {
                        core.trim(0).unwrap();
                    }
                }
            })
        });
    }
    g.finish();

    // The touch alone: pages never touched (trimmed before) against pages kept from the last
    // use of the same buffer.
    let mut g = c.benchmark_group("fake_cuda/touch 256 MiB");
    g.sample_size(10).throughput(Throughput::Bytes(N as u64));
    for (name, cold) in [("first touch", true), ("reused buffer", false)] {
        let core = core();
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    if cold {
                        core.trim(0).unwrap();
                    }
                    let p = core.malloc(0, N).unwrap();
                    let t = Instant::now();
                    core.memset(p, 2, N, 0).unwrap();
                    spent += t.elapsed();
                    core.free(p).unwrap();
                }
                spent
            })
        });
    }
    g.finish();
}

/// Warm 256 MiB copies: plain `memcpy` between host buffers, and `cudaMemcpy` host to device,
/// device to host and device to device.
fn copies(c: &mut Criterion) {
    let core = core();
    let src = vec![3u8; N];
    let mut dst = vec![0u8; N];
    let d0 = core.malloc(0, N).unwrap();
    let d1 = core.malloc(0, N).unwrap();
    core.memset(d0, 1, N, 0).unwrap();
    core.memset(d1, 1, N, 0).unwrap();
    let (h_src, h_dst) = (src.as_ptr() as usize, dst.as_mut_ptr() as usize);
    let mut g = c.benchmark_group("fake_cuda/copy 256 MiB warm");
    g.sample_size(20).throughput(Throughput::Bytes(N as u64));
    g.bench_function("memcpy host to host", |b| {
        b.iter(|| {
            // SAFETY: two distinct live buffers of N bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(black_box(h_src) as *const u8, h_dst as *mut u8, N)
            }
        })
    });
    for (name, dst, src, kind) in [
        (
            "cudaMemcpy host to device",
            d0,
            h_src,
            CopyKind::HostToDevice,
        ),
        (
            "cudaMemcpy device to host",
            h_dst,
            d0,
            CopyKind::DeviceToHost,
        ),
        (
            "cudaMemcpy device to device",
            d1,
            d0,
            CopyKind::DeviceToDevice,
        ),
    ] {
        g.bench_function(name, |b| {
            // SAFETY: the host sides are `src` and `dst`, N bytes each, alive until `drop(dst)`.
            b.iter(|| unsafe { core.memcpy(black_box(dst), src, N, kind, 0) }.unwrap())
        });
    }
    g.finish();
    drop(dst);
}

/// A legacy-stream enqueue (implicit synchronisation with the device's blocking streams) with
/// 1 and 10,000 other streams on the device.
fn legacy_stream(c: &mut Criterion) {
    let mut g = c.benchmark_group("fake_cuda/legacy-stream enqueue");
    for streams in [1usize, 10_000] {
        let core = core();
        for _ in 0..streams {
            core.stream_create(0, 0).unwrap();
        }
        // Work on the legacy stream of device 0 (null stream), as cudaMemcpy / kernels do.
        g.bench_function(format!("{streams} streams"), |b| {
            b.iter(|| {
                // SAFETY: no host function to call.
                unsafe { core.enqueue_host(black_box(0), 1, None, 0) }.unwrap()
            })
        });
    }
    // The same while publishing the process's telemetry record (as under `ncclsim run`).
    let dir = std::env::temp_dir().join(format!("ncclsim-bench-job-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let core = core();
    core.publish_to(&dir, 0);
    g.bench_function("1 streams, telemetry published", |b| {
        b.iter(|| {
            // SAFETY: no host function to call.
            unsafe { core.enqueue_host(black_box(0), 1, None, 0) }.unwrap()
        })
    });
    g.finish();
    std::fs::remove_dir_all(&dir).unwrap();
}

criterion_group!(benches, reuse, copies, legacy_stream);
criterion_main!(benches);
