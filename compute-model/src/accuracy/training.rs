//! Training throughput: published training runs against the op lists of their steps.
//!
//! `data/workloads/<name>.csv` holds the ops of one training step of each measured workload as
//! ncclsim's runtime prices them (written by `scripts/python/workload_ops.py` from torch's own
//! dispatch of the model on the meta device): forward, backward, and an AdamW step over 2^24
//! FP32 parameters, which is scaled to the parameters one GPU updates (all of them, or its
//! FSDP shard). A step takes the sum of its ops' modelled times on one GPU:
//! `fwd + recompute + bwd + opt / accumulation`, where recompute is the forward again under full
//! activation checkpointing, and under selective (per-op) checkpointing the forward's ops other
//! than matrix products and attention plus half its matrix products (torchtitan's policy keeps
//! every second matmul's output). Communication is taken as hidden behind compute (FSDP
//! prefetches the next layer's parameters while computing; these runs are compute-bound). The
//! host issues every op in `calibration::HOST_OP_NS`; it runs ahead of the GPU, so a step takes
//! the longer of its kernels' sum and its launches' sum. Attention is priced as the kernel torch
//! dispatched (`attention`), causal in the language models' workloads (MPT and Llama are
//! decoders), not in the vision transformer's. Nothing here is fitted: these rows are the
//! check of the kernel model.

use super::measurements::{board_key, Row};
use crate::{spec, Gemm, KernelCost, Precision, Unit};

/// One op line of a workload file.
#[derive(Debug, Clone, serde::Deserialize)]
struct OpLine {
    phase: String,
    op: String,
    unit: i32,
    precision: i32,
    flops: f64,
    bytes: f64,
    batch: u64,
    m: u64,
    n: u64,
    k: u64,
    count: u64,
}

/// Parameters the optimizer step of a workload file updates.
const OPT_PARAMS: f64 = (1u64 << 24) as f64;

/// How a step recomputes its forward.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Checkpointing {
    None,
    Full,
    SelectiveOp,
}

/// A measured training row and the workload that reproduces it.
#[derive(Debug, Clone)]
pub struct TrainingCase {
    pub line: usize,
    pub board: &'static str,
    pub label: String,
    /// The precision (and memory format) as the source states it.
    pub dtype: String,
    pub workload: &'static str,
    /// Parameters of the model; the optimizer of one GPU updates `params / shards`.
    pub params: f64,
    pub shards: f64,
    /// Micro-batches per optimizer step.
    pub accumulation: f64,
    pub checkpointing: Checkpointing,
    /// Linear layers in FP8 (Transformer Engine).
    pub fp8: bool,
    /// Samples (images) or tokens of one micro-batch step on one GPU.
    pub per_step: f64,
    /// Published value (tokens/s per GPU or samples/s).
    pub measured: f64,
    pub unit: String,
    /// The publication (`measurements::source`).
    pub source: String,
    /// The ops of one step of the workload (its file, read once).
    ops: std::sync::Arc<[OpLine]>,
}

/// The bundled workload files, by name.
pub fn workload(name: &str) -> Option<&'static str> {
    WORKLOADS.iter().find(|(n, _)| *n == name).map(|w| w.1)
}

macro_rules! workloads {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../data/workloads/", $name, ".csv")))),*]
    };
}

const WORKLOADS: &[(&str, &str)] = workloads!(
    "mpt-125m-mb40-s2048",
    "mpt-350m-mb32-s2048",
    "mpt-760m-mb24-s2048",
    "mpt-1b-mb14-s2048",
    "mpt-1b-mb56-s512",
    "mpt-3b-mb6-s2048",
    "mpt-3b-mb10-s2048",
    "mpt-7b-mb6-s2048",
    "mpt-7b-mb12-s2048",
    "mpt-13b-mb2-s2048",
    "mpt-13b-mb4-s2048",
    "mpt-30b-mb3-s2048",
    "mpt-70b-mb8-s2048",
    "llama3-8b-mb1-s8192",
    "llama3-8b-mb2-s8192",
    "llama3-70b-mb1-s8192",
    "llama2-13b-mb2-s4096",
    "llama2-70b-mb1-s4096",
    "resnet50-b512-nchw",
    "resnet101-b256-nchw",
    "vit-b16-b192-nchw",
    "resnet50-b512-nhwc",
    "resnet101-b256-nhwc",
    "vit-b16-b192-nhwc",
    "resnet50-b256-nhwc",
    "resnet50-b256-nchw-fp32",
    "resnet50-b112-nchw-fp32",
);

fn ops(text: &str) -> Result<(f64, Vec<OpLine>), String> {
    let header = text.lines().next().unwrap_or_default();
    let params = header
        .split(": ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|p| p.parse::<f64>().ok())
        .ok_or_else(|| format!("workload header without a parameter count: {header}"))?;
    let mut r = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let lines = r
        .deserialize()
        .collect::<Result<Vec<OpLine>, _>>()
        .map_err(|e| e.to_string())?;
    Ok((params, lines))
}

/// The workload, the shape of its run and its checkpointing, for the rows this report can
/// reproduce; `None` for rows it cannot (with the reason).
fn recipe(row: &Row) -> Result<(&'static str, Checkpointing, bool), &'static str> {
    let m = row.shape_or_model.as_str();
    let b = row.batch.as_str();
    let notes = row.notes.as_str();
    let micro = |n: &str| b.starts_with(&format!("micro {n},"));
    let ac = if notes.contains("activation checkpointing True") || notes.contains("full activation")
    {
        Checkpointing::Full
    } else if notes.contains("selective op") {
        Checkpointing::SelectiveOp
    } else {
        Checkpointing::None
    };
    let fp8 = row.dtype.contains("fp8");
    let mpt = [
        ("MPT 125m, seq len 2048", "40", "mpt-125m-mb40-s2048"),
        ("MPT 350m, seq len 2048", "32", "mpt-350m-mb32-s2048"),
        ("MPT 760m, seq len 2048", "24", "mpt-760m-mb24-s2048"),
        ("MPT 1b, seq len 2048", "14", "mpt-1b-mb14-s2048"),
        ("MPT 1b, seq len 512", "56", "mpt-1b-mb56-s512"),
        ("MPT 3b, seq len 2048", "6", "mpt-3b-mb6-s2048"),
        ("MPT 3b, seq len 2048", "10", "mpt-3b-mb10-s2048"),
        ("MPT 7b, seq len 2048", "6", "mpt-7b-mb6-s2048"),
        ("MPT 7b, seq len 2048", "12", "mpt-7b-mb12-s2048"),
        ("MPT 13b, seq len 2048", "2", "mpt-13b-mb2-s2048"),
        ("MPT 13b, seq len 2048", "4", "mpt-13b-mb4-s2048"),
        ("MPT 30b, seq len 2048", "3", "mpt-30b-mb3-s2048"),
        ("MPT 70b, seq len 2048", "8", "mpt-70b-mb8-s2048"),
    ];
    if let Some(w) = mpt.iter().find(|(s, mb, _)| m == *s && micro(mb)) {
        return Ok((w.2, ac, fp8));
    }
    let w = match (m, row.kind.as_str()) {
        (m, _) if m.starts_with("Llama 3.1 8B") && b.starts_with("local 2,") => "llama3-8b-mb2-s8192",
        (m, _) if m.starts_with("Llama 3 8B") => "llama3-8b-mb1-s8192",
        ("Llama 3 70B", _) => "llama3-70b-mb1-s8192",
        (m, _) if m.starts_with("Llama 2 13B") => "llama2-13b-mb2-s4096",
        (m, _) if m.starts_with("Llama 2 70B") => "llama2-70b-mb1-s4096",
        (m, _) if m.starts_with("resnet50") || m.starts_with("resnet101") || m.starts_with("vit_base") => {
            let nhwc = row.dtype.contains("NHWC");
            let fp32 = row.dtype.starts_with("FP32") || row.dtype.starts_with("TF32");
            match (m.split_whitespace().next(), nhwc) {
                (Some("resnet50"), _) if b.trim() == "256" && nhwc => "resnet50-b256-nhwc",
                (Some("resnet50"), _) if b.trim() == "256" && fp32 => "resnet50-b256-nchw-fp32",
                (Some("resnet50"), _) if b.trim() == "112" && fp32 => "resnet50-b112-nchw-fp32",
                (Some("resnet50"), false) => "resnet50-b512-nchw",
                (Some("resnet50"), true) => "resnet50-b512-nhwc",
                (Some("resnet101"), false) => "resnet101-b256-nchw",
                (Some("resnet101"), true) => "resnet101-b256-nhwc",
                (_, false) => "vit-b16-b192-nchw",
                (_, true) => "vit-b16-b192-nhwc",
            }
        }
        _ if m.starts_with("GPT") => {
            return Err("tensor and pipeline parallel (Megatron-LM): needs the pipeline schedule and TP communication, run through `ncclsim run`")
        }
        _ if row.unit == "minutes_time_to_train" => return Err("time to train (convergence), not a step rate"),
        _ if m.starts_with("BERT") || m.starts_with("GPT-2") => {
            return Err("custom fused kernels, shapes not stated")
        }
        _ => return Err("model configuration not stated"),
    };
    Ok((w, ac, fp8))
}

/// The training rows this report reproduces, and the others with the reason.
pub fn cases(rows: &[Row]) -> (Vec<TrainingCase>, Vec<(usize, String)>) {
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let line = i + 1;
        if row.kind != "training" {
            continue;
        }
        let case = (|| {
            let board = board_key(&row.gpu).ok_or("board not modelled")?;
            let (workload, checkpointing, fp8) = recipe(row)?;
            let (params, lines) = ops(self::workload(workload).ok_or("no workload file")?)?;
            let gpus: f64 = row
                .gpus
                .trim()
                .parse()
                .map_err(|_| "GPU count not stated")?;
            let nums: Vec<f64> = row
                .batch
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse().ok())
                .collect();
            let (micro, global) = match nums[..] {
                [micro, global] => (micro, global),
                [b] => (b, b * gpus),
                _ => return Err("batch not stated".to_string()),
            };
            let image = workload.starts_with("resnet") || workload.starts_with("vit");
            let seq: f64 = workload
                .rsplit("-s")
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1.0);
            Ok(TrainingCase {
                line,
                board,
                label: format!("{} {} ({})", row.gpu, row.shape_or_model, row.dtype),
                dtype: row.dtype.clone(),
                workload,
                params,
                shards: if image { 1.0 } else { gpus },
                accumulation: (global / (micro * gpus)).max(1.0),
                checkpointing,
                fp8,
                // An image workload's op list is one step at its own batch (its name's
                // `-b<N>`), which a row at another batch is priced by: images per second do
                // not depend on the batch in the model at these sizes.
                per_step: if image {
                    workload
                        .rsplit('-')
                        .find_map(|p| p.strip_prefix('b').and_then(|n| n.parse().ok()))
                        .unwrap_or(micro)
                } else {
                    micro * seq
                },
                measured: row.value.trim().parse().map_err(|_| "value")?,
                unit: row.unit.clone(),
                source: super::measurements::source(&row.source_url),
                ops: lines.into(),
            })
        })();
        match case {
            Ok(c) => ok.push(c),
            Err(why) => skipped.push((line, why.to_string())),
        }
    }
    (ok, skipped)
}

/// The fused attention kernel an op line is, if it is one (`causal` for the workload).
fn attention_of(op: &str, causal: bool) -> Option<crate::Attention> {
    use crate::attention::Library;
    let base = op.strip_prefix("aten::_scaled_dot_product_")?;
    let (library, rest) = [
        ("flash_attention", Library::Flash),
        ("efficient_attention", Library::MemEfficient),
        ("cudnn_attention", Library::Cudnn),
    ]
    .into_iter()
    .find_map(|(name, l)| base.strip_prefix(name).map(|rest| (l, rest)))?;
    Some(crate::Attention {
        library,
        backward: rest.starts_with("_backward"),
        causal,
    })
}

fn op_ns(gpu: &crate::GpuSpec, o: &OpLine, fp8: bool, causal: bool) -> f64 {
    let mut p = Precision::from_code(o.precision).unwrap_or(Precision::F32);
    let is_linear = o.op.starts_with("aten::mm") || o.op.starts_with("aten::addmm");
    if fp8 && is_linear && matches!(p, Precision::Bf16 | Precision::F16) {
        p = Precision::F8;
    }
    let unit = if o.unit == 1 {
        Unit::Tensor(p)
    } else {
        Unit::Vector(p)
    };
    let gemm = (o.batch > 0 && o.m > 0 && o.n > 0 && o.k > 0).then_some(Gemm {
        batch: o.batch,
        m: o.m,
        n: o.n,
        k: o.k,
    });
    let cost = KernelCost {
        flops: o.flops,
        bytes: if fp8 && is_linear {
            o.bytes / 2.0
        } else {
            o.bytes
        },
        unit,
        gemm,
        attention: attention_of(&o.op, causal),
    };
    crate::price_at(gpu, &cost, crate::calibration::efficiency(gpu, unit)) * o.count as f64
}

/// Whether a workload's attention is causal (the decoder language models').
fn causal(workload: &str) -> bool {
    workload.starts_with("mpt-") || workload.starts_with("llama")
}

/// A case's step on one GPU: the sum of its kernels' modelled times and of the host's time
/// to launch them, s.
pub fn step(c: &TrainingCase) -> (f64, f64) {
    let gpu = spec(c.board);
    let causal = causal(c.workload);
    let (mut fwd, mut bwd, mut opt, mut fwd_heavy) = (0.0, 0.0, 0.0, 0.0);
    let (mut fwd_ops, mut bwd_ops, mut opt_ops, mut fwd_heavy_ops) = (0.0, 0.0, 0.0, 0.0);
    for o in c.ops.iter() {
        let ns = op_ns(&gpu, o, c.fp8, causal);
        let n = o.count as f64;
        match o.phase.as_str() {
            "fwd" => {
                fwd += ns;
                fwd_ops += n;
                if o.unit == 1 {
                    fwd_heavy += ns;
                    fwd_heavy_ops += n;
                }
            }
            "bwd" => {
                bwd += ns;
                bwd_ops += n;
            }
            _ => {
                opt += ns;
                opt_ops += n;
            }
        }
    }
    let (recompute, recompute_ops) = match c.checkpointing {
        Checkpointing::None => (0.0, 0.0),
        Checkpointing::Full => (fwd, fwd_ops),
        Checkpointing::SelectiveOp => (fwd - fwd_heavy / 2.0, fwd_ops - fwd_heavy_ops / 2.0),
    };
    let opt = opt * (c.params / c.shards) / OPT_PARAMS;
    let kernels = (fwd + recompute + bwd + opt / c.accumulation) * 1e-9;
    let launches = fwd_ops + recompute_ops + bwd_ops + opt_ops / c.accumulation;
    let host = launches * crate::calibration::HOST_OP_NS as f64 * 1e-9;
    (kernels, host)
}

/// The modelled throughput of a case (samples or tokens per second per GPU): from the sum of
/// its kernels' times alone, and with its step the longer of its kernels and its launches.
pub fn rates(c: &TrainingCase) -> (f64, f64) {
    let (kernels, host) = step(c);
    (c.per_step / kernels, c.per_step / kernels.max(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_file_parses_and_has_every_phase() {
        for (name, text) in WORKLOADS {
            let (params, lines) = ops(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(params > 1e6, "{name}");
            for phase in ["fwd", "bwd", "opt"] {
                assert!(lines.iter().any(|l| l.phase == phase), "{name}: no {phase}");
            }
        }
    }
}

/// One training row scored.
#[derive(Debug, Clone)]
pub struct TrainingScore {
    pub case: TrainingCase,
    /// The rate from the kernels' times alone.
    pub kernels: f64,
    /// The predicted rate (kernels and launches).
    pub predicted: f64,
}

impl TrainingScore {
    pub fn error(&self) -> f64 {
        100.0 * (self.predicted / self.case.measured - 1.0)
    }
}

/// Every training case scored.
pub fn score(cases: &[TrainingCase]) -> Vec<TrainingScore> {
    cases
        .iter()
        .map(|c| {
            let (kernels, predicted) = rates(c);
            TrainingScore {
                case: c.clone(),
                kernels,
                predicted,
            }
        })
        .collect()
}

/// Modelled time per (phase, op) of a bundled workload on `board`, kernels alone, ms, longest
/// first.
pub fn breakdown(workload_name: &str, board: &str) -> Result<Vec<(String, f64)>, String> {
    let gpu = spec(board);
    let (_, lines) = ops(workload(workload_name).ok_or("no such workload")?)?;
    let causal = causal(workload_name);
    let mut by: std::collections::BTreeMap<String, f64> = Default::default();
    for o in &lines {
        *by.entry(format!("{} {}", o.phase, o.op)).or_default() +=
            op_ns(&gpu, o, false, causal) / 1e6;
    }
    let mut v: Vec<(String, f64)> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(v)
}
