//! Communication kernels sharing a GPU with compute.
//!
//! An NCCL kernel holds one CTA per channel of its plan, each on a multiprocessor of its own, for
//! as long as it runs (NCCL 2.30 `enqueue.cc`: a collective's grid is its channel count). A
//! compute kernel that runs beside it on the same GPU has only the other multiprocessors: an
//! arithmetic-bound kernel progresses at `(sms - ctas) / sms` of its speed while the
//! communication runs, so overlapping communication with compute is not free. Memory-bound and
//! floor-bound kernels are taken as unslowed (a streaming kernel saturates the memory with fewer
//! multiprocessors; the memory traffic of NCCL's copies is not modelled).
//!
//! The core keeps, per physical device, the intervals its communication kernels hold (the most
//! recent [`KEPT`]); a compute kernel placed later is stretched by those it overlaps. A
//! communication kernel placed after a compute kernel it overlaps does not slow that kernel
//! (placement is in host order, as the programs that overlap issue the communication first).

use crate::{SimDuration, SimTime};
use std::collections::VecDeque;

/// Communication intervals kept per device.
pub const KEPT: usize = 4096;

/// Per physical device (by index), (start, end, CTAs) of its recent communication kernels.
#[derive(Debug, Default)]
pub struct CommLoad {
    by_device: Vec<VecDeque<(SimTime, SimTime, u32)>>,
}

impl CommLoad {
    /// A communication kernel of `ctas` CTAs held `device`'s multiprocessors over
    /// `[start, end)`.
    pub fn add(&mut self, device: usize, start: SimTime, end: SimTime, ctas: u32) {
        if ctas == 0 || end <= start {
            return;
        }
        if self.by_device.len() <= device {
            self.by_device.resize_with(device + 1, VecDeque::new);
        }
        let v = &mut self.by_device[device];
        if v.len() == KEPT {
            v.pop_front();
        }
        v.push_back((start, end, ctas));
    }

    /// How long a kernel of `alone` (its time on the whole GPU) takes from `start` on
    /// `device` of `sms` multiprocessors, its progress slowed to `(sms - ctas) / sms` while
    /// communication kernels of `ctas` CTAs in all run beside it.
    pub fn stretched(
        &self,
        device: usize,
        sms: u32,
        start: SimTime,
        alone: SimDuration,
    ) -> SimDuration {
        let Some(v) = self.by_device.get(device).filter(|v| !v.is_empty()) else {
            return alone;
        };
        let sms = f64::from(sms.max(1));
        let end_alone = start + alone;
        // The breakpoints where the CTAs in use change, from the kernel's start on.
        let mut points: Vec<(u64, i64)> = Vec::new();
        for &(s, e, c) in v {
            if e <= start || s >= end_alone + alone + alone {
                continue;
            }
            points.push((s.max(start).as_nanos(), i64::from(c)));
            points.push((e.as_nanos(), -i64::from(c)));
        }
        if points.is_empty() {
            return alone;
        }
        points.sort_unstable();
        let mut t = start.as_nanos() as f64;
        let mut left = alone.as_nanos() as f64;
        let mut ctas = 0i64;
        for (at, delta) in points {
            let at = at as f64;
            if at > t {
                let rate = (1.0 - ctas.clamp(0, sms as i64 - 1) as f64 / sms).max(1.0 / sms);
                let can = (at - t) * rate;
                if can >= left {
                    t += left / rate;
                    left = 0.0;
                    break;
                }
                left -= can;
                t = at;
            }
            ctas += delta;
        }
        let end = t + left; // past the last communication, at full speed
        SimDuration::from_nanos((end - start.as_nanos() as f64).round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> SimTime {
        SimTime::from_nanos(ns)
    }

    #[test]
    fn a_kernel_beside_communication_runs_on_the_multiprocessors_left() {
        let mut load = CommLoad::default();
        let alone = SimDuration::from_nanos(1_000);
        assert_eq!(load.stretched(0, 100, t(0), alone), alone);
        // 25 of 100 multiprocessors taken over the whole kernel: 4/3 as long.
        load.add(0, t(0), t(10_000), 25);
        assert_eq!(load.stretched(0, 100, t(0), alone).as_nanos(), 1_333);
        // Another device is not slowed.
        assert_eq!(load.stretched(1, 100, t(0), alone), alone);
        // Communication ending halfway: 500 ns at 3/4 speed cover 375 of its work, the other
        // 625 run at full speed.
        let mut half = CommLoad::default();
        half.add(0, t(0), t(500), 25);
        assert_eq!(half.stretched(0, 100, t(0), alone).as_nanos(), 1_125);
        // Communication that starts after the kernel would have ended does not touch it.
        let mut later = CommLoad::default();
        later.add(0, t(5_000), t(6_000), 25);
        assert_eq!(later.stretched(0, 100, t(0), alone), alone);
    }
}
