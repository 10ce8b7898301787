//! Telemetry a monitor reads: temperatures, power, clocks, fan, performance state, ECC and
//! persistence modes, and the compute processes on a device.
//!
//! The simulated boards have no sensors, so the values follow from the board's model and its
//! utilization: an idle board sits at its idle clocks, a few degrees above 30 C and about an
//! eighth of its power limit, and warms, draws and clocks up in proportion to its utilization.
//! Utilization comes from the virtual timeline ([`utilization`]): in an `ncclsim run` job the
//! recent busy fractions of all its processes (`job`), outside one the work this process
//! scheduled itself. Power limits are the boards' TDPs from `compute-model`. Features
//! a board of this model does not have (a fan on an SXM module, ECC on a GeForce card) answer
//! `NVML_ERROR_NOT_SUPPORTED`, as the real library does.

use super::*;
use std::time::Instant;

/// Per-model facts of a board, from its NVML name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Board {
    /// Default (and maximum) power limit, watts: the board's TDP.
    pub tdp_w: u32,
    /// Lowest power limit an administrator may set, watts.
    pub min_limit_w: u32,
    /// SM clock when idle, MHz.
    pub idle_sm_mhz: u32,
    /// Whether the board has a fan NVML controls (add-in GeForce cards), else passive cooling.
    pub fan: bool,
    /// Whether the board has ECC memory (data-center boards).
    pub ecc: bool,
}

/// The board facts of a GPU by its NVML name, compute capability major and TDP (the core's,
/// from the compute model's datasheet entry of its model): a quarter of the TDP as the lowest
/// limit, the idle clock of its generation, a fan and no ECC on GeForce cards.
pub(crate) fn board(name: &str, sm_major: i32, tdp_w: u32) -> Board {
    let geforce = name.contains("GeForce");
    Board {
        tdp_w,
        min_limit_w: tdp_w / 4,
        idle_sm_mhz: if sm_major >= 9 { 345 } else { 210 },
        fan: geforce,
        ecc: !geforce,
    }
}

/// The last utilization sample of each physical device.
#[derive(Clone, Copy)]
struct Sample {
    busy_ns: u64,
    clock_ns: u64,
    at: Instant,
    percent: u32,
}

static SAMPLES: std::sync::Mutex<Vec<Option<Sample>>> = std::sync::Mutex::new(Vec::new());

/// How long a device keeps its last utilization without new work before it reads idle.
const SAMPLE_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// GPU utilization, percent: the share of the virtual time since the previous sample during
/// which the device's streams had work (their summed durations, so overlapping streams count
/// once each, capped at 100). A sample without new virtual time keeps the previous value for
/// a second of wall time, then reads 0: nothing has run for a sampling period.
pub(crate) fn utilization(device: nvmlDevice_t) -> Result<u32> {
    let i = index(device)?;
    if let Some(u) = super::job::device_usage(i as usize) {
        return Ok(u.percent);
    }
    let (busy_ns, clock_ns) = core()?.physical_device_busy(i)?;
    let now = Instant::now();
    let mut samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    let slot = i as usize;
    if samples.len() <= slot {
        samples.resize(slot + 1, None);
    }
    let last = samples[slot].unwrap_or(Sample {
        busy_ns: 0,
        clock_ns: 0,
        at: now,
        percent: 0,
    });
    let percent = if clock_ns > last.clock_ns {
        let busy = busy_ns.saturating_sub(last.busy_ns) as u128 * 100;
        (busy / u128::from(clock_ns - last.clock_ns)).min(100) as u32
    } else if now.duration_since(last.at) >= SAMPLE_PERIOD {
        0
    } else {
        last.percent
    };
    if clock_ns > last.clock_ns || percent != last.percent || samples[slot].is_none() {
        samples[slot] = Some(Sample {
            busy_ns,
            clock_ns,
            at: now,
            percent,
        });
    }
    Ok(percent)
}

/// A small fixed per-device offset (0..=4), so eight identical boards do not read identically.
fn spread(device: nvmlDevice_t) -> Result<u32> {
    Ok((index(device)? as u32 * 3) % 5)
}

fn device_board(device: nvmlDevice_t) -> Result<(Board, CDeviceInfo)> {
    let d = info(device)?;
    let name = String::from_utf8_lossy(&ffi_boundary::c_array_text(&d.name)).into_owned();
    let facts = core()?.physical_device_board(index(device)?)?;
    Ok((board(&name, d.sm_major, facts.tdp_watts), d))
}

/// GPU temperature, C: 30-34 idle, up to 40 degrees more at full utilization.
pub(crate) fn temperature_c(device: nvmlDevice_t) -> Result<u32> {
    Ok(30 + spread(device)? + utilization(device)? * 2 / 5)
}

/// Power draw, milliwatts: about an eighth of the TDP idle, 85% of it at full utilization.
pub(crate) fn power_mw(device: nvmlDevice_t) -> Result<u32> {
    let (b, _) = device_board(device)?;
    let idle = b.tdp_w * 1000 / 8 + spread(device)? * 700;
    let busy = b.tdp_w * 850;
    Ok(idle + (busy.saturating_sub(idle)) * utilization(device)? / 100)
}

/// `nvmlClockType_t`: graphics 0, SM 1, memory 2, video 3.
fn clock_mhz(device: nvmlDevice_t, kind: c_uint, max: bool) -> Result<u32> {
    let (b, d) = device_board(device)?;
    let sm_max = (d.clock_khz / 1000) as u32;
    let mem = (d.memory_clock_khz / 1000) as u32;
    let busy = utilization(device)? > 0;
    let sm = if max || busy { sm_max } else { b.idle_sm_mhz };
    match kind {
        0 | 1 => Ok(sm),
        2 => Ok(mem),
        3 => Ok(if max || busy { sm_max * 4 / 5 } else { 555 }),
        _ => Err(err(INVALID_ARGUMENT, format!("clock type {kind}"))),
    }
}

nvml_fn!(
    fn nvmlDeviceGetTemperature(device: nvmlDevice_t, sensor: c_int, temp: *mut c_uint) {
        // NVML_TEMPERATURE_GPU is the only sensor.
        if sensor != 0 {
            return Err(err(
                INVALID_ARGUMENT,
                format!("temperature sensor {sensor}"),
            ));
        }
        write_out(temp, temperature_c(device)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetTemperatureThreshold(device: nvmlDevice_t, kind: c_int, temp: *mut c_uint) {
        index(device)?;
        // Shutdown, slowdown, memory max, GPU max (NVML_TEMPERATURE_THRESHOLD_*).
        let t = match kind {
            0 => 92,
            1 => 89,
            2 => 95,
            3 => 87,
            _ => return Err(err(NOT_SUPPORTED, format!("temperature threshold {kind}"))),
        };
        write_out(temp, t)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, milliwatts: *mut c_uint) {
        write_out(milliwatts, power_mw(device)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPowerManagementMode(device: nvmlDevice_t, mode: *mut c_int) {
        index(device)?;
        write_out(mode, 1)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPowerManagementLimit(device: nvmlDevice_t, limit: *mut c_uint) {
        write_out(limit, device_board(device)?.0.tdp_w * 1000)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPowerManagementDefaultLimit(device: nvmlDevice_t, limit: *mut c_uint) {
        write_out(limit, device_board(device)?.0.tdp_w * 1000)
    }
);
nvml_fn!(
    fn nvmlDeviceGetEnforcedPowerLimit(device: nvmlDevice_t, limit: *mut c_uint) {
        write_out(limit, device_board(device)?.0.tdp_w * 1000)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPowerManagementLimitConstraints(
        device: nvmlDevice_t,
        min: *mut c_uint,
        max: *mut c_uint,
    ) {
        let (b, _) = device_board(device)?;
        write_out(min, b.min_limit_w * 1000)?;
        write_out(max, b.tdp_w * 1000)
    }
);

/// When this library was first asked for energy: the start of its energy counter.
static ENERGY_START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

nvml_fn!(
    fn nvmlDeviceGetTotalEnergyConsumption(device: nvmlDevice_t, millijoules: *mut c_ulonglong) {
        let mw = u64::from(power_mw(device)?);
        let ms = ENERGY_START.get_or_init(Instant::now).elapsed().as_millis() as u64;
        write_out(millijoules, mw * ms / 1000)
    }
);
nvml_fn!(
    fn nvmlDeviceGetClockInfo(device: nvmlDevice_t, kind: c_uint, mhz: *mut c_uint) {
        write_out(mhz, clock_mhz(device, kind, false)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetMaxClockInfo(device: nvmlDevice_t, kind: c_uint, mhz: *mut c_uint) {
        write_out(mhz, clock_mhz(device, kind, true)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetApplicationsClock(device: nvmlDevice_t, kind: c_uint, mhz: *mut c_uint) {
        write_out(mhz, clock_mhz(device, kind, true)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetDefaultApplicationsClock(device: nvmlDevice_t, kind: c_uint, mhz: *mut c_uint) {
        write_out(mhz, clock_mhz(device, kind, true)?)
    }
);
nvml_fn!(
    fn nvmlDeviceGetClock(device: nvmlDevice_t, kind: c_uint, id: c_uint, mhz: *mut c_uint) {
        // NVML_CLOCK_ID_CURRENT 0, _APP_CLOCK_TARGET 1, _APP_CLOCK_DEFAULT 2, _CUSTOMER_BOOST_MAX 3.
        let v = match id {
            0 => clock_mhz(device, kind, false)?,
            1..=3 => clock_mhz(device, kind, true)?,
            _ => return Err(err(INVALID_ARGUMENT, format!("clock id {id}"))),
        };
        write_out(mhz, v)
    }
);
nvml_fn!(
    fn nvmlDeviceGetCurrentClocksThrottleReasons(device: nvmlDevice_t, reasons: *mut c_ulonglong) {
        // nvmlClocksThrottleReasonGpuIdle (1) while idle, else none.
        write_out(reasons, u64::from(utilization(device)? == 0))
    }
);
nvml_fn!(
    fn nvmlDeviceGetCurrentClocksEventReasons(device: nvmlDevice_t, reasons: *mut c_ulonglong) {
        write_out(reasons, u64::from(utilization(device)? == 0))
    }
);
nvml_fn!(
    fn nvmlDeviceGetFanSpeed(device: nvmlDevice_t, percent: *mut c_uint) {
        if !device_board(device)?.0.fan {
            return Err(err(NOT_SUPPORTED, "the board is passively cooled"));
        }
        write_out(percent, 30 + utilization(device)? * 2 / 5)
    }
);
nvml_fn!(
    fn nvmlDeviceGetFanSpeed_v2(device: nvmlDevice_t, fan: c_uint, percent: *mut c_uint) {
        if !device_board(device)?.0.fan || fan != 0 {
            return Err(err(NOT_SUPPORTED, format!("no fan {fan}")));
        }
        write_out(percent, 30 + utilization(device)? * 2 / 5)
    }
);
nvml_fn!(
    fn nvmlDeviceGetNumFans(device: nvmlDevice_t, count: *mut c_uint) {
        if !device_board(device)?.0.fan {
            return Err(err(NOT_SUPPORTED, "the board is passively cooled"));
        }
        write_out(count, 1)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPerformanceState(device: nvmlDevice_t, state: *mut c_int) {
        // P0: the boards keep their maximum performance state (persistence mode on).
        index(device)?;
        write_out(state, 0)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPowerState(device: nvmlDevice_t, state: *mut c_int) {
        index(device)?;
        write_out(state, 0)
    }
);
nvml_fn!(
    fn nvmlDeviceGetPersistenceMode(device: nvmlDevice_t, mode: *mut c_int) {
        // Enabled on data-center boards (as cluster nodes run them), disabled on GeForce.
        write_out(mode, c_int::from(device_board(device)?.0.ecc))
    }
);
nvml_fn!(
    fn nvmlDeviceGetDisplayMode(device: nvmlDevice_t, mode: *mut c_int) {
        index(device)?;
        write_out(mode, 0)
    }
);
nvml_fn!(
    fn nvmlDeviceGetDisplayActive(device: nvmlDevice_t, active: *mut c_int) {
        index(device)?;
        write_out(active, 0)
    }
);
nvml_fn!(
    fn nvmlDeviceGetComputeMode(device: nvmlDevice_t, mode: *mut c_int) {
        // NVML_COMPUTEMODE_DEFAULT.
        index(device)?;
        write_out(mode, 0)
    }
);
nvml_fn!(
    fn nvmlDeviceGetEccMode(device: nvmlDevice_t, current: *mut c_int, pending: *mut c_int) {
        if !device_board(device)?.0.ecc {
            return Err(err(NOT_SUPPORTED, "the board has no ECC memory"));
        }
        write_out(current, 1)?;
        write_out(pending, 1)
    }
);
nvml_fn!(
    fn nvmlDeviceGetTotalEccErrors(
        device: nvmlDevice_t,
        _error_type: c_int,
        _counter_type: c_int,
        count: *mut c_ulonglong,
    ) {
        if !device_board(device)?.0.ecc {
            return Err(err(NOT_SUPPORTED, "the board has no ECC memory"));
        }
        write_out(count, 0)
    }
);
nvml_fn!(
    fn nvmlDeviceGetMigMode(device: nvmlDevice_t, current: *mut c_uint, pending: *mut c_uint) {
        // MIG exists on A100, H100 and later data-center boards; it is never enabled here.
        let (b, d) = device_board(device)?;
        if !b.ecc || d.sm_major < 8 || (d.sm_major == 8 && d.sm_minor != 0) {
            return Err(err(NOT_SUPPORTED, "the board has no MIG mode"));
        }
        write_out(current, 0)?;
        write_out(pending, 0)
    }
);
nvml_fn!(
    fn nvmlDeviceGetEncoderUtilization(
        device: nvmlDevice_t,
        percent: *mut c_uint,
        period_us: *mut c_uint,
    ) {
        index(device)?;
        write_out(percent, 0)?;
        write_out(period_us, 167_000)
    }
);
nvml_fn!(
    fn nvmlDeviceGetDecoderUtilization(
        device: nvmlDevice_t,
        percent: *mut c_uint,
        period_us: *mut c_uint,
    ) {
        index(device)?;
        write_out(percent, 0)?;
        write_out(period_us, 167_000)
    }
);

// ---- processes -----------------------------------------------------------------------------

/// `nvmlProcessInfo_v1_t` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlProcessInfo_v1_t {
    /// Process id.
    pub pid: c_uint,
    /// Device memory the process uses, bytes.
    pub usedGpuMemory: c_ulonglong,
}

/// `nvmlProcessInfo_t` of `_v2`/`_v3` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlProcessInfo_t {
    /// Process id.
    pub pid: c_uint,
    /// Device memory the process uses, bytes.
    pub usedGpuMemory: c_ulonglong,
    /// GPU instance (0xFFFFFFFF without MIG).
    pub gpuInstanceId: c_uint,
    /// Compute instance (0xFFFFFFFF without MIG).
    pub computeInstanceId: c_uint,
}

const _: () = {
    assert!(size_of::<nvmlProcessInfo_v1_t>() == 16);
    assert!(size_of::<nvmlProcessInfo_t>() == 24);
};

/// The compute processes NVML knows on `device`: in an `ncclsim run` job each of its
/// processes holding a context there (`job`), else this process when it holds memory there.
fn processes(device: nvmlDevice_t) -> Result<Vec<(u32, u64)>> {
    if let Some(u) = super::job::device_usage(index(device)? as usize) {
        return Ok(u.processes);
    }
    let (_, used) = memory(device)?;
    Ok(if used > 0 {
        vec![(std::process::id(), used)]
    } else {
        Vec::new()
    })
}

/// NVML's array protocol: `*count` is the room in `infos`; too little room (or a null array
/// with processes to report) writes the needed count and answers `INSUFFICIENT_SIZE`.
fn write_processes<T>(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut T,
    make: impl Fn(u32, u64) -> T,
) -> Result<()> {
    let list = processes(device)?;
    if count.is_null() {
        return Err(err(INVALID_ARGUMENT, "null count"));
    }
    // SAFETY: non-null, a readable `c_uint` by the API contract.
    let room = unsafe { *count } as usize;
    write_out(count, list.len() as c_uint)?;
    if list.is_empty() {
        return Ok(());
    }
    if room < list.len() || infos.is_null() {
        return Err(err(
            INSUFFICIENT_SIZE,
            format!("room for {room} processes, {} running", list.len()),
        ));
    }
    for (i, (pid, used)) in list.into_iter().enumerate() {
        // SAFETY: `infos` has room for `room` >= this many elements (API contract).
        unsafe { infos.add(i).write(make(pid, used)) };
    }
    Ok(())
}

nvml_fn!(
    fn nvmlDeviceGetComputeRunningProcesses(
        device: nvmlDevice_t,
        count: *mut c_uint,
        infos: *mut nvmlProcessInfo_v1_t,
    ) {
        write_processes(device, count, infos, |pid, used| nvmlProcessInfo_v1_t {
            pid,
            usedGpuMemory: used,
        })
    }
);

fn process_v2(pid: u32, used: u64) -> nvmlProcessInfo_t {
    nvmlProcessInfo_t {
        pid,
        usedGpuMemory: used,
        gpuInstanceId: u32::MAX,
        computeInstanceId: u32::MAX,
    }
}

nvml_fn!(
    fn nvmlDeviceGetComputeRunningProcesses_v2(
        device: nvmlDevice_t,
        count: *mut c_uint,
        infos: *mut nvmlProcessInfo_t,
    ) {
        write_processes(device, count, infos, process_v2)
    }
);
nvml_fn!(
    fn nvmlDeviceGetComputeRunningProcesses_v3(
        device: nvmlDevice_t,
        count: *mut c_uint,
        infos: *mut nvmlProcessInfo_t,
    ) {
        write_processes(device, count, infos, process_v2)
    }
);

fn no_graphics(device: nvmlDevice_t, count: *mut c_uint) -> Result<()> {
    // Nothing renders on the simulated boards.
    index(device)?;
    write_out(count, 0)
}

nvml_fn!(
    fn nvmlDeviceGetGraphicsRunningProcesses(
        device: nvmlDevice_t,
        count: *mut c_uint,
        _infos: *mut c_void,
    ) {
        no_graphics(device, count)
    }
);
nvml_fn!(
    fn nvmlDeviceGetGraphicsRunningProcesses_v2(
        device: nvmlDevice_t,
        count: *mut c_uint,
        _infos: *mut c_void,
    ) {
        no_graphics(device, count)
    }
);
nvml_fn!(
    fn nvmlDeviceGetGraphicsRunningProcesses_v3(
        device: nvmlDevice_t,
        count: *mut c_uint,
        _infos: *mut c_void,
    ) {
        no_graphics(device, count)
    }
);
nvml_fn!(
    fn nvmlDeviceGetDriverModel(device: nvmlDevice_t, current: *mut c_int, pending: *mut c_int) {
        // WDDM/TCC driver models exist on Windows only.
        index(device)?;
        let _ = (current, pending);
        Err(err(NOT_SUPPORTED, "driver models are a Windows feature"))
    }
);
nvml_fn!(
    fn nvmlDeviceGetDriverModel_v2(device: nvmlDevice_t, current: *mut c_int, pending: *mut c_int) {
        index(device)?;
        let _ = (current, pending);
        Err(err(NOT_SUPPORTED, "driver models are a Windows feature"))
    }
);

/// `nvmlProcessUtilizationSample_t` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlProcessUtilizationSample_t {
    /// Process id.
    pub pid: c_uint,
    /// When the sample was taken, microseconds since the epoch.
    pub timeStamp: c_ulonglong,
    /// SM utilization, percent.
    pub smUtil: c_uint,
    /// Memory (bandwidth) utilization, percent.
    pub memUtil: c_uint,
    /// Encoder utilization, percent.
    pub encUtil: c_uint,
    /// Decoder utilization, percent.
    pub decUtil: c_uint,
}

const _: () = assert!(size_of::<nvmlProcessUtilizationSample_t>() == 32);

nvml_fn!(
    /// One sample per compute process on the device, taken now: its share of the device's
    /// recent busy time (in a job, each process's own; outside one, this process's).
    fn nvmlDeviceGetProcessUtilization(
        device: nvmlDevice_t,
        samples: *mut nvmlProcessUtilizationSample_t,
        count: *mut c_uint,
        last_seen_us: c_ulonglong,
    ) {
        let i = index(device)?;
        let list: Vec<(u32, u32)> = match super::job::device_usage(i as usize) {
            Some(u) => u.process_percent,
            None => {
                let pct = utilization(device)?;
                processes(device)?
                    .into_iter()
                    .map(|(pid, _)| (pid, pct))
                    .collect()
            }
        };
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        if list.is_empty() || now_us <= last_seen_us {
            return Err(err(NOT_FOUND, "no process samples since the time given"));
        }
        if count.is_null() {
            return Err(err(INVALID_ARGUMENT, "null count"));
        }
        // SAFETY: non-null, a readable `c_uint` by the API contract.
        let room = unsafe { *count } as usize;
        write_out(count, list.len() as c_uint)?;
        if samples.is_null() || room < list.len() {
            return Err(err(
                INSUFFICIENT_SIZE,
                format!("room for {room} samples, {} processes", list.len()),
            ));
        }
        for (k, (pid, pct)) in list.into_iter().enumerate() {
            let sample = nvmlProcessUtilizationSample_t {
                pid,
                timeStamp: now_us,
                smUtil: pct,
                memUtil: pct,
                encUtil: 0,
                decUtil: 0,
            };
            // SAFETY: `samples` has room for `room` >= this many elements (API contract).
            unsafe { samples.add(k).write(sample) };
        }
        Ok(())
    }
);
nvml_fn!(
    fn nvmlSystemGetProcessName(pid: c_uint, name: *mut c_char, length: c_uint) {
        core()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map_err(|e| err(NOT_FOUND, format!("process {pid}: {e}")))?;
        write_string(name, length, comm.trim_end().as_bytes())
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_clocks_and_features_follow_the_board() {
        let b = board("NVIDIA B200", 10, 1000);
        assert_eq!((b.tdp_w, b.min_limit_w, b.idle_sm_mhz), (1000, 250, 345));
        let g = board("NVIDIA GeForce RTX 4090", 8, 450);
        assert_eq!((g.idle_sm_mhz, g.fan, g.ecc), (210, true, false));
        let a = board("NVIDIA A100-SXM4-40GB", 8, 400);
        assert!(!a.fan && a.ecc);
    }
}
