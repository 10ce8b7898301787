//! One reading of every GPU: what the tables, `-q` and the CSV queries print.

use crate::nvml::Nvml;
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};

/// One GPU as NVML reports it. `None`: not supported or not available, printed "N/A".
pub struct Gpu {
    pub index: u32,
    pub handle: *mut c_void,
    pub name: String,
    pub uuid: String,
    pub bus_id: String,
    pub compute_cap: Option<(i32, i32)>,
    pub temperature: Option<u32>,
    /// Shutdown, slowdown, memory max, GPU max (C).
    pub thresholds: [Option<u32>; 4],
    pub power_mw: Option<u32>,
    pub limit_mw: Option<u32>,
    pub default_limit_mw: Option<u32>,
    pub limit_range_mw: Option<(u32, u32)>,
    /// (total, free, used) bytes.
    pub memory: Option<[u64; 3]>,
    /// (GPU, memory) percent.
    pub utilization: Option<(u32, u32)>,
    /// Graphics, SM, memory, video (MHz): current and maximum.
    pub clocks: [Option<u32>; 4],
    pub max_clocks: [Option<u32>; 4],
    pub pstate: Option<i32>,
    pub fan: Option<u32>,
    pub persistence: Option<bool>,
    pub ecc: Option<bool>,
    pub mig: Option<bool>,
    pub compute_mode: Option<i32>,
    pub display_active: Option<bool>,
    /// Clock event reasons mask.
    pub throttle: Option<u64>,
    pub processes: Vec<(u32, u64)>,
}

impl Gpu {
    pub fn read(nvml: &Nvml, index: u32) -> Option<Gpu> {
        let d = nvml.device(index)?;
        let clock = |name: &std::ffi::CStr, k| nvml.value_at::<c_uint>(name, d, k);
        let threshold = |k| nvml.value_at::<c_uint>(c"nvmlDeviceGetTemperatureThreshold", d, k);
        Some(Gpu {
            index,
            handle: d,
            name: nvml.string(c"nvmlDeviceGetName", d).unwrap_or_default(),
            uuid: nvml.string(c"nvmlDeviceGetUUID", d).unwrap_or_default(),
            bus_id: nvml.bus_id(d).unwrap_or_default(),
            compute_cap: nvml.pair::<c_int>(c"nvmlDeviceGetCudaComputeCapability", d),
            temperature: nvml.value_at::<c_uint>(c"nvmlDeviceGetTemperature", d, 0),
            thresholds: [threshold(0), threshold(1), threshold(2), threshold(3)],
            power_mw: nvml.value::<c_uint>(c"nvmlDeviceGetPowerUsage", d),
            limit_mw: nvml.value::<c_uint>(c"nvmlDeviceGetEnforcedPowerLimit", d),
            default_limit_mw: nvml.value::<c_uint>(c"nvmlDeviceGetPowerManagementDefaultLimit", d),
            limit_range_mw: nvml.pair::<c_uint>(c"nvmlDeviceGetPowerManagementLimitConstraints", d),
            memory: nvml.memory(d),
            utilization: nvml
                .value::<[c_uint; 2]>(c"nvmlDeviceGetUtilizationRates", d)
                .map(|[g, m]| (g, m)),
            clocks: [0, 1, 2, 3].map(|k| clock(c"nvmlDeviceGetClockInfo", k)),
            max_clocks: [0, 1, 2, 3].map(|k| clock(c"nvmlDeviceGetMaxClockInfo", k)),
            pstate: nvml.value::<c_int>(c"nvmlDeviceGetPerformanceState", d),
            fan: nvml.value::<c_uint>(c"nvmlDeviceGetFanSpeed", d),
            persistence: nvml
                .value::<c_int>(c"nvmlDeviceGetPersistenceMode", d)
                .map(|m| m != 0),
            ecc: nvml
                .pair::<c_int>(c"nvmlDeviceGetEccMode", d)
                .map(|(c, _)| c != 0),
            mig: nvml
                .pair::<c_uint>(c"nvmlDeviceGetMigMode", d)
                .map(|(c, _)| c != 0),
            compute_mode: nvml.value::<c_int>(c"nvmlDeviceGetComputeMode", d),
            display_active: nvml
                .value::<c_int>(c"nvmlDeviceGetDisplayActive", d)
                .map(|a| a != 0),
            throttle: nvml.value::<c_ulonglong>(c"nvmlDeviceGetCurrentClocksEventReasons", d),
            processes: nvml.processes(d),
        })
    }

    /// `mib(bytes)`: whole MiB as nvidia-smi prints them.
    pub fn mib(bytes: u64) -> u64 {
        bytes >> 20
    }

    pub fn memory_mib(&self, which: usize) -> Option<u64> {
        self.memory.map(|m| Gpu::mib(m[which]))
    }

    pub fn pstate_text(&self) -> Option<String> {
        self.pstate.map(|p| format!("P{p}"))
    }

    pub fn compute_mode_text(&self) -> Option<&'static str> {
        self.compute_mode.map(|m| match m {
            0 => "Default",
            1 => "Exclusive_Thread",
            2 => "Prohibited",
            _ => "E. Process",
        })
    }
}

/// "Enabled"/"Disabled".
pub fn enabled(b: bool) -> &'static str {
    if b {
        "Enabled"
    } else {
        "Disabled"
    }
}

/// A value or "N/A".
pub fn or_na<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "N/A".into())
}

/// Milliwatts as watts with two decimals.
pub fn watts(mw: u32) -> String {
    format!("{:.2}", f64::from(mw) / 1000.0)
}
