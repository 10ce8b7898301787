//! ACCURACY.md's compute section.

use std::fmt::Write;

use super::{median, GemmScore};

/// Median and maximum absolute value of `errors`, as `m% / x%`.
fn band(errors: &[f64]) -> String {
    if errors.is_empty() {
        return "-".into();
    }
    let mut abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    let max = abs.iter().cloned().fold(0.0, f64::max);
    format!("{:.1}% / {:.1}%", median(&mut abs), max)
}

/// The GEMM part of the report.
pub fn gemm_section(scores: &[GemmScore]) -> String {
    let mut s = String::new();
    let big: Vec<&GemmScore> = scores.iter().filter(|g| g.case.size >= 2048).collect();
    let held = |v: &[&GemmScore]| band(&v.iter().map(|g| g.held_out_error()).collect::<Vec<_>>());
    let all = |v: &[&GemmScore]| band(&v.iter().map(|g| g.all_error()).collect::<Vec<_>>());
    let every: Vec<&GemmScore> = scores.iter().collect();
    writeln!(s, "| GEMM rows | n | source held out | fitted to all |").unwrap();
    writeln!(s, "|---|---|---|---|").unwrap();
    writeln!(
        s,
        "| largest dimension >= 2048 | {} | {} | {} |",
        big.len(),
        held(&big),
        all(&big)
    )
    .unwrap();
    writeln!(
        s,
        "| all sizes | {} | {} | {} |",
        every.len(),
        held(&every),
        all(&every)
    )
    .unwrap();
    s
}

/// The fitted efficiencies as `calibration.rs` holds them.
pub fn constants(fit: &super::Fit) -> String {
    let mut s = String::from("pub const GEMM_EFFICIENCY: &[(Arch, Class, f64)] = &[\n");
    for ((arch, class), e) in &fit.by_arch {
        writeln!(s, "    (Arch::{arch:?}, Class::{class:?}, {e:.3}),").unwrap();
    }
    s.push_str("];\n\npub const CLASS_EFFICIENCY: &[(Class, f64)] = &[\n");
    for (class, e) in &fit.by_class {
        writeln!(s, "    (Class::{class:?}, {e:.3}),").unwrap();
    }
    s.push_str("];\n");
    s
}
