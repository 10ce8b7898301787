//! Inter-process memory and event handles: an allocation or event exported, and one another
//! process exported opened.

use super::*;

impl Core {
    /// `cudaIpcGetMemHandle`: the handle of the allocation containing `ptr`.
    pub fn ipc_get_mem_handle(&self, ptr: usize) -> Result<[u8; HANDLE_BYTES]> {
        let mut st = self.lock();
        if let Some((a, alloc)) = st.live_allocation(ptr)? {
            let e = a.export(alloc.offset)?;
            let h = MemHandle {
                owner_pid: std::process::id(),
                arena_id: a.id(),
                slot: e.slot.expect("export assigns a slot"),
                offset: e.offset,
                size: e.size,
                serial: e.serial,
                device: a.device(),
                grant: a.grant()?,
            };
            return Ok(h.encode());
        }
        Err(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not device memory allocated by this process",
        })
    }

    /// `cudaIpcOpenMemHandle`: maps another process's allocation (or returns the original
    /// pointer for a handle of this process).
    pub fn ipc_open_mem_handle(&self, bytes: &[u8; HANDLE_BYTES]) -> Result<usize> {
        let h = MemHandle::decode(bytes)?;
        let mut st = self.lock();
        if h.owner_pid == std::process::id() {
            let a = st
                .arenas
                .iter()
                .flatten()
                .find(|a| a.id() == h.arena_id)
                .ok_or_else(|| CoreError::InvalidIpcHandle(format!("no arena {}", h.arena_id)))?;
            let address = (h.offset < a.capacity()).then(|| a.data_base() + h.offset as usize);
            let ok = h.grant == a.grant()?
                && address.and_then(|p| a.allocation_at(p)).is_some_and(|x| {
                    x.serial == h.serial && x.offset == h.offset && x.size == h.size
                });
            return if let (true, Some(address)) = (ok, address) {
                Ok(address)
            } else {
                Err(CoreError::InvalidIpcHandle(format!(
                    "allocation {} of this process is not live (freed, stale or forged)",
                    h.serial
                )))
            };
        }
        let key = (h.owner_pid, h.arena_id, h.serial);
        if let Some(imp) = st.imports.values_mut().find(|i| i.key == key) {
            imp.refs += 1;
            return Ok(imp.mapping.ptr);
        }
        let mapping = ForeignMapping::open(&h)?;
        let ptr = mapping.ptr;
        st.imports.insert(
            ptr,
            Import {
                mapping,
                device: h.device,
                key,
                refs: 1,
            },
        );
        Ok(ptr)
    }

    /// `cudaIpcCloseMemHandle`.
    pub fn ipc_close_mem_handle(&self, ptr: usize) -> Result<()> {
        let mut st = self.lock();
        if let Some(imp) = st.imports.get_mut(&ptr) {
            imp.refs -= 1;
            if imp.refs == 0 {
                let imp = st.imports.remove(&ptr).expect("present");
                let (start, len) = imp.mapping.retire();
                st.retired.add(
                    start,
                    len,
                    "an IPC mapping that cudaIpcCloseMemHandle closed",
                );
            }
            return Ok(());
        }
        if st
            .arenas
            .iter()
            .flatten()
            .any(|a| a.allocation_at(ptr).is_some())
        {
            // Opened in its own process: the original pointer was handed out, nothing to undo.
            return Ok(());
        }
        Err(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not a pointer from cudaIpcOpenMemHandle",
        })
    }

    /// `cudaIpcGetEventHandle`: publishes the event in an export slot of the current
    /// device's arena (once per event) and returns a handle naming that slot.
    pub fn ipc_get_event_handle(&self, event: u64) -> Result<[u8; HANDLE_BYTES]> {
        let (_, phys) = self.current_checked()?;
        let mut st = self.lock();
        st.timeline.event_flags(event)?;
        let (phys, slot, serial) = match st.event_exports.get(&event) {
            Some(&e) => e,
            None => {
                st.next_serial += 1;
                let serial = st.next_serial;
                let slot = self.arena(&mut st, phys)?.export_event(event, serial)?;
                st.event_exports.insert(event, (phys, slot, serial));
                (phys, slot, serial)
            }
        };
        let a = st.arenas[phys]
            .as_ref()
            .expect("invariant: exported events live in an existing arena");
        Ok(EventHandle {
            owner_pid: std::process::id(),
            event,
            device: phys as u32,
            arena_id: a.id(),
            slot,
            serial,
            grant: a.grant()?,
        }
        .encode())
    }

    /// `cudaIpcOpenEventHandle`. The handle is checked against the owner's export slot like a
    /// memory handle (forged, corrupt and stale handles are `InvalidValue`). In the owner
    /// process this is the same event; elsewhere the owner's virtual clock is not visible, so
    /// the event opens as already complete.
    pub fn ipc_open_event_handle(&self, bytes: &[u8; HANDLE_BYTES]) -> Result<u64> {
        let invalid = |e: CoreError| match e {
            CoreError::InvalidIpcHandle(m) | CoreError::IpcMapFailed(m) => {
                CoreError::InvalidValue(format!("IPC event handle: {m}"))
            }
            e => e,
        };
        let h = EventHandle::decode(bytes).map_err(invalid)?;
        if h.owner_pid == std::process::id() {
            let st = self.lock();
            let ok =
                st.event_exports
                    .get(&h.event)
                    .is_some_and(|&(p, slot, serial)| {
                        st.arenas[p].as_ref().is_some_and(|a| {
                            a.id() == h.arena_id && a.grant().ok() == Some(h.grant)
                        }) && p as u32 == h.device
                            && slot == h.slot
                            && serial == h.serial
                    });
            return if ok {
                Ok(h.event)
            } else {
                Err(CoreError::InvalidValue(format!(
                    "IPC event handle: event {:#x} is not exported by this process (destroyed, stale or forged)",
                    h.event
                )))
            };
        }
        h.check_foreign().map_err(invalid)?;
        let mut st = self.lock();
        let now = st.timeline.host_clock();
        Ok(st
            .timeline
            .create_completed_event(timeline::EVENT_DISABLE_TIMING, now))
    }
}
