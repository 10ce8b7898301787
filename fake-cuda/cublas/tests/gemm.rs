//! cuBLAS GEMMs through the library's exported C functions, on device memory of the fake CUDA
//! core, compared with a naive reference: every transpose pair, beta != 0 and beta == 0 over
//! NaN, f64 strided batches, pointer-array batches, f16 and bf16 through `cublasGemmEx`,
//! device pointer mode, argument checks, and stream time.

mod common;

use common::{assert_close, reference, values, Dev};
use cublas12 as cublas;
use half::{bf16, f16};
use std::ffi::{c_int, c_void, CStr};
use std::ptr::null_mut;

const OK: c_int = 0;
const INVALID_VALUE: c_int = 7;
const NOT_SUPPORTED: c_int = 15;
const R_32F: c_int = 0;
const R_16F: c_int = 2;
const R_16BF: c_int = 14;
const COMPUTE_32F: c_int = 68;
const COMPUTE_32F_FAST_TF32: c_int = 77;
const GEMM_DEFAULT: c_int = -1;

struct Handle(*mut cublas::Handle);

impl Handle {
    fn new() -> Handle {
        let mut h = null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { cublas::cublasCreate_v2(&mut h) }, OK);
        Handle(h)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: a live handle, destroyed once.
        assert_eq!(unsafe { cublas::cublasDestroy_v2(self.0) }, OK);
    }
}

/// Stored dimensions of op(X) = rows x cols.
fn stored(t: bool, rows: usize, cols: usize) -> (usize, usize) {
    if t {
        (cols, rows)
    } else {
        (rows, cols)
    }
}

#[test]
fn sgemm_every_transpose_with_beta() {
    let h = Handle::new();
    let (m, n, k) = (5, 4, 3);
    for (opa, opb) in [(0, 0), (1, 0), (0, 1), (1, 1), (2, 2)] {
        let (ta, tb) = (opa != 0, opb != 0);
        let (ar, ac) = stored(ta, m, k);
        let (br, bc) = stored(tb, k, n);
        let (lda, ldb, ldc) = (ar + 2, br + 1, m + 3);
        let a = values(1, lda * ac);
        let b = values(2, ldb * bc);
        let c = values(3, ldc * n);
        let da = Dev::from(&a.iter().map(|&x| x as f32).collect::<Vec<_>>());
        let db = Dev::from(&b.iter().map(|&x| x as f32).collect::<Vec<_>>());
        let dc = Dev::from(&c.iter().map(|&x| x as f32).collect::<Vec<_>>());
        let (alpha, beta) = (1.5f32, -0.5f32);
        // SAFETY: device buffers of the sizes the dimensions need; host scalars.
        let status = unsafe {
            cublas::cublasSgemm_v2(
                h.0,
                opa,
                opb,
                m as c_int,
                n as c_int,
                k as c_int,
                &alpha,
                da.ptr as *const f32,
                lda as c_int,
                db.ptr as *const f32,
                ldb as c_int,
                &beta,
                dc.ptr as *mut f32,
                ldc as c_int,
            )
        };
        assert_eq!(status, OK);
        let want = reference(
            (ta, tb),
            (m, n, k),
            1.5,
            (&a, lda),
            (&b, ldb),
            -0.5,
            (&c, ldc),
        );
        let got: Vec<f64> = dc.read().iter().map(|&x| f64::from(x)).collect();
        assert_close(&got, &want, (m, n, ldc), 1e-6);
    }
}

#[test]
fn sgemm_beta_zero_never_reads_c() {
    let h = Handle::new();
    let (m, n, k) = (3, 2, 4);
    let a = values(4, m * k);
    let b = values(5, k * n);
    let da = Dev::from(&a.iter().map(|&x| x as f32).collect::<Vec<_>>());
    let db = Dev::from(&b.iter().map(|&x| x as f32).collect::<Vec<_>>());
    let dc = Dev::from(&vec![f32::NAN; m * n]);
    let (alpha, beta) = (2.0f32, 0.0f32);
    // SAFETY: as above.
    let status = unsafe {
        cublas::cublasSgemm_v2(
            h.0,
            0,
            0,
            3,
            2,
            4,
            &alpha,
            da.ptr as *const f32,
            3,
            db.ptr as *const f32,
            4,
            &beta,
            dc.ptr as *mut f32,
            3,
        )
    };
    assert_eq!(status, OK);
    let want = reference(
        (false, false),
        (m, n, k),
        2.0,
        (&a, m),
        (&b, k),
        0.0,
        (&vec![f64::NAN; m * n], m),
    );
    let got: Vec<f64> = dc.read().iter().map(|&x| f64::from(x)).collect();
    assert!(got.iter().all(|x| x.is_finite()), "{got:?}");
    assert_close(&got, &want, (m, n, m), 1e-6);
}

#[test]
fn dgemm_strided_batched() {
    let h = Handle::new();
    let (m, n, k, batch) = (4, 3, 5, 3);
    let (lda, ldb, ldc) = (k, k + 1, m);
    // A transposed: stored k x m; strides leave gaps between items.
    let (sa, sb, sc) = (lda * m + 3, ldb * n + 2, ldc * n + 1);
    let a = values(6, sa * batch);
    let b = values(7, sb * batch);
    let c = values(8, sc * batch);
    let (da, db, dc) = (Dev::from(&a), Dev::from(&b), Dev::from(&c));
    let (alpha, beta) = (0.75f64, 2.0f64);
    // SAFETY: device buffers holding `batch` items at the given strides.
    let status = unsafe {
        cublas::cublasDgemmStridedBatched(
            h.0,
            1,
            0,
            m as c_int,
            n as c_int,
            k as c_int,
            &alpha,
            da.ptr as *const f64,
            lda as c_int,
            sa as i64,
            db.ptr as *const f64,
            ldb as c_int,
            sb as i64,
            &beta,
            dc.ptr as *mut f64,
            ldc as c_int,
            sc as i64,
            batch as c_int,
        )
    };
    assert_eq!(status, OK);
    let got = dc.read();
    for i in 0..batch {
        let want = reference(
            (true, false),
            (m, n, k),
            0.75,
            (&a[i * sa..], lda),
            (&b[i * sb..], ldb),
            2.0,
            (&c[i * sc..i * sc + ldc * n], ldc),
        );
        assert_close(&got[i * sc..i * sc + ldc * n], &want, (m, n, ldc), 1e-12);
        // The gap after each item is untouched.
        assert_eq!(got[i * sc + ldc * n], c[i * sc + ldc * n]);
    }
}

fn to_f16(v: &[f64]) -> Vec<u16> {
    v.iter().map(|&x| f16::from_f64(x).to_bits()).collect()
}
fn to_bf16(v: &[f64]) -> Vec<u16> {
    v.iter().map(|&x| bf16::from_f64(x).to_bits()).collect()
}

#[test]
fn gemm_ex_half_and_bfloat16_with_f32_compute() {
    let h = Handle::new();
    let (m, n, k) = (6, 5, 7);
    // (A/B type, C type, transposes, beta)
    let cases = [
        (R_16F, R_16F, (true, false), 0.0),
        (R_16F, R_16F, (false, true), 1.0),
        (R_16BF, R_32F, (true, true), 0.5),
        (R_16BF, R_16BF, (false, false), 0.0),
    ];
    for (in_type, out_type, (ta, tb), beta) in cases {
        let (ar, ac) = stored(ta, m, k);
        let (br, bc) = stored(tb, k, n);
        let a = values(9, ar * ac);
        let b = values(10, br * bc);
        let c = values(11, m * n);
        let conv = if in_type == R_16F { to_f16 } else { to_bf16 };
        let (da, db) = (Dev::from(&conv(&a)), Dev::from(&conv(&b)));
        // C holds NaN where beta is 0: it must not be read.
        let c_init: Vec<f64> = if beta == 0.0 {
            vec![f64::NAN; m * n]
        } else {
            c.clone()
        };
        // Both buffers exist; the one of the output type is used.
        let dc32 = Dev::from(&c_init.iter().map(|&x| x as f32).collect::<Vec<_>>());
        let conv_out = if out_type == R_16F { to_f16 } else { to_bf16 };
        let dc16 = Dev::from(&conv_out(&c_init));
        let c_ptr = if out_type == R_32F {
            dc32.void()
        } else {
            dc16.void()
        };
        let (alpha, beta32) = (1.0f32, beta as f32);
        // SAFETY: device buffers of the sizes the dimensions need; f32 host scalars for
        // CUBLAS_COMPUTE_32F.
        let status = unsafe {
            cublas::cublasGemmEx(
                h.0,
                ta as c_int,
                tb as c_int,
                m as c_int,
                n as c_int,
                k as c_int,
                (&alpha as *const f32).cast(),
                da.void(),
                in_type,
                ar as c_int,
                db.void(),
                in_type,
                br as c_int,
                (&beta32 as *const f32).cast(),
                c_ptr,
                out_type,
                m as c_int,
                COMPUTE_32F,
                GEMM_DEFAULT,
            )
        };
        assert_eq!(status, OK, "{in_type} -> {out_type}");
        let want = reference((ta, tb), (m, n, k), 1.0, (&a, ar), (&b, br), beta, (&c, m));
        let got: Vec<f64> = if out_type == R_32F {
            dc32.read().iter().map(|&x| f64::from(x)).collect()
        } else if out_type == R_16F {
            dc16.read()
                .iter()
                .map(|&x| f16::from_bits(x).to_f64())
                .collect()
        } else {
            dc16.read()
                .iter()
                .map(|&x| bf16::from_bits(x).to_f64())
                .collect()
        };
        // One rounding to the output type: 2^-11 (f16), 2^-8 (bf16) relative.
        let tol = match out_type {
            R_32F => 1e-6,
            R_16F => 1e-3,
            _ => 4e-3,
        };
        assert_close(&got, &want, (m, n, m), tol);
    }
}

#[test]
fn gemm_batched_ex_reads_pointer_arrays_and_tf32_computes_in_f32() {
    let h = Handle::new();
    let (m, n, k, batch) = (3, 3, 2, 4);
    let a = values(12, m * k * batch);
    let b = values(13, k * n * batch);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    let (da, db) = (Dev::from(&to32(&a)), Dev::from(&to32(&b)));
    let dc = Dev::from(&vec![f32::NAN; m * n * batch]);
    // Items in reverse order, to tell the arrays are followed.
    let at = |d: &Dev<f32>, per: usize| (0..batch).rev().map(|i| d.at(i * per)).collect::<Vec<_>>();
    let (pa, pb, pc) = (
        Dev::from(&at(&da, m * k)),
        Dev::from(&at(&db, k * n)),
        Dev::from(&at(&dc, m * n)),
    );
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: pointer arrays in device memory, each naming a buffer of the item's size.
    let status = unsafe {
        cublas::cublasGemmBatchedEx(
            h.0,
            0,
            0,
            m as c_int,
            n as c_int,
            k as c_int,
            (&alpha as *const f32).cast(),
            pa.ptr as *const *const c_void,
            R_32F,
            m as c_int,
            pb.ptr as *const *const c_void,
            R_32F,
            k as c_int,
            (&beta as *const f32).cast(),
            pc.ptr as *const *mut c_void,
            R_32F,
            m as c_int,
            batch as c_int,
            COMPUTE_32F_FAST_TF32,
            GEMM_DEFAULT,
        )
    };
    assert_eq!(status, OK);
    let got: Vec<f64> = dc.read().iter().map(|&x| f64::from(x)).collect();
    for i in 0..batch {
        let want = reference(
            (false, false),
            (m, n, k),
            1.0,
            (&a[i * m * k..], m),
            (&b[i * k * n..], k),
            0.0,
            (&vec![0.0; m * n], m),
        );
        assert_close(&got[i * m * n..(i + 1) * m * n], &want, (m, n, m), 1e-6);
    }
    // An empty batch is a no-op, whatever its arrays.
    // SAFETY: no item, so no array is read.
    let status = unsafe {
        cublas::cublasGemmBatchedEx(
            h.0,
            0,
            0,
            m as c_int,
            n as c_int,
            k as c_int,
            (&alpha as *const f32).cast(),
            std::ptr::null(),
            R_32F,
            m as c_int,
            std::ptr::null(),
            R_32F,
            k as c_int,
            (&beta as *const f32).cast(),
            std::ptr::null(),
            R_32F,
            m as c_int,
            0,
            COMPUTE_32F,
            GEMM_DEFAULT,
        )
    };
    assert_eq!(status, OK);
}

#[test]
fn device_pointer_mode_reads_scalars_from_device_memory() {
    let h = Handle::new();
    let a = values(14, 4);
    let b = values(15, 4);
    let c = values(16, 4);
    let (da, db, dc) = (Dev::from(&a), Dev::from(&b), Dev::from(&c));
    let scalars = Dev::from(&[3.0f64, -1.0]);
    let mut mode = -1;
    // SAFETY: a live handle and out-pointer.
    unsafe {
        assert_eq!(cublas::cublasSetPointerMode_v2(h.0, 1), OK);
        assert_eq!(cublas::cublasGetPointerMode_v2(h.0, &mut mode), OK);
    }
    assert_eq!(mode, 1);
    // SAFETY: 2 x 2 device matrices; alpha and beta in device memory.
    let status = unsafe {
        cublas::cublasDgemm_v2(
            h.0,
            0,
            0,
            2,
            2,
            2,
            scalars.ptr as *const f64,
            da.ptr as *const f64,
            2,
            db.ptr as *const f64,
            2,
            scalars.at(1) as *const f64,
            dc.ptr as *mut f64,
            2,
        )
    };
    assert_eq!(status, OK);
    let want = reference(
        (false, false),
        (2, 2, 2),
        3.0,
        (&a, 2),
        (&b, 2),
        -1.0,
        (&c, 2),
    );
    assert_close(&dc.read(), &want, (2, 2, 2), 1e-12);
}

#[test]
fn bad_arguments_are_refused_without_touching_memory() {
    let h = Handle::new();
    let da = Dev::from(&[1.0f32; 6]);
    let dc = Dev::from(&[0.0f32; 4]);
    let host = [1.0f32; 6];
    let (alpha, beta) = (1.0f32, 0.0f32);
    let sgemm = |a: *const f32, lda: c_int, m: c_int| {
        // SAFETY: the library checks every pointer before touching it.
        unsafe {
            cublas::cublasSgemm_v2(
                h.0,
                0,
                0,
                m,
                2,
                3,
                &alpha,
                a,
                lda,
                da.ptr as *const f32,
                3,
                &beta,
                dc.ptr as *mut f32,
                2,
            )
        }
    };
    assert_eq!(sgemm(da.ptr as *const f32, 2, 2), OK);
    // Host memory the core does not know.
    assert_eq!(sgemm(host.as_ptr(), 2, 2), INVALID_VALUE);
    // lda below the rows.
    assert_eq!(sgemm(da.ptr as *const f32, 1, 2), INVALID_VALUE);
    // A 2 x 3 with lda 2048 spans 16 KiB, past the allocation (one page for 6 elements).
    assert_eq!(sgemm(da.ptr as *const f32, 2048, 2), INVALID_VALUE);
    // Negative m.
    assert_eq!(sgemm(da.ptr as *const f32, 2, -1), INVALID_VALUE);
    // Integer compute types are not modelled.
    // SAFETY: rejected before any pointer is used.
    let status = unsafe {
        cublas::cublasGemmEx(
            h.0,
            0,
            0,
            2,
            2,
            3,
            (&alpha as *const f32).cast(),
            da.void(),
            R_32F,
            2,
            da.void(),
            R_32F,
            3,
            (&beta as *const f32).cast(),
            dc.void(),
            R_32F,
            2,
            72,
            GEMM_DEFAULT,
        )
    };
    assert_eq!(status, NOT_SUPPORTED);
    // A generated stand-in.
    // SAFETY: takes no arguments.
    assert_eq!(unsafe { cublas::cublasSsymv_v2() }, NOT_SUPPORTED);
}

#[test]
fn handle_settings_version_and_strings() {
    let h = Handle::new();
    let (mut version, mut math, mut stream) = (0, -1, std::ptr::dangling_mut::<c_void>());
    // SAFETY: a live handle and valid out-pointers.
    unsafe {
        assert_eq!(cublas::cublasGetVersion_v2(h.0, &mut version), OK);
        assert_eq!(cublas::cublasSetMathMode(h.0, 3), OK);
        assert_eq!(cublas::cublasGetMathMode(h.0, &mut math), OK);
        assert_eq!(cublas::cublasSetMathMode(h.0, 7), INVALID_VALUE);
        assert_eq!(cublas::cublasGetStream_v2(h.0, &mut stream), OK);
        assert_eq!(cublas::cublasSetWorkspace_v2(h.0, null_mut(), 0), OK);
    }
    assert_eq!(version, 120900);
    assert_eq!(math, 3);
    assert!(stream.is_null());
    // SAFETY: the functions return static C strings.
    let (name, text) = unsafe {
        (
            CStr::from_ptr(cublas::cublasGetStatusName(7)),
            CStr::from_ptr(cublas::cublasGetStatusString(15)),
        )
    };
    assert_eq!(name, c"CUBLAS_STATUS_INVALID_VALUE");
    assert_eq!(text, c"the functionality requested is not supported");
}

#[test]
fn gemm_advances_its_streams_virtual_clock() {
    let core = fake_cuda_client::client().expect("core");
    let stream = core.stream_create(1, 0).expect("stream");
    let h = Handle::new();
    // SAFETY: a live handle and stream.
    let status = unsafe { cublas::cublasSetStream_v2(h.0, stream as *mut c_void) };
    assert_eq!(status, OK);
    let size = 512;
    let da = Dev::from(&vec![0.5f32; size * size]);
    let dc = Dev::from(&vec![0.0f32; size * size]);
    let before = core.stream_clock(stream).expect("clock");
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: square device matrices of `size`.
    let status = unsafe {
        cublas::cublasSgemm_v2(
            h.0,
            0,
            0,
            size as c_int,
            size as c_int,
            size as c_int,
            &alpha,
            da.ptr as *const f32,
            size as c_int,
            da.ptr as *const f32,
            size as c_int,
            &beta,
            dc.ptr as *mut f32,
            size as c_int,
        )
    };
    assert_eq!(status, OK);
    let after = core.stream_clock(stream).expect("clock");
    // 2 * 512^3 flops take at least 13.8 us at an A100's 19.5 TFLOPS FP32 peak (without TF32),
    // plus a kernel's launch: the stream advances by at least that (by more when the process's
    // host clock, which tests running at the same time move forward, is ahead).
    let elapsed = after - before;
    let model = 2.0 * 512f64.powi(3) / 19.5e12 * 1e9 + 2000.0;
    assert!(
        elapsed as f64 >= model - 1.0,
        "{elapsed} ns, model {model} ns"
    );
    // The work ran before the call returned: 0.5 * 0.5 * 512 everywhere.
    assert!(dc.read().iter().all(|&x| x == 128.0));
    core.stream_destroy(stream).expect("destroy");
}

#[test]
fn captured_gemm_runs_at_each_graph_launch_reading_device_alpha_then() {
    let core = fake_cuda_client::client().expect("core");
    let stream = core.stream_create(1, 0).expect("stream");
    let h = Handle::new();
    // SAFETY: a live handle and stream.
    let statuses = unsafe {
        [
            cublas::cublasSetStream_v2(h.0, stream as *mut c_void),
            cublas::cublasSetPointerMode_v2(h.0, 1),
        ]
    };
    assert_eq!(statuses, [OK; 2]);
    // C += alpha * A B with A = B = identity (2 x 2).
    let eye = [1.0f32, 0.0, 0.0, 1.0];
    let (da, dc) = (Dev::from(&eye), Dev::from(&[0.0f32; 4]));
    let scalars = Dev::from(&[1.0f32, 1.0]);
    core.begin_capture(stream).expect("capture");
    // SAFETY: 2 x 2 device matrices; alpha and beta in device memory.
    let status = unsafe {
        cublas::cublasSgemm_v2(
            h.0,
            0,
            0,
            2,
            2,
            2,
            scalars.ptr as *const f32,
            da.ptr as *const f32,
            2,
            da.ptr as *const f32,
            2,
            scalars.at(1) as *const f32,
            dc.ptr as *mut f32,
            2,
        )
    };
    assert_eq!(status, OK);
    let graph = core.end_capture(stream).expect("end capture");
    // Recorded, not run.
    assert_eq!(dc.read(), [0.0; 4]);
    let exec = core.graph_instantiate(graph).expect("instantiate");
    core.graph_launch(exec, stream).expect("launch");
    assert_eq!(dc.read(), [1.0, 0.0, 0.0, 1.0]);
    // alpha is read when the work runs.
    // SAFETY: the first scalar of the device buffer, not in use by any running work.
    unsafe { (scalars.ptr as *mut f32).write(5.0) };
    core.graph_launch(exec, stream).expect("launch");
    core.stream_synchronize(stream).expect("sync");
    assert_eq!(dc.read(), [6.0, 0.0, 0.0, 6.0]);
    core.graph_exec_destroy(exec).expect("exec destroy");
    core.graph_destroy(graph).expect("graph destroy");
    core.stream_destroy(stream).expect("destroy");
}

#[test]
fn hgemm_takes_half_scalars_and_rounds_through_f16() {
    let h = Handle::new();
    let (m, n, k) = (4, 3, 5);
    let a = values(17, k * m);
    let b = values(18, k * n);
    let c = values(19, m * n);
    let (da, db, dc) = (
        Dev::from(&to_f16(&a)),
        Dev::from(&to_f16(&b)),
        Dev::from(&to_f16(&c)),
    );
    let (alpha, beta) = (f16::from_f64(0.5).to_bits(), f16::from_f64(2.0).to_bits());
    // SAFETY: device buffers of the sizes the dimensions need; half host scalars.
    let status = unsafe {
        cublas::cublasHgemm(
            h.0,
            1,
            1,
            m as c_int,
            n as c_int,
            k as c_int,
            &alpha,
            da.ptr as *const u16,
            k as c_int,
            db.ptr as *const u16,
            n as c_int,
            &beta,
            dc.ptr as *mut u16,
            m as c_int,
        )
    };
    assert_eq!(status, OK);
    let want = reference((true, true), (m, n, k), 0.5, (&a, k), (&b, n), 2.0, (&c, m));
    let got: Vec<f64> = dc
        .read()
        .iter()
        .map(|&x| f16::from_bits(x).to_f64())
        .collect();
    // Two roundings to f16 (the product, then the sum with beta C).
    assert_close(&got, &want, (m, n, m), 2e-3);
}

#[test]
fn sgemv_both_operations_with_increments() {
    let h = Handle::new();
    let (m, n, lda) = (5, 3, 7);
    let a = values(40, lda * n);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    let da = Dev::from(&to32(&a));
    for op in [0, 1] {
        let (len_x, len_y) = if op == 0 { (n, m) } else { (m, n) };
        let (incx, incy) = (2, 3);
        let x = values(41, len_x * incx);
        let y = values(42, len_y * incy);
        let (dx, dy) = (Dev::from(&to32(&x)), Dev::from(&to32(&y)));
        let (alpha, beta) = (1.5f32, -2.0f32);
        // SAFETY: device buffers of the sizes the dimensions and increments need.
        let status = unsafe {
            cublas::cublasSgemv_v2(
                h.0,
                op,
                m as c_int,
                n as c_int,
                &alpha,
                da.ptr as *const f32,
                lda as c_int,
                dx.ptr as *const f32,
                incx as c_int,
                &beta,
                dy.ptr as *mut f32,
                incy as c_int,
            )
        };
        assert_eq!(status, OK);
        let got = dy.read();
        for i in 0..len_y {
            let mut sum = 0.0;
            for p in 0..len_x {
                let aij = if op == 0 {
                    a[i + p * lda]
                } else {
                    a[p + i * lda]
                };
                sum += aij * x[p * incx];
            }
            let want = 1.5 * sum - 2.0 * y[i * incy];
            assert!(
                (f64::from(got[i * incy]) - want).abs() < 1e-5,
                "op {op} y[{i}]"
            );
            // Elements between the increments are untouched.
            assert_eq!(f64::from(got[i * incy + 1]), y[i * incy + 1]);
        }
    }
}
