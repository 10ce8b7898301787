//! The planner's constants, one place: the search's limits and step budgets and the per-release
//! speed arrays `ncclTopoCompute` tries (NCCL 2.30.7 `src/graph/search.cc`, `src/include/
//! device.h`; the arrays of older releases from their `search.cc`). Which array a release uses is
//! [`crate::profile::Profile::speeds`].

/// `MAXCHANNELS` as the search's working arrays are sized (the largest of any release).
pub(crate) const MAXCHANNELS: usize = 64;
/// `NCCL_TOPO_MAX_NODES`.
pub(crate) const NCCL_TOPO_MAX_NODES: usize = 576;
/// `NCCL_MAX_NVLS_ARITY`.
pub(crate) const NCCL_MAX_NVLS_ARITY: i32 = 32;
/// `NCCL_MAX_DIRECT_ARITY`.
pub(crate) const NCCL_MAX_DIRECT_ARITY: i32 = 7;

/// `NCCL_SEARCH_GLOBAL_TIMEOUT` (2.19+).
pub(crate) const GLOBAL_TIMEOUT: i64 = 1 << 19;
/// `NCCL_SEARCH_GLOBAL_TIMEOUT` of 2.18.
pub(crate) const GLOBAL_TIMEOUT_2_18: i64 = 5 << 16;
/// `NCCL_SEARCH_TIMEOUT`.
pub(crate) const TIMEOUT: i32 = 1 << 14;
/// `NCCL_SEARCH_TIMEOUT_TREE`.
pub(crate) const TIMEOUT_TREE: i32 = 1 << 14;
/// `NCCL_SEARCH_TIMEOUT_SAMECHANNELS`.
pub(crate) const TIMEOUT_SAMECHANNELS: i32 = 1 << 8;

/// `FORCED_ORDER_PCI`: follow the PCI order of GPUs.
pub(crate) const FORCED_ORDER_PCI: i32 = 1;
/// `FORCED_ORDER_REPLAY`: replay the previous channel's GPU order.
pub(crate) const FORCED_ORDER_REPLAY: i32 = 2;

/// `speedArrayIntra` (sm < 90).
pub const SPEED_INTRA: &[f32] = &[
    40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
];
/// `speedArrayInter` (sm < 90).
pub const SPEED_INTER: &[f32] = &[
    48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
    0.24, 0.12,
];

/// `sm90SpeedArrayIntra` of 2.18.
pub const SM90_SPEED_INTRA_2_18: &[f32] = &[60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0];
/// `sm90SpeedArrayIntra` of 2.19-2.20 (50 added).
pub const SM90_SPEED_INTRA_2_19: &[f32] =
    &[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0];
/// `sm90SpeedArrayIntra` from 2.21 (11 added).
pub const SM90_SPEED_INTRA: &[f32] = &[
    60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
];
/// `sm90SpeedArrayInter`; sm100 uses it before 2.25.
pub const SM90_SPEED_INTER: &[f32] = &[
    48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
    0.12,
];

/// `sm100SpeedArrayIntra` of 2.25-2.26.
pub const SM100_SPEED_INTRA_2_25: &[f32] =
    &[90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0];
/// `sm100SpeedArrayIntra` of 2.27-2.28 (18 added).
pub const SM100_SPEED_INTRA_2_27: &[f32] = &[
    90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
];
/// `sm100SpeedArrayIntra` from 2.29 (45 added).
pub const SM100_SPEED_INTRA: &[f32] = &[
    90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
];
/// `sm100SpeedArrayInter` of 2.25-2.26: the sm90 array.
pub const SM100_SPEED_INTER_2_25: &[f32] = SM90_SPEED_INTER;
/// `sm100SpeedArrayInter` of 2.27: the sm90 array starting at 47.9.
pub const SM100_SPEED_INTER_2_27: &[f32] = &[
    47.9, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
    0.12,
];
/// `sm100SpeedArrayInter` of 2.28.
pub const SM100_SPEED_INTER_2_28: &[f32] = &[
    96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
    0.24, 0.12,
];
/// `sm100SpeedArrayInter` of 2.29.
pub const SM100_SPEED_INTER_2_29: &[f32] = &[
    96.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
    1.2, 0.24, 0.12,
];
/// `sm100SpeedArrayInter` from 2.30.
pub const SM100_SPEED_INTER: &[f32] = &[
    96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
    2.4, 1.2, 0.24, 0.12,
];
