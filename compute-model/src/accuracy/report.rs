//! ACCURACY.md's compute section.

use std::fmt::Write;

use super::training::{TrainingCase, TrainingScore};
use super::{class, median, GemmScore, OUTSIDE_FIT};
use crate::calibration::{self, Class};
use crate::Arch;

/// Where the compute section starts in ACCURACY.md.
pub const HEADING: &str = "# Accuracy of the compute model";

/// Median and maximum absolute value of `errors`.
pub fn median_max(errors: &[f64]) -> (f64, f64) {
    let mut abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    let max = abs.iter().cloned().fold(0.0, f64::max);
    (median(&mut abs), max)
}

fn band(errors: &[f64]) -> String {
    if errors.is_empty() {
        return "-".into();
    }
    let (m, x) = median_max(errors);
    format!("{m:.1}% / {x:.1}%")
}

/// Everything the section reports, computed once.
pub struct Scored {
    pub gemms: Vec<GemmScore>,
    pub gemm_fit: super::Fit,
    pub gemm_skipped: Vec<(usize, String)>,
    pub training: Vec<TrainingScore>,
    pub training_skipped: Vec<(usize, String)>,
    /// Rows of the sets kept out of the fit, priced with the parameters fitted to all rows.
    pub checks: Vec<CheckScore>,
    pub checks_skipped: Vec<(usize, String)>,
    /// Training rows of the sets kept out of the fit.
    pub training_checks: Vec<TrainingCheck>,
}

/// One training row of `data/checks.csv` against the fitted model.
#[derive(Debug, Clone)]
pub struct TrainingCheck {
    pub case: TrainingCase,
    /// Predicted throughput in the row's unit.
    pub predicted: f64,
}

impl TrainingCheck {
    /// Signed error, percent of the measurement.
    pub fn error(&self) -> f64 {
        100.0 * (self.predicted / self.case.measured - 1.0)
    }
}

/// One row of `data/checks.csv` against the model fitted to `measurements.csv`.
#[derive(Debug, Clone)]
pub struct CheckScore {
    pub case: super::measurements::GemmCase,
    /// Modelled FLOP/s with the fitted parameters.
    pub predicted: f64,
}

impl CheckScore {
    /// Signed error, percent of the measurement.
    pub fn error(&self) -> f64 {
        100.0 * (self.predicted / self.case.measured - 1.0)
    }
}

/// Rows a file holds that the model cannot price: (data line, why).
pub type Skipped = Vec<(usize, String)>;

/// Prices the rows of the sets kept out of the fit with `fit` (GEMMs) and the model's
/// constants (training steps).
fn score_checks(
    fit: &super::Fit,
) -> Result<(Vec<CheckScore>, Vec<TrainingCheck>, Skipped), String> {
    let rows = super::measurements::parse(super::measurements::CHECKS_CSV, "checks.csv")?;
    let (cases, mut skipped) = super::measurements::gemm_cases(&rows);
    let (tcases, tskipped) = super::training::cases(&rows);
    skipped.extend(tskipped);
    let training = tcases
        .into_iter()
        .map(|c| TrainingCheck {
            predicted: super::training::rates(&c).1,
            case: c,
        })
        .collect();
    let scores = cases
        .into_iter()
        .map(|c| CheckScore {
            predicted: super::modelled(&c, fit.get(c.gpu.arch, class(&c))),
            case: c,
        })
        .collect();
    Ok((scores, training, skipped))
}

/// Scores the bundled measurements.
pub fn score() -> Result<Scored, String> {
    let rows = super::measurements::parse(super::measurements::CSV, "measurements.csv")?;
    let (cases, gemm_skipped) = super::measurements::gemm_cases(&rows);
    let (gemms, gemm_fit) = super::score_gemms(&cases);
    let (tcases, training_skipped) = super::training::cases(&rows);
    let training = super::training::score(&tcases);
    let (checks, training_checks, checks_skipped) = score_checks(&gemm_fit)?;
    Ok(Scored {
        gemms,
        gemm_fit,
        gemm_skipped,
        training,
        training_skipped,
        checks,
        checks_skipped,
        training_checks,
    })
}

/// GEMM throughput held out at sizes >= 2048 (the target's rows): median absolute error.
pub fn gemm_target(s: &Scored) -> f64 {
    let e: Vec<f64> = s
        .gemms
        .iter()
        .filter(|g| g.case.size >= 2048)
        .map(|g| g.held_out_error())
        .collect();
    median_max(&e).0
}

/// Training throughput (no parameter fitted to training rows): median absolute error.
pub fn training_target(s: &Scored) -> f64 {
    let e: Vec<f64> = s.training.iter().map(|t| t.error()).collect();
    median_max(&e).0
}

/// The sets kept out of the fit: median absolute error.
pub fn checks_target(s: &Scored) -> f64 {
    let e: Vec<f64> = s.checks.iter().map(|c| c.error()).collect();
    median_max(&e).0
}

/// The training rows of the sets kept out of the fit: median absolute error.
pub fn training_checks_target(s: &Scored) -> f64 {
    let e: Vec<f64> = s.training_checks.iter().map(|c| c.error()).collect();
    median_max(&e).0
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "not met"
    }
}

fn training_group(c: &TrainingCase) -> String {
    let kind = if c.workload.starts_with("mpt") || c.workload.starts_with("llama") {
        "LLM pretraining, FSDP"
    } else {
        "vision, one GPU"
    };
    format!("{kind}, {}", crate::spec(c.board).arch.name())
}

/// The section, from `HEADING` to the end of the file.
pub fn section(s: &Scored) -> String {
    let mut o = String::new();
    let w = &mut o;
    writeln!(w, "{HEADING}\n").unwrap();
    writeln!(w, "Generated by `cargo run -p compute-model --features accuracy --example accuracy` from the published measurements in").unwrap();
    writeln!(w, "`compute-model/data/measurements.csv` (each row with its source; see its README) and the op lists of the").unwrap();
    writeln!(w, "measured training steps in `compute-model/data/workloads/` (`scripts/python/workload_ops.py`). A test fails").unwrap();
    writeln!(w, "when this section and the generated report differ. The plot `docs/compute-accuracy.svg` comes from the same").unwrap();
    writeln!(w, "run (`-- --svg docs/compute-accuracy.svg`).\n").unwrap();
    writeln!(w, "- **Kernel model** (`compute-model`): a GEMM takes waves of output tiles over the multiprocessors at the fitted").unwrap();
    writeln!(w, "  fraction of peak of its architecture and precision class (on Hopper and Blackwell tensor cores, or a stream-K").unwrap();
    writeln!(w, "  schedule that shares the tiles' inner-dimension steps evenly over the multiprocessors, whichever is faster),").unwrap();
    writeln!(w, "  and at least the time to read its operands and write its result; other kernels a roofline over the datasheet peaks").unwrap();
    writeln!(w, "  (vector arithmetic at {:.0}% of peak, memory at {:.0}% of bandwidth), and every kernel at least {:.0} µs. A", calibration::DEFAULT_EFFICIENCY * 100.0, calibration::BYTES_EFFICIENCY * 100.0, calibration::FLOOR_NS / 1e3).unwrap();
    writeln!(w, "  half-precision convolution in NCHW layout also reads and writes each operand and result once more for").unwrap();
    writeln!(
        w,
        "  cuDNN's transposes to and from NHWC (no parameter: the tensors' bytes)."
    )
    .unwrap();
    writeln!(w, "- **Attention** (`compute_model::attention`): a fused attention kernel at its library's published fraction of").unwrap();
    writeln!(w, "  peak (FlashAttention-2 73% forward and 63% backward on A100, 35% on H100; cuDNN's on Hopper as FlashAttention-3,").unwrap();
    writeln!(w, "  75% and 55%) on the work torch's FLOP formula counts (the backward's five products, the recomputed scores among them), half under a causal mask.").unwrap();
    writeln!(w, "- **No training-fitted factor**: a kernel in a program takes the time it takes alone. The host issues each op in").unwrap();
    writeln!(w, "  {:.0} µs (`calibration::HOST_OP_NS`, not fitted); a step takes the longer of its kernels and its launches.", calibration::HOST_OP_NS as f64 / 1e3).unwrap();
    writeln!(w, "- **source held out** (the GEMM rows' headline): the row's prediction with every parameter fitted without the rows of its own").unwrap();
    writeln!(w, "  publication (leave-one-source-out; an architecture left without rows falls back to its class over all").unwrap();
    writeln!(
        w,
        "  architectures). **fitted to all**: with the parameters `ncclsim run` uses.\n"
    )
    .unwrap();
    writeln!(w, "Errors are absolute percentages of the published throughput (TFLOP/s, tokens/s per GPU or images/s).\n").unwrap();

    let big: Vec<f64> = s
        .gemms
        .iter()
        .filter(|g| g.case.size >= 2048)
        .map(|g| g.held_out_error())
        .collect();
    let tr: Vec<f64> = s.training.iter().map(|t| t.error()).collect();
    writeln!(w, "| target (source held out) | value | |").unwrap();
    writeln!(w, "|---|---|---|").unwrap();
    let g = gemm_target(s);
    writeln!(
        w,
        "| GEMM TFLOP/s, sizes >= 2048: median <= 10% | {g:.1}% ({} rows) | {} |",
        big.len(),
        met(g <= 10.0)
    )
    .unwrap();
    let t = training_target(s);
    writeln!(
        w,
        "| training throughput: median <= 10% | {t:.1}% ({} rows) | {} |",
        tr.len(),
        met(t <= 10.0)
    )
    .unwrap();
    let c = checks_target(s);
    writeln!(
        w,
        "| GEMM TFLOP/s, sets kept out of the fit: median <= 10% | {c:.1}% ({} rows) | {} |",
        s.checks.len(),
        met(c <= 10.0)
    )
    .unwrap();
    let t = training_checks_target(s);
    writeln!(
        w,
        "| training throughput, sets kept out of the fit: median <= 10% | {t:.1}% ({} rows) | {} |\n",
        s.training_checks.len(),
        met(t <= 10.0)
    )
    .unwrap();

    gemm_part(w, s);
    training_part(w, s);
    checks_part(w, s);
    writeln!(
        w,
        "\n![measured vs predicted throughput, source held out](docs/compute-accuracy.svg)"
    )
    .unwrap();
    o
}

fn gemm_part(w: &mut String, s: &Scored) {
    writeln!(w, "## GEMM throughput\n").unwrap();
    writeln!(w, "Each row's implied efficiency is the fraction of peak at which the tile model gives the measured throughput").unwrap();
    writeln!(w, "(for rows that are the best of a sweep of sizes, the model's best over the same sweep); the fitted efficiency").unwrap();
    writeln!(w, "of an architecture and class is the median of its rows' ({} rows outside the fit, below).\n", OUTSIDE_FIT.len()).unwrap();
    writeln!(
        w,
        "| architecture | class | rows | fitted efficiency | source held out | fitted to all |"
    )
    .unwrap();
    writeln!(w, "|---|---|---|---|---|---|").unwrap();
    let mut groups: Vec<(Arch, Class)> = s
        .gemms
        .iter()
        .map(|g| (g.case.gpu.arch, class(&g.case)))
        .collect();
    groups.sort();
    groups.dedup();
    for (arch, cls) in groups {
        let rows: Vec<&GemmScore> = s
            .gemms
            .iter()
            .filter(|g| g.case.gpu.arch == arch && class(&g.case) == cls)
            .collect();
        let held: Vec<f64> = rows.iter().map(|g| g.held_out_error()).collect();
        let all: Vec<f64> = rows.iter().map(|g| g.all_error()).collect();
        writeln!(
            w,
            "| {} | {} | {} | {:.3} | {} | {} |",
            arch.name(),
            cls.name(),
            rows.len(),
            s.gemm_fit.get(arch, cls),
            band(&held),
            band(&all)
        )
        .unwrap();
    }
    let every: Vec<&GemmScore> = s.gemms.iter().collect();
    let big: Vec<&GemmScore> = s.gemms.iter().filter(|g| g.case.size >= 2048).collect();
    for (name, v) in [("largest dimension >= 2048", &big), ("all sizes", &every)] {
        let held: Vec<f64> = v.iter().map(|g| g.held_out_error()).collect();
        let all: Vec<f64> = v.iter().map(|g| g.all_error()).collect();
        writeln!(
            w,
            "| **{name}** | | {} | | {} | {} |",
            v.len(),
            band(&held),
            band(&all)
        )
        .unwrap();
    }
    writeln!(w, "\n| row | board | precision | shape | measured TFLOP/s | source held out | error | fitted to all |").unwrap();
    writeln!(w, "|---|---|---|---|---|---|---|---|").unwrap();
    for g in &s.gemms {
        writeln!(
            w,
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:+.1}% | {:+.1}% |",
            g.case.line,
            g.case.board,
            g.case.dtype,
            g.case.shape_text.replace('|', "/"),
            g.case.measured / 1e12,
            g.held_out / 1e12,
            g.held_out_error(),
            g.all_error()
        )
        .unwrap();
    }
    writeln!(w).unwrap();
    for (line, why) in OUTSIDE_FIT {
        writeln!(w, "- Row {line} is scored but outside the fit: {why}.").unwrap();
    }
    for (line, why) in &s.gemm_skipped {
        writeln!(w, "- Row {line} is not scored: {why}.").unwrap();
    }
    writeln!(w).unwrap();
}

fn training_part(w: &mut String, s: &Scored) {
    writeln!(w, "## Training throughput\n").unwrap();
    writeln!(w, "A training row's step is the sum of the modelled times of its ops on one GPU: forward, backward, the").unwrap();
    writeln!(w, "forward again under activation checkpointing (the non-matmul ops and half the matmuls under torchtitan's").unwrap();
    writeln!(w, "selective per-op policy), and the AdamW step over the parameters one GPU updates once per optimizer step").unwrap();
    writeln!(w, "(its FSDP shard, shared by the micro-batches of gradient accumulation). Communication is taken as hidden").unwrap();
    writeln!(w, "behind compute. The host runs ahead of the GPU, so the step takes the longer of its kernels and its launches").unwrap();
    writeln!(w, "(every op's host time; the last column says which bounds the row). Attention is causal in the language models.").unwrap();
    writeln!(w, "FP8 rows run their linear layers in FP8. The ops are those torch dispatches for the model, recorded on the").unwrap();
    writeln!(
        w,
        "meta device with ncclsim's own pricing code. No parameter is fitted to these rows.\n"
    )
    .unwrap();
    writeln!(w, "| workload class | rows | error median / max |").unwrap();
    writeln!(w, "|---|---|---|").unwrap();
    let mut groups: Vec<String> = s.training.iter().map(|t| training_group(&t.case)).collect();
    groups.sort();
    groups.dedup();
    for gname in &groups {
        let v: Vec<&TrainingScore> = s
            .training
            .iter()
            .filter(|t| &training_group(&t.case) == gname)
            .collect();
        let e: Vec<f64> = v.iter().map(|t| t.error()).collect();
        writeln!(w, "| {gname} | {} | {} |", v.len(), band(&e)).unwrap();
    }
    let e: Vec<f64> = s.training.iter().map(|t| t.error()).collect();
    writeln!(w, "| **all** | {} | {} |\n", s.training.len(), band(&e)).unwrap();
    writeln!(
        w,
        "| row | board | workload | measured | unit | predicted | error | bound |"
    )
    .unwrap();
    writeln!(w, "|---|---|---|---|---|---|---|---|").unwrap();
    for t in &s.training {
        let bound = if t.predicted < t.kernels {
            "launches"
        } else {
            "kernels"
        };
        writeln!(
            w,
            "| {} | {} | {} | {:.1} | {} | {:.1} | {:+.1}% | {bound} |",
            t.case.line,
            t.case.board,
            t.case.workload,
            t.case.measured,
            t.case.unit,
            t.predicted,
            t.error()
        )
        .unwrap();
    }
    writeln!(w).unwrap();
    for (line, why) in &s.training_skipped {
        writeln!(w, "- Row {line} is not reproduced: {why}.").unwrap();
    }
    writeln!(
        w,
        "\nThe largest errors, and what the model does not see yet:"
    )
    .unwrap();
    writeln!(w, "- **H100 language models, the model too fast.** Their published steps reach about two thirds of the rate of").unwrap();
    writeln!(w, "  their kernels timed alone (A100's four fifths), with FlashAttention-2's 35% on H100 already priced. Not").unwrap();
    writeln!(w, "  modelled: clocks under hours of power-limited load (the torchtitan rows ran at a 500 W limit, below the").unwrap();
    writeln!(w, "  board's 700 W), NCCL's kernels taking multiprocessors and memory bandwidth from the GEMMs they overlap under").unwrap();
    writeln!(w, "  FSDP, and, on the FP8 rows, Transformer Engine's scaling and cast kernels, which the op lists lack.").unwrap();
    writeln!(w, "- **RTX 3090 vision, the model too slow.** Its 16-bit GEMM efficiency is the median of three GA10x rows, two").unwrap();
    writeln!(w, "  from an A10 (a 150 W board at 45% of its peak) and one from an RTX 3090 (at 92%), so the A10 sets it.").unwrap();
}

fn checks_part(w: &mut String, s: &Scored) {
    writeln!(w, "\n## Checked against sets kept out of the fit\n").unwrap();
    writeln!(w, "`compute-model/data/checks.csv` holds rows of the community matmul database torch-performance-test-data (its").unwrap();
    writeln!(w, "`test.py`: square `torch.mm` on randn inputs at 1024, 2048, 4096, 8192 and 10240, the best size per precision),").unwrap();
    writeln!(w, "one of the sets the calibration never sees. Each row is priced with the parameters fitted to all of").unwrap();
    writeln!(
        w,
        "`measurements.csv`, as `ncclsim run` prices it, over the same five sizes.\n"
    )
    .unwrap();
    let mut groups: std::collections::BTreeMap<(&str, &str), Vec<&CheckScore>> = Default::default();
    for c in &s.checks {
        groups
            .entry((c.case.board, c.case.dtype.as_str()))
            .or_default()
            .push(c);
    }
    writeln!(
        w,
        "| board | precision | rows | measured (median) | predicted | error median / max |"
    )
    .unwrap();
    writeln!(w, "|---|---|---|---|---|---|").unwrap();
    for ((board, dtype), rows) in &groups {
        let errs: Vec<f64> = rows.iter().map(|c| c.error()).collect();
        let mut measured: Vec<f64> = rows.iter().map(|c| c.case.measured / 1e12).collect();
        // The rows of a group share board, precision and sizes, so one prediction.
        let predicted = rows[0].predicted / 1e12;
        writeln!(
            w,
            "| {board} | {dtype} | {} | {:.1} | {predicted:.1} | {} |",
            rows.len(),
            median(&mut measured),
            band(&errs)
        )
        .unwrap();
    }
    let all: Vec<f64> = s.checks.iter().map(|c| c.error()).collect();
    writeln!(w, "| **all** | | {} | | | {} |\n", all.len(), band(&all)).unwrap();
    writeln!(w, "Training rows: NVIDIA DeepLearningExamples' ResNet-50 v1.5 tables (one GPU, the README's recipe: batch, precision,").unwrap();
    writeln!(w, "memory format) and Lambda's deep learning benchmark (the same training script, one GPU, FP16), priced as the").unwrap();
    writeln!(w, "training rows above.\n").unwrap();
    writeln!(
        w,
        "| board | workload | precision | measured | predicted | error |"
    )
    .unwrap();
    writeln!(w, "|---|---|---|---|---|---|").unwrap();
    for t in &s.training_checks {
        writeln!(
            w,
            "| {} | {} | {} | {:.0} {} | {:.0} | {:+.1}% |",
            t.case.board,
            t.case.workload,
            t.case.dtype,
            t.case.measured,
            t.case.unit,
            t.predicted,
            t.error()
        )
        .unwrap();
    }
    writeln!(w).unwrap();
    for (line, why) in &s.checks_skipped {
        writeln!(w, "- checks.csv row {line} is not priced: {why}.").unwrap();
    }
}

/// The fitted parameters as `calibration.rs` holds them.
pub fn constants(s: &Scored) -> String {
    let fit = &s.gemm_fit;
    let mut o = String::from("pub const GEMM_EFFICIENCY: &[(Arch, Class, f64)] = &[\n");
    for ((arch, class), e) in &fit.by_arch {
        writeln!(o, "    (Arch::{arch:?}, Class::{class:?}, {e:.3}),").unwrap();
    }
    o.push_str("];\n\npub const CLASS_EFFICIENCY: &[(Class, f64)] = &[\n");
    for (class, e) in &fit.by_class {
        writeln!(o, "    (Class::{class:?}, {e:.3}),").unwrap();
    }
    o.push_str("];\n");
    o
}
