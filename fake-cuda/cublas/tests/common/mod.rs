//! Device memory and reference GEMMs for the tests: buffers allocated through the fake CUDA
//! core (device memory is host memory, so the tests read and write it directly) and a naive
//! triple-loop GEMM in f64, written independently of the libraries' GEMM path.

#![allow(dead_code)]

use fake_cuda_client::client;

/// A device allocation holding `len` elements of `T`.
pub struct Dev<T> {
    pub ptr: usize,
    pub len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Copy> Dev<T> {
    /// Allocates and fills with `values`.
    pub fn from(values: &[T]) -> Dev<T> {
        let bytes = std::mem::size_of_val(values).max(1);
        let ptr = client()
            .expect("core")
            .malloc(0, bytes)
            .expect("cudaMalloc");
        // SAFETY: a fresh device allocation of `bytes` bytes, which is host memory here.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), ptr as *mut T, values.len()) };
        Dev {
            ptr,
            len: values.len(),
            _t: std::marker::PhantomData,
        }
    }

    /// The current contents.
    pub fn read(&self) -> Vec<T> {
        // SAFETY: `len` elements of `T` live at `ptr` (written by `from` or a GEMM).
        unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.len) }.to_vec()
    }

    pub fn at(&self, index: usize) -> usize {
        self.ptr + index * std::mem::size_of::<T>()
    }

    pub fn void(&self) -> *mut std::ffi::c_void {
        self.ptr as *mut std::ffi::c_void
    }
}

impl<T> Drop for Dev<T> {
    fn drop(&mut self) {
        let _ = client().map(|c| c.free(self.ptr));
    }
}

/// Deterministic values that f16 and bf16 represent exactly: multiples of 1/8 in [-2, 2).
pub fn values(seed: u64, len: usize) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 32) as f64 / 8.0 - 2.0
        })
        .collect()
}

/// `alpha op(A) op(B) + beta C` (column-major, C m x n with leading dimension ldc); C is not
/// read when beta is 0.
#[allow(clippy::too_many_arguments)]
pub fn reference(
    (ta, tb): (bool, bool),
    (m, n, k): (usize, usize, usize),
    alpha: f64,
    (a, lda): (&[f64], usize),
    (b, ldb): (&[f64], usize),
    beta: f64,
    (c, ldc): (&[f64], usize),
) -> Vec<f64> {
    let mut out = c.to_vec();
    for j in 0..n {
        for i in 0..m {
            let mut sum = 0.0;
            for p in 0..k {
                let x = if ta { a[p + i * lda] } else { a[i + p * lda] };
                let y = if tb { b[j + p * ldb] } else { b[p + j * ldb] };
                sum += x * y;
            }
            let prior = if beta == 0.0 {
                0.0
            } else {
                beta * c[i + j * ldc]
            };
            out[i + j * ldc] = alpha * sum + prior;
        }
    }
    out
}

/// Asserts `got` and `want` agree within `tol` relative to max(1, |want|) on the m x n
/// entries (ld `ld`); padding rows must keep `pad` values.
pub fn assert_close(got: &[f64], want: &[f64], (m, n, ld): (usize, usize, usize), tol: f64) {
    assert_eq!(got.len(), want.len());
    for j in 0..n {
        for i in 0..ld {
            let (g, w) = (got[i + j * ld], want[i + j * ld]);
            if i < m {
                assert!(
                    (g - w).abs() <= tol * w.abs().max(1.0),
                    "({i}, {j}): got {g}, want {w}"
                );
            } else {
                assert!(
                    g == w || (g.is_nan() && w.is_nan()),
                    "padding ({i}, {j}) changed: {g} vs {w}"
                );
            }
        }
    }
}
