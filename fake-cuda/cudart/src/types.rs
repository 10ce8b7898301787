//! CUDA runtime ABI types, laid out as on x86-64 Linux with the sizes and offsets of the CUDA
//! 12.9 and 13.5 headers (printed with `offsetof`) asserted at compile time. Field names follow the CUDA headers so
//! the structs can be read next to NVIDIA's documentation.
//!
//! One definition serves both runtimes: fields that CUDA 13 removed are `#[cfg(not(cuda13))]`,
//! fields it added are `#[cfg(cuda13)]` (build.rs sets `cuda13` for `libcudart.so.13`).

#![allow(non_snake_case, non_camel_case_types)]

use std::ffi::{c_char, c_void};
use std::mem::{offset_of, size_of};

/// `cudaError_t`.
pub type cudaError_t = i32;
/// `cudaStream_t`: an opaque handle (0 = legacy default stream).
pub type cudaStream_t = *mut c_void;
/// `cudaEvent_t`.
pub type cudaEvent_t = *mut c_void;

/// `dim3` / `uint3`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct dim3 {
    /// x extent.
    pub x: u32,
    /// y extent.
    pub y: u32,
    /// z extent.
    pub z: u32,
}

/// `cudaUUID_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct cudaUUID_t {
    /// 16 UUID bytes.
    pub bytes: [c_char; 16],
}

/// `cudaIpcMemHandle_t` and `cudaIpcEventHandle_t` (both 64 opaque bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cudaIpcHandle {
    /// Opaque bytes (our encoding: fake_cuda_core::ipc).
    pub reserved: [u8; 64],
}

/// `struct cudaPointerAttributes` (24 bytes in CUDA 12, 88 in CUDA 13).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cudaPointerAttributes {
    /// `cudaMemoryType`.
    pub r#type: i32,
    /// Device ordinal.
    pub device: i32,
    /// Device address.
    pub devicePointer: *mut c_void,
    /// Host address.
    pub hostPointer: *mut c_void,
    /// CUDA 13: a union of `int localityDomainOrdinal` and `long unused`.
    #[cfg(cuda13)]
    pub localityDomainOrdinal: i64,
    /// CUDA 13: reserved.
    #[cfg(cuda13)]
    pub reserved: [i64; 7],
}

/// `struct cudaFuncAttributes`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct cudaFuncAttributes {
    pub sharedSizeBytes: usize,
    pub constSizeBytes: usize,
    pub localSizeBytes: usize,
    pub maxThreadsPerBlock: i32,
    pub numRegs: i32,
    pub ptxVersion: i32,
    pub binaryVersion: i32,
    pub cacheModeCA: i32,
    pub maxDynamicSharedSizeBytes: i32,
    pub preferredShmemCarveout: i32,
    pub clusterDimMustBeSet: i32,
    pub requiredClusterWidth: i32,
    pub requiredClusterHeight: i32,
    pub requiredClusterDepth: i32,
    pub clusterSchedulingPolicyPreference: i32,
    pub nonPortableClusterSizeAllowed: i32,
    pub reserved: [i32; 16],
}

/// `cudaLaunchConfig_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cudaLaunchConfig_t {
    pub gridDim: dim3,
    pub blockDim: dim3,
    pub dynamicSmemBytes: usize,
    pub stream: cudaStream_t,
    pub attrs: *mut c_void,
    pub numAttrs: u32,
}

/// `struct cudaDeviceProp`: 1032 bytes in CUDA 12.x, 1008 in CUDA 13.x (eight fields removed,
/// seven appended, a shorter `reserved`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cudaDeviceProp {
    pub name: [c_char; 256],
    pub uuid: cudaUUID_t,
    pub luid: [c_char; 8],
    pub luidDeviceNodeMask: u32,
    pub totalGlobalMem: usize,
    pub sharedMemPerBlock: usize,
    pub regsPerBlock: i32,
    pub warpSize: i32,
    pub memPitch: usize,
    pub maxThreadsPerBlock: i32,
    pub maxThreadsDim: [i32; 3],
    pub maxGridSize: [i32; 3],
    #[cfg(not(cuda13))]
    pub clockRate: i32,
    pub totalConstMem: usize,
    pub major: i32,
    pub minor: i32,
    pub textureAlignment: usize,
    pub texturePitchAlignment: usize,
    #[cfg(not(cuda13))]
    pub deviceOverlap: i32,
    pub multiProcessorCount: i32,
    #[cfg(not(cuda13))]
    pub kernelExecTimeoutEnabled: i32,
    pub integrated: i32,
    pub canMapHostMemory: i32,
    #[cfg(not(cuda13))]
    pub computeMode: i32,
    pub maxTexture1D: i32,
    pub maxTexture1DMipmap: i32,
    #[cfg(not(cuda13))]
    pub maxTexture1DLinear: i32,
    pub maxTexture2D: [i32; 2],
    pub maxTexture2DMipmap: [i32; 2],
    pub maxTexture2DLinear: [i32; 3],
    pub maxTexture2DGather: [i32; 2],
    pub maxTexture3D: [i32; 3],
    pub maxTexture3DAlt: [i32; 3],
    pub maxTextureCubemap: i32,
    pub maxTexture1DLayered: [i32; 2],
    pub maxTexture2DLayered: [i32; 3],
    pub maxTextureCubemapLayered: [i32; 2],
    pub maxSurface1D: i32,
    pub maxSurface2D: [i32; 2],
    pub maxSurface3D: [i32; 3],
    pub maxSurface1DLayered: [i32; 2],
    pub maxSurface2DLayered: [i32; 3],
    pub maxSurfaceCubemap: i32,
    pub maxSurfaceCubemapLayered: [i32; 2],
    pub surfaceAlignment: usize,
    pub concurrentKernels: i32,
    pub ECCEnabled: i32,
    pub pciBusID: i32,
    pub pciDeviceID: i32,
    pub pciDomainID: i32,
    pub tccDriver: i32,
    pub asyncEngineCount: i32,
    pub unifiedAddressing: i32,
    #[cfg(not(cuda13))]
    pub memoryClockRate: i32,
    pub memoryBusWidth: i32,
    pub l2CacheSize: i32,
    pub persistingL2CacheMaxSize: i32,
    pub maxThreadsPerMultiProcessor: i32,
    pub streamPrioritiesSupported: i32,
    pub globalL1CacheSupported: i32,
    pub localL1CacheSupported: i32,
    pub sharedMemPerMultiprocessor: usize,
    pub regsPerMultiprocessor: i32,
    pub managedMemory: i32,
    pub isMultiGpuBoard: i32,
    pub multiGpuBoardGroupID: i32,
    pub hostNativeAtomicSupported: i32,
    #[cfg(not(cuda13))]
    pub singleToDoublePrecisionPerfRatio: i32,
    pub pageableMemoryAccess: i32,
    pub concurrentManagedAccess: i32,
    pub computePreemptionSupported: i32,
    pub canUseHostPointerForRegisteredMem: i32,
    pub cooperativeLaunch: i32,
    #[cfg(not(cuda13))]
    pub cooperativeMultiDeviceLaunch: i32,
    pub sharedMemPerBlockOptin: usize,
    pub pageableMemoryAccessUsesHostPageTables: i32,
    pub directManagedMemAccessFromHost: i32,
    pub maxBlocksPerMultiProcessor: i32,
    pub accessPolicyMaxWindowSize: i32,
    pub reservedSharedMemPerBlock: usize,
    pub hostRegisterSupported: i32,
    pub sparseCudaArraySupported: i32,
    pub hostRegisterReadOnlySupported: i32,
    pub timelineSemaphoreInteropSupported: i32,
    pub memoryPoolsSupported: i32,
    pub gpuDirectRDMASupported: i32,
    pub gpuDirectRDMAFlushWritesOptions: u32,
    pub gpuDirectRDMAWritesOrdering: i32,
    pub memoryPoolSupportedHandleTypes: u32,
    pub deferredMappingCudaArraySupported: i32,
    pub ipcEventSupported: i32,
    pub clusterLaunch: i32,
    pub unifiedFunctionPointers: i32,
    #[cfg(cuda13)]
    pub deviceNumaConfig: i32,
    #[cfg(cuda13)]
    pub deviceNumaId: i32,
    #[cfg(cuda13)]
    pub mpsEnabled: i32,
    #[cfg(cuda13)]
    pub hostNumaId: i32,
    #[cfg(cuda13)]
    pub gpuPciDeviceID: u32,
    #[cfg(cuda13)]
    pub gpuPciSubsystemID: u32,
    #[cfg(cuda13)]
    pub hostNumaMultinodeIpcSupported: i32,
    #[cfg(not(cuda13))]
    pub reserved: [i32; 63],
    #[cfg(cuda13)]
    pub reserved: [i32; 56],
}

// Sizes and offsets from the CUDA 12.9 headers (`driver_types.h`, `cuda_runtime_api.h`, via `offsetof`).
#[cfg(not(cuda13))]
const _: () = {
    assert!(size_of::<cudaDeviceProp>() == 1032);
    assert!(offset_of!(cudaDeviceProp, clockRate) == 348);
    assert!(offset_of!(cudaDeviceProp, multiProcessorCount) == 388);
    assert!(offset_of!(cudaDeviceProp, pciBusID) == 584);
    assert!(offset_of!(cudaDeviceProp, pciDeviceID) == 588);
    assert!(offset_of!(cudaDeviceProp, pciDomainID) == 592);
    assert!(offset_of!(cudaDeviceProp, l2CacheSize) == 616);
    assert!(offset_of!(cudaDeviceProp, sharedMemPerBlockOptin) == 696);
    assert!(offset_of!(cudaDeviceProp, reserved) == 780);
    assert!(size_of::<cudaPointerAttributes>() == 24);
};

// Sizes and offsets from the CUDA 13.5 headers (`driver_types.h`, `cuda_runtime_api.h`, via `offsetof`).
#[cfg(cuda13)]
const _: () = {
    assert!(size_of::<cudaDeviceProp>() == 1008);
    assert!(offset_of!(cudaDeviceProp, totalConstMem) == 352);
    assert!(offset_of!(cudaDeviceProp, multiProcessorCount) == 384);
    assert!(offset_of!(cudaDeviceProp, integrated) == 388);
    assert!(offset_of!(cudaDeviceProp, surfaceAlignment) == 552);
    assert!(offset_of!(cudaDeviceProp, pciBusID) == 568);
    assert!(offset_of!(cudaDeviceProp, pciDeviceID) == 572);
    assert!(offset_of!(cudaDeviceProp, pciDomainID) == 576);
    assert!(offset_of!(cudaDeviceProp, l2CacheSize) == 596);
    assert!(offset_of!(cudaDeviceProp, sharedMemPerMultiprocessor) == 624);
    assert!(offset_of!(cudaDeviceProp, sharedMemPerBlockOptin) == 672);
    assert!(offset_of!(cudaDeviceProp, deviceNumaConfig) == 756);
    assert!(offset_of!(cudaDeviceProp, hostNumaMultinodeIpcSupported) == 780);
    assert!(offset_of!(cudaDeviceProp, reserved) == 784);
    assert!(size_of::<cudaPointerAttributes>() == 88);
    assert!(offset_of!(cudaPointerAttributes, localityDomainOrdinal) == 24);
};

// The same in both versions.
const _: () = {
    assert!(offset_of!(cudaDeviceProp, uuid) == 256);
    assert!(offset_of!(cudaDeviceProp, luid) == 272);
    assert!(offset_of!(cudaDeviceProp, totalGlobalMem) == 288);
    assert!(offset_of!(cudaDeviceProp, warpSize) == 308);
    assert!(offset_of!(cudaDeviceProp, major) == 360);
    assert!(offset_of!(cudaDeviceProp, minor) == 364);
    assert!(offset_of!(cudaPointerAttributes, devicePointer) == 8);
    assert!(offset_of!(cudaPointerAttributes, hostPointer) == 16);
    assert!(size_of::<cudaIpcHandle>() == 64);
    assert!(size_of::<cudaUUID_t>() == 16);
    assert!(size_of::<cudaFuncAttributes>() == 144);
    assert!(size_of::<cudaLaunchConfig_t>() == 56);
    assert!(size_of::<dim3>() == 12);
};

impl Default for cudaDeviceProp {
    fn default() -> Self {
        // SAFETY: all-zero is a valid value of this plain-data struct.
        unsafe { std::mem::zeroed() }
    }
}

impl Default for cudaPointerAttributes {
    fn default() -> Self {
        // SAFETY: all-zero (null pointers, zero integers) is a valid value of this struct.
        unsafe { std::mem::zeroed() }
    }
}
