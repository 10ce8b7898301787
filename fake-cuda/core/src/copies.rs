//! Copies, memsets and host functions: both sides of a transfer checked, the transfer priced,
//! and run on its stream (or recorded into a capture).

use super::*;

impl Core {
    /// Checks that `[ptr, ptr + len)` is device memory the core can read (and write, if
    /// `write`).
    fn check_device(st: &State, ptr: usize, len: usize, write: bool) -> Result<DeviceRange> {
        let r = st
            .device_range(ptr)
            .ok_or_else(|| CoreError::InvalidPointer {
                ptr,
                len,
                why: st.unreachable_why(ptr, len),
            })?;
        let end = ptr.checked_add(len);
        if end.is_none_or(|end| end > r.read_end) {
            return Err(CoreError::InvalidPointer {
                ptr,
                len,
                why: "range runs past the end of its allocation",
            });
        }
        if write && end.is_none_or(|end| end > r.write_end) {
            return Err(CoreError::InvalidPointer {
                ptr,
                len,
                why: "memory mapped read-only (cuMemSetAccess)",
            });
        }
        Ok(r)
    }

    /// Checks one side of a copy: device sides must lie in one allocation; `Ok(None)` for host.
    fn check_side(
        st: &State,
        ptr: usize,
        len: usize,
        must_be_device: bool,
        write: bool,
    ) -> Result<Option<DeviceRange>> {
        if must_be_device || st.touches_device_space(ptr, len) {
            Self::check_device(st, ptr, len, write).map(Some)
        } else if ptr == 0 && len > 0 {
            Err(CoreError::InvalidValue("null host pointer".into()))
        } else {
            Ok(None)
        }
    }

    /// Checks the memory an operation touches and returns its modelled duration.
    fn price(&self, st: &State, op: &Op, stream_device: usize) -> Result<u64> {
        let extent = |pitch: usize, width: usize, height: usize| {
            pitch
                .checked_mul(height - 1)
                .and_then(|x| x.checked_add(width))
                .ok_or_else(|| CoreError::InvalidValue("copy extent overflows".into()))
        };
        let (spans, path, bytes) = match *op {
            Op::Copy {
                dst,
                dpitch,
                src,
                spitch,
                width,
                height,
                kind,
            } => {
                let (dst_dev, src_dev) = match kind {
                    CopyKind::HostToHost | CopyKind::Default => (false, false),
                    CopyKind::HostToDevice => (true, false),
                    CopyKind::DeviceToHost => (false, true),
                    CopyKind::DeviceToDevice => (true, true),
                };
                let d = Self::check_side(st, dst, extent(dpitch, width, height)?, dst_dev, true)?;
                let s = Self::check_side(st, src, extent(spitch, width, height)?, src_dev, false)?;
                let path = match (d.is_some(), s.is_some()) {
                    (false, false) => CopyPath::HostToHost,
                    (true, true) => CopyPath::DeviceToDevice,
                    _ => CopyPath::HostLink,
                };
                (vec![d, s], path, (width * height) as u64)
            }
            Op::Memset { dst, n, .. } => (
                vec![Self::check_side(st, dst, n, true, true)?],
                CopyPath::Memset,
                n as u64,
            ),
            Op::Fill {
                dst, elem, count, ..
            } => {
                let n = elem * count;
                (
                    vec![Self::check_side(st, dst, n, true, true)?],
                    CopyPath::Memset,
                    n as u64,
                )
            }
            // Priced when it runs (`submit`): the kernel-time table counts its launches.
            Op::Kernel { .. } | Op::Compute { .. } => return Ok(0),
            Op::Host { duration_ns, .. } => return Ok(duration_ns),
            // Placed when it starts (`submit`).
            Op::Meeting { .. } => return Ok(0),
        };
        if let [Some(d), Some(s)] = spans[..] {
            if d.physical != s.physical {
                let (src, dst) = (&self.devices[s.physical], &self.devices[d.physical]);
                return Ok(timing::peer_copy_ns(src, dst, d.physical, bytes));
            }
        }
        let dev = spans
            .iter()
            .flatten()
            .next()
            .map_or(stream_device, |r| r.physical);
        Ok(timing::copy_ns(&self.devices[dev], path, bytes))
    }

    /// Adds a placed compute launch to the trace, if tracing (a failure to write is said once
    /// and ends the tracing, never the program's work).
    #[allow(clippy::too_many_arguments)]
    fn trace_compute(
        &self,
        st: &mut State,
        stream: u64,
        device: usize,
        placed: compute_trace::Placed,
        cost: &compute_model::KernelCost,
        name: &str,
        detail: &Option<std::sync::Arc<str>>,
    ) {
        let range = st.open_profiler_range();
        let mark = st.step_marks;
        let ordinal = self.ordinal_of(device).unwrap_or(-1);
        let Some(w) = st.compute_trace.as_mut() else {
            return;
        };
        // Under the virtual clock, when the host issued it on its own timeline (a kernel that
        // starts at its issue after an idle stream waited for the host: launch-bound).
        let issued_ns = self
            .config
            .virtual_clock
            .then(|| self.host_clock().as_nanos());
        let launch = compute_trace::Launch {
            name,
            stream,
            issued_ns,
            start_ns: placed.times.0.as_nanos(),
            duration_ns: (placed.times.1 - placed.times.0).as_nanos(),
            shared_ns: placed.shared.as_nanos(),
            device: ordinal,
            gpu: &self.devices[device].name,
            cost,
            range,
            mark,
            detail: detail.as_deref(),
        };
        if let Err(e) = w.add(std::process::id(), &launch) {
            eprintln!("ncclsim: NCCLSIM_TRACE: {e}; compute is no longer traced");
            st.compute_trace = None;
        }
    }

    /// The stream whose host work is running on the calling thread, as it was submitted (for
    /// a graph replay, the stream the graph was launched on); None outside host work.
    pub fn host_stream() -> Option<u64> {
        HOST_STREAM.get()
    }

    /// Submits one operation to a stream: recorded if the stream is capturing, otherwise
    /// checked, placed on the stream's virtual timeline and run now (after the lock is
    /// released, so host functions may call back into the core).
    pub(crate) fn submit(&self, stream: u64, op: Op) -> Result<()> {
        self.submit_timed(stream, op).map(|_| ())
    }

    /// [`Core::submit`], giving the virtual (start, end) of the operation when it ran now.
    pub(crate) fn submit_timed(&self, stream: u64, op: Op) -> Result<Option<(SimTime, SimTime)>> {
        // A large device-only write under `--compute time`: its time, not its bytes.
        let skipped;
        let ready = {
            let mut st = self.lock();
            let key = self.resolve(&mut st, stream)?;
            let stream_device = st.timeline.stream_info(key).device;
            let mut ns = self.price(&st, &op, stream_device)?;
            skipped = self.config.shapes_only && shapes_only_skips(&st, &op);
            if let Some((dst, len)) = op.device_write_extent() {
                if st.touches_device_space(dst, len) && !skipped {
                    self.commit_device(&mut st, dst, len)?;
                }
            }
            if let Op::Kernel { host_fun } = op {
                if self.config.strict_kernels {
                    return Err(CoreError::KernelRefused(st.kernels.name_of(host_fun)));
                }
            }
            if let Op::Compute {
                func: None, name, ..
            } = &op
            {
                if st.graphs.is_capturing(key) {
                    return Err(CoreError::CaptureViolation(format!(
                        "{name}: compute the caller runs itself cannot be captured into a \
                         graph (nothing would compute it at replay)"
                    )));
                }
            }
            if st.graphs.record(key, &op) {
                return Ok(None);
            }
            if let Op::Compute { cost, name, .. } = &op {
                ns = self
                    .priced_or_measured(&mut st, stream_device, cost, name)
                    .as_nanos();
                st.kernels.launch_named(name);
            }
            if let Op::Kernel { host_fun } = op {
                // A raw kernel takes no time, or its measured time from the kernel-time table.
                let name = st.kernels.launch(host_fun);
                if let Some(t) = st.kernel_times.as_mut() {
                    ns = t.duration(stream_device, &name).unwrap_or(ns);
                }
            }
            let wall = self.start_floor();
            if let Op::Meeting { .. } = op {
                // Placed once it knows its start, below.
                let ready = st.timeline.ready(key, wall);
                (ready, ready)
            } else {
                let mut shared = SimDuration::ZERO;
                if let Op::Compute { cost, .. } = &op {
                    // Beside communication kernels, an arithmetic-bound kernel has only the
                    // multiprocessors they leave.
                    // (Classified only when communication overlaps it: most kernels meet none.)
                    let spec = &self.devices[stream_device].spec;
                    let start = st.timeline.ready(key, wall);
                    let alone = SimDuration::from_nanos(ns);
                    let with = st
                        .comm_load
                        .stretched(stream_device, spec.sms, start, alone);
                    if with != alone
                        && compute_model::limit(spec, cost) == compute_model::Limit::Arithmetic
                    {
                        shared = SimDuration::from_nanos(
                            with.as_nanos().saturating_sub(alone.as_nanos()),
                        );
                        ns = with.as_nanos();
                    }
                }
                let times = st.timeline.schedule(key, SimDuration::from_nanos(ns), wall);
                self.publish_work(&mut st, stream_device);
                if let Op::Compute {
                    cost, name, detail, ..
                } = &op
                {
                    let placed = compute_trace::Placed { times, shared };
                    self.trace_compute(&mut st, stream, stream_device, placed, cost, name, detail);
                }
                times
            }
        };
        // SAFETY (all arms): device ranges were checked to lie inside live allocations; host
        // ranges are the caller's promise, as with the real runtime; host functions are the
        // program's, called with the argument it gave.
        match op {
            Op::Copy { .. } | Op::Memset { .. } | Op::Fill { .. } if skipped => {}
            Op::Copy {
                dst,
                dpitch,
                src,
                spitch,
                width,
                height,
                ..
            } => {
                for row in 0..height {
                    // SAFETY: device rows lie inside live allocations (checked when priced),
                    // host rows are the caller's promise; `copy` allows overlap.
                    unsafe {
                        std::ptr::copy(
                            (src + row * spitch) as *const u8,
                            (dst + row * dpitch) as *mut u8,
                            width,
                        )
                    }
                }
            }
            // SAFETY: the `n` bytes at `dst` were checked to lie inside a live allocation.
            Op::Memset { dst, value, n } => unsafe {
                std::ptr::write_bytes(dst as *mut u8, value, n)
            },
            Op::Fill {
                dst,
                pattern,
                elem,
                count,
            } => {
                let bytes = &pattern.to_le_bytes()[..elem];
                // SAFETY: the `elem * count` bytes at `dst` were checked to lie inside a live
                // allocation; the first element is written, then doubled in place.
                unsafe {
                    let p = dst as *mut u8;
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, elem);
                    let total = elem * count;
                    let mut done = elem;
                    while done < total {
                        let n = done.min(total - done);
                        std::ptr::copy_nonoverlapping(p, p.add(done), n);
                        done += n;
                    }
                }
            }
            Op::Kernel { .. } => {}
            Op::Host { func, data, .. } | Op::Compute { func, data, .. } => {
                if let Some(f) = func {
                    let outer = HOST_STREAM.replace(Some(stream));
                    // SAFETY: the program's host function, called with the argument it gave.
                    unsafe { f(data as *mut std::ffi::c_void) }
                    HOST_STREAM.set(outer);
                }
                // Dropping `op` here releases owned data that no graph holds.
            }
            Op::Meeting {
                func,
                data,
                duration_ns,
                ctas,
                ..
            } => {
                let outer = HOST_STREAM.replace(Some(stream));
                // SAFETY: the caller's work function, called with the argument it gave
                // (`enqueue_meeting`'s contract).
                let start =
                    unsafe { func(data as *mut std::ffi::c_void, stream, ready.0.as_nanos()) };
                HOST_STREAM.set(outer);
                if start == crate::abi::MEETING_FAILED {
                    return Ok(None);
                }
                let start = SimTime::from_nanos(start).max(ready.0);
                let mut st = self.lock();
                let key = self.resolve(&mut st, stream)?;
                let placed = (start - ready.0) + SimDuration::from_nanos(duration_ns);
                let (_, end) = st.timeline.schedule(key, placed, Some(ready.0));
                let device = st.timeline.stream_info(key).device;
                st.comm_load.add(device, start, end, ctas);
                self.publish_work(&mut st, device);
                return Ok(Some((start, end)));
            }
        }
        Ok(Some(ready))
    }

    /// `cudaMemcpyAsync`: copies `n` bytes in stream order.
    ///
    /// # Safety
    /// As [`Core::memcpy_2d`] with one row of `n` bytes.
    pub unsafe fn memcpy(
        &self,
        dst: usize,
        src: usize,
        n: usize,
        kind: CopyKind,
        stream: u64,
    ) -> Result<()> {
        // SAFETY: the same ranges, under this function's contract.
        unsafe { self.memcpy_2d(dst, n, src, n, n, 1, kind, stream) }
    }

    /// `cudaMemcpy2DAsync`: `height` rows of `width` bytes between pitched buffers.
    ///
    /// # Safety
    /// Device sides are checked (live allocations of the right size and access). A side outside
    /// device memory is host memory the core copies from (`src`) or to (`dst`) during this
    /// call, or, if the stream is capturing, at every launch of a graph made from the capture:
    /// then each of its rows must be readable (`src`) or writable (`dst`) and not touched by
    /// another thread, as the CUDA runtime requires of its callers.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn memcpy_2d(
        &self,
        dst: usize,
        dpitch: usize,
        src: usize,
        spitch: usize,
        width: usize,
        height: usize,
        kind: CopyKind,
        stream: u64,
    ) -> Result<()> {
        if width == 0 || height == 0 {
            return Ok(());
        }
        if width > dpitch || width > spitch {
            return Err(CoreError::InvalidValue(format!(
                "2D copy width {width} exceeds a pitch ({dpitch}, {spitch})"
            )));
        }
        self.submit(
            stream,
            Op::Copy {
                dst,
                dpitch,
                src,
                spitch,
                width,
                height,
                kind,
            },
        )
    }

    /// `cudaMemsetAsync`: fills `n` bytes of device memory with `value`.
    pub fn memset(&self, dst: usize, value: u8, n: usize, stream: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.submit(stream, Op::Memset { dst, value, n })
    }

    /// `cuMemsetD16/D32Async`, `cuStreamWriteValue32/64`: fills `count` elements of `elem`
    /// bytes (1, 2, 4 or 8; `dst` aligned to it) with the low bytes of `pattern`.
    pub fn memset_pattern(
        &self,
        dst: usize,
        pattern: u64,
        elem: usize,
        count: usize,
        stream: u64,
    ) -> Result<()> {
        if ![1, 2, 4, 8].contains(&elem) {
            return Err(CoreError::InvalidValue(format!(
                "fill element of {elem} bytes (1, 2, 4 or 8)"
            )));
        }
        if dst % elem != 0 {
            return Err(CoreError::InvalidValue(format!(
                "fill destination {dst:#x} is not aligned to its {elem}-byte elements"
            )));
        }
        if count == 0 {
            return Ok(());
        }
        if elem.checked_mul(count).is_none() {
            return Err(CoreError::InvalidValue("fill size overflows".into()));
        }
        self.submit(
            stream,
            Op::Fill {
                dst,
                pattern,
                elem,
                count,
            },
        )
    }

    /// Host work of the program (`cudaLaunchHostFunc`, the vtable's `enqueue`): `func(data)`
    /// runs in stream order after `duration_ns` of virtual time; captured and replayed like
    /// any other work.
    ///
    /// # Safety
    /// `func(data)` must be safe to call on this thread during this call, or, if the stream is
    /// capturing, on the launching thread at every launch of a graph made from the capture.
    pub unsafe fn enqueue_host(
        &self,
        stream: u64,
        duration_ns: u64,
        func: Option<CWorkFn>,
        data: usize,
    ) -> Result<()> {
        self.submit(
            stream,
            Op::Host {
                func,
                data,
                duration_ns,
                owned: None,
            },
        )
    }

    /// Like [`Core::enqueue_host`], but the core owns `data`: `release(data)` is called once
    /// when no operation needs it any more — right after `func` ran (or the enqueue failed),
    /// or, if the stream was capturing, when the graph and every executable graph made from
    /// it are destroyed. `release` may run while the core's lock is held, so it must not call
    /// into the core.
    ///
    /// # Safety
    /// `release(data)` must be safe to call once, from any thread, at any later time, and
    /// `func(data)` must be safe to call until then.
    pub unsafe fn enqueue_host_owned(
        &self,
        stream: u64,
        duration_ns: u64,
        func: Option<CWorkFn>,
        data: usize,
        release: CWorkFn,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        let owned = unsafe { graph::OwnedData::new(data, release) };
        self.submit(
            stream,
            Op::Host {
                func,
                data,
                duration_ns,
                owned: Some(owned),
            },
        )
    }

    /// Like [`Core::enqueue_host_owned`], for work that starts when others are ready (a
    /// collective): `func(data, stream, ready)` runs with the virtual time the stream reached
    /// it and returns the start (or [`crate::abi::MEETING_FAILED`]); the stream then waits until
    /// the start and `duration_ns` more. At each replay of a graph that captured it, the same
    /// happens on the launch stream. Gives the end, or None when nothing ran now.
    ///
    /// # Safety
    /// As [`Core::enqueue_host_owned`], with `func(data, ..)`.
    pub unsafe fn enqueue_meeting(
        &self,
        stream: u64,
        duration_ns: u64,
        ctas: u32,
        func: crate::abi::CMeetFn,
        data: usize,
        release: CWorkFn,
    ) -> Result<Option<SimTime>> {
        // SAFETY: the caller's contract.
        let owned = unsafe { graph::OwnedData::new(data, release) };
        let end = self.submit_timed(
            stream,
            Op::Meeting {
                func,
                data,
                duration_ns,
                ctas,
                owned,
            },
        )?;
        Ok(end.map(|(_, end)| end))
    }
}

/// Whether `op` is a device-only write larger than [`crate::SHAPES_ONLY_MOVED`]: a copy
/// between device buffers, or a memset or fill of one.
fn shapes_only_skips(st: &State, op: &Op) -> bool {
    let Some((dst, len)) = op.device_write_extent() else {
        return false;
    };
    if len <= crate::SHAPES_ONLY_MOVED || !st.touches_device_space(dst, len) {
        return false;
    }
    match op {
        Op::Copy { .. } => op
            .copy_read_extent()
            .is_some_and(|(src, span)| st.touches_device_space(src, span)),
        Op::Memset { .. } | Op::Fill { .. } => true,
        _ => false,
    }
}
