//! `ncclGroupSimulateEnd`-style estimates for a group of collectives, and the cost table in the
//! shape NCCL's tuner plugin interface (v4 `getCollInfo`) receives.
//!
//! NCCL (enqueue.cc `ncclPrepareTasks`) sorts a group's tasks by traffic, bins them by (function,
//! op, type), aggregates tasks within 4x of the smallest in a bin, and tunes each aggregate with
//! `numPipeOps = ceil(nTasks / nChannels)`; `estimatedTime` is left at the last aggregate's time.

use crate::consts::{Func, N_ALGOS, N_PROTOS};
use crate::error::{CostError, Result};
use crate::query::{CostModel, Prediction};
use crate::types::{Collective, DataType, RedOp};
use serde::Serialize;

/// One operation of a group: a collective with NCCL's `count` (per-rank count for AllGather /
/// ReduceScatter, as in the C API).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupOp {
    /// Collective (tuned functions only).
    pub coll: Collective,
    /// Element count as passed to NCCL.
    pub count: u64,
    /// Data type.
    pub dtype: DataType,
    /// Reduction.
    pub op: RedOp,
}

/// One aggregate NCCL would launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupAggregate {
    /// Indices into the group's ops.
    pub ops: Vec<usize>,
    /// The aggregate's prediction (bytes = NCCL's nBytes of the summed count).
    pub prediction: Prediction,
}

/// Estimate of a group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupEstimate {
    /// Aggregates in NCCL's processing order.
    pub aggregates: Vec<GroupAggregate>,
    /// What `ncclSimInfo_t.estimatedTime` reports (the last aggregate's time, µs).
    pub nccl_estimated_time_us: f64,
    /// Sum of all aggregates' times (µs): the group's kernels run one after another.
    pub total_time_us: f64,
}

/// The cost table a v4 tuner plugin receives: `table[algo][proto]` in µs, -1 for ignored entries.
pub type TunerCostTable = [[f32; N_PROTOS]; N_ALGOS];

impl CostModel {
    /// `collCostTable` for one collective (what `getCollInfo` would be handed).
    pub fn tuner_cost_table(
        &self,
        coll: Collective,
        n_bytes: u64,
        dtype: DataType,
        op: RedOp,
        num_pipe_ops: usize,
    ) -> Result<TunerCostTable> {
        let f = coll
            .func()
            .ok_or_else(|| CostError::Query(format!("{} is not tuned by NCCL", coll.name())))?;
        Ok(self.nccl.cost_table(f, n_bytes, dtype, op, num_pipe_ops))
    }

    /// Estimate a group of collectives as `ncclGroupSimulateEnd` would.
    pub fn simulate_group(&self, ops: &[GroupOp]) -> Result<GroupEstimate> {
        let n = self.shape().n_ranks;
        let mut funcs = Vec::with_capacity(ops.len());
        for o in ops {
            funcs.push(o.coll.func().ok_or_else(|| {
                CostError::Query(format!(
                    "{} cannot be grouped as a collective",
                    o.coll.name()
                ))
            })?);
        }
        let traffic = |i: usize| {
            ops[i].count * ops[i].dtype.size() as u64 * funcs[i].traffic_per_byte(n) as u64
        };
        // Sorted by traffic, descending (stable), then binned by (func, op, type) in order of first
        // appearance; each bin's LIFO yields ascending sizes.
        let mut order: Vec<usize> = (0..ops.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(traffic(i)));
        let mut bins: Vec<((Func, RedOp, DataType), Vec<usize>)> = Vec::new();
        for &i in &order {
            let key = (funcs[i], ops[i].op, ops[i].dtype);
            match bins.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.insert(0, i),
                None => bins.push((key, vec![i])),
            }
        }
        let pipe_ops = ops.len().div_ceil(self.shape().n_channels.max(1));
        let mut aggregates = Vec::new();
        for ((f, op, dt), members) in bins {
            let mut k = 0;
            while k < members.len() {
                let beg = members[k];
                let mut count = ops[beg].count;
                let mut agg = vec![beg];
                let mut j = k + 1;
                while j < members.len() && traffic(members[j]) < 4 * traffic(beg) {
                    count += ops[members[j]].count;
                    agg.push(members[j]);
                    j += 1;
                }
                k = j;
                let elt = dt.size() as u64;
                let n_bytes = match f {
                    Func::AllGather | Func::ReduceScatter => n as u64 * count * elt,
                    _ => count * elt,
                };
                let table = self.nccl.cost_table(f, n_bytes, dt, op, pipe_ops);
                let info = self.nccl.algo_info(&table, n_bytes).ok_or_else(|| {
                    CostError::Query(format!(
                        "No algorithm/protocol available for function {} with datatype {}.",
                        f.name(),
                        dt.name()
                    ))
                })?;
                let coll = Collective::from_func(f);
                let mut p = self.predict(coll, n_bytes, dt, op)?;
                // The group's time uses the pipelined latency count NCCL used for its choice.
                p.algo = info.algo.name();
                p.proto = info.proto.name();
                p.channels = info.channels;
                p.threads = info.threads;
                p.time_us = match self.mode {
                    crate::Mode::Nccl => {
                        info.time_us as f64 / self.nccl.selection_penalty(dt, info.algo) as f64
                    }
                    crate::Mode::Calibrated => self.calibration.time_us(
                        &self.nccl,
                        self.pricing.as_deref(),
                        f,
                        info.algo,
                        info.proto,
                        n_bytes,
                    ),
                };
                p.algbw = if p.time_us > 0.0 {
                    n_bytes as f64 / p.time_us / 1000.0
                } else {
                    0.0
                };
                p.busbw = p.algbw * coll.busbw_factor(n);
                aggregates.push(GroupAggregate {
                    ops: agg,
                    prediction: p,
                });
            }
        }
        let total = aggregates.iter().map(|a| a.prediction.time_us).sum();
        let last = aggregates
            .last()
            .map(|a| a.prediction.time_us)
            .unwrap_or(0.0);
        Ok(GroupEstimate {
            aggregates,
            nccl_estimated_time_us: last,
            total_time_us: total,
        })
    }
}
