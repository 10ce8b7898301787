//! A rank's host group: what the data path (`exec`, `net`) needs of a communicator, owned by
//! the `Comm` and lent to every operation. It holds this rank's place among the communicator's
//! ranks on its host, the segment they share, the peers' arenas mapped so far, the connections
//! to ranks on other hosts, and the numbering of operations and messages.
//!
//! **Invariant:** the same for every operation of the communicator once assembled: only the
//! sequence numbers, message counts and the map of peers' arenas change, each behind its own
//! atomic or lock.

use crate::net::Links;
use crate::shm::{Mapping, PeerArenas, WaitFor, Waiter};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Other processes of this host in the communicator: (first rank, pid, host name).
pub type LocalProcesses = Arc<Vec<(usize, u32, String)>>;

/// The data path's share of a communicator, as one rank holds it.
pub struct HostGroup {
    /// This rank.
    pub rank: usize,
    /// Number of ranks of the communicator.
    pub nranks: usize,
    /// CUDA device ordinal of this rank in its process.
    pub cuda_dev: i32,
    /// Communicator ranks on this host, in rank order.
    pub ranks: Vec<usize>,
    /// This rank's index in `ranks`.
    pub index: usize,
    /// The shared segment (layout in `exec`).
    pub segment: Mapping,
    /// Whether a rank of another process of this host takes part (its buffers must then be
    /// in an arena, see `exec::staging`).
    pub shares_with_processes: bool,
    /// Other processes of this host in the communicator; a wait fails as soon as one exits.
    pub processes: LocalProcesses,
    /// Peers' arenas mapped so far.
    pub peers: Mutex<PeerArenas>,
    /// Connections to the ranks on other hosts.
    pub links: Links,
    /// Operations issued (each collective gets the next number).
    pub op_seq: AtomicU64,
    /// Point-to-point messages sent to / received from each rank.
    pub p2p_counts: Mutex<(Vec<u64>, Vec<u64>)>,
    /// Set by `ncclCommAbort`: ends every wait.
    pub abort: Arc<AtomicBool>,
}

impl HostGroup {
    /// Whether every rank of the communicator is on this host.
    pub fn is_whole(&self) -> bool {
        self.ranks.len() == self.nranks
    }

    /// A waiter for this communicator's operations: one `NCCLSIM_TIMEOUT` from now, ended
    /// early by an abort or a local peer process's exit.
    pub fn waiter(&self, what: impl Into<WaitFor>) -> Waiter {
        Waiter {
            deadline: Instant::now() + crate::bootstrap::timeout(),
            abort: self.abort.clone(),
            what: what.into(),
            peers: self.processes.clone(),
        }
    }
}
