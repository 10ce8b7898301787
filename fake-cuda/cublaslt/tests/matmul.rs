//! cuBLASLt matmuls through the library's exported C functions, on device memory of the fake
//! CUDA core, compared with a naive reference plus the epilogue written here: BIAS, RELU_BIAS
//! and GELU_BIAS over f32, bf16 and f16, transposes, beta != 0 with C apart from D, beta == 0
//! over a NaN C, strided batches with a bias batch stride; descriptors and heuristics.

#[path = "../../cublas/tests/common/mod.rs"]
mod common;

use common::{assert_close, reference, values, Dev};
use cublaslt12 as lt;
use half::{bf16, f16};
use std::ffi::{c_int, c_void};
use std::ptr::{null, null_mut};

const OK: c_int = 0;
const INVALID_VALUE: c_int = 7;
const NOT_SUPPORTED: c_int = 15;
const R_32F: c_int = 0;
const R_16F: c_int = 2;
const R_16BF: c_int = 14;
const COMPUTE_32F: c_int = 68;
// cublasLtMatmulDescAttributes_t
const TRANSA: c_int = 3;
const TRANSB: c_int = 4;
const EPILOGUE: c_int = 7;
const BIAS_POINTER: c_int = 8;
const BIAS_BATCH_STRIDE: c_int = 10;
// cublasLtEpilogue_t
const EPI_BIAS: u32 = 4;
const EPI_RELU_BIAS: u32 = 6;
const EPI_GELU_BIAS: u32 = 36;
const EPI_RELU_AUX: u32 = 130;
// cublasLtMatrixLayoutAttribute_t
const ORDER: c_int = 1;
const BATCH_COUNT: c_int = 5;
const STRIDED_BATCH_OFFSET: c_int = 6;

fn set<T>(desc: *mut lt::MatmulDesc, attr: c_int, value: T) -> c_int {
    // SAFETY: a live descriptor and a value of the attribute's size.
    unsafe {
        lt::cublasLtMatmulDescSetAttribute(
            desc,
            attr,
            (&value as *const T).cast(),
            std::mem::size_of::<T>(),
        )
    }
}

fn set_layout<T>(layout: *mut lt::Layout, attr: c_int, value: T) -> c_int {
    // SAFETY: a live layout and a value of the attribute's size.
    unsafe {
        lt::cublasLtMatrixLayoutSetAttribute(
            layout,
            attr,
            (&value as *const T).cast(),
            std::mem::size_of::<T>(),
        )
    }
}

fn desc(transa: c_int, transb: c_int, epilogue: u32, bias: usize) -> *mut lt::MatmulDesc {
    let mut d = null_mut();
    // SAFETY: a valid out-pointer.
    let status = unsafe { lt::cublasLtMatmulDescCreate(&mut d, COMPUTE_32F, R_32F) };
    assert_eq!(status, OK);
    assert_eq!(set(d, TRANSA, transa), OK);
    assert_eq!(set(d, TRANSB, transb), OK);
    assert_eq!(set(d, EPILOGUE, epilogue), OK);
    assert_eq!(set(d, BIAS_POINTER, bias), OK);
    d
}

fn layout(dtype: c_int, rows: usize, cols: usize, ld: usize) -> *mut lt::Layout {
    let mut l = null_mut();
    // SAFETY: a valid out-pointer.
    let status = unsafe {
        lt::cublasLtMatrixLayoutCreate(&mut l, dtype, rows as u64, cols as u64, ld as i64)
    };
    assert_eq!(status, OK);
    l
}

/// Device buffer of `v` converted to `dtype`.
enum Buf {
    F32(Dev<f32>),
    Half(Dev<u16>, c_int),
}

impl Buf {
    fn new(dtype: c_int, v: &[f64]) -> Buf {
        match dtype {
            R_32F => Buf::F32(Dev::from(&v.iter().map(|&x| x as f32).collect::<Vec<_>>())),
            R_16F => Buf::Half(
                Dev::from(
                    &v.iter()
                        .map(|&x| f16::from_f64(x).to_bits())
                        .collect::<Vec<_>>(),
                ),
                dtype,
            ),
            _ => Buf::Half(
                Dev::from(
                    &v.iter()
                        .map(|&x| bf16::from_f64(x).to_bits())
                        .collect::<Vec<_>>(),
                ),
                dtype,
            ),
        }
    }
    fn ptr(&self) -> usize {
        match self {
            Buf::F32(d) => d.ptr,
            Buf::Half(d, _) => d.ptr,
        }
    }
    fn read(&self) -> Vec<f64> {
        match self {
            Buf::F32(d) => d.read().iter().map(|&x| f64::from(x)).collect(),
            Buf::Half(d, R_16F) => d
                .read()
                .iter()
                .map(|&x| f16::from_bits(x).to_f64())
                .collect(),
            Buf::Half(d, _) => d
                .read()
                .iter()
                .map(|&x| bf16::from_bits(x).to_f64())
                .collect(),
        }
    }
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
}

struct Case {
    dtype: c_int,
    trans: (bool, bool),
    epilogue: u32,
    beta: f64,
    /// C and D are one buffer (then full of NaN when beta is 0).
    in_place: bool,
    batch: usize,
}

fn run(case: Case) {
    let (m, n, k) = (6, 5, 4);
    let (ta, tb) = case.trans;
    let (ar, ac) = if ta { (k, m) } else { (m, k) };
    let (br, bc) = if tb { (n, k) } else { (k, n) };
    let (lda, ldb, ldc) = (ar + 1, br, m + 2);
    let (sa, sb, sc, sbias) = (lda * ac, ldb * bc + 3, ldc * n, m + 1);
    let batch = case.batch;
    let a = values(21, sa * batch);
    let b = values(22, sb * batch);
    let c = values(23, sc * batch);
    let bias = values(24, sbias * batch);
    let d_init = if case.in_place && case.beta == 0.0 {
        vec![f64::NAN; sc * batch]
    } else if case.in_place {
        c.clone()
    } else {
        vec![f64::NAN; sc * batch]
    };
    let (da, db, dbias) = (
        Buf::new(case.dtype, &a),
        Buf::new(case.dtype, &b),
        Buf::new(case.dtype, &bias),
    );
    let dd = Buf::new(case.dtype, &d_init);
    let dc_apart = Buf::new(case.dtype, &c);
    let dc = if case.in_place { &dd } else { &dc_apart };

    let md = desc(ta as c_int, tb as c_int, case.epilogue, dbias.ptr());
    assert_eq!(set(md, BIAS_BATCH_STRIDE, sbias as i64), OK);
    let la = layout(case.dtype, ar, ac, lda);
    let lb = layout(case.dtype, br, bc, ldb);
    let lc = layout(case.dtype, m, n, ldc);
    for (l, stride) in [(la, sa), (lb, sb), (lc, sc)] {
        assert_eq!(set_layout(l, BATCH_COUNT, batch as c_int), OK);
        assert_eq!(set_layout(l, STRIDED_BATCH_OFFSET, stride as i64), OK);
    }
    let (alpha, beta) = (1.25f32, case.beta as f32);
    let stream = null_mut::<c_void>();
    let handle = std::ptr::dangling_mut::<c_void>();
    let mut heuristic = std::mem::MaybeUninit::<lt::HeuristicResult>::zeroed();
    let mut returned = 0;
    // SAFETY: live descriptors, device buffers of the sizes the layouts give, host scalars;
    // the handle is only checked for null.
    unsafe {
        assert_eq!(
            lt::cublasLtMatmulAlgoGetHeuristic(
                handle,
                md,
                la,
                lb,
                lc,
                lc,
                null_mut(),
                1,
                heuristic.as_mut_ptr(),
                &mut returned
            ),
            OK
        );
        assert_eq!(returned, 1);
        let status = lt::cublasLtMatmul(
            handle,
            md,
            (&alpha as *const f32).cast(),
            da.ptr() as *const c_void,
            la,
            db.ptr() as *const c_void,
            lb,
            (&beta as *const f32).cast(),
            dc.ptr() as *const c_void,
            lc,
            dd.ptr() as *mut c_void,
            lc,
            null(),
            null_mut(),
            0,
            stream,
        );
        assert_eq!(status, OK);
        for l in [la, lb, lc] {
            assert_eq!(lt::cublasLtMatrixLayoutDestroy(l), OK);
        }
        assert_eq!(lt::cublasLtMatmulDescDestroy(md), OK);
    }
    let got = dd.read();
    let tol = match case.dtype {
        R_32F => 1e-6,
        R_16F => 1e-3,
        _ => 4e-3,
    };
    for i in 0..batch {
        let c_item = &c[i * sc..(i + 1) * sc];
        let mut want = reference(
            case.trans,
            (m, n, k),
            1.25,
            (&a[i * sa..], lda),
            (&b[i * sb..], ldb),
            case.beta,
            (
                if case.beta == 0.0 {
                    &d_init[i * sc..(i + 1) * sc]
                } else {
                    c_item
                },
                ldc,
            ),
        );
        for j in 0..n {
            // D's padding rows keep what D held.
            for r in m..ldc {
                want[r + j * ldc] = d_init[i * sc + r + j * ldc];
            }
            for r in 0..m {
                let v = want[r + j * ldc] + bias[i * sbias + r];
                want[r + j * ldc] = match case.epilogue {
                    EPI_RELU_BIAS => v.max(0.0),
                    EPI_GELU_BIAS => gelu(v),
                    _ => v,
                };
            }
        }
        assert_close(&got[i * sc..(i + 1) * sc], &want, (m, n, ldc), tol);
    }
}

#[test]
fn bias_f32_transposed_a_with_beta_and_c_apart_from_d() {
    run(Case {
        dtype: R_32F,
        trans: (true, false),
        epilogue: EPI_BIAS,
        beta: 0.5,
        in_place: false,
        batch: 1,
    });
}

#[test]
fn relu_bias_bf16_transposed_b_beta_zero_over_nan() {
    run(Case {
        dtype: R_16BF,
        trans: (false, true),
        epilogue: EPI_RELU_BIAS,
        beta: 0.0,
        in_place: true,
        batch: 1,
    });
}

#[test]
fn relu_bias_f32_both_transposed_in_place_batched() {
    run(Case {
        dtype: R_32F,
        trans: (true, true),
        epilogue: EPI_RELU_BIAS,
        beta: -1.0,
        in_place: true,
        batch: 3,
    });
}

#[test]
fn gelu_bias_f16_batched() {
    run(Case {
        dtype: R_16F,
        trans: (false, false),
        epilogue: EPI_GELU_BIAS,
        beta: 0.0,
        in_place: false,
        batch: 2,
    });
}

#[test]
fn descriptors_refuse_what_is_not_modelled() {
    let md = desc(0, 0, EPI_BIAS, 0);
    assert_eq!(set(md, EPILOGUE, EPI_RELU_AUX), NOT_SUPPORTED);
    let (mut value, mut written) = (0u32, 0usize);
    // SAFETY: a live descriptor and valid buffers.
    unsafe {
        assert_eq!(
            lt::cublasLtMatmulDescGetAttribute(md, EPILOGUE, null_mut(), 0, &mut written),
            OK
        );
        assert_eq!(written, 4);
        assert_eq!(
            lt::cublasLtMatmulDescGetAttribute(
                md,
                EPILOGUE,
                (&mut value as *mut u32).cast(),
                4,
                &mut written
            ),
            OK
        );
    }
    assert_eq!(value, EPI_BIAS);
    let l = layout(R_32F, 4, 4, 4);
    // CUBLASLT_ORDER_ROW.
    assert_eq!(set_layout(l, ORDER, 1 as c_int), NOT_SUPPORTED);
    assert_eq!(set_layout(l, ORDER, 0 as c_int), OK);
    let small = layout(R_32F, 3, 4, 3);
    let mut results = std::mem::MaybeUninit::<lt::HeuristicResult>::zeroed();
    let mut returned = 0;
    // SAFETY: live descriptors; the handle is only checked for null.
    unsafe {
        // A bias epilogue without a bias pointer.
        assert_eq!(
            lt::cublasLtMatmulAlgoGetHeuristic(
                std::ptr::dangling_mut::<c_void>(),
                md,
                l,
                l,
                l,
                l,
                null_mut(),
                1,
                results.as_mut_ptr(),
                &mut returned
            ),
            INVALID_VALUE
        );
        assert_eq!(set(md, EPILOGUE, 1u32), OK);
        // Shapes that do not chain: (4 x 4)(3 x 4).
        assert_eq!(
            lt::cublasLtMatmulAlgoGetHeuristic(
                std::ptr::dangling_mut::<c_void>(),
                md,
                l,
                small,
                l,
                l,
                null_mut(),
                1,
                results.as_mut_ptr(),
                &mut returned
            ),
            INVALID_VALUE
        );
        assert_eq!(lt::cublasLtMatrixLayoutDestroy(l), OK);
        assert_eq!(lt::cublasLtMatrixLayoutDestroy(small), OK);
        assert_eq!(lt::cublasLtMatmulDescDestroy(md), OK);
        assert_eq!(lt::cublasLtGetVersion(), 120900);
        // A generated stand-in.
        assert_eq!(lt::cublasLtMatmulAlgoInit(), NOT_SUPPORTED);
    }
}

#[test]
fn device_pointer_mode_and_refused_ranges() {
    const POINTER_MODE: c_int = 2;
    let md = desc(0, 0, 1, 0);
    assert_eq!(set(md, POINTER_MODE, 1 as c_int), OK);
    // A vector pointer mode is not modelled.
    assert_eq!(set(md, POINTER_MODE, 2 as c_int), NOT_SUPPORTED);
    let l = layout(R_32F, 2, 2, 2);
    let a = values(31, 4);
    let b = values(32, 4);
    let c = values(33, 4);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    let (da, db, dc) = (
        Dev::from(&to32(&a)),
        Dev::from(&to32(&b)),
        Dev::from(&to32(&c)),
    );
    let scalars = Dev::from(&[2.0f32, 0.5]);
    let host = [0.0f32; 4];
    let matmul = |d: usize| {
        // SAFETY: live descriptors; the library checks every matrix range before use; alpha
        // and beta in device memory.
        unsafe {
            lt::cublasLtMatmul(
                std::ptr::dangling_mut::<c_void>(),
                md,
                scalars.void(),
                da.void(),
                l,
                db.void(),
                l,
                scalars.at(1) as *const c_void,
                dc.void(),
                l,
                d as *mut c_void,
                l,
                null(),
                null_mut(),
                0,
                null_mut(),
            )
        }
    };
    // D in host memory the core does not know.
    assert_eq!(matmul(host.as_ptr() as usize), INVALID_VALUE);
    assert_eq!(matmul(dc.ptr), OK);
    let want = reference(
        (false, false),
        (2, 2, 2),
        2.0,
        (&a, 2),
        (&b, 2),
        0.5,
        (&c, 2),
    );
    let got: Vec<f64> = dc.read().iter().map(|&x| f64::from(x)).collect();
    assert_close(&got, &want, (2, 2, 2), 1e-6);
    // SAFETY: live descriptors, destroyed once.
    unsafe {
        assert_eq!(lt::cublasLtMatrixLayoutDestroy(l), OK);
        assert_eq!(lt::cublasLtMatmulDescDestroy(md), OK);
    }
}
