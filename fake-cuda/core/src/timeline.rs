//! Streams, events and virtual time.
//!
//! Work runs eagerly on the calling thread when it is enqueued, so stream order holds trivially;
//! what the timeline models is *when* that work would have happened on a GPU. Every stream has
//! a virtual clock (nanoseconds since the core started): work starts at the latest of the
//! stream's clock, the host's clock and whatever the legacy default stream's implicit
//! synchronisation requires, and ends a modelled duration later. Events capture a stream's clock;
//! `cudaStreamWaitEvent` merges clocks; synchronising moves the host clock forward. With
//! pacing on, queries report "not ready" and synchronisation sleeps until the wall clock
//! reaches the virtual completion time.

use crate::error::{CoreError, Result};
use crate::threads::PerThread;
use fake_cuda_abi::{SimDuration, SimTime};
use fnv::FnvHashMap as HashMap;

/// `cudaStreamNonBlocking`: no implicit synchronisation with the legacy default stream.
pub const STREAM_NON_BLOCKING: u32 = 0x1;
/// `cudaEventDisableTiming`.
pub const EVENT_DISABLE_TIMING: u32 = 0x2;
/// The legacy default stream handle (`0` means the same).
pub const STREAM_LEGACY: u64 = 0x1;
/// The per-thread default stream handle.
pub const STREAM_PER_THREAD: u64 = 0x2;

/// A stream the timeline knows, as [`Timeline::resolve`] gives it (a handle checked, a default
/// stream made on first use): what the timeline and the capture state are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey(u64);

impl StreamKey {
    /// The handle a program holds for the stream.
    pub fn handle(self) -> u64 {
        self.0
    }

    /// A key of handle `h`, for tests of the state keyed by streams.
    #[cfg(test)]
    pub(crate) fn for_tests(h: u64) -> StreamKey {
        StreamKey(h)
    }
}

impl std::fmt::LowerHex for StreamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::LowerHex::fmt(&self.0, f)
    }
}

/// First handle value given to user streams and events (well above the special values).
const FIRST_HANDLE: u64 = 0x5eed_0000;

#[derive(Debug, Clone)]
struct Stream {
    device: usize,
    flags: u32,
    priority: i32,
    legacy: bool,
    clock: SimTime,
}

#[derive(Debug, Clone)]
struct Event {
    flags: u32,
    recorded: Option<SimTime>,
}

/// What a stream handle refers to, as front-ends report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamInfo {
    /// Visible device ordinal the stream belongs to.
    pub device: usize,
    /// Creation flags.
    pub flags: u32,
    /// Priority.
    pub priority: i32,
}

/// Latest completion times of a device's streams, kept up to date as clocks move (clocks only
/// ever move forward), so that the legacy stream and device synchronisation cost O(1) however
/// many streams exist.
#[derive(Debug, Clone, Copy, Default)]
struct DeviceClocks {
    /// Over all streams of the device.
    all: SimTime,
    /// Over its blocking streams (not `cudaStreamNonBlocking`).
    blocking: SimTime,
    /// Sum of the durations of all work scheduled on its streams (NVML's utilization).
    busy: SimDuration,
}

/// All streams and events of a process and the host's virtual clock.
#[derive(Debug, Default)]
pub struct Timeline {
    streams: HashMap<StreamKey, Stream>,
    legacy: HashMap<usize, StreamKey>,
    /// Each thread's per-thread default streams, by device; dropped after the thread exits.
    per_thread: PerThread<HashMap<usize, StreamKey>>,
    devices: HashMap<usize, DeviceClocks>,
    events: HashMap<u64, Event>,
    next_handle: u64,
    host_clock: SimTime,
}

impl Timeline {
    fn fresh_handle(&mut self) -> u64 {
        if self.next_handle < FIRST_HANDLE {
            self.next_handle = FIRST_HANDLE;
        }
        self.next_handle += 0x10;
        self.next_handle
    }

    /// Creates a stream on `device` (a visible ordinal).
    pub fn create_stream(&mut self, device: usize, flags: u32, priority: i32) -> StreamKey {
        let h = StreamKey(self.fresh_handle());
        self.streams.insert(
            h,
            Stream {
                device,
                flags,
                priority,
                legacy: false,
                clock: SimTime::ZERO,
            },
        );
        self.set_clock(h, self.host_clock);
        h
    }

    /// Moves stream `key`'s clock forward to `t` (never back) and the device's aggregates.
    fn set_clock(&mut self, key: StreamKey, t: SimTime) {
        let s = self.streams.get_mut(&key).expect("resolved key");
        s.clock = s.clock.max(t);
        let (device, clock) = (s.device, s.clock);
        let blocking = s.flags & STREAM_NON_BLOCKING == 0;
        let c = self.devices.entry(device).or_default();
        c.all = c.all.max(clock);
        if blocking {
            c.blocking = c.blocking.max(clock);
        }
    }

    /// Resolves a user-visible handle (`0`, `1` = legacy, `2` = per-thread, or a created
    /// stream) to an internal stream key, creating default streams on first use.
    pub fn resolve(&mut self, handle: u64, current_device: usize) -> Result<StreamKey> {
        match handle {
            0 | STREAM_LEGACY => {
                if let Some(&k) = self.legacy.get(&current_device) {
                    return Ok(k);
                }
                let k = self.create_stream(current_device, 0, 0);
                self.streams.get_mut(&k).expect("just created").legacy = true;
                self.legacy.insert(current_device, k);
                Ok(k)
            }
            STREAM_PER_THREAD => {
                let mine = self.per_thread.get().and_then(|m| m.get(&current_device));
                if let Some(&k) = mine {
                    return Ok(k);
                }
                let k = self.create_stream(current_device, 0, 0);
                let mut exited = Vec::new();
                self.per_thread
                    .get_or_insert_with(HashMap::default, |m| exited.extend(m.into_values()))
                    .insert(current_device, k);
                // Streams of exited threads go; their clocks stay in the device aggregates,
                // so the work they held still orders later legacy-stream work.
                for old in exited {
                    self.streams.remove(&old);
                }
                Ok(k)
            }
            h if self.streams.contains_key(&StreamKey(h)) => Ok(StreamKey(h)),
            h => Err(CoreError::InvalidHandle {
                what: "stream",
                handle: h,
            }),
        }
    }

    /// Destroys a created stream; default streams cannot be destroyed.
    pub fn destroy_stream(&mut self, handle: u64) -> Result<()> {
        let key = StreamKey(handle);
        let special = self.legacy.values().any(|&k| k == key)
            || self
                .per_thread
                .values()
                .any(|m| m.values().any(|&k| k == key));
        if special || self.streams.remove(&key).is_none() {
            return Err(CoreError::InvalidHandle {
                what: "stream",
                handle,
            });
        }
        Ok(())
    }

    /// Streams that exist: created ones, default streams, and per-thread default streams of
    /// threads that are alive (or exited and not swept yet).
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Device, flags and priority of a resolved stream.
    pub fn stream_info(&self, key: StreamKey) -> StreamInfo {
        let s = &self.streams[&key];
        StreamInfo {
            device: s.device,
            flags: s.flags,
            priority: s.priority,
        }
    }

    /// The virtual time at which all work enqueued so far on `key` completes.
    pub fn stream_clock(&self, key: StreamKey) -> SimTime {
        self.streams[&key].clock
    }

    /// Places `duration` of work on stream `key`; returns its (start, end) virtual times.
    /// `floor` is a time the work cannot start before: the wall clock when pacing, or what
    /// the submitting thread polled for under the virtual clock.
    pub fn schedule(
        &mut self,
        key: StreamKey,
        duration: SimDuration,
        floor: Option<SimTime>,
    ) -> (SimTime, SimTime) {
        let start = self.ready(key, floor);
        let end = start + duration;
        let device = self.streams[&key].device;
        self.set_clock(key, end);
        let c = self.devices.entry(device).or_default();
        c.busy += duration;
        (start, end)
    }

    /// When work placed on stream `key` now would start (`schedule`), without placing it.
    pub fn ready(&self, key: StreamKey, floor: Option<SimTime>) -> SimTime {
        let s = &self.streams[&key];
        let mut start = s.clock.max(self.host_clock).max(floor.unwrap_or_default());
        let blocking = s.flags & STREAM_NON_BLOCKING == 0;
        if s.legacy {
            // The legacy stream waits for all earlier work on the device's blocking streams.
            let dev = self.devices.get(&s.device).copied().unwrap_or_default();
            start = start.max(dev.blocking);
        } else if blocking {
            if let Some(l) = self.legacy.get(&s.device) {
                start = start.max(self.streams[l].clock);
            }
        }
        start
    }

    /// The host waited until `t`: later work cannot start earlier.
    pub fn host_waited(&mut self, t: SimTime) {
        self.host_clock = self.host_clock.max(t);
    }

    /// The host's virtual clock.
    pub fn host_clock(&self) -> SimTime {
        self.host_clock
    }

    /// Completion time of all work on a device's streams.
    pub fn device_clock(&self, device: usize) -> SimTime {
        self.devices.get(&device).map_or(SimTime::ZERO, |c| c.all)
    }

    /// (Busy time, completion time of all work) of a device's streams: the work scheduled on
    /// them summed, and the latest of their clocks.
    pub fn device_busy(&self, device: usize) -> (SimDuration, SimTime) {
        self.devices
            .get(&device)
            .map_or_else(Default::default, |c| (c.busy, c.all))
    }

    /// Makes stream `key` wait for `event` (no-op if the event was never recorded).
    pub fn wait_event(&mut self, key: StreamKey, event: u64) -> Result<()> {
        let t = self.event(event)?.recorded;
        if let Some(t) = t {
            self.set_clock(key, t);
        }
        Ok(())
    }

    /// Creates an event.
    pub fn create_event(&mut self, flags: u32) -> u64 {
        let h = self.fresh_handle();
        self.events.insert(
            h,
            Event {
                flags,
                recorded: None,
            },
        );
        h
    }

    /// Creates an event that is already complete at virtual time `at` (opened IPC events).
    pub fn create_completed_event(&mut self, flags: u32, at: SimTime) -> u64 {
        let h = self.create_event(flags);
        self.events.get_mut(&h).expect("just created").recorded = Some(at);
        h
    }

    fn event(&self, handle: u64) -> Result<&Event> {
        self.events.get(&handle).ok_or(CoreError::InvalidHandle {
            what: "event",
            handle,
        })
    }

    /// Destroys an event.
    pub fn destroy_event(&mut self, handle: u64) -> Result<()> {
        self.events
            .remove(&handle)
            .map(|_| ())
            .ok_or(CoreError::InvalidHandle {
                what: "event",
                handle,
            })
    }

    /// Records `event` on stream `key`: it completes when the work enqueued so far does.
    pub fn record(&mut self, event: u64, key: StreamKey, floor: Option<SimTime>) -> Result<()> {
        self.event(event)?;
        let (_, t) = self.schedule(key, SimDuration::ZERO, floor);
        self.events.get_mut(&event).expect("checked").recorded = Some(t);
        Ok(())
    }

    /// Virtual completion time of an event; `None` if never recorded.
    pub fn event_time(&self, event: u64) -> Result<Option<SimTime>> {
        Ok(self.event(event)?.recorded)
    }

    /// Flags the event was created with.
    pub fn event_flags(&self, event: u64) -> Result<u32> {
        Ok(self.event(event)?.flags)
    }

    /// `cudaEventElapsedTime`: virtual milliseconds from `start` to `end`.
    pub fn elapsed_ms(&self, start: u64, end: u64) -> Result<f32> {
        let (a, b) = (self.event(start)?, self.event(end)?);
        if (a.flags | b.flags) & EVENT_DISABLE_TIMING != 0 {
            return Err(CoreError::InvalidHandle {
                what: "event (created with cudaEventDisableTiming)",
                handle: if a.flags & EVENT_DISABLE_TIMING != 0 {
                    start
                } else {
                    end
                },
            });
        }
        match (a.recorded, b.recorded) {
            (Some(x), Some(y)) => Ok(((y.as_nanos() as f64 - x.as_nanos() as f64) / 1e6) as f32),
            _ => Err(CoreError::InvalidHandle {
                what: "event (never recorded)",
                handle: if a.recorded.is_none() { start } else { end },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ns: u64) -> SimDuration {
        SimDuration::from_nanos(ns)
    }

    fn at(ns: u64) -> SimTime {
        SimTime::from_nanos(ns)
    }

    fn span(a: u64, b: u64) -> (SimTime, SimTime) {
        (at(a), at(b))
    }

    #[test]
    fn work_on_one_stream_is_serial() {
        let mut t = Timeline::default();
        let s = t.create_stream(0, STREAM_NON_BLOCKING, 0);
        assert_eq!(t.schedule(s, d(100), None), span(0, 100));
        assert_eq!(t.schedule(s, d(50), None), span(100, 150));
        let other = t.create_stream(0, STREAM_NON_BLOCKING, 0);
        assert_eq!(
            t.schedule(other, d(10), None),
            span(0, 10),
            "independent streams overlap"
        );
    }

    #[test]
    fn busy_time_sums_the_work_of_a_devices_streams() {
        let mut t = Timeline::default();
        let a = t.create_stream(0, STREAM_NON_BLOCKING, 0);
        let b = t.create_stream(0, STREAM_NON_BLOCKING, 0);
        let other = t.create_stream(1, 0, 0);
        t.schedule(a, d(100), None);
        t.schedule(a, d(50), None);
        t.schedule(b, d(30), None);
        t.host_waited(at(400));
        t.schedule(other, d(10), None);
        assert_eq!(t.device_busy(0), (d(180), at(150)));
        assert_eq!(t.device_busy(1), (d(10), at(410)));
        assert_eq!(t.device_busy(2), (d(0), at(0)));
    }

    #[test]
    fn legacy_stream_synchronises_with_blocking_streams_only() {
        let mut t = Timeline::default();
        let blocking = t.create_stream(0, 0, 0);
        let nonblocking = t.create_stream(0, STREAM_NON_BLOCKING, 0);
        t.schedule(blocking, d(100), None);
        t.schedule(nonblocking, d(1000), None);
        let legacy = t.resolve(0, 0).unwrap();
        assert_eq!(t.resolve(STREAM_LEGACY, 0).unwrap(), legacy);
        assert_eq!(t.schedule(legacy, d(10), None), span(100, 110));
        assert_eq!(t.schedule(blocking, d(1), None), span(110, 111));
        assert_eq!(t.schedule(nonblocking, d(1), None), span(1000, 1001));
        // Another device's legacy stream is separate.
        let legacy1 = t.resolve(0, 1).unwrap();
        assert_eq!(t.schedule(legacy1, d(5), None), span(0, 5));
    }

    #[test]
    fn events_capture_and_merge_clocks() {
        let mut t = Timeline::default();
        let a = t.create_stream(0, STREAM_NON_BLOCKING, 0);
        let b = t.create_stream(0, STREAM_NON_BLOCKING, 0);
        let (e0, e1) = (t.create_event(0), t.create_event(0));
        t.record(e0, a, None).unwrap();
        t.schedule(a, d(2_500_000), None);
        t.record(e1, a, None).unwrap();
        assert_eq!(t.elapsed_ms(e0, e1).unwrap(), 2.5);
        assert_eq!(t.elapsed_ms(e1, e0).unwrap(), -2.5);
        t.wait_event(b, e1).unwrap();
        assert_eq!(t.schedule(b, d(1), None), span(2_500_000, 2_500_001));
        let never = t.create_event(0);
        assert!(t.elapsed_ms(e0, never).is_err());
        let untimed = t.create_event(EVENT_DISABLE_TIMING);
        t.record(untimed, a, None).unwrap();
        assert!(t.elapsed_ms(e0, untimed).is_err());
        t.destroy_event(e0).unwrap();
        assert!(t.destroy_event(e0).is_err());
    }

    #[test]
    fn host_synchronisation_orders_later_work() {
        let mut t = Timeline::default();
        let a = t.create_stream(0, STREAM_NON_BLOCKING, 0);
        t.schedule(a, d(500), None);
        t.host_waited(t.stream_clock(a));
        let b = t.create_stream(0, STREAM_NON_BLOCKING, 0);
        assert_eq!(t.schedule(b, d(1), None), span(500, 501));
        assert_eq!(t.device_clock(0), at(501));
        assert_eq!(
            t.schedule(b, d(0), Some(at(9000))),
            span(9000, 9000),
            "pacing"
        );
    }

    #[test]
    fn stream_handles_validate() {
        let mut t = Timeline::default();
        assert!(t.resolve(0xdead, 0).is_err());
        let s = t.create_stream(0, 0, -3);
        assert_eq!(t.stream_info(s).priority, -3);
        let pt = t.resolve(STREAM_PER_THREAD, 0).unwrap();
        assert_ne!(pt, t.resolve(0, 0).unwrap());
        assert!(t.destroy_stream(pt.handle()).is_err());
        t.destroy_stream(s.handle()).unwrap();
        assert!(t.destroy_stream(s.handle()).is_err());
    }

    #[test]
    fn device_aggregates_agree_with_every_stream() {
        let mut t = Timeline::default();
        let mut all = Vec::new();
        for i in 0..50u64 {
            let flags = if i % 3 == 0 { STREAM_NON_BLOCKING } else { 0 };
            let s = t.create_stream((i % 2) as usize, flags, 0);
            t.schedule(s, d(1000 * (i % 7)), None);
            all.push(s);
        }
        let e = t.create_event(0);
        t.record(e, all[3], None).unwrap();
        t.wait_event(all[10], e).unwrap();
        for dev in 0..2 {
            let of = |blocking_only: bool| {
                all.iter()
                    .map(|k| &t.streams[k])
                    .filter(|s| s.device == dev)
                    .filter(|s| !blocking_only || s.flags & STREAM_NON_BLOCKING == 0)
                    .map(|s| s.clock)
                    .max()
                    .unwrap()
            };
            let (want_all, want_blocking) = (of(false), of(true));
            assert_eq!(t.device_clock(dev), want_all);
            let legacy = t.resolve(STREAM_LEGACY, dev).unwrap();
            let (start, _) = t.schedule(legacy, d(0), None);
            assert_eq!(start, want_blocking);
        }
    }

    #[test]
    fn per_thread_streams_of_exited_threads_are_dropped() {
        let t = std::sync::Mutex::new(Timeline::default());
        for i in 0..500 {
            std::thread::scope(|s| {
                s.spawn(|| {
                    let mut t = t.lock().unwrap();
                    let k = t.resolve(STREAM_PER_THREAD, 0).unwrap();
                    t.schedule(k, d(10 * i), None);
                });
            });
        }
        let mut t = t.into_inner().unwrap();
        assert!(
            t.per_thread.len() <= 32,
            "{} per-thread maps",
            t.per_thread.len()
        );
        assert!(t.streams.len() <= 32, "{} streams", t.streams.len());
        // Their work still orders the legacy stream.
        let legacy = t.resolve(STREAM_LEGACY, 0).unwrap();
        assert_eq!(t.schedule(legacy, d(1), None), span(4990, 4991));
    }
}
