//! Per step and process: compute time, the communication not hidden behind compute, and idle
//! time, from the intervals of the traced compute and NCCL operations on the virtual timeline.
//!
//! A compute operation belongs to a step by its `cudaProfilerStart` range when steps are the
//! program's ranges, else by time: step k of a process runs from its first call's start to
//! the next step's first call's start (its forward pass, before the first collective, counts
//! with the step before; the last step ends at its last call).

use super::compute::ComputeOp;
use super::steps::{Source, Steps};
use super::Call;
use std::collections::BTreeMap;

/// One step's figures, per process.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Overlap {
    /// Time some compute operation runs, µs.
    pub compute_us: f64,
    /// Time communication runs while no compute does, µs.
    pub exposed_us: f64,
    /// Time in the step's window with neither, µs.
    pub idle_us: f64,
}

/// Total length of the union of intervals.
fn union_len(mut v: Vec<(f64, f64)>) -> f64 {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for (s, e) in v {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    total + cur.map_or(0.0, |(s, e)| e - s)
}

fn figures(comm: &[(f64, f64)], compute: &[(f64, f64)]) -> Overlap {
    let both: Vec<(f64, f64)> = comm.iter().chain(compute).copied().collect();
    let busy = union_len(both.clone());
    let compute_us = union_len(compute.to_vec());
    let start = both.iter().map(|i| i.0).fold(f64::MAX, f64::min);
    let end = both.iter().map(|i| i.1).fold(f64::MIN, f64::max);
    Overlap {
        compute_us,
        exposed_us: busy - compute_us,
        idle_us: if both.is_empty() {
            0.0
        } else {
            (end - start - busy).max(0.0)
        },
    }
}

/// Per step (None: outside any step), the figures averaged over the processes.
pub fn per_step(
    calls: &[Call],
    steps: &Steps,
    ops: &[ComputeOp],
) -> BTreeMap<Option<u64>, Overlap> {
    // (step, pid) -> (communication intervals, compute intervals)
    type Iv = Vec<(f64, f64)>;
    let mut by: BTreeMap<(Option<u64>, u64), (Iv, Iv)> = BTreeMap::new();
    let mut windows: BTreeMap<u64, Vec<(u64, f64, f64)>> = BTreeMap::new();
    for (c, s) in calls.iter().zip(&steps.of_call) {
        by.entry((*s, c.pid))
            .or_default()
            .0
            .push((c.ts, c.ts + c.dur));
        if let Some(k) = s {
            let w = windows.entry(c.pid).or_default();
            match w.iter_mut().find(|x| x.0 == *k) {
                Some(x) => {
                    x.1 = x.1.min(c.ts);
                    x.2 = x.2.max(c.ts + c.dur);
                }
                None => w.push((*k, c.ts, c.ts + c.dur)),
            }
        }
    }
    for w in windows.values_mut() {
        w.sort_by(|a, b| a.1.total_cmp(&b.1));
        for i in 0..w.len().saturating_sub(1) {
            w[i].2 = w[i + 1].1;
        }
    }
    for op in ops {
        let step = match steps.source {
            Source::Profiler => op.range,
            Source::Pattern(_) => windows.get(&op.pid).and_then(|w| {
                w.iter()
                    .find(|x| op.ts_us >= x.1 && op.ts_us < x.2)
                    .map(|x| x.0)
            }),
        };
        by.entry((step, op.pid))
            .or_default()
            .1
            .push((op.ts_us, op.ts_us + op.dur_us));
    }
    let mut sums: BTreeMap<Option<u64>, (Overlap, usize)> = BTreeMap::new();
    for ((step, _), (comm, compute)) in &by {
        let f = figures(comm, compute);
        let e = sums.entry(*step).or_default();
        e.0.compute_us += f.compute_us;
        e.0.exposed_us += f.exposed_us;
        e.0.idle_us += f.idle_us;
        e.1 += 1;
    }
    sums.into_iter()
        .map(|(s, (o, n))| {
            let n = n.max(1) as f64;
            (
                s,
                Overlap {
                    compute_us: o.compute_us / n,
                    exposed_us: o.exposed_us / n,
                    idle_us: o.idle_us / n,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_communication_is_what_compute_does_not_cover() {
        // Compute 0-10 and 20-30, communication 5-25: 10 of its 20 us are exposed; no idle.
        let f = figures(&[(5.0, 25.0)], &[(0.0, 10.0), (20.0, 30.0)]);
        assert_eq!(
            f,
            Overlap {
                compute_us: 20.0,
                exposed_us: 10.0,
                idle_us: 0.0
            }
        );
        // A gap between compute and communication is idle.
        let g = figures(&[(15.0, 20.0)], &[(0.0, 10.0)]);
        assert_eq!(
            g,
            Overlap {
                compute_us: 10.0,
                exposed_us: 5.0,
                idle_us: 5.0
            }
        );
    }
}
