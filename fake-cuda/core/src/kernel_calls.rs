//! Kernels and the end-of-run report: registration, launch counts, and what the process did.

use super::*;

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

    /// Compute whose time the compute model gives: occupies `stream` for the modelled time of
    /// `cost` on the stream's GPU (`compute_model::price`), or the measured time of the
    /// kernel-time table for this launch of `name`, and counts a launch of `name`; returns its
    /// (start, end) in virtual ns. Refused while the stream captures: nothing would run the
    /// computation at replay.
    pub fn launch_priced(
        &self,
        stream: u64,
        cost: &compute_model::KernelCost,
        name: &str,
    ) -> Result<(u64, u64)> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        if st.graphs.is_capturing(key) {
            return Err(CoreError::CaptureViolation(format!(
                "{name}: compute on the simulated GPU cannot be captured into a graph"
            )));
        }
        let phys = st.timeline.stream_info(key).device;
        let ns = self.priced_or_measured(&mut st, phys, cost, name);
        st.kernels.launch_named(name);
        let wall = self.start_floor();
        let times = st.timeline.schedule(key, ns, wall);
        self.publish_work(&mut st, phys);
        Ok(times)
    }

    /// The measured time of the kernel-time table for this launch of `name` on `device`
    /// (physical), else the compute model's time for `cost` there.
    fn priced_or_measured(
        &self,
        st: &mut State,
        device: usize,
        cost: &compute_model::KernelCost,
        name: &str,
    ) -> u64 {
        st.kernel_times
            .as_mut()
            .and_then(|t| t.duration(device, name))
            .unwrap_or_else(|| compute_model::price(&self.devices[device].spec, cost))
    }

    /// The time of a launch of `name` on `stream`'s device that the caller schedules itself
    /// (cuBLAS GEMMs): the kernel-time table's measured time for this launch of `name`, else
    /// the compute model's for `cost`, ns. Counts the launch in the table's matching.
    pub fn price_launch(
        &self,
        stream: u64,
        cost: &compute_model::KernelCost,
        name: &str,
    ) -> Result<u64> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        let phys = st.timeline.stream_info(key).device;
        Ok(self.priced_or_measured(&mut st, phys, cost, name))
    }

    /// The compute model's time for `cost` on `stream`'s device, ns (nothing is scheduled).
    pub fn price_compute(&self, stream: u64, cost: &compute_model::KernelCost) -> Result<u64> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        let phys = st.timeline.stream_info(key).device;
        Ok(compute_model::price(&self.devices[phys].spec, cost))
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
