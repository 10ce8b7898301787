//! `cublas[SD]gemv_v2`: `y = alpha op(A) x + beta y`, computed as the GEMM
//! `y^T = alpha x^T op(A)^T + beta y^T` of a 1-row matrix, whose leading dimensions are the
//! vector increments (positive increments only).

use super::{dim, handle, scalar, BlasError, Handle, Result};
use fake_cuda_blas::gemm::{Gemm, Item, Operand};
use fake_cuda_blas::submit::enqueue;
use fake_cuda_blas::types::{transposed, Activation, Compute, DType};
use std::ffi::{c_int, c_void};

fn inc(name: &str, v: c_int) -> Result<usize> {
    match v {
        0 => Err(BlasError::invalid(format!("{name} = 0"))),
        v if v < 0 => Err(BlasError::not_supported(format!("negative {name} {v}"))),
        v => Ok(v as usize),
    }
}

/// `name` is the cuBLAS function called (the launch's name in the kernel-time table).
#[allow(clippy::too_many_arguments)]
fn gemv(
    name: &str,
    h: *mut Handle,
    dtype: DType,
    op: c_int,
    (m, n): (c_int, c_int),
    alpha: *const c_void,
    (a, lda): (*const c_void, c_int),
    (x, incx): (*const c_void, c_int),
    beta: *const c_void,
    (y, incy): (*mut c_void, c_int),
) -> Result<()> {
    let h = handle(h)?;
    let trans = transposed(op)?;
    let (m, n) = (dim("m", m)?, dim("n", n)?);
    if lda < 1 {
        return Err(BlasError::invalid(format!("lda = {lda}")));
    }
    let (incx, incy) = (inc("incx", incx)?, inc("incy", incy)?);
    // op(A) is m x n (A stored m x n, ld lda) or n x m transposed.
    let (len_x, len_y) = if trans { (m, n) } else { (n, m) };
    let vector = |ld| Operand { dtype, ld };
    let compute = if dtype == DType::F64 {
        Compute::F64
    } else {
        Compute::F32
    };
    let g = Gemm {
        m: 1,
        n: len_y,
        k: len_x,
        transa: false,
        // y^T = x^T op(A)^T: the right operand is A transposed once more.
        transb: !trans,
        a: vector(incx),
        b: Operand {
            dtype,
            ld: lda as usize,
        },
        c: vector(incy),
        d: vector(incy),
        bias_type: dtype,
        alpha: scalar(h, "alpha", alpha, dtype)?,
        beta: scalar(h, "beta", beta, dtype)?,
        compute,
        activation: Activation::None,
        items: vec![Item {
            a: x as usize,
            b: a as usize,
            c: y as usize,
            d: y as usize,
            bias: 0,
        }],
    };
    enqueue(h.stream, g, false, name)
}

macro_rules! typed_gemv {
    ($name:ident, $t:ty, $dtype:expr) => {
        blas_fn!(
            fn $name(
                h: *mut Handle,
                op: c_int,
                m: c_int,
                n: c_int,
                alpha: *const $t,
                a: *const $t,
                lda: c_int,
                x: *const $t,
                incx: c_int,
                beta: *const $t,
                y: *mut $t,
                incy: c_int,
            ) {
                gemv(
                    stringify!($name),
                    h,
                    $dtype,
                    op,
                    (m, n),
                    alpha.cast(),
                    (a.cast(), lda),
                    (x.cast(), incx),
                    beta.cast(),
                    (y.cast(), incy),
                )
            }
        );
    };
}

typed_gemv!(cublasSgemv_v2, f32, DType::F32);
typed_gemv!(cublasDgemv_v2, f64, DType::F64);
