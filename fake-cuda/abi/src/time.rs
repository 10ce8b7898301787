//! Simulated time: instants on the core's virtual clocks ([`SimTime`]) and lengths of
//! virtual time ([`SimDuration`]), both whole nanoseconds in a `u64`.
//!
//! Every virtual clock of a process (each stream's, each device's and the host's) counts
//! nanoseconds from the moment the core started, so instants of different clocks compare.
//! The types are `repr(transparent)` over `u64`: they cost nothing over the raw numbers and
//! cross the C boundary as `u64` (the vtable's `*_ns` fields). Sums saturate at `u64::MAX`
//! (about 584 years) and differences at zero, so no arithmetic on them panics or wraps.
//!
//! The cost model predicts in `f64` microseconds; [`SimDuration::from_micros_f64`] is the one
//! conversion from a prediction to simulated time (rounded to the nearest nanosecond), and
//! [`SimTime::as_micros_f64`] / [`SimDuration::as_micros_f64`] the one conversion back for
//! traces and reports.

use std::ops::{Add, AddAssign, Sub};

/// Nanoseconds in a microsecond.
const NANOS_PER_MICRO: f64 = 1e3;

/// An instant of simulated time: nanoseconds on the virtual clocks since the core started.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(u64);

/// A length of simulated time, in nanoseconds.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimDuration(u64);

impl SimTime {
    /// When the core started: every virtual clock's first reading.
    pub const ZERO: SimTime = SimTime(0);

    /// The instant `ns` nanoseconds after the core started.
    pub const fn from_nanos(ns: u64) -> SimTime {
        SimTime(ns)
    }

    /// Nanoseconds since the core started.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Microseconds since the core started (the trace's unit).
    pub fn as_micros_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_MICRO
    }

    /// How long after `earlier` this is; zero when it is not later.
    pub const fn saturating_since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl SimDuration {
    /// No time.
    pub const ZERO: SimDuration = SimDuration(0);

    /// `ns` nanoseconds.
    pub const fn from_nanos(ns: u64) -> SimDuration {
        SimDuration(ns)
    }

    /// `us` microseconds (a cost-model prediction), rounded to the nearest nanosecond;
    /// negative and NaN give zero, and anything beyond the range the largest duration.
    pub fn from_micros_f64(us: f64) -> SimDuration {
        // `as` saturates a float to the integer's range and maps NaN to zero.
        SimDuration((us * NANOS_PER_MICRO).round() as u64)
    }

    /// Nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Microseconds (the trace's and the report's unit).
    pub fn as_micros_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_MICRO
    }

    /// Whether this is no time.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, d: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(d.0))
    }
}

impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, d: SimDuration) {
        *self = *self + d;
    }
}

impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, d: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(d.0))
    }
}

impl AddAssign for SimDuration {
    fn add_assign(&mut self, d: SimDuration) {
        *self = *self + d;
    }
}

impl Sub for SimTime {
    type Output = SimDuration;
    /// The duration from `earlier` to `self`, zero when `self` is not later
    /// ([`SimTime::saturating_since`]).
    fn sub(self, earlier: SimTime) -> SimDuration {
        self.saturating_since(earlier)
    }
}

impl std::iter::Sum for SimDuration {
    fn sum<I: Iterator<Item = SimDuration>>(iter: I) -> SimDuration {
        iter.fold(SimDuration::ZERO, Add::add)
    }
}

const _: () =
    assert!(std::mem::size_of::<SimTime>() == 8 && std::mem::size_of::<SimDuration>() == 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predictions_round_to_the_nearest_nanosecond() {
        // 1.2345 us is 1234.5 ns: rounds half away from zero, as f64::round does.
        assert_eq!(SimDuration::from_micros_f64(1.2345).as_nanos(), 1235);
        assert_eq!(SimDuration::from_micros_f64(0.0004).as_nanos(), 0);
        assert_eq!(SimDuration::from_micros_f64(25.0).as_nanos(), 25_000);
        assert_eq!(SimDuration::from_micros_f64(-3.0), SimDuration::ZERO);
        assert_eq!(SimDuration::from_micros_f64(f64::NAN), SimDuration::ZERO);
        assert_eq!(
            SimDuration::from_micros_f64(f64::INFINITY).as_nanos(),
            u64::MAX
        );
    }

    #[test]
    fn arithmetic_saturates() {
        let t = SimTime::from_nanos(u64::MAX - 1);
        assert_eq!((t + SimDuration::from_nanos(5)).as_nanos(), u64::MAX);
        let (a, b) = (SimTime::from_nanos(10), SimTime::from_nanos(25));
        assert_eq!((b - a).as_nanos(), 15);
        assert_eq!(a - b, SimDuration::ZERO);
        assert_eq!(a.max(b), b);
    }

    #[test]
    fn micros_for_traces() {
        assert_eq!(SimTime::from_nanos(1_500).as_micros_f64(), 1.5);
        assert_eq!(SimDuration::from_nanos(2_000_001).as_micros_f64(), 2000.001);
    }
}
