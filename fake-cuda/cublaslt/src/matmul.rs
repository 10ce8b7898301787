//! `cublasLtMatmulAlgoGetHeuristic` and `cublasLtMatmul`: the descriptors become a
//! [`Gemm`], checked and enqueued on the given stream by `fake_cuda_blas::submit`.

use super::*;
use fake_cuda_blas::gemm::{self, Gemm, Item, Operand, Scalar};
use fake_cuda_blas::submit::enqueue;

/// `cublasLtMatmulAlgo_t`: opaque 64 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Algo {
    data: [u64; 8],
}

/// `cublasLtMatmulHeuristicResult_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HeuristicResult {
    algo: Algo,
    workspace_size: usize,
    state: c_int,
    waves_count: f32,
    reserved: [c_int; 4],
}
const _: () = assert!(std::mem::size_of::<HeuristicResult>() == 96);

/// The one algorithm, tagged so a program can tell it was filled in.
const ALGO_TAG: u64 = 0x6e63_6c73_696d_0001;

/// A matrix layout as the matmul reads it.
struct Mat {
    dtype: DType,
    rows: usize,
    cols: usize,
    ld: usize,
    batch: usize,
    stride: i64,
}

fn mat(name: &str, layout: *mut Layout) -> Result<Mat> {
    let a = &live(layout)
        .map_err(|_| BlasError::invalid(format!("null layout for {name}")))?
        .0;
    let size = |v: u64| {
        usize::try_from(v).map_err(|_| BlasError::invalid(format!("{name}: dimension {v}")))
    };
    let ld = a.get::<i64>(LAYOUT_LD, 0);
    let batch = a.get::<c_int>(LAYOUT_BATCH_COUNT, 1);
    if ld < 0 || batch < 1 {
        return Err(BlasError::invalid(format!(
            "{name}: ld {ld}, batch {batch}"
        )));
    }
    Ok(Mat {
        dtype: DType::from_cuda(a.get::<u32>(LAYOUT_TYPE, 0) as c_int)?,
        rows: size(a.get::<u64>(LAYOUT_ROWS, 0))?,
        cols: size(a.get::<u64>(LAYOUT_COLS, 0))?,
        ld: ld as usize,
        batch: batch as usize,
        stride: a.get::<i64>(LAYOUT_STRIDED_BATCH_OFFSET, 0),
    })
}

/// The matmul the descriptors describe, without its addresses and scalars; the layouts'
/// batch strides, in elements.
struct Plan {
    gemm: Gemm,
    scale: DType,
    device_scalars: bool,
    strides: [i64; 4],
    bias: (usize, i64),
    batch: usize,
}

fn plan(
    desc: *mut MatmulDesc,
    a: *mut Layout,
    b: *mut Layout,
    c: *mut Layout,
    d: *mut Layout,
) -> Result<Plan> {
    let attrs = &live(desc)?.0;
    let (ma, mb, mc, md) = (mat("A", a)?, mat("B", b)?, mat("C", c)?, mat("D", d)?);
    let transa = transposed(attrs.get::<c_int>(DESC_TRANSA, 0))?;
    let transb = transposed(attrs.get::<c_int>(DESC_TRANSB, 0))?;
    let (m, n) = (md.rows, md.cols);
    let k = if transa { ma.rows } else { ma.cols };
    let op_a = if transa {
        (ma.cols, ma.rows)
    } else {
        (ma.rows, ma.cols)
    };
    let op_b = if transb {
        (mb.cols, mb.rows)
    } else {
        (mb.rows, mb.cols)
    };
    if op_a != (m, k) || op_b != (k, n) || (mc.rows, mc.cols) != (m, n) {
        return Err(BlasError::invalid(format!(
            "shapes do not chain: op(A) {op_a:?}, op(B) {op_b:?}, C {:?}, D {:?}",
            (mc.rows, mc.cols),
            (m, n)
        )));
    }
    if [ma.batch, mb.batch, mc.batch] != [md.batch; 3] {
        return Err(BlasError::invalid(format!(
            "batch counts differ: A {}, B {}, C {}, D {}",
            ma.batch, mb.batch, mc.batch, md.batch
        )));
    }
    let compute = Compute::from_cublas(attrs.get::<c_int>(DESC_COMPUTE_TYPE, 68))?;
    let scale = DType::from_cuda(attrs.get::<c_int>(DESC_SCALE_TYPE, 0))?;
    let (activation, has_bias) = epilogue(attrs.get::<u32>(DESC_EPILOGUE, 1))?;
    let bias_ptr = if has_bias {
        let p = attrs.get::<usize>(DESC_BIAS_POINTER, 0);
        if p == 0 {
            return Err(BlasError::invalid("bias epilogue without a bias pointer"));
        }
        p
    } else {
        0
    };
    let bias_type = match attrs.get::<c_int>(DESC_BIAS_DATA_TYPE, -1) {
        -1 => md.dtype,
        v => DType::from_cuda(v)?,
    };
    let operand = |x: &Mat| Operand {
        dtype: x.dtype,
        ld: x.ld,
    };
    Ok(Plan {
        gemm: Gemm {
            m,
            n,
            k,
            transa,
            transb,
            a: operand(&ma),
            b: operand(&mb),
            c: operand(&mc),
            d: operand(&md),
            bias_type,
            alpha: Scalar::Value(1.0),
            beta: Scalar::Value(0.0),
            compute,
            activation,
            items: Vec::with_capacity(md.batch),
        },
        scale,
        device_scalars: attrs.get::<c_int>(DESC_POINTER_MODE, 0) == 1,
        strides: [ma.stride, mb.stride, mc.stride, md.stride],
        bias: (bias_ptr, attrs.get::<i64>(DESC_BIAS_BATCH_STRIDE, 0)),
        batch: md.batch,
    })
}

blas_fn!(
    fn cublasLtMatmulAlgoGetHeuristic(
        handle: *mut c_void,
        desc: *mut MatmulDesc,
        a: *mut Layout,
        b: *mut Layout,
        c: *mut Layout,
        d: *mut Layout,
        _pref: *mut Preference,
        requested: c_int,
        results: *mut HeuristicResult,
        returned: *mut c_int,
    ) {
        if handle.is_null() {
            return Err(BlasError::Status {
                code: types::NOT_INITIALIZED,
                message: "null handle".into(),
            });
        }
        if requested < 1 || results.is_null() {
            return Err(BlasError::invalid(format!(
                "{requested} results requested into {results:?}"
            )));
        }
        plan(desc, a, b, c, d)?;
        let mut algo = Algo::default();
        algo.data[0] = ALGO_TAG;
        write_out(
            results,
            HeuristicResult {
                algo,
                workspace_size: 0,
                state: types::SUCCESS,
                waves_count: 1.0,
                reserved: [0; 4],
            },
        )?;
        write_out(returned, 1)
    }
);

/// Element `i` of a batch: `base + i * stride` elements of `size` bytes.
fn at(base: usize, stride: i64, size: usize, i: usize) -> Result<usize> {
    let stride = usize::try_from(stride)
        .map_err(|_| BlasError::invalid(format!("negative batch stride {stride}")))?;
    i.checked_mul(stride)
        .and_then(|e| e.checked_mul(size))
        .and_then(|off| base.checked_add(off))
        .ok_or_else(|| BlasError::invalid("batch offset overflows"))
}

fn scalar(device: bool, name: &str, ptr: *const c_void, dtype: DType) -> Result<Scalar> {
    if ptr.is_null() {
        return Err(BlasError::invalid(format!("null {name}")));
    }
    if device {
        return Ok(Scalar::At(ptr as usize, dtype));
    }
    // SAFETY: in host pointer mode the scalar is a readable value of the scale type (API
    // contract).
    Ok(Scalar::Value(unsafe { gemm::load(ptr as usize, 0, dtype) }))
}

blas_fn!(
    fn cublasLtMatmul(
        handle: *mut c_void,
        desc: *mut MatmulDesc,
        alpha: *const c_void,
        a: *const c_void,
        a_desc: *mut Layout,
        b: *const c_void,
        b_desc: *mut Layout,
        beta: *const c_void,
        c: *const c_void,
        c_desc: *mut Layout,
        d: *mut c_void,
        d_desc: *mut Layout,
        _algo: *const Algo,
        _workspace: *mut c_void,
        _workspace_size: usize,
        stream: *mut c_void,
    ) {
        if handle.is_null() {
            return Err(BlasError::Status {
                code: types::NOT_INITIALIZED,
                message: "null handle".into(),
            });
        }
        let Plan {
            mut gemm,
            scale,
            device_scalars,
            strides,
            bias,
            batch,
        } = plan(desc, a_desc, b_desc, c_desc, d_desc)?;
        gemm.alpha = scalar(device_scalars, "alpha", alpha, scale)?;
        gemm.beta = scalar(device_scalars, "beta", beta, scale)?;
        for i in 0..batch {
            gemm.items.push(Item {
                a: at(a as usize, strides[0], gemm.a.dtype.size(), i)?,
                b: at(b as usize, strides[1], gemm.b.dtype.size(), i)?,
                c: at(c as usize, strides[2], gemm.c.dtype.size(), i)?,
                d: at(d as usize, strides[3], gemm.d.dtype.size(), i)?,
                bias: if bias.0 == 0 {
                    0
                } else {
                    at(bias.0, bias.1, gemm.bias_type.size(), i)?
                },
            });
        }
        enqueue(stream as u64, gemm, false, "cublasLtMatmul")
    }
);
