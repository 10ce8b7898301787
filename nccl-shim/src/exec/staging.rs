//! Buffers other processes cannot map: memory the driver's virtual memory API mapped
//! (`cuMemCreate` + `cuMemMap`, e.g. PyTorch's expandable segments) is not in a device arena,
//! whose memfd is how peers on the host reach a rank's buffers. Such a buffer takes part in an
//! operation through a copy in the rank's device arena: the send side is copied in before the
//! rank publishes its buffers, the receive side copied out after the operation's closing
//! barrier, and the copy is freed then. Arena buffers (and ranks whose peers are all threads of
//! this process) are used in place.

use crate::error::Result;

/// One buffer of an operation and, when it had to be staged, its arena copy.
pub(super) struct Staged {
    user: usize,
    copy: Option<usize>,
    bytes: usize,
}

impl Staged {
    /// The address the operation publishes and works on.
    pub(super) fn addr(&self) -> usize {
        self.copy.unwrap_or(self.user)
    }
}

fn needs_copy(ptr: usize, bytes: usize, shared: bool) -> bool {
    shared && ptr != 0 && bytes > 0 && crate::cuda::arena_location(ptr).is_err()
}

/// `ptr`'s stand-in for peers in other processes (`shared`): an arena copy holding its bytes
/// when `fill` (a send side), else uninitialised.
pub(super) fn stage(
    dev: i32,
    ptr: usize,
    bytes: usize,
    fill: bool,
    shared: bool,
) -> Result<Staged> {
    if !needs_copy(ptr, bytes, shared) {
        return Ok(Staged {
            user: ptr,
            copy: None,
            bytes,
        });
    }
    let copy = crate::cuda::malloc(dev, bytes)?;
    if fill {
        // SAFETY: `ptr` is the caller's buffer of `bytes` bytes (checked at enqueue, not
        // written while its operation runs); `copy` is the fresh arena allocation of `bytes`.
        unsafe { super::copy(ptr, copy, bytes) };
    }
    Ok(Staged {
        user: ptr,
        copy: Some(copy),
        bytes,
    })
}

/// The send and receive sides of a collective; in place (the same buffer) they share a copy.
pub(super) fn stage_pair(
    dev: i32,
    send: (usize, usize),
    recv: (usize, usize),
    shared: bool,
) -> Result<(Staged, Option<Staged>)> {
    if send.0 == recv.0 && send.0 != 0 {
        let s = stage(dev, send.0, send.1.max(recv.1), true, shared)?;
        return Ok((s, None));
    }
    let s = stage(dev, send.0, send.1, true, shared)?;
    let r = match stage(dev, recv.0, recv.1, false, shared) {
        Ok(r) => r,
        Err(e) => {
            s.release(false);
            return Err(e);
        }
    };
    Ok((s, Some(r)))
}

impl Staged {
    /// Copies the result back (`keep`: the operation succeeded and this side receives) and
    /// frees the arena copy.
    pub(super) fn release(self, keep: bool) {
        if let Some(copy) = self.copy {
            if keep {
                // SAFETY: `copy` is the arena allocation of `bytes` made by `stage`, which the
                // operation no longer touches; `user` is the caller's buffer of that size
                // (checked at enqueue), written by nothing else while its operation runs.
                unsafe { super::copy(copy, self.user, self.bytes) };
            }
            let _ = crate::cuda::free(copy);
        }
    }
}
