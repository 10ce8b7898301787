//! The GEMM entry points: typed (`cublas[SDH]gemm`, batched forms) and mixed-precision
//! (`cublasGemmEx` and its batched forms, `cublasSgemmEx`). All take column-major matrices
//! and `cublasOperation_t` transposes; alpha and beta follow the handle's pointer mode.

use super::{one, run, Batch, BlasError, Call, Compute, Handle};

use std::ffi::{c_int, c_longlong, c_void};

/// `CUDA_R_16F`, `CUDA_R_32F`, `CUDA_R_64F`.
const R_16F: c_int = 2;
const R_32F: c_int = 0;
const R_64F: c_int = 1;

#[allow(clippy::too_many_arguments)]
fn typed(
    dtype: c_int,
    compute: Compute,
    (transa, transb, m, n, k): (c_int, c_int, c_int, c_int, c_int),
    alpha: *const c_void,
    (lda, ldb): (c_int, c_int),
    beta: *const c_void,
    ldc: c_int,
) -> Call {
    Call {
        transa,
        transb,
        m,
        n,
        k,
        alpha,
        beta,
        a: (dtype, lda),
        b: (dtype, ldb),
        c: (dtype, ldc),
        compute,
    }
}

macro_rules! typed_gemm {
    ($name:ident, $strided:ident, $batched:ident, $t:ty, $dtype:expr, $compute:expr) => {
        blas_fn!(
            fn $name(
                h: *mut Handle,
                transa: c_int,
                transb: c_int,
                m: c_int,
                n: c_int,
                k: c_int,
                alpha: *const $t,
                a: *const $t,
                lda: c_int,
                b: *const $t,
                ldb: c_int,
                beta: *const $t,
                c: *mut $t,
                ldc: c_int,
            ) {
                let call = typed(
                    $dtype,
                    $compute,
                    (transa, transb, m, n, k),
                    alpha.cast(),
                    (lda, ldb),
                    beta.cast(),
                    ldc,
                );
                run(
                    h,
                    call,
                    one(1, a.cast(), b.cast(), c.cast()),
                    stringify!($name),
                )
            }
        );
        blas_fn!(
            fn $strided(
                h: *mut Handle,
                transa: c_int,
                transb: c_int,
                m: c_int,
                n: c_int,
                k: c_int,
                alpha: *const $t,
                a: *const $t,
                lda: c_int,
                stride_a: c_longlong,
                b: *const $t,
                ldb: c_int,
                stride_b: c_longlong,
                beta: *const $t,
                c: *mut $t,
                ldc: c_int,
                stride_c: c_longlong,
                count: c_int,
            ) {
                let call = typed(
                    $dtype,
                    $compute,
                    (transa, transb, m, n, k),
                    alpha.cast(),
                    (lda, ldb),
                    beta.cast(),
                    ldc,
                );
                let batch = Batch::Strided {
                    count,
                    a: (a as usize, stride_a),
                    b: (b as usize, stride_b),
                    c: (c as usize, stride_c),
                };
                run(h, call, batch, stringify!($strided))
            }
        );
        blas_fn!(
            fn $batched(
                h: *mut Handle,
                transa: c_int,
                transb: c_int,
                m: c_int,
                n: c_int,
                k: c_int,
                alpha: *const $t,
                a: *const *const $t,
                lda: c_int,
                b: *const *const $t,
                ldb: c_int,
                beta: *const $t,
                c: *const *mut $t,
                ldc: c_int,
                count: c_int,
            ) {
                let call = typed(
                    $dtype,
                    $compute,
                    (transa, transb, m, n, k),
                    alpha.cast(),
                    (lda, ldb),
                    beta.cast(),
                    ldc,
                );
                let batch = Batch::Arrays {
                    count,
                    a: a.cast(),
                    b: b.cast(),
                    c: c.cast(),
                };
                run(h, call, batch, stringify!($batched))
            }
        );
    };
}

typed_gemm!(
    cublasSgemm_v2,
    cublasSgemmStridedBatched,
    cublasSgemmBatched,
    f32,
    R_32F,
    Compute::F32
);
typed_gemm!(
    cublasDgemm_v2,
    cublasDgemmStridedBatched,
    cublasDgemmBatched,
    f64,
    R_64F,
    Compute::F64
);
typed_gemm!(
    cublasHgemm,
    cublasHgemmStridedBatched,
    cublasHgemmBatched,
    u16,
    R_16F,
    Compute::F16
);

blas_fn!(
    fn cublasSgemmEx(
        h: *mut Handle,
        transa: c_int,
        transb: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: *const f32,
        a: *const c_void,
        a_type: c_int,
        lda: c_int,
        b: *const c_void,
        b_type: c_int,
        ldb: c_int,
        beta: *const f32,
        c: *mut c_void,
        c_type: c_int,
        ldc: c_int,
    ) {
        let call = Call {
            transa,
            transb,
            m,
            n,
            k,
            alpha: alpha.cast(),
            beta: beta.cast(),
            a: (a_type, lda),
            b: (b_type, ldb),
            c: (c_type, ldc),
            compute: Compute::F32,
        };
        run(h, call, one(1, a, b, c), "cublasSgemmEx")
    }
);

blas_fn!(
    fn cublasGemmEx(
        h: *mut Handle,
        transa: c_int,
        transb: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: *const c_void,
        a: *const c_void,
        a_type: c_int,
        lda: c_int,
        b: *const c_void,
        b_type: c_int,
        ldb: c_int,
        beta: *const c_void,
        c: *mut c_void,
        c_type: c_int,
        ldc: c_int,
        compute: c_int,
        _algo: c_int,
    ) {
        let call = Call {
            transa,
            transb,
            m,
            n,
            k,
            alpha,
            beta,
            a: (a_type, lda),
            b: (b_type, ldb),
            c: (c_type, ldc),
            compute: Compute::from_cublas(compute)?,
        };
        run(h, call, one(1, a, b, c), "cublasGemmEx")
    }
);

blas_fn!(
    fn cublasGemmStridedBatchedEx(
        h: *mut Handle,
        transa: c_int,
        transb: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: *const c_void,
        a: *const c_void,
        a_type: c_int,
        lda: c_int,
        stride_a: c_longlong,
        b: *const c_void,
        b_type: c_int,
        ldb: c_int,
        stride_b: c_longlong,
        beta: *const c_void,
        c: *mut c_void,
        c_type: c_int,
        ldc: c_int,
        stride_c: c_longlong,
        count: c_int,
        compute: c_int,
        _algo: c_int,
    ) {
        let call = Call {
            transa,
            transb,
            m,
            n,
            k,
            alpha,
            beta,
            a: (a_type, lda),
            b: (b_type, ldb),
            c: (c_type, ldc),
            compute: Compute::from_cublas(compute)?,
        };
        let batch = Batch::Strided {
            count,
            a: (a as usize, stride_a),
            b: (b as usize, stride_b),
            c: (c as usize, stride_c),
        };
        run(h, call, batch, "cublasGemmStridedBatchedEx")
    }
);

blas_fn!(
    fn cublasGemmBatchedEx(
        h: *mut Handle,
        transa: c_int,
        transb: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: *const c_void,
        a: *const *const c_void,
        a_type: c_int,
        lda: c_int,
        b: *const *const c_void,
        b_type: c_int,
        ldb: c_int,
        beta: *const c_void,
        c: *const *mut c_void,
        c_type: c_int,
        ldc: c_int,
        count: c_int,
        compute: c_int,
        _algo: c_int,
    ) {
        let call = Call {
            transa,
            transb,
            m,
            n,
            k,
            alpha,
            beta,
            a: (a_type, lda),
            b: (b_type, ldb),
            c: (c_type, ldc),
            compute: Compute::from_cublas(compute)?,
        };
        let batch = Batch::Arrays {
            count,
            a: a.cast(),
            b: b.cast(),
            c: c.cast(),
        };
        run(h, call, batch, "cublasGemmBatchedEx")
    }
);
