//! Device and host memory: allocation, freeing, the caching arenas, host registration and
//! pointer queries.

use super::*;

impl Core {
    /// Allocates `size` bytes of device memory on visible device `ordinal`.
    pub fn malloc(&self, ordinal: i32, size: usize) -> Result<usize> {
        let phys = self.physical(ordinal)?;
        let cap = self.devices[phys].memory_bytes;
        let oom = |used: u64, requested: u64| CoreError::OutOfMemory {
            device: ordinal,
            requested,
            free: cap - used,
            total: cap,
        };
        let rounded = arena::round_size(size as u64).ok_or_else(|| oom(0, u64::MAX))?;
        let mut st = self.lock();
        self.arena(&mut st, phys)?;
        st.next_serial += 1;
        let serial = st.next_serial;
        // Allocations of the cuMem* API share the device's memory.
        let others = st.vmm.used(phys);
        let a = st.arenas[phys].as_mut().expect("created above");
        if a.used() + others + rounded > cap {
            return Err(oom(a.used() + others, rounded));
        }
        let alloc = a
            .alloc_for(rounded, size as u64, serial)
            .ok_or_else(|| oom(a.used() + others, rounded))?;
        let (ptr, used) = (a.data_base() + alloc.offset as usize, a.used() + others);
        st.peak[phys] = st.peak[phys].max(used);
        self.publish_memory(&mut st, phys);
        Ok(ptr)
    }

    /// Commits the pages of `[ptr, ptr + len)` against the host's memory before they are
    /// touched (see [`crate::backing`]): [`CoreError::HostMemory`] if the host cannot back them.
    /// In an arena the pages of the range are committed; a `cuMemMap`ped range commits each
    /// physical allocation it overlaps whole. Other memory (IPC imports) is the exporter's.
    pub(crate) fn commit_device(&self, st: &mut State, ptr: usize, len: usize) -> Result<()> {
        let committed = self.committed_bytes(st);
        let limit = self.config.host_memory;
        let check = |bytes| crate::backing::check(bytes, committed, limit);
        if let Some(a) = st.arenas.iter_mut().flatten().find(|a| a.contains(ptr)) {
            let off = (ptr - a.data_base()) as u64;
            return a.commit(off, len as u64, check);
        }
        st.vmm.commit(ptr, len, check)
    }

    /// Commits `[ptr, ptr + len)` before a caller outside the core writes or reads it
    /// (collectives into their receive buffers, the Python compute layer); see
    /// [`Core::commit_device`].
    pub fn commit(&self, ptr: usize, len: usize) -> Result<()> {
        let mut st = self.lock();
        self.commit_device(&mut st, ptr, len)
    }

    /// Bytes of device memory committed against the host's memory: the arenas' committed
    /// ranges and the committed `cuMemCreate` allocations.
    pub(crate) fn committed_bytes(&self, st: &State) -> u64 {
        let arenas: u64 = st.arenas.iter().flatten().map(Arena::committed).sum();
        arenas + st.vmm.committed()
    }

    /// The arena of physical device `phys`, created on first use.
    pub(crate) fn arena<'s>(&self, st: &'s mut State, phys: usize) -> Result<&'s mut Arena> {
        if st.arenas[phys].is_none() {
            st.next_arena_id += 1;
            let id = st.next_arena_id;
            let cap = self.devices[phys].memory_bytes;
            st.arenas[phys] = Some(Arena::create(id, phys as u32, cap)?);
        }
        Ok(st.arenas[phys].as_mut().expect("created above"))
    }

    /// Frees device memory from [`Core::malloc`]. Freeing 0 is a no-op.
    pub fn free(&self, ptr: usize) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        let mut st = self.lock();
        for a in st.arenas.iter_mut().flatten() {
            if a.contains(ptr) {
                let off = (ptr - a.data_base()) as u64;
                a.free(off).ok_or(CoreError::InvalidPointer {
                    ptr,
                    len: 0,
                    why: "not the start of a live allocation",
                })?;
                let phys = a.device() as usize;
                let cached: u64 = st.arenas.iter().flatten().map(Arena::cached).sum();
                if cached > self.config.cache_limit {
                    for a in st.arenas.iter_mut().flatten() {
                        a.trim();
                    }
                }
                self.publish_memory(&mut st, phys);
                return Ok(());
            }
        }
        Err(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not device memory of this process",
        })
    }

    /// Gives the pages of freed memory of visible device `ordinal` back to the system (freed
    /// memory otherwise keeps its pages for reuse); returns the bytes trimmed.
    pub fn trim(&self, ordinal: i32) -> Result<u64> {
        let phys = self.physical(ordinal)?;
        Ok(self.lock().arenas[phys].as_mut().map_or(0, Arena::trim))
    }

    /// Bytes of freed memory of visible device `ordinal` whose pages are kept for reuse.
    pub fn cached_bytes(&self, ordinal: i32) -> Result<u64> {
        let phys = self.physical(ordinal)?;
        Ok(self.lock().arenas[phys].as_ref().map_or(0, Arena::cached))
    }

    /// `(free, total)` bytes of visible device `ordinal` (logical: freed memory whose pages
    /// are kept for reuse counts as free).
    pub fn mem_info(&self, ordinal: i32) -> Result<(u64, u64)> {
        let phys = self.physical(ordinal)?;
        let total = self.devices[phys].memory_bytes;
        let st = self.lock();
        let used = st.arenas[phys].as_ref().map_or(0, Arena::used) + st.vmm.used(phys);
        Ok((total - used, total))
    }

    /// Current and peak allocated bytes per visible device.
    pub fn memory_stats(&self) -> Vec<MemoryStats> {
        let st = self.lock();
        self.visible
            .iter()
            .map(|&p| MemoryStats {
                current: st.arenas[p].as_ref().map_or(0, Arena::used) + st.vmm.used(p),
                peak: st.peak[p],
            })
            .collect()
    }

    /// Allocates pinned host memory (page-aligned, zero-filled).
    pub fn host_alloc(&self, size: usize) -> Result<usize> {
        let len = size.max(1);
        // SAFETY: anonymous private mapping; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(CoreError::host_mapping_refused(size as u64));
        }
        self.lock()
            .host
            .insert(p as usize, HostBlock { len, owned: true });
        Ok(p as usize)
    }

    /// Frees memory from [`Core::host_alloc`]. Freeing 0 is a no-op.
    pub fn host_free(&self, ptr: usize) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        let mut st = self.lock();
        match st.host.get(&ptr) {
            Some(b) if b.owned => {
                let b = st.host.remove(&ptr).expect("present");
                // SAFETY: unmapping exactly what host_alloc mapped.
                unsafe { libc::munmap(ptr as *mut libc::c_void, b.len) };
                Ok(())
            }
            _ => Err(CoreError::InvalidPointer {
                ptr,
                len: 0,
                why: "not memory from cudaHostAlloc/cudaMallocHost",
            }),
        }
    }

    /// Registers user memory as pinned host memory.
    pub fn host_register(&self, ptr: usize, size: usize) -> Result<()> {
        if ptr == 0 || size == 0 {
            return Err(CoreError::InvalidValue(
                "cudaHostRegister of a null or empty range".into(),
            ));
        }
        let mut st = self.lock();
        if st.host.contains_key(&ptr) {
            return Err(CoreError::InvalidValue(format!(
                "{ptr:#x} is already registered host memory"
            )));
        }
        st.host.insert(
            ptr,
            HostBlock {
                len: size,
                owned: false,
            },
        );
        Ok(())
    }

    /// Undoes [`Core::host_register`].
    pub fn host_unregister(&self, ptr: usize) -> Result<()> {
        let mut st = self.lock();
        match st.host.get(&ptr) {
            Some(b) if !b.owned => {
                st.host.remove(&ptr);
                Ok(())
            }
            _ => Err(CoreError::InvalidPointer {
                ptr,
                len: 0,
                why: "not registered host memory",
            }),
        }
    }

    /// What `ptr` points into.
    pub fn pointer_info(&self, ptr: usize) -> PointerInfo {
        let st = self.lock();
        if let Some(r) = st.device_range(ptr) {
            return PointerInfo {
                kind: MemoryKind::Device,
                device: self.ordinal_of(r.physical).unwrap_or(-1),
                base: r.base,
                size: r.size,
            };
        }
        if let Some((&base, b)) = st.host.range(..=ptr).next_back() {
            if ptr < base + b.len {
                return PointerInfo {
                    kind: MemoryKind::Host,
                    device: -1,
                    base,
                    size: b.len,
                };
            }
        }
        PointerInfo {
            kind: MemoryKind::Unregistered,
            device: -1,
            base: 0,
            size: 0,
        }
    }

    /// The buffer `ptr` points into, as the program made it, for checks of a buffer's bounds:
    /// a `cudaMalloc` allocation up to the size asked for (neither the rest of its allocation
    /// granule nor the allocation beside it belongs to it), another process's allocation
    /// mapped through IPC up to the size its exporter asked for, or the run of accessible mappings of one device that `cuMemMap`
    /// made side by side in one reserved range (PyTorch's expandable segments grow a segment
    /// so; the next reserved range is another buffer). Kind 0 when `ptr` is not in device
    /// memory of this process.
    pub fn buffer_extent(&self, ptr: usize) -> abi::CBufferExtent {
        self.extent_in(&self.lock(), ptr)
    }

    /// [`Core::buffer_extent`], and when `[ptr, ptr + commit_len)` lies inside that buffer,
    /// the range committed as [`Core::commit`] does, under one lock.
    pub fn buffer_extent_commit(
        &self,
        ptr: usize,
        commit_len: usize,
    ) -> Result<abi::CBufferExtent> {
        let mut st = self.lock();
        let extent = self.extent_in(&st, ptr);
        let inside = ptr
            .checked_add(commit_len)
            .is_some_and(|end| end <= extent.end);
        if commit_len > 0 && extent.kind != abi::BUFFER_NONE && inside {
            self.commit_device(&mut st, ptr, commit_len)?;
        }
        Ok(extent)
    }

    fn extent_in(&self, st: &State, ptr: usize) -> abi::CBufferExtent {
        let found = if let Some(a) = st.arenas.iter().flatten().find(|a| a.contains(ptr)) {
            a.allocation_at(ptr).map(|alloc| {
                let base = a.data_base() + alloc.offset as usize;
                let end = base + alloc.requested as usize;
                (abi::BUFFER_ALLOCATION, a.device() as usize, base, end)
            })
        } else if let Some((&base, imp)) = st
            .imports
            .range(..=ptr)
            .next_back()
            .filter(|(&b, imp)| ptr < b + imp.mapping.len())
        {
            let end = base + imp.mapping.requested();
            Some((abi::BUFFER_IMPORTED, imp.device as usize, base, end))
        } else {
            st.vmm
                .extent(ptr)
                .map(|(physical, base, end)| (abi::BUFFER_MAPPED, physical, base, end))
        };
        match found {
            Some((kind, physical, base, end)) => abi::CBufferExtent {
                kind,
                device: self.ordinal_of(physical).unwrap_or(-1),
                base,
                end,
            },
            None => abi::CBufferExtent::default(),
        }
    }

    /// Where the live device allocation containing `ptr` lives in one of this process's
    /// arenas, for peers of a communicator that map the arena whole.
    pub fn arena_location(&self, ptr: usize) -> Result<abi::CArenaLocation> {
        let mut st = self.lock();
        if let Some((a, alloc)) = st.live_allocation(ptr)? {
            let header = arena::HEADER_BYTES as u64;
            let grant = a.grant()?;
            return Ok(abi::CArenaLocation {
                owner_pid: std::process::id(),
                arena_id: a.id(),
                key: grant.key,
                secret: grant.secret,
                device: a.device() as i32,
                file_len: header + a.capacity(),
                offset: header + (ptr - a.data_base()) as u64,
                alloc_offset: header + alloc.offset,
                alloc_size: alloc.size,
            });
        }
        Err(CoreError::InvalidPointer {
            ptr,
            len: 0,
            why: "not inside a device allocation of this process",
        })
    }
}
