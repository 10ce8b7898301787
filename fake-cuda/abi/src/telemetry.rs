//! The telemetry record each process of an `ncclsim run` job publishes for NVML in the
//! job's other processes (`nvidia-smi`, a monitor's pynvml): per physical device, the memory
//! the process holds and its busy virtual time, with enough history to answer a one-shot
//! utilization query.
//!
//! A record is a sealed memfd of its writer (`F_SEAL_FUTURE_WRITE`: once published, no other
//! process can map it writable or write to it), named in the job directory
//! (`NCCLSIM_JOB_DIR`) by a symbolic link `<pid>` -> `/proc/<pid>/fd/<n>`. When the writer
//! exits the memfd goes with it and the link dangles, so a reader ignores (and removes) it;
//! `ncclsim run` removes the directory when the job ends.
//!
//! Layout: a [`RecordHeader`], then one [`DeviceSlot`] per physical device of the node. The
//! writer is the process's one core, under its lock; each slot is a sequence lock (`seq` odd
//! while the writer updates it), so a reader copies a slot's fields only between two equal,
//! even loads of `seq`.

use std::sync::atomic::{AtomicU64, Ordering};

/// "NCSMTELE": identifies a telemetry record.
pub const RECORD_MAGIC: u64 = 0x4e43_534d_5445_4c45;
/// Layout version of the record.
pub const RECORD_VERSION: u32 = 1;
/// Prefix of record memfd names (`/proc/<pid>/fd/<n>` shows `/memfd:<name> (deleted)`).
pub const RECORD_MEMFD_NAME: &str = "ncclsim-telemetry";
/// Device memory a CUDA context holds besides the program's allocations, bytes, charged once
/// per process and device it uses. A CUDA 12 primary context on an A100 or H100 with lazy
/// module loading takes a few hundred MiB (its code, stacks, printf and heap buffers); NVML
/// counts it in the device's used memory and in the process's `usedGpuMemory`.
pub const CONTEXT_BYTES: u64 = 400 << 20;
/// NVML's sampling period for utilization, ns: a device whose processes scheduled no work for
/// this long reads idle, and a process's busy fraction is taken over windows of this length.
pub const SAMPLE_PERIOD_NS: u64 = 1_000_000_000;

/// Fixed fields at offset 0 of a record.
#[repr(C)]
pub struct RecordHeader {
    /// [`RECORD_MAGIC`].
    pub magic: u64,
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// The writer's process id.
    pub pid: u32,
    /// The simulated node of the writer (`NCCLSIM_NODE`).
    pub node: u32,
    /// Device slots after the header.
    pub devices: u32,
    /// Reserved, zero.
    pub reserved: u64,
}

/// One physical device's figures of the writer. Times are ns: `busy`/`clock` virtual (the
/// summed durations of the work the process scheduled there, and when all of it completes),
/// `*_wall` on `CLOCK_MONOTONIC`, which every process of the machine shares.
#[repr(C)]
#[derive(Default)]
pub struct DeviceSlot {
    /// Sequence lock: odd while the writer updates the slot.
    pub seq: AtomicU64,
    /// 1 once the process used the device (allocated or scheduled work there): it holds a
    /// context on it.
    pub active: AtomicU64,
    /// Device memory the process has allocated there, bytes (without the context).
    pub used: AtomicU64,
    /// Busy virtual time so far.
    pub busy: AtomicU64,
    /// The device's virtual clock in the process.
    pub clock: AtomicU64,
    /// When work was last scheduled.
    pub last_wall: AtomicU64,
    /// `busy`, `clock` and the wall time when the current window started.
    pub window_busy: AtomicU64,
    /// See `window_busy`.
    pub window_clock: AtomicU64,
    /// See `window_busy`.
    pub window_wall: AtomicU64,
    /// Utilization of the last complete window, percent.
    pub last_percent: AtomicU64,
}

/// A consistent copy of a [`DeviceSlot`] (see [`DeviceSlot::snapshot`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotSnapshot {
    /// The process holds a context on the device.
    pub active: bool,
    /// Allocated bytes.
    pub used: u64,
    /// Busy virtual time.
    pub busy: u64,
    /// Virtual clock.
    pub clock: u64,
    /// Wall time of the last work.
    pub last_wall: u64,
    /// Window start: busy.
    pub window_busy: u64,
    /// Window start: clock.
    pub window_clock: u64,
    /// Window start: wall time.
    pub window_wall: u64,
    /// Last complete window's percent.
    pub last_percent: u64,
}

/// The busy share of a span of virtual time, percent, at most 100 (overlapping streams sum
/// past the span).
pub fn busy_percent(busy: u64, span: u64) -> u64 {
    if span == 0 {
        return 0;
    }
    (u128::from(busy) * 100 / u128::from(span)).min(100) as u64
}

/// Bytes a record of `devices` slots takes.
pub fn record_bytes(devices: usize) -> usize {
    std::mem::size_of::<RecordHeader>() + devices * std::mem::size_of::<DeviceSlot>()
}

impl DeviceSlot {
    fn write(&self, f: impl FnOnce(&DeviceSlot)) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        f(self);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// Writer: the process now holds `used` bytes on the device.
    pub fn set_used(&self, used: u64) {
        self.write(|s| {
            s.active.store(1, Ordering::Relaxed);
            s.used.store(used, Ordering::Relaxed);
        });
    }

    /// Writer: work was scheduled at wall time `now`, the device's totals are now `busy` and
    /// `clock`. A window of [`SAMPLE_PERIOD_NS`] or more since the current one started ends it:
    /// its busy share becomes `last_percent` and a new window starts from the previous totals.
    pub fn scheduled(&self, busy: u64, clock: u64, now: u64) {
        self.write(|s| {
            let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
            if now.saturating_sub(r(&s.window_wall)) >= SAMPLE_PERIOD_NS {
                let (b, c) = (r(&s.busy), r(&s.clock));
                let pct = busy_percent(
                    b.saturating_sub(r(&s.window_busy)),
                    c.saturating_sub(r(&s.window_clock)),
                );
                s.last_percent.store(pct, Ordering::Relaxed);
                s.window_busy.store(b, Ordering::Relaxed);
                s.window_clock.store(c, Ordering::Relaxed);
                s.window_wall.store(now, Ordering::Relaxed);
            }
            s.active.store(1, Ordering::Relaxed);
            s.busy.store(busy, Ordering::Relaxed);
            s.clock.store(clock, Ordering::Relaxed);
            s.last_wall.store(now, Ordering::Relaxed);
        });
    }

    /// Reader: a consistent copy, or `None` if the writer kept updating it.
    pub fn snapshot(&self) -> Option<SlotSnapshot> {
        for _ in 0..1000 {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let snap = SlotSnapshot {
                active: r(&self.active) != 0,
                used: r(&self.used),
                busy: r(&self.busy),
                clock: r(&self.clock),
                last_wall: r(&self.last_wall),
                window_busy: r(&self.window_busy),
                window_clock: r(&self.window_clock),
                window_wall: r(&self.window_wall),
                last_percent: r(&self.last_percent),
            };
            std::sync::atomic::fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return Some(snap);
            }
        }
        None
    }
}

impl SlotSnapshot {
    /// The process's utilization of the device at wall time `now`, percent: 0 when it
    /// scheduled nothing for a sampling period; else the busy share of the current window's
    /// virtual time, or of the last complete window when the current one has none yet.
    pub fn percent_at(&self, now: u64) -> u64 {
        if !self.active || now.saturating_sub(self.last_wall) >= SAMPLE_PERIOD_NS {
            return 0;
        }
        if self.clock > self.window_clock {
            busy_percent(
                self.busy.saturating_sub(self.window_busy),
                self.clock - self.window_clock,
            )
        } else {
            self.last_percent
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = SAMPLE_PERIOD_NS;

    #[test]
    fn utilization_is_the_busy_share_of_recent_virtual_time() {
        let slot = DeviceSlot::default();
        assert_eq!(slot.snapshot().unwrap().percent_at(10 * S), 0);
        // 30 of 100 virtual ns busy within the first window.
        slot.scheduled(10, 50, 5 * S);
        slot.scheduled(30, 100, 5 * S + 10);
        let snap = slot.snapshot().unwrap();
        assert!(snap.active);
        // The first call opened a window at the totals before it (0, 0).
        assert_eq!(snap.percent_at(5 * S + 20), 30);
        // A second later with no new work: idle.
        assert_eq!(snap.percent_at(6 * S + 10), 0);
        // Work a window later closes the first window (30 %) and opens one at (30, 100).
        slot.scheduled(130, 200, 6 * S + 20);
        let snap = slot.snapshot().unwrap();
        assert_eq!(snap.last_percent, 30);
        assert_eq!(snap.percent_at(6 * S + 30), 100);
        // Two streams overlapping: summed busy time past the span is capped.
        slot.scheduled(400, 250, 6 * S + 40);
        assert_eq!(slot.snapshot().unwrap().percent_at(6 * S + 50), 100);
    }

    #[test]
    fn memory_marks_the_device_used_and_the_sequence_stays_even() {
        let slot = DeviceSlot::default();
        slot.set_used(1 << 20);
        let snap = slot.snapshot().unwrap();
        assert_eq!((snap.active, snap.used), (true, 1 << 20));
        assert_eq!(slot.seq.load(Ordering::Relaxed), 2);
        // Allocating alone is no utilization.
        assert_eq!(snap.percent_at(1), 0);
        assert_eq!(busy_percent(1, 0), 0);
        assert_eq!(busy_percent(1, 3), 33);
        assert_eq!(record_bytes(8), 32 + 8 * 80);
    }
}
