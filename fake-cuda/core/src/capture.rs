//! Stream capture and graphs: a stream's work recorded into a graph, instantiated and replayed;
//! device reset.

use super::*;

impl Core {
    /// `cudaStreamBeginCapture`. The legacy default stream cannot capture.
    pub fn begin_capture(&self, stream: u64) -> Result<()> {
        if stream == 0 || stream == timeline::STREAM_LEGACY {
            return Err(CoreError::CaptureViolation(
                "the legacy default stream cannot capture".into(),
            ));
        }
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        st.graphs.begin(key)
    }

    /// `cudaStreamEndCapture`: the graph of the capture `stream` began.
    pub fn end_capture(&self, stream: u64) -> Result<u64> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        st.graphs.end(key)
    }

    /// `cudaStreamGetCaptureInfo`: (status, capture id, graph being captured into).
    pub fn capture_info(&self, stream: u64) -> Result<(graph::CaptureStatus, u64, u64)> {
        let mut st = self.lock();
        let key = self.resolve(&mut st, stream)?;
        Ok(st.graphs.info(key))
    }

    /// `cudaGraphCreate`: an empty graph.
    pub fn graph_create(&self) -> u64 {
        self.lock().graphs.create_graph()
    }

    /// `cudaGraphDestroy`.
    pub fn graph_destroy(&self, graph: u64) -> Result<()> {
        self.lock().graphs.destroy_graph(graph)
    }

    /// The operations of a graph, in order (`cudaGraphGetNodes`, `cudaGraphDebugDotPrint`).
    pub fn graph_ops(&self, graph: u64) -> Result<Vec<Op>> {
        self.lock().graphs.graph_ops(graph)
    }

    /// `cudaUserObjectCreate`: an object whose creator holds `refs` references; `destroy(ptr)`
    /// runs once the last reference (the creator's or a graph's) goes, possibly while the
    /// core's lock is held (CUDA's destructors must not call CUDA).
    ///
    /// # Safety
    /// `destroy(ptr)` must be safe to call once, from any thread, at any later time.
    pub unsafe fn user_object_create(
        &self,
        ptr: usize,
        destroy: CWorkFn,
        refs: u32,
    ) -> Result<u64> {
        // SAFETY: the caller's contract.
        let owned = unsafe { graph::OwnedData::new(ptr, destroy) };
        self.lock().graphs.create_user_object(owned, refs)
    }

    /// `cudaUserObjectRetain`.
    pub fn user_object_retain(&self, object: u64, count: u32) -> Result<()> {
        self.lock().graphs.retain_user_object(object, count)
    }

    /// `cudaUserObjectRelease`.
    pub fn user_object_release(&self, object: u64, count: u32) -> Result<()> {
        self.lock().graphs.release_user_object(object, count)
    }

    /// `cudaGraphRetainUserObject` (`moved`: `cudaGraphUserObjectMove`).
    pub fn graph_retain_user_object(
        &self,
        graph: u64,
        object: u64,
        count: u32,
        moved: bool,
    ) -> Result<()> {
        self.lock()
            .graphs
            .graph_retain_user_object(graph, object, count, moved)
    }

    /// `cudaGraphReleaseUserObject`.
    pub fn graph_release_user_object(&self, graph: u64, object: u64, count: u32) -> Result<()> {
        self.lock()
            .graphs
            .graph_release_user_object(graph, object, count)
    }

    /// `cudaGraphInstantiate`.
    pub fn graph_instantiate(&self, graph: u64) -> Result<u64> {
        self.lock().graphs.instantiate(graph)
    }

    /// `cudaGraphExecUpdate` (see [`crate::graph::Graphs::update_exec`]): 0 or the
    /// `cudaGraphExecUpdateResult` refusing it, and the refused node's position (from 1; 0 for
    /// none).
    pub fn graph_exec_update(&self, exec: u64, graph: u64) -> Result<(u32, usize)> {
        self.lock().graphs.update_exec(exec, graph)
    }

    /// `cudaGraphExecDestroy`.
    pub fn graph_exec_destroy(&self, exec: u64) -> Result<()> {
        self.lock().graphs.destroy_exec(exec)
    }

    /// `cudaGraphLaunch`: replays the graph's operations in order on `stream` (recorded
    /// again if `stream` is itself capturing).
    pub fn graph_launch(&self, exec: u64, stream: u64) -> Result<()> {
        let ops = self.lock().graphs.exec_ops(exec)?;
        for op in ops {
            self.submit(stream, op)?;
        }
        Ok(())
    }

    /// `cudaDeviceReset`: waits for the device, then frees every allocation on it (the
    /// arena and its memfd go away, its addresses stay reserved so stale pointers are errors;
    /// mappings other processes opened stay valid until they
    /// close them).
    pub fn device_reset(&self, ordinal: i32) -> Result<()> {
        let phys = self.physical(ordinal)?;
        let mut st = self.lock();
        if st.graphs.any_capturing() {
            return Err(CoreError::CaptureViolation(
                "device reset while a stream is capturing".into(),
            ));
        }
        let clock = st.timeline.device_clock(phys);
        self.host_wait(&mut st, clock);
        if let Some(a) = st.arenas[phys].take() {
            let (start, len) = a.retire();
            st.retired
                .add(start, len, "memory of a device that cudaDeviceReset freed");
        }
        // Event exports lived in that arena's header: their handles are stale now.
        st.event_exports.retain(|_, (p, _, _)| *p != phys);
        self.publish_memory(&mut st, phys);
        Ok(())
    }
}
