//! The published measurements (`data/measurements.csv`) as the model can price them.

use crate::{spec, Gemm, GpuSpec, Precision, Unit};

/// One row of `data/measurements.csv`, as published.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Row {
    pub kind: String,
    pub gpu: String,
    pub workload: String,
    pub shape_or_model: String,
    pub dtype: String,
    pub batch: String,
    pub gpus: String,
    pub software: String,
    pub value: String,
    pub unit: String,
    pub source_url: String,
    pub notes: String,
}

/// The bundled measurements.
pub const CSV: &str = include_str!("../../data/measurements.csv");

/// Measurements from the sets kept out of the fit (same columns): they only check it.
pub const CHECKS_CSV: &str = include_str!("../../data/checks.csv");

/// Every row of `csv_text`, the file `name` (1-based data line numbers in errors).
pub fn parse(csv_text: &str, name: &str) -> Result<Vec<Row>, String> {
    let mut r = csv::Reader::from_reader(csv_text.as_bytes());
    r.deserialize()
        .enumerate()
        .map(|(i, row)| row.map_err(|e| format!("{name} row {}: {e}", i + 1)))
        .collect()
}

/// The publication a row comes from: `owner/repo` for GitHub (whatever the commit or file),
/// else the host and path without the fragment.
pub fn source(url: &str) -> String {
    let bare = url.split('#').next().unwrap_or(url);
    let rest = bare
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let parts: Vec<&str> = rest.split('/').collect();
    if parts.first() == Some(&"github.com") && parts.len() >= 3 {
        return format!("{}/{}", parts[1], parts[2]);
    }
    if parts.first() == Some(&"gist.github.com") && parts.len() >= 2 {
        return format!("gist:{}", parts[1]);
    }
    rest.trim_end_matches('/').to_string()
}

/// The `topo` profile key of a board as the sources name it.
pub fn board_key(gpu: &str) -> Option<&'static str> {
    let mut g = gpu.trim().to_ascii_uppercase();
    for prefix in ["NVIDIA ", "GEFORCE ", "TESLA "] {
        if let Some(rest) = g.strip_prefix(prefix) {
            g = rest.to_string();
        }
    }
    Some(if g.starts_with("GH200") || g.starts_with("H200") {
        "H200"
    } else if g.starts_with("H100") {
        if g.contains("PCIE") {
            "H100-PCIE"
        } else {
            "H100-SXM5"
        }
    } else if g.starts_with("B200") {
        "B200"
    } else if g.starts_with("GB200") {
        "GB200"
    } else if g.starts_with("A100") {
        if g.contains("PCIE") {
            "A100-PCIE"
        } else if g.contains("40GB") {
            "A100-SXM4-40GB"
        } else {
            "A100-SXM4"
        }
    } else if g.starts_with("A10") {
        "A10G"
    } else if g.starts_with("V100") {
        "V100-SXM2"
    } else if g.starts_with("RTX 3090") {
        "RTX3090"
    } else if g.starts_with("RTX 4090") {
        "RTX4090"
    } else {
        return None;
    })
}

/// The arithmetic a GEMM row's dtype names.
pub fn gemm_unit(dtype: &str) -> Option<Unit> {
    let d = dtype.to_ascii_lowercase();
    Some(if d.starts_with("fp8") {
        Unit::Tensor(Precision::F8)
    } else if d.starts_with("bf16") {
        Unit::Tensor(Precision::Bf16)
    } else if d.starts_with("fp16") {
        Unit::Tensor(Precision::F16)
    } else if d.starts_with("tf32") {
        Unit::Tensor(Precision::Tf32)
    } else if d.starts_with("fp32") {
        Unit::Tensor(Precision::F32)
    } else {
        return None;
    })
}

/// The shapes a GEMM row measured: one shape (`MxNxK`, `M,K,N` where marked, or `M= N= K=`
/// with an optional batch count `B=`), or for "best of A..B" rows every square size from A to
/// B in steps of 8 (the row is the best of them).
pub fn gemm_shapes(text: &str) -> Option<Vec<Gemm>> {
    let one = |m: u64, n: u64, k: u64| Some(vec![Gemm { batch: 1, m, n, k }]);
    if let Some(range) = text.split("best of ").nth(1) {
        if !range.contains("..") {
            // An explicit list of square sizes.
            return range
                .split_whitespace()
                .map(|n| {
                    n.parse::<u64>().ok().map(|n| Gemm {
                        batch: 1,
                        m: n,
                        n,
                        k: n,
                    })
                })
                .collect::<Option<Vec<_>>>()
                .filter(|v| !v.is_empty());
        }
        let (a, b) = range.split_once("..")?;
        let (a, b) = (a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?);
        return Some(
            (a..=b)
                .step_by(8)
                .map(|n| Gemm {
                    batch: 1,
                    m: n,
                    n,
                    k: n,
                })
                .collect(),
        );
    }
    if text.contains("M=") {
        let get = |key: &str| -> Option<u64> {
            text.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|v| v.parse().ok())
        };
        let batch = get("B=").unwrap_or(1);
        return Some(vec![Gemm {
            batch,
            m: get("M=")?,
            n: get("N=")?,
            k: get("K=")?,
        }]);
    }
    let dims: Vec<u64> = text
        .split_whitespace()
        .next()?
        .split('x')
        .map(|d| d.parse().ok())
        .collect::<Option<_>>()?;
    let [a, b, c] = dims[..] else { return None };
    if text.contains("(M,K,N)") {
        one(a, c, b)
    } else {
        // MxNxK, and the unlabelled tables of the same source.
        one(a, b, c)
    }
}

/// A GEMM row's throughput, FLOP/s.
pub fn gemm_flops_per_s(row: &Row, shapes: &[Gemm]) -> Option<f64> {
    let v: f64 = row.value.trim().parse().ok()?;
    Some(match row.unit.as_str() {
        "TFLOPS" => v * 1e12,
        "GFLOP/s" => v * 1e9,
        "FLOP/s" => v,
        "s" if shapes.len() == 1 => shapes[0].flops() / v,
        "ms" if shapes.len() == 1 => shapes[0].flops() / (v * 1e-3),
        "us" if shapes.len() == 1 => shapes[0].flops() / (v * 1e-6),
        _ => return None,
    })
}

/// A GEMM row ready to price.
#[derive(Debug, Clone)]
pub struct GemmCase {
    /// 1-based row number in the data file.
    pub line: usize,
    pub board: &'static str,
    pub gpu: GpuSpec,
    pub unit: Unit,
    pub shapes: Vec<Gemm>,
    /// Measured FLOP/s.
    pub measured: f64,
    pub source: String,
    /// The largest dimension (of the best shape for "best of" rows: its upper end).
    pub size: u64,
    /// The board, precision and shape as the source states them.
    pub label: String,
    pub dtype: String,
    pub shape_text: String,
}

/// The GEMM rows the model can price; the others with the reason.
pub fn gemm_cases(rows: &[Row]) -> (Vec<GemmCase>, Vec<(usize, String)>) {
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let line = i + 1;
        if row.kind != "gemm" {
            continue;
        }
        let case = (|| {
            let board = board_key(&row.gpu).ok_or("board not modelled")?;
            let unit = gemm_unit(&row.dtype).ok_or("dtype not stated")?;
            let shapes = gemm_shapes(&row.shape_or_model).ok_or("shape not stated")?;
            let measured = gemm_flops_per_s(row, &shapes).ok_or("unit not convertible")?;
            let size = shapes
                .iter()
                .map(|g| g.m.max(g.n).max(g.k))
                .max()
                .unwrap_or(0);
            Ok::<_, &str>(GemmCase {
                line,
                board,
                gpu: spec(board),
                unit,
                shapes,
                measured,
                source: source(&row.source_url),
                size,
                label: format!(
                    "{} {} {}",
                    row.gpu,
                    row.dtype.split_whitespace().next().unwrap_or(""),
                    row.shape_or_model
                ),
                dtype: row
                    .dtype
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string(),
                shape_text: row.shape_or_model.clone(),
            })
        })();
        match case {
            Ok(c) => ok.push(c),
            Err(why) => skipped.push((line, why.to_string())),
        }
    }
    (ok, skipped)
}
