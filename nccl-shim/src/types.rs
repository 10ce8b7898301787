//! NCCL's C-visible types and numbers (NCCL 2.30.7 `src/nccl.h.in`): result codes, the
//! reduction as the data path applies it, `ncclConfig_t` read by its own `size`, the 128-byte
//! unique id. Collectives, data types and reduction operations are the cost model's
//! vocabulary ([`cost_model::types`]), re-exported here.

use crate::error::{NcclError, Result};

/// `NCCL_VERSION(2, 30, 7)`: the release whose API this library implements. Clients gate
/// features on it (nccl-tests enables `ncclAlltoAll` from 2.28, PyTorch `ncclCommShrink`
/// from 2.27).
pub const NCCL_VERSION_CODE: i32 = 23007;
/// The version string NCCL prints at init.
pub const NCCL_VERSION_STRING: &str = "2.30.7";

/// `ncclResult_t` values.
pub mod result {
    /// ncclSuccess
    pub const SUCCESS: i32 = 0;
    /// ncclUnhandledCudaError
    pub const UNHANDLED_CUDA_ERROR: i32 = 1;
    /// ncclSystemError
    pub const SYSTEM_ERROR: i32 = 2;
    /// ncclInternalError
    pub const INTERNAL_ERROR: i32 = 3;
    /// ncclInvalidArgument
    pub const INVALID_ARGUMENT: i32 = 4;
    /// ncclInvalidUsage
    pub const INVALID_USAGE: i32 = 5;
    /// ncclRemoteError
    pub const REMOTE_ERROR: i32 = 6;
    /// ncclInProgress
    pub const IN_PROGRESS: i32 = 7;
    /// ncclTimeout (2.30)
    pub const TIMEOUT: i32 = 8;
}

/// `ncclGetErrorString`'s texts, by result code.
pub fn error_string(code: i32) -> &'static std::ffi::CStr {
    match code {
        0 => c"no error",
        1 => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        2 => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        3 => c"internal error - please report this issue to the NCCL developers",
        4 => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        5 => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        6 => c"remote process exited or there was a network error",
        7 => c"NCCL operation in progress",
        8 => c"timeout",
        _ => c"unknown result code",
    }
}

pub use cost_model::types::{Collective, DataType, RedOp};

/// A reduction as the data path applies it: NCCL's device-side form of an `ncclRedOp_t`
/// (`ncclDevRedOpFull` in NCCL 2.30.7 `src/include/device.h`, built by `hostToDevRedOp` in
/// `src/enqueue.cc`). The operation itself is [`RedOp`]; ncclAvg and created PreMulSum
/// operations become a sum with a scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reduction {
    /// A built-in operation applied elementwise as it is (sum and product in rank order).
    /// [`Reduction::builtin`] never gives `Op(RedOp::Avg)`; were one built, it sums.
    Op(RedOp),
    /// Each input scaled by `scalar` (converted to the element type), then summed in rank
    /// order (NCCL's PreMulSum; ncclAvg on floating types with 1/nranks).
    PreMulSum {
        /// The scalar as the element type's bits, little-endian, zero-extended; or, with
        /// `on_device`, the device address of the scalar, read when the operation runs.
        scalar: u64,
        /// `scalar` is a device address (`ncclScalarDevice`).
        on_device: bool,
    },
    /// Summed in rank order, then divided by `divisor` (ncclAvg on integer types).
    SumPostDiv {
        /// The number of ranks.
        divisor: u64,
    },
}

impl Reduction {
    /// ncclSum as it is: what non-reducing operations carry.
    pub const SUM: Reduction = Reduction::Op(RedOp::Sum);

    /// The reduction a built-in `op` means for `dtype` on `nranks` ranks: ncclAvg is a
    /// PreMulSum by 1/nranks on floating types and a sum divided by nranks on integers
    /// (`hostToDevRedOp`), the others are themselves.
    pub fn builtin(op: RedOp, dtype: DataType, nranks: usize) -> Reduction {
        match op {
            RedOp::Avg if dtype.is_integer() => Reduction::SumPostDiv {
                divisor: nranks as u64,
            },
            RedOp::Avg => Reduction::PreMulSum {
                scalar: crate::reduce::scalar_bits(dtype, 1.0 / nranks as f64),
                on_device: false,
            },
            op => Reduction::Op(op),
        }
    }
}

/// `ncclScalarResidence_t`.
pub mod residence {
    /// ncclScalarDevice: the scalar is read from device memory when the operation runs.
    pub const DEVICE: i32 = 0;
    /// ncclScalarHostImmediate: the scalar is read from host memory when the op is created.
    pub const HOST_IMMEDIATE: i32 = 1;
}

/// `NCCL_API_MAGIC`, the `magic` of `ncclConfig_t` and the other versioned structs.
pub const NCCL_API_MAGIC: u32 = 0xcafe_beef;
/// `NCCL_CONFIG_UNDEF_INT`.
pub const CONFIG_UNDEF_INT: i32 = i32::MIN;
/// `NCCL_SPLIT_NOCOLOR`.
pub const SPLIT_NOCOLOR: i32 = -1;
/// `NCCL_UNIQUE_ID_BYTES`.
pub const UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    /// Opaque bytes: magic (8), root socket address (28), nRanks (4), zeros.
    pub internal: [u8; UNIQUE_ID_BYTES],
}
const _: () = assert!(std::mem::size_of::<UniqueId>() == 128);

/// `ncclConfig_t` of NCCL 2.30 (`ncclConfig_v23000`). Callers built against older headers pass
/// shorter structs; [`CommConfig::read`] never reads past the caller's `size`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawConfig {
    /// sizeof the caller's struct.
    pub size: usize,
    /// NCCL_API_MAGIC.
    pub magic: u32,
    /// NCCL_VERSION_CODE of the caller's headers.
    pub version: u32,
    /// 1 blocking, 0 non-blocking.
    pub blocking: i32,
    /// cgaClusterSize.
    pub cga_cluster_size: i32,
    /// minCTAs.
    pub min_ctas: i32,
    /// maxCTAs.
    pub max_ctas: i32,
    /// netName.
    pub net_name: *const std::ffi::c_char,
    /// splitShare.
    pub split_share: i32,
    /// trafficClass (2.27).
    pub traffic_class: i32,
    /// commName (2.27).
    pub comm_name: *const std::ffi::c_char,
    /// collnetEnable (2.27).
    pub collnet_enable: i32,
    /// CTAPolicy (2.27).
    pub cta_policy: i32,
    /// shrinkShare (2.27).
    pub shrink_share: i32,
    /// nvlsCTAs (2.27).
    pub nvls_ctas: i32,
    /// nChannelsPerNetPeer (2.28).
    pub n_channels_per_net_peer: i32,
    /// nvlinkCentricSched (2.28).
    pub nvlink_centric_sched: i32,
    /// graphUsageMode (2.29).
    pub graph_usage_mode: i32,
    /// numRmaCtx (2.29).
    pub num_rma_ctx: i32,
    /// maxP2pPeers (2.30).
    pub max_p2p_peers: i32,
    /// graphStreamOrdering (2.30).
    pub graph_stream_ordering: i32,
}
const _: () = assert!(std::mem::size_of::<RawConfig>() == 96);
const _: () = assert!(std::mem::offset_of!(RawConfig, net_name) == 32);
const _: () = assert!(std::mem::offset_of!(RawConfig, comm_name) == 48);

/// What the runtime keeps of a communicator's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommConfig {
    /// Blocking communicator (calls return when done) or not (`ncclInProgress`).
    pub blocking: bool,
    /// minCTAs, maxCTAs as given (`None` = default).
    pub min_ctas: Option<i32>,
    /// maxCTAs.
    pub max_ctas: Option<i32>,
    /// splitShare.
    pub split_share: bool,
    /// commName.
    pub comm_name: Option<String>,
}

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig {
            blocking: env_int("NCCL_COMM_BLOCKING").is_none_or(|v| v != 0),
            min_ctas: None,
            max_ctas: None,
            split_share: env_int("NCCL_COMM_SPLIT_SHARE_RESOURCES").is_some_and(|v| v != 0),
            comm_name: None,
        }
    }
}

fn env_int(name: &str) -> Option<i64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

impl CommConfig {
    /// Reads a caller's `ncclConfig_t` (null: defaults; `base` for fields left undefined).
    ///
    /// # Safety
    /// A non-null `config` must point to at least `config->size` readable bytes (at least the
    /// 16-byte header), as NCCL's API requires.
    pub unsafe fn read(config: *const RawConfig, base: &CommConfig) -> Result<CommConfig> {
        if config.is_null() {
            return Ok(base.clone());
        }
        // SAFETY: the header (size, magic, version) is present in every version of the struct.
        let (size, magic) = unsafe { ((*config).size, (*config).magic) };
        if magic != NCCL_API_MAGIC {
            return Err(NcclError::invalid_argument(format!(
                "config: magic {magic:#x} is not NCCL_API_MAGIC (initialise it with NCCL_CONFIG_INITIALIZER)"
            )));
        }
        if size < 16 {
            return Err(NcclError::invalid_argument(format!(
                "config: size {size} is too small"
            )));
        }
        let bytes = size.min(std::mem::size_of::<RawConfig>());
        let mut raw = RawConfig {
            size,
            magic,
            version: 0,
            blocking: CONFIG_UNDEF_INT,
            cga_cluster_size: CONFIG_UNDEF_INT,
            min_ctas: CONFIG_UNDEF_INT,
            max_ctas: CONFIG_UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: CONFIG_UNDEF_INT,
            traffic_class: CONFIG_UNDEF_INT,
            comm_name: std::ptr::null(),
            collnet_enable: CONFIG_UNDEF_INT,
            cta_policy: CONFIG_UNDEF_INT,
            shrink_share: CONFIG_UNDEF_INT,
            nvls_ctas: CONFIG_UNDEF_INT,
            n_channels_per_net_peer: CONFIG_UNDEF_INT,
            nvlink_centric_sched: CONFIG_UNDEF_INT,
            graph_usage_mode: CONFIG_UNDEF_INT,
            num_rma_ctx: CONFIG_UNDEF_INT,
            max_p2p_peers: CONFIG_UNDEF_INT,
            graph_stream_ordering: CONFIG_UNDEF_INT,
        };
        // SAFETY: copies the caller's first `bytes` bytes (<= its size and <= ours) over a
        // fully initialised value of plain fields.
        unsafe {
            std::ptr::copy_nonoverlapping(
                config.cast::<u8>(),
                (&mut raw as *mut RawConfig).cast::<u8>(),
                bytes,
            )
        };
        let defined = |v: i32| (v != CONFIG_UNDEF_INT).then_some(v);
        let mut out = base.clone();
        if let Some(b) = defined(raw.blocking) {
            out.blocking = b != 0;
        }
        if let Some(v) = defined(raw.min_ctas) {
            out.min_ctas = Some(v);
        }
        if let Some(v) = defined(raw.max_ctas) {
            out.max_ctas = Some(v);
        }
        if let Some(v) = defined(raw.split_share) {
            out.split_share = v != 0;
        }
        if bytes >= std::mem::offset_of!(RawConfig, comm_name) + 8 && !raw.comm_name.is_null() {
            // SAFETY: a non-null commName is a NUL-terminated string by the API's contract.
            let name = unsafe { std::ffi::CStr::from_ptr(raw.comm_name) };
            out.comm_name = Some(name.to_string_lossy().into_owned());
        }
        Ok(out)
    }
}

/// `ncclTeam_t` (device API, 2.28+): returned by value from `ncclTeam*`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Team {
    /// Ranks in the team.
    pub n_ranks: i32,
    /// This rank's index in it.
    pub rank: i32,
    /// Distance between consecutive members in world ranks.
    pub stride: i32,
}

/// `ncclCommProperties_t` (2.29+), read and written no further than the caller's `size`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CommProperties {
    /// sizeof the caller's struct.
    pub size: usize,
    /// NCCL_API_MAGIC.
    pub magic: u32,
    /// NCCL_VERSION_CODE of the caller's headers.
    pub version: u32,
    /// Rank in the communicator.
    pub rank: i32,
    /// Ranks in the communicator.
    pub n_ranks: i32,
    /// CUDA device ordinal.
    pub cuda_dev: i32,
    /// NVML device index.
    pub nvml_dev: i32,
    /// Device API available (false: there are no device kernels here).
    pub device_api_support: bool,
    /// NVLink SHARP multimem available.
    pub multimem_support: bool,
    /// ncclGinType_t: 0 (none).
    pub gin_type: i32,
    /// LSA teams.
    pub n_lsa_teams: i32,
    /// Host RMA available.
    pub host_rma_support: bool,
    /// Railed GIN type: 0 (none).
    pub railed_gin_type: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_read_stops_at_the_callers_size() {
        // A 48-byte struct (headers before 2.27, ending at splitShare) followed by bytes that
        // would be a wild commName pointer if they were read.
        let mut words = [0xAAAA_AAAA_AAAA_AAAAu64; 12];
        // SAFETY: viewing the aligned words as bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), 96) };
        let mut raw = [0u8; 48];
        raw[0..8].copy_from_slice(&48usize.to_ne_bytes());
        raw[8..12].copy_from_slice(&NCCL_API_MAGIC.to_ne_bytes());
        raw[12..16].copy_from_slice(&22705u32.to_ne_bytes());
        raw[16..20].copy_from_slice(&0i32.to_ne_bytes()); // blocking = 0
        for f in (20..32).step_by(4) {
            raw[f..f + 4].copy_from_slice(&CONFIG_UNDEF_INT.to_ne_bytes());
        }
        raw[40..44].copy_from_slice(&CONFIG_UNDEF_INT.to_ne_bytes());
        buf[..48].copy_from_slice(&raw);
        let base = CommConfig::default();
        // SAFETY: the buffer is a live, initialised config of at least the size it declares.
        let c = unsafe { CommConfig::read(buf.as_ptr().cast(), &base) }.unwrap();
        assert!(!c.blocking);
        assert_eq!(
            c.comm_name, None,
            "commName lies past size 48 and was not read"
        );
    }

    #[test]
    fn bad_magic_is_refused() {
        let mut words = [0u64; 12];
        words[0] = 96;
        // SAFETY: the buffer is a live, initialised config of at least the size it declares.
        let e = unsafe { CommConfig::read(words.as_ptr().cast(), &CommConfig::default()) };
        assert!(e.unwrap_err().to_string().contains("magic"));
    }
}
