//! Per step and process: kernel time (split by what limits each kernel: arithmetic, memory or
//! the floor of a kernel too small to matter), the communication hidden behind compute and the
//! communication not hidden, and idle time, of which the part where the stream waited for the
//! host to issue the next kernel (launch-bound; known under the virtual clock, where each
//! compute event says when the host issued it); and which of compute, memory, launches and
//! communication bounds the step. From the intervals of the traced compute and NCCL operations
//! on the virtual timeline.
//!
//! A compute operation belongs to a step by its `cudaProfilerStart` range when steps are the
//! program's ranges, by the steps its process had marked before it when steps are the
//! framework's marks, else by time: step k of a process runs from its first call's start to
//! the next step's first call's start (its forward pass, before the first collective, counts
//! with the step before; the last step ends at its last call).

use super::compute::ComputeOp;
use super::steps::{Source, Steps};
use super::Call;
use compute_model::Limit;
use std::collections::BTreeMap;

/// One step's figures, per process.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Overlap {
    /// Time some compute operation runs, µs.
    pub compute_us: f64,
    /// The part of `compute_us` whose kernels are limited by their memory traffic, µs.
    pub memory_us: f64,
    /// Time communication runs while compute does too, µs.
    pub hidden_us: f64,
    /// Time communication runs while no compute does, µs.
    pub exposed_us: f64,
    /// Time in the step's window with neither, µs.
    pub idle_us: f64,
    /// The part of `idle_us` before kernels the host had not issued yet, µs.
    pub launch_us: f64,
}

impl Overlap {
    /// From its figures in report order ([`Overlap::figures`]).
    fn from_figures(f: [f64; 6]) -> Overlap {
        let [compute_us, memory_us, hidden_us, exposed_us, idle_us, launch_us] = f;
        Overlap {
            compute_us,
            memory_us,
            hidden_us,
            exposed_us,
            idle_us,
            launch_us,
        }
    }

    /// Its figures in report order: compute, memory-bound, hidden, exposed, idle, launch-bound.
    pub fn figures(&self) -> [f64; 6] {
        [
            self.compute_us,
            self.memory_us,
            self.hidden_us,
            self.exposed_us,
            self.idle_us,
            self.launch_us,
        ]
    }

    /// What bounds the step: the largest of its arithmetic-bound kernels (`compute`), its
    /// memory-bound kernels (`memory`), its launch-bound idle time (`launch`) and its exposed
    /// communication (`communication`).
    pub fn bound(&self) -> &'static str {
        let parts = [
            ("compute", self.compute_us - self.memory_us),
            ("memory", self.memory_us),
            ("launch", self.launch_us),
            ("communication", self.exposed_us),
        ];
        parts
            .iter()
            .fold(
                ("compute", f64::MIN),
                |best, p| if p.1 > best.1 { *p } else { best },
            )
            .0
    }
}

/// One traced kernel as the split needs it.
#[derive(Debug, Clone, Copy)]
struct Kernel {
    start: f64,
    end: f64,
    issued: Option<f64>,
    limit: Option<Limit>,
}

/// Total length of the union of intervals.
fn union_len(v: Vec<(f64, f64)>) -> f64 {
    merged(v).iter().map(|s| s.1 - s.0).sum()
}

/// The merged segments of a set of intervals, in order.
fn merged(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn figures(comm: &[(f64, f64)], kernels: &[Kernel]) -> Overlap {
    let compute: Vec<(f64, f64)> = kernels.iter().map(|k| (k.start, k.end)).collect();
    let both: Vec<(f64, f64)> = comm.iter().chain(&compute).copied().collect();
    let busy = merged(both);
    let busy_us: f64 = busy.iter().map(|s| s.1 - s.0).sum();
    let compute_us = union_len(compute);
    let comm_us = union_len(comm.to_vec());
    let exposed_us = busy_us - compute_us;
    // Kernel time by what limits each kernel, as shares of the union (streams may overlap).
    let total: f64 = kernels.iter().map(|k| k.end - k.start).sum();
    let memory: f64 = kernels
        .iter()
        .filter(|k| k.limit == Some(Limit::Memory))
        .map(|k| k.end - k.start)
        .sum();
    // Each gap between busy stretches waited for the host as long as the kernel that ends it
    // had not been issued.
    let mut launch_us = 0.0;
    for w in busy.windows(2) {
        let (gap_start, gap_end) = (w[0].1, w[1].0);
        let issued = kernels
            .iter()
            .filter(|k| (k.start - gap_end).abs() < 1e-6)
            .filter_map(|k| k.issued)
            .fold(f64::MIN, f64::max);
        if issued > gap_start {
            launch_us += issued.min(gap_end) - gap_start;
        }
    }
    let idle_us = match (busy.first(), busy.last()) {
        (Some(first), Some(last)) => (last.1 - first.0 - busy_us).max(0.0),
        _ => 0.0,
    };
    Overlap {
        compute_us,
        memory_us: if total > 0.0 {
            compute_us * memory / total
        } else {
            0.0
        },
        hidden_us: comm_us - exposed_us,
        exposed_us,
        idle_us,
        launch_us: launch_us.min(idle_us),
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
    let mut by: BTreeMap<(Option<u64>, u64), (Iv, Vec<Kernel>)> = BTreeMap::new();
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
            Source::Marks { .. } => steps.marks.step(op.pid, op.mark),
            Source::Pattern(_) => windows.get(&op.pid).and_then(|w| {
                w.iter()
                    .find(|x| op.ts_us >= x.1 && op.ts_us < x.2)
                    .map(|x| x.0)
            }),
        };
        by.entry((step, op.pid)).or_default().1.push(Kernel {
            start: op.ts_us,
            end: op.ts_us + op.dur_us,
            issued: op.issued_us,
            limit: op.limit,
        });
    }
    let mut sums: BTreeMap<Option<u64>, ([f64; 6], usize)> = BTreeMap::new();
    for ((step, _), (comm, kernels)) in &by {
        let f = figures(comm, kernels).figures();
        let e = sums.entry(*step).or_default();
        for (sum, x) in e.0.iter_mut().zip(f) {
            *sum += x;
        }
        e.1 += 1;
    }
    sums.into_iter()
        .map(|(s, (sum, n))| {
            let n = n.max(1) as f64;
            (s, Overlap::from_figures(sum.map(|x| x / n)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(start: f64, end: f64, issued: Option<f64>, limit: Limit) -> Kernel {
        Kernel {
            start,
            end,
            issued,
            limit: Some(limit),
        }
    }

    #[test]
    fn exposed_communication_is_what_compute_does_not_cover() {
        // Compute 0-10 and 20-30, communication 5-25: 10 of its 20 us are exposed, 10 hidden.
        let kernels = [
            k(0.0, 10.0, None, Limit::Arithmetic),
            k(20.0, 30.0, None, Limit::Memory),
        ];
        let f = figures(&[(5.0, 25.0)], &kernels);
        assert_eq!(
            f,
            Overlap {
                compute_us: 20.0,
                memory_us: 10.0,
                hidden_us: 10.0,
                exposed_us: 10.0,
                idle_us: 0.0,
                launch_us: 0.0,
            }
        );
        // Arithmetic, memory and exposed communication take 10 us each: the first wins ties.
        assert_eq!(f.bound(), "compute");
        let longer = figures(&[(5.0, 45.0)], &kernels);
        assert_eq!((longer.exposed_us, longer.bound()), (25.0, "communication"));
        // A gap between compute and communication is idle, not launch-bound.
        let g = figures(&[(15.0, 20.0)], &[k(0.0, 10.0, None, Limit::Arithmetic)]);
        assert_eq!((g.exposed_us, g.idle_us, g.launch_us), (5.0, 5.0, 0.0));
        assert_eq!(g.bound(), "compute");
    }

    #[test]
    fn a_gap_before_a_kernel_the_host_issued_late_is_launch_bound() {
        // Three 3 us kernels the host issued every 10 us: 7 us of each gap waited for the host.
        let kernels: Vec<Kernel> = (0..3)
            .map(|i| {
                let t = 10.0 * i as f64;
                k(t, t + 3.0, Some(t), Limit::Floor)
            })
            .collect();
        let f = figures(&[], &kernels);
        assert_eq!((f.compute_us, f.idle_us, f.launch_us), (9.0, 14.0, 14.0));
        assert_eq!(f.bound(), "launch");
        // Issued early (the host ran ahead), the same gaps are idle for another reason.
        let early: Vec<Kernel> = kernels
            .iter()
            .map(|x| Kernel {
                issued: Some(0.0),
                ..*x
            })
            .collect();
        let g = figures(&[], &early);
        assert_eq!((g.idle_us, g.launch_us), (14.0, 0.0));
    }
}
