//! nccl-tests' output layout (v2.19.6 `src/common.cu`) for predicted rows, so a
//! prediction can be diffed against a real run, plus the CSV form.

use crate::query::Prediction;
use crate::types::{Collective, DataType, RedOp};

/// nccl-tests' `getFloatStr`: `%*.2f`, else `.1f`, else `.0f`, else `%*.1e`, else `%*.0e`.
pub fn float_str(v: f64, width: usize) -> String {
    for p in [2usize, 1, 0] {
        let s = format!("{v:>width$.p$}");
        if s.len() <= width {
            return s;
        }
    }
    let e1 = c_exp(v, 1);
    if e1.len() <= width {
        return format!("{e1:>width$}");
    }
    format!("{:>width$}", c_exp(v, 0))
}

/// C's `%.*e` (exponent with a sign and at least two digits).
fn c_exp(v: f64, prec: usize) -> String {
    let s = format!("{v:.prec$e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// C's `%g`.
pub fn c_g(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let exp = v.abs().log10().floor() as i32;
    if !(-4..6).contains(&exp) {
        let s = c_exp(v, 5);
        let (m, e) = s.split_once('e').unwrap_or((&s, ""));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        return format!("{m}e{e}");
    }
    let prec = (5 - exp).max(0) as usize;
    let s = format!("{v:.prec$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// What a table needs besides the rows.
#[derive(Debug, Clone)]
pub struct TableInfo<'a> {
    /// Collective.
    pub coll: Collective,
    /// Data type.
    pub dtype: DataType,
    /// Reduction.
    pub op: RedOp,
    /// Smallest and largest size asked for, and the factor.
    pub min_bytes: u64,
    /// Largest size.
    pub max_bytes: u64,
    /// Multiplicative step.
    pub step_factor: u64,
    /// `(rank, busid, device name)` per rank for the "Using devices" block.
    pub devices: &'a [(usize, i32, String, String)],
    /// A line describing the model (printed as a comment before the header).
    pub model: String,
}

/// One printed row: the same prediction out-of-place and in-place (the model does not tell them
/// apart), then the algorithm/protocol and channels.
pub fn row(info: &TableInfo, count: u64, p: &Prediction) -> String {
    let redop = if info.coll.reduces() {
        info.op.name()
    } else {
        "none"
    };
    let root = if info.coll.rooted() { 0 } else { -1 };
    let mut s = format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
        p.bytes,
        count,
        info.dtype.name(),
        redop,
        root
    );
    for _ in 0..2 {
        s += &format!(
            "  {}  {}  {}  {:>6}",
            float_str(p.time_us, 7),
            float_str(p.algbw, 6),
            float_str(p.busbw, 6),
            "N/A"
        );
    }
    s += &format!(
        "  {:>16}  {:>3}",
        format!("{}/{}", p.algo, p.proto),
        p.channels
    );
    s
}

/// The table's header lines.
pub fn header(info: &TableInfo) -> Vec<String> {
    let name = format!("{}_perf", info.coll.name());
    let mut v = vec![
        format!("# ncclsim prediction in nccl-tests 2.19.6 layout: {}", info.model),
        format!("# Collective test starting: {name}"),
        format!(
            "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {}(factor) warmup iters: 0 iters: 0 agg iters: 1 validation: 0 graph: 0 unalign: 0",
            info.min_bytes, info.max_bytes, info.step_factor
        ),
        "#".into(),
        "# Using devices".into(),
    ];
    for (rank, dev, busid, model) in info.devices {
        v.push(format!(
            "#  Rank {rank:>2} Group  0 Pid {:>6} on {:>10} device {dev:>2} [{busid}] {model}",
            0, "ncclsim"
        ));
    }
    v.push("#".into());
    v.push(format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ",
        "", "", "", "", ""
    ));
    v.push(format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>16}  {:>3}",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
        "busbw", "#wrong", "algo/proto", "ch"
    ));
    v.push(format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
    ));
    v
}

/// The footer lines; `busbws` are the rows' bus bandwidths (each counted twice, out-of-place and
/// in-place, as nccl-tests averages every printed value).
pub fn footer(info: &TableInfo, busbws: &[f64]) -> Vec<String> {
    let avg = if busbws.is_empty() {
        0.0
    } else {
        busbws.iter().sum::<f64>() / busbws.len() as f64
    };
    vec![
        format!("# {:<20} : {} {}", "Out of bounds values", 0, "OK"),
        format!("# {:<20} : {} {}", "Avg bus bandwidth", c_g(avg), ""),
        "#".into(),
        format!("# Collective test concluded: {}_perf", info.coll.name()),
    ]
}

/// CSV header of `predict --format csv`.
pub const CSV_HEADER: &str = "size,count,type,redop,root,time_us,algbw,busbw,algo,proto,channels";

/// One CSV row.
pub fn csv_row(info: &TableInfo, count: u64, p: &Prediction) -> String {
    format!(
        "{},{},{},{},{},{:.3},{:.4},{:.4},{},{},{}",
        p.bytes,
        count,
        info.dtype.name(),
        if info.coll.reduces() {
            info.op.name()
        } else {
            "none"
        },
        if info.coll.rooted() { 0 } else { -1 },
        p.time_us,
        p.algbw,
        p.busbw,
        p.algo,
        p.proto,
        p.channels
    )
}

/// nccl-tests' size arguments: a number with an optional K/M/G suffix (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let (num, mult) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1u64 << 10),
        'm' | 'M' => (&t[..t.len() - 1], 1 << 20),
        'g' | 'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// The sizes nccl-tests runs for `-b min -e max -f factor` (factor 1 is not a sweep: min only).
pub fn sizes(min: u64, max: u64, factor: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        if factor <= 1 {
            break;
        }
        s = match s.checked_mul(factor) {
            Some(x) => x,
            None => break,
        };
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_and_g_formats_follow_c() {
        assert_eq!(float_str(56.0, 7), "  56.00");
        assert_eq!(float_str(123456.7, 7), " 123457");
        assert_eq!(float_str(1234567.0, 7), "1234567");
        assert_eq!(float_str(238.3, 6), "238.30");
        assert_eq!(float_str(12345678.0, 7), "1.2e+07");
        assert_eq!(c_g(221.5), "221.5");
        assert_eq!(c_g(0.123456789), "0.123457");
        assert_eq!(c_g(1234567.0), "1.23457e+06");
        assert_eq!(c_g(100.0), "100");
    }

    #[test]
    fn sizes_and_suffixes() {
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size("128k"), Some(128 << 10));
        assert_eq!(parse_size("x"), None);
        assert_eq!(sizes(8, 64, 2), vec![8, 16, 32, 64]);
        assert_eq!(sizes(8, 8 << 30, 2).len(), 31);
    }
}
