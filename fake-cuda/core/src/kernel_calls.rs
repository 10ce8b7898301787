//! Kernels and the end-of-run report: registration, launch counts, and what the process did.

use super::*;

/// What computes a [`Core::launch_compute`]: `func(data)` in stream order, and `release(data)`,
/// if given, once no operation needs `data`.
#[derive(Debug, Clone, Copy)]
pub struct ComputeWork {
    /// Computes the kernel.
    pub func: CWorkFn,
    /// Its argument.
    pub data: usize,
    /// Frees `data`.
    pub release: Option<CWorkFn>,
}

impl Core {
    /// `__cudaRegisterFunction`.
    pub fn register_function(&self, host_fun: usize, name: &str) {
        self.lock().kernels.register(host_fun, name);
    }

    /// A kernel launch: counted by name, or refused with `NCCLSIM_STRICT_KERNELS=1`. It takes
    /// no time, unless the kernel-time table has a time for it (see `Core::submit`).
    pub fn launch_kernel(&self, host_fun: usize, stream: u64) -> Result<()> {
        self.submit(stream, Op::Kernel { host_fun })
    }

    /// Compute on `stream`, the one way torch ops, cuBLAS GEMMs and other priced kernels
    /// reach the timeline: a launch of `name` that occupies the stream for the kernel-time
    /// table's measured time of this launch of `name`, else the compute model's time for
    /// `cost` on the stream's GPU (`compute_model::price`), counted by name. `work`, if any,
    /// computes it in stream order (now, or at each replay of a graph the stream is capturing
    /// into); compute without it (the caller computes the values itself) is refused while the
    /// stream captures. With tracing on, each placement (eager or at a replay) is a trace event
    /// carrying `detail` (a JSON object of the caller's). Gives its virtual (start, duration),
    /// `None` when it was captured.
    ///
    /// # Safety
    /// As [`Core::enqueue_host_owned`] for `work`: its function must be safe to call with its
    /// data until the data is released, and the release must be safe once from any thread.
    pub unsafe fn launch_compute(
        &self,
        stream: u64,
        cost: compute_model::KernelCost,
        name: &str,
        detail: Option<&str>,
        work: Option<ComputeWork>,
    ) -> Result<Option<(SimTime, SimDuration)>> {
        let (func, data, owned) = match work {
            Some(w) => (
                Some(w.func),
                w.data,
                w.release.map(|r| {
                    // SAFETY: the caller's contract.
                    unsafe { graph::OwnedData::new(w.data, r) }
                }),
            ),
            None => (None, 0, None),
        };
        let times = self.submit_timed(
            stream,
            Op::Compute {
                cost,
                name: name.into(),
                detail: detail.map(Into::into),
                func,
                data,
                owned,
            },
        )?;
        Ok(times.map(|(start, end)| (start, end - start)))
    }

    /// The measured time of the kernel-time table for this launch of `name` on `device`
    /// (physical), else the compute model's time for `cost` there.
    pub(crate) fn priced_or_measured(
        &self,
        st: &mut State,
        device: usize,
        cost: &compute_model::KernelCost,
        name: &str,
    ) -> SimDuration {
        let ns = st
            .kernel_times
            .as_mut()
            .and_then(|t| t.duration(device, name))
            .unwrap_or_else(|| compute_model::price(&self.devices[device].spec, cost));
        SimDuration::from_nanos(ns)
    }

    /// Traces every launch through the compute door into `dir` from now on
    /// (`compute-<host>-<pid>.json`, see `compute_trace`, made at the first launch).
    pub fn trace_compute_to(&self, dir: &std::path::Path) -> Result<()> {
        let t = compute_trace::Trace::new(dir).map_err(|e| CoreError::Os {
            call: "make the trace directory",
            errno: format!("{}: {e}", dir.display()),
        })?;
        self.lock().compute_trace = Some(t);
        Ok(())
    }

    /// Writes the compute trace's buffered events (at exit, and whenever a reader needs them).
    pub fn flush_compute_trace(&self) -> Result<()> {
        match self.lock().compute_trace.as_mut() {
            Some(w) => w.flush().map_err(|e| CoreError::Os {
                call: "write the compute trace",
                errno: e.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// `cudaProfilerStart` (`op` 1), `cudaProfilerStop` (0), or a query (any other): the
    /// ranges started so far and whether one is open.
    pub fn profiler(&self, op: i32) -> (u64, bool) {
        let mut st = self.lock();
        let p = &mut st.profiler;
        match op {
            crate::abi::PROFILER_START if !p.1 => *p = (p.0 + 1, true),
            crate::abi::PROFILER_STOP => p.1 = false,
            _ => {}
        }
        *p
    }

    /// A training step ended where the program's framework marks steps (`by`:
    /// `STEP_BY_OPTIMIZER` or `STEP_BY_PROFILER`), or with `STEP_QUERY` only a query: the
    /// steps marked so far. A mark is a `step_end` event in the compute trace at the calling
    /// thread's host clock ([`Core::host_clock`]).
    pub fn step_mark(&self, by: i32) -> Result<u64> {
        let name = match by {
            crate::abi::STEP_QUERY => return Ok(self.lock().step_marks),
            crate::abi::STEP_BY_OPTIMIZER => "optimizer",
            crate::abi::STEP_BY_PROFILER => "profiler",
            _ => {
                return Err(CoreError::InvalidValue(format!(
                    "step mark by {by}: not STEP_BY_OPTIMIZER, STEP_BY_PROFILER or STEP_QUERY"
                )))
            }
        };
        let at = self.host_clock();
        let mut st = self.lock();
        st.step_marks += 1;
        let marks = st.step_marks;
        if let Some(w) = st.compute_trace.as_mut() {
            if let Err(e) = w.step_end(std::process::id(), marks, name, at.as_nanos()) {
                eprintln!("ncclsim: NCCLSIM_TRACE: {e}; compute is no longer traced");
                st.compute_trace = None;
            }
        }
        Ok(marks)
    }

    /// The index of the `cudaProfilerStart` range open now, if one is.
    pub fn open_profiler_range(&self) -> Option<u64> {
        self.lock().open_profiler_range()
    }

    /// Kernel launch counts by name.
    pub fn kernel_launch_counts(&self) -> BTreeMap<String, u64> {
        self.lock().kernels.launch_counts().clone()
    }

    /// The end-of-run report (`NCCLSIM_REPORT`); `calls` are the API call counts the caller
    /// kept.
    pub fn report(&self, calls: BTreeMap<String, u64>) -> Report {
        let stats = self.memory_stats();
        Report {
            devices: self
                .visible
                .iter()
                .zip(stats)
                .enumerate()
                .map(|(ordinal, (&p, m))| DeviceReport {
                    ordinal,
                    pci_bus_id: self.devices[p].pci.to_string(),
                    name: self.devices[p].name.clone(),
                    current_bytes: m.current,
                    peak_bytes: m.peak,
                    capacity_bytes: self.devices[p].memory_bytes,
                })
                .collect(),
            calls,
            kernel_launches: self.kernel_launch_counts(),
            streams: self.lock().timeline.stream_count(),
        }
    }
}
