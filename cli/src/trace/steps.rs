//! Steps of a traced run, found in this order:
//! - the program's profiler ranges: each `cudaProfilerStart`..`cudaProfilerStop` range is a
//!   step (the runtime tags the calls made inside one with its index); calls outside any range
//!   are "outside";
//! - the steps its framework marked: ncclsim's Python package marks the end of a step at each
//!   step of the program's optimizer on the simulated GPUs (torch's global optimizer step
//!   hooks) and at each `torch.profiler.profile.step()`, the two places torch's own step
//!   counter (`torch.autograd.profiler.KinetoStepTracker`) advances; step k is what a process
//!   did after its k-th mark and up to its (k+1)-th, so the first step also holds what came
//!   before the training loop, and what follows the last mark (an evaluation, a final barrier)
//!   is "outside";
//! - otherwise the repetition of its call pattern: per process, the shortest period `p` such
//!   that the sequence of (communicator, operation, bytes) from some call on repeats every `p`
//!   calls at least twice, the earliest such start winning. The calls before that start
//!   (initialisation, warm-up) are "outside".

use super::compute::ComputeOp;
use super::Call;
use plotters::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};

/// How the steps were found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// `cudaProfilerStart`/`Stop` ranges.
    Profiler,
    /// The program's framework marked the steps' ends: its optimizer's steps, its
    /// `torch.profiler` steps, or both.
    Marks { optimizer: bool, profiler: bool },
    /// A repeating call pattern; the period (calls per step) of the first process.
    Pattern(usize),
}

impl Source {
    pub fn describe(&self) -> String {
        match self {
            Source::Profiler => "cudaProfilerStart/Stop ranges".into(),
            Source::Marks {
                optimizer,
                profiler,
            } => match (optimizer, profiler) {
                (true, false) => "the optimizer's steps".into(),
                (false, true) => "torch.profiler's steps".into(),
                _ => "the optimizer's and torch.profiler's steps".into(),
            },
            Source::Pattern(p) => format!("a call pattern repeating every {p} call(s)"),
        }
    }
    fn name(&self) -> &'static str {
        match self {
            Source::Profiler => "profiler",
            Source::Marks {
                optimizer,
                profiler,
            } => match (optimizer, profiler) {
                (true, false) => "optimizer",
                (false, true) => "torch_profiler",
                _ => "optimizer_and_torch_profiler",
            },
            Source::Pattern(_) => "pattern",
        }
    }
}

/// The steps each process marked as ended (its compute trace's `step_end` events).
#[derive(Debug, Default, Clone)]
pub struct Marks {
    /// Per process id, how many.
    count: BTreeMap<u64, u64>,
    optimizer: bool,
    profiler: bool,
}

impl Marks {
    /// One `step_end` event of process `pid`: its mark number (from 1) and what marked it.
    pub fn add(&mut self, pid: u64, mark: Option<u64>, by: Option<&str>) {
        let n = self.count.entry(pid).or_default();
        *n = (*n).max(mark.unwrap_or(*n + 1));
        match by {
            Some("profiler") => self.profiler = true,
            _ => self.optimizer = true,
        }
    }

    /// The step of work done after `mark` marks by process `pid`: None after its last.
    pub fn step(&self, pid: u64, mark: u64) -> Option<u64> {
        (mark < self.count.get(&pid).copied().unwrap_or(0)).then_some(mark)
    }
}

/// The step of every call (None: outside any step).
pub struct Steps {
    pub source: Source,
    pub of_call: Vec<Option<u64>>,
    /// The marks the steps are of, when they are ([`Source::Marks`]).
    pub marks: Marks,
}

/// The start and period of the longest periodic tail of `s` (at least two full periods).
fn periodic_tail(s: &[u64]) -> Option<(usize, usize)> {
    let n = s.len();
    let mut best: Option<(usize, usize)> = None;
    for p in 1..=n / 2 {
        if best.is_some_and(|(o, _)| o == 0) {
            break;
        }
        let mut o = n - p;
        while o > 0 && s[o - 1] == s[o - 1 + p] {
            o -= 1;
        }
        if (n - o) / p >= 2 && best.is_none_or(|(bo, _)| o < bo) {
            best = Some((o, p));
        }
    }
    best
}

/// Calls at the end a pattern may leave out (a final barrier, an evaluation).
const MAX_TRAILER: usize = 16;

/// The start, period and end of the longest stretch of `s` that repeats, ending at most
/// [`MAX_TRAILER`] calls before the end (the shortest period, then the shortest trailer, on
/// ties).
fn period(s: &[u64]) -> Option<(usize, usize, usize)> {
    let mut best: Option<(usize, usize, usize)> = None;
    for t in 0..=MAX_TRAILER.min(s.len()) {
        let end = s.len() - t;
        if best.is_some_and(|(o, _, e)| e - o >= end) {
            break;
        }
        if let Some((o, p)) = periodic_tail(&s[..end]) {
            if best.is_none_or(|(bo, _, be)| end - o > be - bo) {
                best = Some((o, p, end));
            }
        }
    }
    best
}

/// The steps of `calls` (in trace order per process), given the steps the processes marked,
/// or None when the program marked none and no pattern repeats.
pub fn find(calls: &[Call], marks: &Marks) -> Option<Steps> {
    if calls.iter().any(|c| c.step.is_some()) {
        return Some(Steps {
            source: Source::Profiler,
            of_call: calls.iter().map(|c| c.step).collect(),
            marks: Marks::default(),
        });
    }
    if !marks.count.is_empty() {
        return Some(Steps {
            source: Source::Marks {
                optimizer: marks.optimizer,
                profiler: marks.profiler,
            },
            of_call: calls.iter().map(|c| marks.step(c.pid, c.mark)).collect(),
            marks: marks.clone(),
        });
    }
    let mut by_proc: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, c) in calls.iter().enumerate() {
        by_proc.entry(c.proc).or_default().push(i);
    }
    let mut of_call = vec![None; calls.len()];
    let mut first_period = None;
    for idx in by_proc.values() {
        let sig: Vec<u64> = idx
            .iter()
            .map(|&i| {
                let c = &calls[i];
                let mut h = DefaultHasher::new();
                (&c.comm, &c.name, c.bytes).hash(&mut h);
                h.finish()
            })
            .collect();
        let Some((o, p, end)) = period(&sig) else {
            continue;
        };
        first_period.get_or_insert(p);
        for (k, &i) in idx.iter().enumerate().take(end).skip(o) {
            of_call[i] = Some(((k - o) / p) as u64);
        }
    }
    Some(Steps {
        source: Source::Pattern(first_period?),
        of_call,
        marks: Marks::default(),
    })
}

/// One step's figures, summed over processes.
#[derive(Default)]
struct Totals {
    procs: BTreeSet<usize>,
    calls: u64,
    bytes: u64,
    predicted_us: f64,
    waited_us: f64,
    start: f64,
    end: f64,
}

/// Per step (None: outside any step) the totals of `us` (the calls' times).
fn totals(calls: &[Call], steps: &Steps, us: &[f64]) -> BTreeMap<Option<u64>, Totals> {
    let mut t: BTreeMap<Option<u64>, Totals> = BTreeMap::new();
    for ((c, s), &x) in calls.iter().zip(&steps.of_call).zip(us) {
        let e = t.entry(*s).or_insert_with(|| Totals {
            start: f64::MAX,
            ..Default::default()
        });
        e.procs.insert(c.proc);
        e.calls += 1;
        e.bytes += c.bytes;
        e.predicted_us += x;
        e.waited_us += c.waited_us;
        e.start = e.start.min(c.ts);
        e.end = e.end.max(c.ts + c.dur);
    }
    t
}

/// Per step, the predicted time per process of `us` (in step order, steps only).
pub fn per_step(calls: &[Call], steps: &Steps, us: &[f64]) -> Vec<(u64, f64)> {
    totals(calls, steps, us)
        .into_iter()
        .filter_map(|(s, e)| Some((s?, e.predicted_us / e.procs.len().max(1) as f64)))
        .collect()
}

/// `ncclsim trace summarize --steps`: per step, calls, bytes, predicted and waited time per
/// process, the step's span of virtual time on all ranks, and its share of the total; with
/// traced compute, also per process its kernel time and the memory-bound part of it, the
/// communication hidden and not hidden, the idle time and its launch-bound part, and what
/// bounds the step ([`super::overlap`]).
pub fn print(calls: &[Call], steps: &Steps, ops: &[ComputeOp], format: &str) -> Result<(), String> {
    let us: Vec<f64> = calls.iter().map(|c| c.predicted_us).collect();
    let t = totals(calls, steps, &us);
    let overlap = (!ops.is_empty()).then(|| super::overlap::per_step(calls, steps, ops));
    let extra = |s: &Option<u64>| -> Option<super::overlap::Overlap> {
        overlap
            .as_ref()
            .map(|o| o.get(s).copied().unwrap_or_default())
    };
    let procs = calls.iter().map(|c| c.proc).collect::<BTreeSet<_>>().len();
    let total: f64 = t
        .values()
        .map(|e| e.predicted_us / e.procs.len().max(1) as f64)
        .sum();
    let label = |s: &Option<u64>| s.map_or("outside".to_string(), |k| k.to_string());
    // Steps in order, then the calls outside any step.
    let rows: Vec<(String, Option<u64>, [f64; 6])> = t
        .iter()
        .filter(|(s, _)| s.is_some())
        .chain(t.iter().filter(|(s, _)| s.is_none()))
        .map(|(s, e)| {
            let n = e.procs.len().max(1) as f64;
            let us = e.predicted_us / n;
            let share = if total > 0.0 { 100.0 * us / total } else { 0.0 };
            (
                label(s),
                *s,
                [
                    e.calls as f64 / n,
                    e.bytes as f64 / n,
                    us,
                    e.waited_us / n,
                    e.end - e.start,
                    share,
                ],
            )
        })
        .collect();
    match format {
        "csv" => {
            let head = if overlap.is_some() {
                ",compute_us_per_process,memory_bound_us_per_process,hidden_comm_us_per_process,exposed_comm_us_per_process,idle_us_per_process,launch_bound_us_per_process,bound"
            } else {
                ""
            };
            println!("step,calls_per_process,bytes_per_process,predicted_us_per_process,waited_us_per_process,span_us,share_pct{head}");
            for (l, st, v) in &rows {
                let tail = extra(st).map_or(String::new(), |o| {
                    let f: Vec<String> = o.figures().iter().map(|x| format!("{x:.3}")).collect();
                    format!(",{},{}", f.join(","), o.bound())
                });
                println!(
                    "{l},{:.1},{:.0},{:.3},{:.3},{:.3},{:.2}{tail}",
                    v[0], v[1], v[2], v[3], v[4], v[5]
                );
            }
        }
        "json" => {
            let v: Vec<serde_json::Value> = rows
                .iter()
                .map(|(_, s, v)| {
                    let mut j = serde_json::json!({"step": s, "calls_per_process": v[0], "bytes_per_process": v[1], "predicted_us_per_process": v[2], "waited_us_per_process": v[3], "span_us": v[4], "share_pct": v[5]});
                    if let Some(o) = extra(s) {
                        j["compute_us_per_process"] = o.compute_us.into();
                        j["memory_bound_us_per_process"] = o.memory_us.into();
                        j["hidden_comm_us_per_process"] = o.hidden_us.into();
                        j["exposed_comm_us_per_process"] = o.exposed_us.into();
                        j["idle_us_per_process"] = o.idle_us.into();
                        j["launch_bound_us_per_process"] = o.launch_us.into();
                        j["bound"] = o.bound().into();
                    }
                    j
                })
                .collect();
            let period = match steps.source {
                Source::Pattern(p) => Some(p),
                _ => None,
            };
            let doc = serde_json::json!({"source": steps.source.name(), "period": period, "processes": procs, "steps": v});
            println!(
                "{}",
                serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
            );
        }
        _ => {
            println!(
                "# {} step(s) by {}, {} process(es); figures per process; span: the step's virtual time from its first call's start to its last call's end on any rank",
                rows.iter().filter(|r| r.1.is_some()).count(),
                steps.source.describe(),
                procs
            );
            let head = if overlap.is_some() {
                format!(
                    " {:>14} {:>12} {:>12} {:>14} {:>14} {:>12} {:>13}",
                    "compute_us",
                    "memory_us",
                    "hidden_us",
                    "exposed_us",
                    "idle_us",
                    "launch_us",
                    "bound"
                )
            } else {
                String::new()
            };
            println!(
                "{:<8} {:>8} {:>14} {:>14} {:>14} {:>14} {:>7}{head}",
                "step", "calls", "bytes", "predicted_us", "waited_us", "span_us", "share"
            );
            for (l, st, v) in &rows {
                let tail = extra(st).map_or(String::new(), |o| {
                    let f: String = o
                        .figures()
                        .iter()
                        .zip([14, 12, 12, 14, 14, 12])
                        .map(|(x, w)| format!(" {x:>w$.3}"))
                        .collect();
                    format!("{f} {:>13}", o.bound())
                });
                println!(
                    "{l:<8} {:>8.1} {:>14.0} {:>14.3} {:>14.3} {:>14.3} {:>6.1}%{tail}",
                    v[0], v[1], v[2], v[3], v[4], v[5]
                );
            }
            println!(
                "{:<8} {:>8} {:>14} {:>14.3} {:>14} {:>14} {:>6.1}%",
                "total", "", "", total, "", "", 100.0
            );
        }
    }
    Ok(())
}

/// Predicted communication time per step, traced and repriced, as an SVG line plot.
pub fn plot(
    path: &str,
    title: &str,
    traced: &[(u64, f64)],
    repriced: &[(u64, f64)],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{path}: {e}");
    if traced.is_empty() {
        return Err(format!("{path}: no steps to plot"));
    }
    let xmax = traced
        .iter()
        .chain(repriced)
        .map(|p| p.0)
        .max()
        .unwrap_or(0) as f64
        + 0.5;
    let ymax = traced
        .iter()
        .chain(repriced)
        .map(|p| p.1)
        .fold(1.0f64, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..xmax, 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("predicted communication time per process (us)")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, pts)) in [("traced", traced), ("repriced", repriced)]
        .into_iter()
        .enumerate()
    {
        let color = Palette99::pick(i).to_rgba();
        let style = ShapeStyle {
            color,
            filled: true,
            stroke_width: 2,
        };
        let xy: Vec<(f64, f64)> = pts.iter().map(|&(s, y)| (s as f64, y)).collect();
        chart
            .draw_series(LineSeries::new(xy.iter().copied(), style))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        chart
            .draw_series(xy.iter().map(|&p| Circle::new(p, 4, style)))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{find, period, Marks, Source};
    use crate::trace::Call;

    /// An AllReduce of process `pid` made after `mark` marked steps (in profiler range `step`).
    fn call(pid: u64, mark: u64, step: Option<u64>) -> Call {
        Call {
            proc: pid as usize,
            pid,
            ts: 0.0,
            dur: 1.0,
            waited_us: 0.0,
            step,
            mark,
            comm: "0x1".into(),
            rank: pid,
            name: "AllReduce".into(),
            bytes: 8,
            dtype: "Float32".into(),
            op: 0,
            predicted_us: 1.0,
            sides: None,
        }
    }

    #[test]
    fn marked_steps_end_at_each_mark_and_what_follows_the_last_is_outside() {
        let mut m = Marks::default();
        for (pid, mark) in [(1, 1), (1, 2), (2, 1), (2, 2)] {
            m.add(pid, Some(mark), Some("optimizer"));
        }
        let marks = [0, 0, 1, 1, 2];
        let calls: Vec<Call> = marks
            .iter()
            .map(|&k| call(1, k, None))
            .chain([0, 1, 2].map(|k| call(2, k, None)))
            .collect();
        let s = find(&calls, &m).unwrap();
        assert_eq!(
            s.source,
            Source::Marks {
                optimizer: true,
                profiler: false
            }
        );
        let n = None;
        let want = [Some(0), Some(0), Some(1), Some(1), n, Some(0), Some(1), n];
        assert_eq!(s.of_call, want);
        // A process that marked nothing has no step.
        assert_eq!(m.step(3, 0), None);
        // The program's profiler ranges come first.
        let mut ranged = calls;
        ranged[0].step = Some(0);
        assert_eq!(find(&ranged, &m).unwrap().source, Source::Profiler);
    }

    #[test]
    fn without_marks_or_ranges_the_call_pattern_gives_the_steps() {
        let calls: Vec<Call> = (0..6).map(|_| call(1, 0, None)).collect();
        let s = find(&calls, &Marks::default()).unwrap();
        assert_eq!(s.source, Source::Pattern(1));
    }

    #[test]
    fn period_after_a_setup_prefix_and_before_a_trailer() {
        // setup X, then (A B C) three times
        assert_eq!(period(&[9, 1, 2, 3, 1, 2, 3, 1, 2, 3]), Some((1, 3, 10)));
        // the same, then a final call of another kind
        assert_eq!(period(&[9, 1, 2, 3, 1, 2, 3, 1, 2, 3, 7]), Some((1, 3, 10)));
        // the same op every call: every call is a step
        assert_eq!(period(&[5, 5, 5, 5]), Some((0, 1, 4)));
        // a trailing partial repetition is part of the pattern
        assert_eq!(period(&[1, 2, 1, 2, 1]), Some((0, 2, 5)));
        // nothing repeats twice
        assert_eq!(period(&[1, 2, 3, 4]), None);
        assert_eq!(period(&[]), None);
    }
}
