//! cuBLAS's public enumerations and status codes, with the values the cuBLAS documentation
//! (docs.nvidia.com/cuda/cublas, "cuBLAS Datatypes Reference" and "cuBLASLt Datatypes
//! Reference") and CUDA's `cudaDataType` give them, and the error type of both libraries.

use fake_cuda_abi::error::{CoreError, Status as CoreStatus};
use std::ffi::{c_int, CStr};

/// `cublasStatus_t`.
pub type CublasStatus = c_int;

/// `CUBLAS_STATUS_SUCCESS`.
pub const SUCCESS: CublasStatus = 0;
/// `CUBLAS_STATUS_NOT_INITIALIZED`.
pub const NOT_INITIALIZED: CublasStatus = 1;
/// `CUBLAS_STATUS_ALLOC_FAILED`.
pub const ALLOC_FAILED: CublasStatus = 3;
/// `CUBLAS_STATUS_INVALID_VALUE`.
pub const INVALID_VALUE: CublasStatus = 7;
/// `CUBLAS_STATUS_ARCH_MISMATCH`.
pub const ARCH_MISMATCH: CublasStatus = 8;
/// `CUBLAS_STATUS_MAPPING_ERROR`.
pub const MAPPING_ERROR: CublasStatus = 11;
/// `CUBLAS_STATUS_EXECUTION_FAILED`.
pub const EXECUTION_FAILED: CublasStatus = 13;
/// `CUBLAS_STATUS_INTERNAL_ERROR`.
pub const INTERNAL_ERROR: CublasStatus = 14;
/// `CUBLAS_STATUS_NOT_SUPPORTED`.
pub const NOT_SUPPORTED: CublasStatus = 15;
/// `CUBLAS_STATUS_LICENSE_ERROR`.
pub const LICENSE_ERROR: CublasStatus = 16;

/// `cublasGetStatusName`: the enumerator's name.
pub fn status_name(status: CublasStatus) -> &'static CStr {
    match status {
        SUCCESS => c"CUBLAS_STATUS_SUCCESS",
        NOT_INITIALIZED => c"CUBLAS_STATUS_NOT_INITIALIZED",
        ALLOC_FAILED => c"CUBLAS_STATUS_ALLOC_FAILED",
        INVALID_VALUE => c"CUBLAS_STATUS_INVALID_VALUE",
        ARCH_MISMATCH => c"CUBLAS_STATUS_ARCH_MISMATCH",
        MAPPING_ERROR => c"CUBLAS_STATUS_MAPPING_ERROR",
        EXECUTION_FAILED => c"CUBLAS_STATUS_EXECUTION_FAILED",
        INTERNAL_ERROR => c"CUBLAS_STATUS_INTERNAL_ERROR",
        NOT_SUPPORTED => c"CUBLAS_STATUS_NOT_SUPPORTED",
        LICENSE_ERROR => c"CUBLAS_STATUS_LICENSE_ERROR",
        _ => c"CUBLAS_STATUS_UNKNOWN",
    }
}

/// `cublasGetStatusString`: a description of the status.
pub fn status_string(status: CublasStatus) -> &'static CStr {
    match status {
        SUCCESS => c"success",
        NOT_INITIALIZED => c"the library was not initialized",
        ALLOC_FAILED => c"the resource allocation failed",
        INVALID_VALUE => c"an invalid numeric value was used as an argument",
        ARCH_MISMATCH => c"an absent device architectural feature is required",
        MAPPING_ERROR => c"an access to GPU memory space failed",
        EXECUTION_FAILED => c"the GPU program failed to execute",
        INTERNAL_ERROR => c"an internal operation failed",
        NOT_SUPPORTED => c"the functionality requested is not supported",
        LICENSE_ERROR => c"error detected trying to check the license",
        _ => c"unknown error",
    }
}

/// Element types (`cudaDataType`): the real types the GEMMs take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// `CUDA_R_16F` (2): IEEE half.
    F16,
    /// `CUDA_R_16BF` (14): bfloat16.
    BF16,
    /// `CUDA_R_32F` (0).
    F32,
    /// `CUDA_R_64F` (1).
    F64,
}

impl DType {
    /// The type of a `cudaDataType` value; other types (complex, integer, fp8) are not
    /// supported.
    pub fn from_cuda(value: c_int) -> Result<DType> {
        match value {
            0 => Ok(DType::F32),
            1 => Ok(DType::F64),
            2 => Ok(DType::F16),
            14 => Ok(DType::BF16),
            v => Err(BlasError::not_supported(format!("cudaDataType {v}"))),
        }
    }

    /// The `cudaDataType` value.
    pub fn to_cuda(self) -> c_int {
        match self {
            DType::F32 => 0,
            DType::F64 => 1,
            DType::F16 => 2,
            DType::BF16 => 14,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
            DType::F64 => 8,
        }
    }
}

/// The precision products are accumulated in (`cublasComputeType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compute {
    /// `CUBLAS_COMPUTE_16F[_PEDANTIC]` (64, 65): accumulated in f32 here, the result rounded
    /// through f16.
    F16,
    /// `CUBLAS_COMPUTE_32F[_PEDANTIC|_FAST_16F|_FAST_16BF]` (68, 69, 74, 75).
    F32,
    /// `CUBLAS_COMPUTE_32F_FAST_TF32` (77): computed in full f32 (the CPU has no TF32).
    Tf32,
    /// `CUBLAS_COMPUTE_64F[_PEDANTIC]` (70, 71).
    F64,
}

impl Compute {
    /// The compute type of a `cublasComputeType_t`, or of the `cudaDataType` values that
    /// `cublasGemmEx` took before CUDA 11 (`CUDA_R_16F`, `CUDA_R_32F`, `CUDA_R_64F`).
    /// Integer compute (`CUBLAS_COMPUTE_32I`, 72 and 73) is not supported.
    pub fn from_cublas(value: c_int) -> Result<Compute> {
        match value {
            64 | 65 | 2 => Ok(Compute::F16),
            68 | 69 | 74 | 75 | 0 => Ok(Compute::F32),
            77 => Ok(Compute::Tf32),
            70 | 71 | 1 => Ok(Compute::F64),
            72 | 73 => Err(BlasError::not_supported("integer compute type")),
            v => Err(BlasError::invalid(format!("compute type {v}"))),
        }
    }

    /// The type of alpha and beta for this compute type (`cublasGemmEx`'s rule; the default
    /// scale type of a cuBLASLt matmul descriptor).
    pub fn scale_type(self) -> DType {
        match self {
            Compute::F16 => DType::F16,
            Compute::F32 | Compute::Tf32 => DType::F32,
            Compute::F64 => DType::F64,
        }
    }
}

/// `cublasOperation_t` on real matrices: `CUBLAS_OP_N` (0) is none, `CUBLAS_OP_T` (1) and
/// `CUBLAS_OP_C` (2) transpose. Returns whether the operand is transposed.
pub fn transposed(op: c_int) -> Result<bool> {
    match op {
        0 => Ok(false),
        1 | 2 => Ok(true),
        v => Err(BlasError::invalid(format!("cublasOperation_t {v}"))),
    }
}

/// The activation a cuBLASLt epilogue applies last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// None (`CUBLASLT_EPILOGUE_DEFAULT`, `_BIAS`).
    None,
    /// max(x, 0) (`_RELU`, `_RELU_BIAS`).
    Relu,
    /// GELU in its tanh form (`_GELU`, `_GELU_BIAS`).
    Gelu,
}

impl Activation {
    /// Applies the activation.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Activation::None => x,
            Activation::Relu => x.max(0.0),
            Activation::Gelu => {
                let inner = 0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x);
                0.5 * x * (1.0 + inner.tanh())
            }
        }
    }
}

/// `cublasLtEpilogue_t` values supported: DEFAULT 1, RELU 2, BIAS 4, RELU_BIAS 6, GELU 32,
/// GELU_BIAS 36. Returns (activation, whether a bias is added). The auxiliary-output and
/// gradient epilogues are not supported.
pub fn epilogue(value: u32) -> Result<(Activation, bool)> {
    match value {
        1 => Ok((Activation::None, false)),
        2 => Ok((Activation::Relu, false)),
        4 => Ok((Activation::None, true)),
        6 => Ok((Activation::Relu, true)),
        32 => Ok((Activation::Gelu, false)),
        36 => Ok((Activation::Gelu, true)),
        v => Err(BlasError::not_supported(format!("cublasLtEpilogue_t {v}"))),
    }
}

/// An error of libcublas or libcublasLt.
#[derive(Debug, thiserror::Error)]
pub enum BlasError {
    /// Reported by the fake CUDA core.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Decided here.
    #[error("{message}")]
    Status {
        /// The `cublasStatus_t`.
        code: CublasStatus,
        /// What was wrong.
        message: String,
    },
}

impl BlasError {
    /// `CUBLAS_STATUS_INVALID_VALUE` with a message.
    pub fn invalid(message: impl Into<String>) -> BlasError {
        BlasError::Status {
            code: INVALID_VALUE,
            message: message.into(),
        }
    }

    /// `CUBLAS_STATUS_NOT_SUPPORTED` with a message.
    pub fn not_supported(message: impl Into<String>) -> BlasError {
        BlasError::Status {
            code: NOT_SUPPORTED,
            message: message.into(),
        }
    }

    /// The `cublasStatus_t` of this error.
    pub fn code(&self) -> CublasStatus {
        match self {
            BlasError::Status { code, .. } => *code,
            BlasError::Core(CoreError::Load(_)) => NOT_INITIALIZED,
            BlasError::Core(e) => match e.status() {
                CoreStatus::InvalidValue
                | CoreStatus::InvalidPointer
                | CoreStatus::InvalidHandle
                | CoreStatus::InvalidDevice => INVALID_VALUE,
                CoreStatus::OutOfMemory => ALLOC_FAILED,
                CoreStatus::NotSupported => NOT_SUPPORTED,
                _ => EXECUTION_FAILED,
            },
        }
    }
}

impl ffi_boundary::FfiError for BlasError {
    const LIBRARY: ffi_boundary::Library = ffi_boundary::Library::new("libcublas", INTERNAL_ERROR);

    fn code(&self) -> i32 {
        BlasError::code(self)
    }
}

/// Result of the BLAS libraries.
pub type Result<T> = std::result::Result<T, BlasError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_strings_cover_every_status() {
        for code in [0, 1, 3, 7, 8, 11, 13, 14, 15, 16] {
            assert_ne!(status_name(code), c"CUBLAS_STATUS_UNKNOWN", "{code}");
            assert_ne!(status_string(code), c"unknown error", "{code}");
        }
        assert_eq!(status_name(15), c"CUBLAS_STATUS_NOT_SUPPORTED");
        assert_eq!(status_name(99), c"CUBLAS_STATUS_UNKNOWN");
    }

    #[test]
    fn documented_enum_values() {
        assert_eq!(DType::from_cuda(14).ok(), Some(DType::BF16));
        assert_eq!(DType::from_cuda(2).ok(), Some(DType::F16));
        assert_eq!(DType::from_cuda(4).map_err(|e| e.code()).err(), Some(15));
        assert_eq!(Compute::from_cublas(77).ok(), Some(Compute::Tf32));
        assert_eq!(Compute::from_cublas(70).ok(), Some(Compute::F64));
        assert_eq!(Compute::from_cublas(64).ok(), Some(Compute::F16));
        assert_eq!(
            Compute::from_cublas(72).map_err(|e| e.code()).err(),
            Some(15)
        );
        assert_eq!(epilogue(6).ok(), Some((Activation::Relu, true)));
        assert_eq!(epilogue(36).ok(), Some((Activation::Gelu, true)));
        assert_eq!(epilogue(130).map_err(|e| e.code()).err(), Some(15));
        assert!(transposed(3).is_err());
    }

    #[test]
    fn activations() {
        assert_eq!(Activation::Relu.apply(-2.0), 0.0);
        assert_eq!(Activation::Relu.apply(3.0), 3.0);
        assert!(Activation::Gelu.apply(0.0).abs() < 1e-12);
        // gelu(1) with the tanh form is 0.841192
        assert!((Activation::Gelu.apply(1.0) - 0.841_192).abs() < 1e-5);
        assert!((Activation::Gelu.apply(-3.0) + 0.003_637).abs() < 1e-5);
    }
}
