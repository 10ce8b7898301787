//! The one driver the fake CUDA stack pretends to be, shared by every front-end so that all
//! of them agree: `cuDriverGetVersion` (`libcuda.so.1`), `cudaDriverGetVersion` (both runtimes)
//! and NVML's driver and CUDA driver versions (`libnvidia-ml.so.1`).
//!
//! A real CUDA runtime refuses to start ("The NVIDIA driver on your system is too old") when
//! the driver's CUDA version is below its own, so the driver version must be at least the
//! newest runtime we ship (`libcudart.so.13`, CUDA 13.5); a test checks it against both
//! runtimes' `cudaRuntimeGetVersion`.

/// The CUDA version of the driver, `1000 * major + 10 * minor` (CUDA 13.5). At least the
/// runtime version of every `libcudart` front-end.
pub const DRIVER_CUDA_VERSION: i32 = 13050;

/// The driver version string NVML reports (`nvmlSystemGetDriverVersion`). Not a released
/// driver: a made-up version of a branch new enough for CUDA 13.5, recognisable as simulated.
pub const DRIVER_VERSION: &str = "600.00.00";

/// NVML's own version string (`nvmlSystemGetNVMLVersion`): the CUDA major, then the driver.
pub const NVML_VERSION: &str = "13.600.00.00";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_agree_with_the_cuda_version() {
        let major = DRIVER_CUDA_VERSION / 1000;
        assert_eq!(NVML_VERSION, format!("{major}.{DRIVER_VERSION}"));
    }
}
