//! Simulated time of operations, the one rule every data path follows: an operation starts
//! when its last participant is ready (start = the latest ready time among the ranks taking
//! part), a rank that was ready earlier waits until then, and the operation then lasts its
//! predicted duration.
//!
//! - A rank is *ready* when its stream could start the operation: the fake CUDA core tells
//!   the operation when it runs it (`cuda::enqueue_meeting`).
//! - The ranks learn each other's ready times from the operation's own synchronisation (the
//!   descriptors in the host's segment, the send/receive slots, the network headers) and fold
//!   them into a [`Meeting`]; its [`Meeting::start`] is the operation's start, which the
//!   operation gives back to the core.
//! - The core makes the stream wait until the start, then the predicted duration
//!   ([`predicted`], from the cost model's microseconds), in one step, also at each replay of a
//!   graph that captured the operation.
//! - [`Completion`] keeps the latest end of a communicator's operations, which
//!   `ncclCommFinalize` waits for.
//!
//! Times are [`SimTime`] / [`SimDuration`] (`fake_cuda_abi::time`, shared with the core's
//! virtual clocks): `u64` nanoseconds as types, converted to raw numbers only in the shared
//! memory and network layouts.

pub(crate) use fake_cuda_abi::{SimDuration, SimTime};
use std::sync::atomic::{AtomicU64, Ordering};

/// The start of an operation, as its participants' ready times become known: the latest of
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meeting(SimTime);

impl Meeting {
    /// A meeting this rank, ready at `ready`, has joined.
    pub(crate) fn new(ready: SimTime) -> Meeting {
        Meeting(ready)
    }

    /// Another participant, ready at `ready`, joins.
    pub(crate) fn join(&mut self, ready: SimTime) {
        self.0 = self.0.max(ready);
    }

    /// [`Meeting::join`] for each of `ready`.
    pub(crate) fn join_all(mut self, ready: impl IntoIterator<Item = SimTime>) -> Meeting {
        for r in ready {
            self.join(r);
        }
        self
    }

    /// When the operation starts: the last participant's ready time.
    pub(crate) fn start(self) -> SimTime {
        self.0
    }
}

/// NCCL's predicted time of an operation (the cost model's microseconds) as simulated time.
pub(crate) fn predicted(time_us: f64) -> SimDuration {
    SimDuration::from_micros_f64(time_us)
}

/// When the operations enqueued on a communicator so far complete: the latest end of their
/// streams right after each was enqueued.
#[derive(Debug, Default)]
pub(crate) struct Completion(AtomicU64);

impl Completion {
    /// An operation's stream ends at `end`.
    pub(crate) fn record(&self, end: SimTime) {
        self.0.fetch_max(end.as_nanos(), Ordering::Relaxed);
    }

    /// When every operation recorded so far completes.
    pub(crate) fn get(&self) -> SimTime {
        SimTime::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_starts_when_its_last_participant_is_ready() {
        let t = SimTime::from_nanos;
        let m = Meeting::new(t(700)).join_all([t(300), t(1_200), t(900)]);
        assert_eq!(m.start(), t(1_200));
        // A rank that is last waits for nobody.
        assert_eq!(Meeting::new(t(5)).join_all([t(1), t(2)]).start(), t(5));
        assert_eq!(m.start() - t(700), SimDuration::from_nanos(500));
    }

    #[test]
    fn completion_keeps_the_latest_end() {
        let c = Completion::default();
        c.record(SimTime::from_nanos(40));
        c.record(SimTime::from_nanos(10));
        assert_eq!(c.get(), SimTime::from_nanos(40));
    }

    #[test]
    fn predictions_in_microseconds_become_nanoseconds() {
        assert_eq!(predicted(12.5).as_nanos(), 12_500);
        assert_eq!(predicted(0.0), SimDuration::ZERO);
    }
}
