//! Column-major GEMMs on host memory: `D = act(alpha * op(A) op(B) + beta * C + bias)` for
//! each item of a batch, with f16/bf16/f32/f64 operands multiplied by `matrixmultiply` in f32
//! or f64.
//!
//! Operands of the compute precision are read in place (strides express the transposes);
//! others are first converted into a contiguous buffer. Products are accumulated into a
//! scratch matrix, then beta, the bias and the activation are applied element by element as
//! `D` is written, so `C` may alias `D` and `C` is not read at all when beta is zero.

use crate::types::{Activation, Compute, DType};
use half::{bf16, f16};

/// One matrix operand of every item: its element type and column-major leading dimension.
#[derive(Clone, Copy, Debug)]
pub struct Operand {
    /// Element type.
    pub dtype: DType,
    /// Leading dimension in elements (distance between columns).
    pub ld: usize,
}

/// The addresses of one batch item's matrices (0 for an absent C or bias).
#[derive(Clone, Copy, Debug, Default)]
pub struct Item {
    /// op(A)'s storage.
    pub a: usize,
    /// op(B)'s storage.
    pub b: usize,
    /// C (read when beta is not zero).
    pub c: usize,
    /// D (written).
    pub d: usize,
    /// Bias vector of `m` elements of the bias type (0: none).
    pub bias: usize,
}

/// Where alpha or beta comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A value read when the call was made (host pointer mode).
    Value(f64),
    /// A pointer to a value of this type, read when the work runs (device pointer mode).
    At(usize, DType),
}

/// A complete GEMM, ready to run.
#[derive(Clone, Debug)]
pub struct Gemm {
    /// Rows of op(A), C and D.
    pub m: usize,
    /// Columns of op(B), C and D.
    pub n: usize,
    /// Columns of op(A), rows of op(B).
    pub k: usize,
    /// Whether A is transposed.
    pub transa: bool,
    /// Whether B is transposed.
    pub transb: bool,
    /// A's type and leading dimension.
    pub a: Operand,
    /// B's.
    pub b: Operand,
    /// C's.
    pub c: Operand,
    /// D's (for `cublas*gemm*`, the same as C).
    pub d: Operand,
    /// The bias vector's type (used when items carry a bias).
    pub bias_type: DType,
    /// alpha.
    pub alpha: Scalar,
    /// beta.
    pub beta: Scalar,
    /// Accumulation precision.
    pub compute: Compute,
    /// Activation applied last.
    pub activation: Activation,
    /// The batch.
    pub items: Vec<Item>,
}

/// Reads element `index` of a `dtype` array at `base` as f64.
///
/// # Safety
/// `base + index * dtype.size()` must be readable for `dtype.size()` bytes.
pub unsafe fn load(base: usize, index: usize, dtype: DType) -> f64 {
    let at = base + index * dtype.size();
    // SAFETY: readable by this function's contract; unaligned reads are allowed.
    unsafe {
        match dtype {
            DType::F16 => f16::from_bits((at as *const u16).read_unaligned()).to_f64(),
            DType::BF16 => bf16::from_bits((at as *const u16).read_unaligned()).to_f64(),
            DType::F32 => f64::from((at as *const f32).read_unaligned()),
            DType::F64 => (at as *const f64).read_unaligned(),
        }
    }
}

/// Writes `value` as element `index` of a `dtype` array at `base`, rounding to nearest.
///
/// # Safety
/// `base + index * dtype.size()` must be writable for `dtype.size()` bytes.
unsafe fn store(base: usize, index: usize, dtype: DType, value: f64) {
    let at = base + index * dtype.size();
    // SAFETY: writable by this function's contract; unaligned writes are allowed.
    unsafe {
        match dtype {
            DType::F16 => (at as *mut u16).write_unaligned(f16::from_f64(value).to_bits()),
            DType::BF16 => (at as *mut u16).write_unaligned(bf16::from_f64(value).to_bits()),
            DType::F32 => (at as *mut f32).write_unaligned(value as f32),
            DType::F64 => (at as *mut f64).write_unaligned(value),
        }
    }
}

/// The precision `matrixmultiply` multiplies in.
trait Real: Copy + Default + 'static {
    const DTYPE: DType;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    /// `c = alpha * a b` (m x k times k x n; c column-major, contiguous, not read).
    ///
    /// # Safety
    /// `a` and `b` must be readable at every index their strides reach.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: &mut [Self],
    );
}

impl Real for f32 {
    const DTYPE: DType = DType::F32;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        c: &mut [f32],
    ) {
        assert!(c.len() >= m * n, "scratch matrix too small");
        // SAFETY: a and b by this function's contract; c is m x n contiguous column-major
        // (row stride 1, column stride m), and beta 0 means it is only written.
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                alpha,
                a,
                rsa,
                csa,
                b,
                rsb,
                csb,
                0.0,
                c.as_mut_ptr(),
                1,
                m as isize,
            )
        }
    }
}

impl Real for f64 {
    const DTYPE: DType = DType::F64;
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f64,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        c: &mut [f64],
    ) {
        assert!(c.len() >= m * n, "scratch matrix too small");
        // SAFETY: as for f32.
        unsafe {
            matrixmultiply::dgemm(
                m,
                k,
                n,
                alpha,
                a,
                rsa,
                csa,
                b,
                rsb,
                csb,
                0.0,
                c.as_mut_ptr(),
                1,
                m as isize,
            )
        }
    }
}

/// An operand as `matrixmultiply` reads it: a pointer and the row and column strides of
/// op(X), keeping the converted copy (if any) alive.
struct View<R> {
    ptr: *const R,
    rs: isize,
    cs: isize,
    _copy: Vec<R>,
}

/// op(X) of `rows x cols` (after the operation) stored at `base`.
///
/// # Safety
/// The stored matrix (`cols x rows` if transposed, else `rows x cols`, leading dimension
/// `op.ld`) must be readable at `base`.
unsafe fn view<R: Real>(
    base: usize,
    op: Operand,
    trans: bool,
    rows: usize,
    cols: usize,
) -> View<R> {
    let (stored_rows, stored_cols) = if trans { (cols, rows) } else { (rows, cols) };
    let aligned = base % std::mem::align_of::<R>() == 0;
    let (ptr, ld, copy) = if op.dtype == R::DTYPE && aligned {
        (base as *const R, op.ld, Vec::new())
    } else {
        let mut copy = Vec::with_capacity(stored_rows * stored_cols);
        for j in 0..stored_cols {
            for i in 0..stored_rows {
                // SAFETY: (i, j) is inside the stored matrix, readable by the contract.
                copy.push(R::from_f64(unsafe { load(base, i + j * op.ld, op.dtype) }));
            }
        }
        (copy.as_ptr(), stored_rows.max(1), copy)
    };
    let (rs, cs) = if trans {
        (ld as isize, 1)
    } else {
        (1, ld as isize)
    };
    View {
        ptr,
        rs,
        cs,
        _copy: copy,
    }
}

impl Gemm {
    /// Reads a scalar.
    ///
    /// # Safety
    /// A device scalar's address must be readable.
    unsafe fn scalar(s: Scalar) -> f64 {
        match s {
            Scalar::Value(v) => v,
            // SAFETY: readable by this function's contract.
            Scalar::At(ptr, dtype) => unsafe { load(ptr, 0, dtype) },
        }
    }

    /// Computes every item.
    ///
    /// # Safety
    /// Every item's matrices (and a device alpha or beta) must be readable, and D writable,
    /// at the extents the dimensions and leading dimensions give (as
    /// [`crate::submit::check`] verifies).
    pub unsafe fn run(&self) {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            match self.compute {
                Compute::F64 => self.run_in::<f64>(),
                Compute::F32 | Compute::Tf32 | Compute::F16 => self.run_in::<f32>(),
            }
        }
    }

    /// # Safety
    /// As [`Gemm::run`].
    unsafe fn run_in<R: Real>(&self) {
        // SAFETY: forwarded from the contract of `run`.
        let (alpha, beta) = unsafe { (Gemm::scalar(self.alpha), Gemm::scalar(self.beta)) };
        let (m, n, k) = (self.m, self.n, self.k);
        let mut scratch = vec![R::default(); m * n];
        for item in &self.items {
            if m == 0 || n == 0 {
                break;
            }
            scratch.fill(R::default());
            if k > 0 && alpha != 0.0 {
                // SAFETY: A and B are readable at their extents (the contract of `run`).
                let (a, b) = unsafe {
                    (
                        view::<R>(item.a, self.a, self.transa, m, k),
                        view::<R>(item.b, self.b, self.transb, k, n),
                    )
                };
                // SAFETY: the views cover op(A) (m x k) and op(B) (k x n).
                unsafe {
                    R::gemm(
                        m,
                        k,
                        n,
                        R::from_f64(alpha),
                        a.ptr,
                        a.rs,
                        a.cs,
                        b.ptr,
                        b.rs,
                        b.cs,
                        &mut scratch,
                    )
                };
            }
            for j in 0..n {
                for i in 0..m {
                    let mut v = scratch[i + j * m].to_f64();
                    if self.compute == Compute::F16 {
                        v = f16::from_f64(v).to_f64();
                    }
                    if beta != 0.0 {
                        // SAFETY: C is readable when beta is not zero (contract of `run`).
                        v += beta * unsafe { load(item.c, i + j * self.c.ld, self.c.dtype) };
                    }
                    if item.bias != 0 {
                        // SAFETY: the bias holds m elements (contract of `run`).
                        v += unsafe { load(item.bias, i, self.bias_type) };
                    }
                    v = self.activation.apply(v);
                    if R::DTYPE == DType::F32 {
                        // Results of f32 compute are f32 values before any narrower output.
                        v = f64::from(v as f32);
                    }
                    // SAFETY: D is writable at its extent (contract of `run`).
                    unsafe { store(item.d, i + j * self.d.ld, self.d.dtype, v) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm(m: usize, n: usize, k: usize, dtype: DType, compute: Compute) -> Gemm {
        let op = |ld| Operand { dtype, ld };
        Gemm {
            m,
            n,
            k,
            transa: false,
            transb: false,
            a: op(m),
            b: op(k),
            c: op(m),
            d: op(m),
            bias_type: dtype,
            alpha: Scalar::Value(1.0),
            beta: Scalar::Value(0.0),
            compute,
            activation: Activation::None,
            items: Vec::new(),
        }
    }

    #[test]
    fn two_by_two_in_f64_and_through_bf16() {
        // A = [1 2; 3 4], B = [5 6; 7 8] column-major; A B = [19 22; 43 50].
        let a = [1.0f64, 3.0, 2.0, 4.0];
        let b = [5.0f64, 7.0, 6.0, 8.0];
        let mut d = [f64::NAN; 4];
        let mut g = gemm(2, 2, 2, DType::F64, Compute::F64);
        g.items.push(Item {
            a: a.as_ptr() as usize,
            b: b.as_ptr() as usize,
            c: d.as_ptr() as usize,
            d: d.as_mut_ptr() as usize,
            bias: 0,
        });
        // SAFETY: all matrices are local 2 x 2 arrays.
        unsafe { g.run() };
        assert_eq!(d, [19.0, 43.0, 22.0, 50.0]);

        let to = |v: &[f64]| v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>();
        let (a16, b16) = (to(&a), to(&b));
        let mut d16 = [bf16::NAN; 4];
        let mut g = gemm(2, 2, 2, DType::BF16, Compute::F32);
        g.transa = true;
        g.items.push(Item {
            a: a16.as_ptr() as usize,
            b: b16.as_ptr() as usize,
            c: 0,
            d: d16.as_mut_ptr() as usize,
            bias: 0,
        });
        // SAFETY: all matrices are local 2 x 2 arrays; C is not read with beta 0.
        unsafe { g.run() };
        // A^T B = [1 3; 2 4] [5 6; 7 8] = [26 30; 38 44].
        let got: Vec<f64> = d16.iter().map(|x| x.to_f64()).collect();
        assert_eq!(got, [26.0, 38.0, 30.0, 44.0]);
    }
}
