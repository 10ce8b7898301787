//! Streams and events: creation, ordering, queries and synchronisation on the virtual clocks.

use super::*;

impl Core {
    /// Creates a stream on the current device.
    pub fn stream_create(&self, flags: u32, priority: i32) -> Result<u64> {
        let (_, phys) = self.current_checked()?;
        Ok(self
            .lock()
            .timeline
            .create_stream(phys, flags, priority)
            .handle())
    }

    /// Destroys a stream.
    pub fn stream_destroy(&self, stream: u64) -> Result<()> {
        self.lock().timeline.destroy_stream(stream)
    }

    pub(crate) fn resolve(&self, st: &mut State, stream: u64) -> Result<timeline::StreamKey> {
        let (_, phys) = self.current_checked()?;
        st.timeline.resolve(stream, phys)
    }

    /// Flags, priority and device ordinal of a stream.
    pub fn stream_info(&self, stream: u64) -> Result<timeline::StreamInfo> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        let mut info = st.timeline.stream_info(key);
        info.device = self.ordinal_of(info.device).unwrap_or(-1) as usize;
        Ok(info)
    }

    /// Virtual time at which a stream's enqueued work completes.
    pub fn stream_clock(&self, stream: u64) -> Result<SimTime> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        Ok(st.timeline.stream_clock(key))
    }

    /// Refuses synchronising with a capturing stream (CUDA invalidates the capture).
    fn not_capturing(&self, st: &State, key: timeline::StreamKey, what: &str) -> Result<()> {
        if st.graphs.is_capturing(key) {
            return Err(CoreError::CaptureViolation(format!(
                "{what} on stream {key:#x} while it is capturing"
            )));
        }
        Ok(())
    }

    /// The virtual completion time of a stream that is not capturing; with `host_waits` the
    /// host clock moves to it (the host synchronised with the stream).
    fn settled_clock(&self, stream: u64, what: &str, host_waits: bool) -> Result<SimTime> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        self.not_capturing(&st, key, what)?;
        let clock = st.timeline.stream_clock(key);
        if host_waits {
            self.host_wait(&mut st, clock);
        }
        Ok(clock)
    }

    /// `cudaStreamQuery`: `Err(NotReady)` while pacing holds the stream's work back, or
    /// under the virtual clock while the host clock is behind the stream's completion.
    pub fn stream_query(&self, stream: u64) -> Result<()> {
        let clock = self.settled_clock(stream, "query", false)?;
        if self.config.virtual_clock {
            return self.poll_virtual(clock);
        }
        if self.config.pace && self.wall() < clock {
            return Err(CoreError::NotReady);
        }
        Ok(())
    }

    /// `cudaStreamSynchronize`.
    pub fn stream_synchronize(&self, stream: u64) -> Result<()> {
        let clock = self.settled_clock(stream, "synchronize", true)?;
        self.pace_until(clock);
        Ok(())
    }

    /// `cudaDeviceSynchronize` for the current device.
    pub fn device_synchronize(&self) -> Result<()> {
        let (_, phys) = self.current_checked()?;
        let clock = {
            let mut st = self.lock();
            if st.graphs.any_capturing() {
                return Err(CoreError::CaptureViolation(
                    "device synchronize while a stream is capturing".into(),
                ));
            }
            let c = st.timeline.device_clock(phys);
            self.host_wait(&mut st, c);
            c
        };
        self.pace_until(clock);
        Ok(())
    }

    /// `cudaStreamWaitEvent`.
    pub fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        if st.graphs.event_waited(key, event)? {
            return Ok(());
        }
        st.timeline.wait_event(key, event)
    }

    /// `cudaEventCreateWithFlags`.
    pub fn event_create(&self, flags: u32) -> u64 {
        self.lock().timeline.create_event(flags)
    }

    /// `cudaEventDestroy`.
    pub fn event_destroy(&self, event: u64) -> Result<()> {
        let mut st = self.lock();
        st.graphs.forget_event(event);
        st.timeline.destroy_event(event)?;
        if let Some((phys, slot, _)) = st.event_exports.remove(&event) {
            if let Some(a) = st.arenas[phys].as_mut() {
                a.retract_event(slot);
            }
        }
        Ok(())
    }

    /// `cudaEventRecord`.
    pub fn event_record(&self, event: u64, stream: u64) -> Result<()> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        st.timeline.event_flags(event)?;
        if st.graphs.event_recorded(event, key) {
            return Ok(());
        }
        let wall = self.start_floor();
        st.timeline.record(event, key, wall)
    }

    /// `cudaEventQuery`.
    pub fn event_query(&self, event: u64) -> Result<()> {
        let t = self.lock().timeline.event_time(event)?;
        if self.config.virtual_clock {
            return t.map_or(Ok(()), |t| self.poll_virtual(t));
        }
        match t {
            Some(t) if self.config.pace && self.wall() < t => Err(CoreError::NotReady),
            _ => Ok(()),
        }
    }

    /// `cudaEventSynchronize`.
    pub fn event_synchronize(&self, event: u64) -> Result<()> {
        let t = {
            let mut st = self.lock();
            let t = st.timeline.event_time(event)?.unwrap_or_default();
            self.host_wait(&mut st, t);
            t
        };
        self.pace_until(t);
        Ok(())
    }

    /// `cudaEventElapsedTime` in virtual milliseconds.
    pub fn event_elapsed_ms(&self, start: u64, end: u64) -> Result<f32> {
        self.lock().timeline.elapsed_ms(start, end)
    }
}
