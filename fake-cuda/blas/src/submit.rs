//! Submission of a [`Gemm`] to the fake CUDA core: the operands are checked to lie inside
//! memory the core knows, and the GEMM runs as stream work (`enqueue_owned`) lasting a
//! modelled time, so it is ordered with the stream's copies, kernels and events, and a stream
//! being captured records it into the graph.

use crate::gemm::{Gemm, Scalar};
use crate::types::{BlasError, Compute, DType, Result};
use fake_cuda_abi::CKernelCost;
use fake_cuda_client::{client, Client};
use std::ffi::{c_void, CString};

/// The process's fake CUDA core.
pub fn core() -> Result<&'static Client> {
    Ok(client()?)
}

/// Bytes spanned by a column-major `rows x cols` matrix of `size`-byte elements with leading
/// dimension `ld` (0 for an empty matrix). `ld` must be at least `rows`, as cuBLAS requires.
pub fn extent(rows: usize, cols: usize, ld: usize, size: usize) -> Result<usize> {
    if rows == 0 || cols == 0 {
        return Ok(0);
    }
    if ld < rows {
        return Err(BlasError::invalid(format!(
            "leading dimension {ld} < {rows} rows"
        )));
    }
    (cols - 1)
        .checked_mul(ld)
        .and_then(|e| e.checked_add(rows))
        .and_then(|e| e.checked_mul(size))
        .ok_or_else(|| BlasError::invalid("matrix extent overflows"))
}

/// Allocations already found to hold earlier ranges, so a strided batch costs one core lookup
/// per allocation rather than one per item.
#[derive(Default)]
struct Known(Vec<(usize, usize)>);

impl Known {
    /// Checks that `[ptr, ptr + len)` lies inside one device or pinned host allocation of
    /// the core (`CUBLAS_STATUS_INVALID_VALUE` otherwise).
    fn check(&mut self, c: &Client, what: &str, ptr: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let end = ptr
            .checked_add(len)
            .ok_or_else(|| BlasError::invalid(format!("{what} {ptr:#x} + {len} overflows")))?;
        if self.0.iter().any(|&(b, s)| ptr >= b && end <= b + s) {
            return Ok(());
        }
        if ptr == 0 {
            return Err(BlasError::invalid(format!("{what} is null")));
        }
        let info = c
            .pointer_info(ptr)
            .map_err(|e| BlasError::invalid(format!("{what} {ptr:#x} is not CUDA memory: {e}")))?;
        if info.kind == 0 {
            return Err(BlasError::invalid(format!(
                "{what} {ptr:#x} is not memory allocated through CUDA"
            )));
        }
        if end > info.base + info.size {
            return Err(BlasError::invalid(format!(
                "{what} {ptr:#x} + {len} bytes runs past its allocation ({:#x} + {} bytes)",
                info.base, info.size
            )));
        }
        self.0.push((info.base, info.size));
        Ok(())
    }
}

fn may_be_nonzero(s: Scalar) -> bool {
    s != Scalar::Value(0.0)
}

/// Checks every range the GEMM reads or writes: A and B unless alpha is zero or k is 0, C
/// unless beta is zero, D, the bias vectors, and alpha and beta in device memory.
pub fn check(c: &Client, g: &Gemm) -> Result<()> {
    let mut known = Known::default();
    for (name, s) in [("alpha", g.alpha), ("beta", g.beta)] {
        if let Scalar::At(ptr, dtype) = s {
            known.check(c, name, ptr, dtype.size())?;
        }
    }
    let stored =
        |trans: bool, rows: usize, cols: usize| if trans { (cols, rows) } else { (rows, cols) };
    let (ar, ac) = stored(g.transa, g.m, g.k);
    let (br, bc) = stored(g.transb, g.k, g.n);
    let a_len = extent(ar, ac, g.a.ld, g.a.dtype.size())?;
    let b_len = extent(br, bc, g.b.ld, g.b.dtype.size())?;
    let c_len = extent(g.m, g.n, g.c.ld, g.c.dtype.size())?;
    let d_len = extent(g.m, g.n, g.d.ld, g.d.dtype.size())?;
    let reads_ab = g.k > 0 && may_be_nonzero(g.alpha);
    let reads_c = may_be_nonzero(g.beta);
    for item in &g.items {
        if reads_ab {
            known.check(c, "A", item.a, a_len)?;
            known.check(c, "B", item.b, b_len)?;
        }
        if reads_c {
            known.check(c, "C", item.c, c_len)?;
        }
        known.check(c, "D", item.d, d_len)?;
        if item.bias != 0 {
            known.check(c, "bias", item.bias, g.m * g.bias_type.size())?;
        }
    }
    Ok(())
}

/// The compute model's precision code for a GEMM (`fake_cuda_abi::PRECISION_*`): f16 and
/// bf16 inputs on their tensor cores, f64, and f32 in TF32 when the compute type or the
/// handle's math mode (`CUBLAS_TF32_TENSOR_OP_MATH`, `tf32`) allows it, else at the f32 rate.
fn precision_code(input: DType, compute: Compute, tf32: bool) -> i32 {
    match (input, compute) {
        (DType::F16, _) => 3,
        (DType::BF16, _) => 4,
        (_, Compute::F64) => 0,
        (_, Compute::Tf32) => 2,
        _ if tf32 => 2,
        _ => 1,
    }
}

/// What a GEMM costs the compute model (the model torch's ops are priced with too): its shape
/// on the tensor cores and its operands' bytes.
pub fn cost(g: &Gemm, tf32: bool) -> CKernelCost {
    let batch = g.items.len() as f64;
    let flops = 2.0 * g.m as f64 * g.n as f64 * g.k as f64 * batch;
    let bytes = batch
        * (g.m as f64 * g.k as f64 * g.a.dtype.size() as f64
            + g.k as f64 * g.n as f64 * g.b.dtype.size() as f64
            + g.m as f64 * g.n as f64 * (g.c.dtype.size() + g.d.dtype.size()) as f64);
    CKernelCost {
        flops,
        bytes,
        unit: fake_cuda_abi::UNIT_TENSOR,
        precision: precision_code(g.a.dtype, g.compute, tf32),
        batch: g.items.len() as u64,
        m: g.m as u64,
        n: g.n as u64,
        k: g.k as u64,
        ..CKernelCost::default()
    }
}

unsafe extern "C" fn run_job(data: *mut c_void) {
    // SAFETY: `data` is the Box `enqueue` handed to the core, alive until `release_job`.
    let g = unsafe { &*data.cast::<Gemm>() };
    ffi_boundary::callback::<crate::types::BlasError, ()>(
        "GEMM stream work",
        || (),
        // SAFETY: `enqueue` checked every range the GEMM touches before submitting it.
        || unsafe { g.run() },
    );
}

unsafe extern "C" fn release_job(data: *mut c_void) {
    // SAFETY: the core releases the Box from `enqueue` exactly once.
    drop(unsafe { Box::from_raw(data.cast::<Gemm>()) });
}

/// Checks the GEMM's operands and enqueues it on `stream` (the core runs it before returning
/// unless the stream is capturing a graph); `name` is the cuBLAS function called, which
/// the kernel-time table knows the launch by.
pub fn enqueue(stream: u64, g: Gemm, tf32: bool, name: &str) -> Result<()> {
    let c = core()?;
    check(c, &g)?;
    if g.items.is_empty() || g.m == 0 || g.n == 0 {
        return Ok(());
    }
    let cost = cost(&g, tf32);
    let name = CString::new(name).map_err(|_| BlasError::invalid("GEMM name holds a NUL"))?;
    let job = Box::into_raw(Box::new(g));
    // SAFETY: the core owns `job` from here on: `run_job` may run it (its ranges were checked
    // above) until `release_job` frees it, exactly once, without calling into the core.
    unsafe {
        c.launch_compute(
            stream,
            cost,
            &name,
            std::ptr::null(),
            Some(run_job),
            job.cast(),
            Some(release_job),
        )
    }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents() {
        assert_eq!(extent(3, 2, 5, 4).ok(), Some((5 + 3) * 4));
        assert_eq!(extent(0, 9, 0, 4).ok(), Some(0));
        assert!(extent(4, 2, 3, 4).is_err());
        assert!(extent(2, usize::MAX / 2, 4, 8).is_err());
    }

    #[test]
    fn precisions_follow_the_inputs_and_the_math_mode() {
        assert_eq!(precision_code(DType::F16, Compute::F32, false), 3);
        assert_eq!(precision_code(DType::BF16, Compute::F32, false), 4);
        assert_eq!(precision_code(DType::F64, Compute::F64, false), 0);
        assert_eq!(precision_code(DType::F32, Compute::Tf32, false), 2);
        assert_eq!(precision_code(DType::F32, Compute::F32, true), 2);
        assert_eq!(precision_code(DType::F32, Compute::F32, false), 1);
    }
}
