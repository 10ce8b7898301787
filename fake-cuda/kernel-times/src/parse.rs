//! Reading a kernel-time file: nsys's GPU trace report as CSV, or Orion's kernel-info CSV.
//!
//! - GPU trace (`nsys stats --report gputrace --format csv`, `cuda_gpu_trace` in newer nsys,
//!   and `ncclsim trace kernels --format csv`): a header naming its columns, then one row per
//!   GPU activity in start order. The columns used are `Name`, the duration (`Duration (ns)`;
//!   older nsys releases write `Duration(nsec)`; `(us)`, `(ms)` and `(s)` are converted) and,
//!   when present, `Device`. Lines before the header (the progress messages nsys prints when its
//!   output goes to the same file) are skipped.
//! - Orion's kernel-info file (`profiling/postprocessing/generate_file.py` of
//!   github.com/eth-easl/orion): the header `Name,Profile,Memory_footprint,SM_usage,Duration`,
//!   durations in ns, one row per kernel or grouped operator (`Conv`, `BatchNorm`) in launch
//!   order. Names are written unquoted, so a name holding commas spans several fields: the last
//!   four fields are the numbers and the ones before them the name.
//!
//! Rows the simulation prices by other models are left out: memory copies and memsets
//! (`[CUDA memcpy ...]`, `[CUDA memset]`: the core's copy model) and NCCL's kernels
//! (`ncclKernel_*`, `ncclDevKernel_*`: the collective cost model). A GPU trace of several
//! devices keeps the rows of the device its first kernel ran on.

use crate::Error;

/// Which layout a file has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// nsys's GPU trace report (or ncclsim's kernel list in the same columns).
    GpuTrace,
    /// Orion's kernel-info file.
    Orion,
}

/// One measured kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The kernel's (or operation's) name as the file gives it.
    pub name: String,
    /// Its measured duration.
    pub duration_ns: u64,
    /// 1-based line of the file it came from.
    pub line: u64,
}

/// The kernels of one file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The file's layout.
    pub format: Format,
    /// The kernels kept.
    pub rows: Vec<Row>,
    /// Rows left out (copies, memsets, NCCL kernels, other devices).
    pub skipped: usize,
}

/// Orion's header, in its order.
const ORION: [&str; 5] = [
    "Name",
    "Profile",
    "Memory_footprint",
    "SM_usage",
    "Duration",
];

/// Whether a row is priced by another model than the kernel table.
fn priced_elsewhere(name: &str) -> bool {
    name.starts_with("[CUDA ")
        || name.starts_with("ncclKernel")
        || name.starts_with("ncclDevKernel")
}

/// "1 field", "3 fields".
fn count(n: usize) -> String {
    format!("{n} field{}", if n == 1 { "" } else { "s" })
}

/// Nanoseconds per unit of a duration header: `Duration (ns)`, `Duration(nsec)`, `Duration
/// (us)`, `Duration (ms)`, `Duration (s)`; a bare `Duration` is in ns. None if not a duration
/// header.
fn duration_unit(header: &str) -> Option<f64> {
    let rest = header.strip_prefix("Duration")?.trim();
    if rest.is_empty() {
        return Some(1.0);
    }
    let unit = rest.strip_prefix('(')?.strip_suffix(')')?.trim();
    Some(match unit {
        "ns" | "nsec" => 1.0,
        "us" | "usec" | "\u{b5}s" => 1e3,
        "ms" | "msec" => 1e6,
        "s" | "sec" => 1e9,
        _ => return None,
    })
}

/// A duration field as whole nanoseconds.
fn duration(
    path: &str,
    line: u64,
    column: (usize, &str),
    text: &str,
    unit: f64,
) -> Result<u64, Error> {
    let at = |message: String| Error::At {
        path: path.to_string(),
        line,
        message: format!("column {} ({:?}): {message}", column.0 + 1, column.1),
    };
    if text.is_empty() {
        return Err(at("empty duration".into()));
    }
    let v: f64 = text
        .parse()
        .map_err(|_| at(format!("{text:?} is not a number")))?;
    if !v.is_finite() || v < 0.0 {
        return Err(at(format!(
            "{text:?} is not a duration (finite, not negative)"
        )));
    }
    let ns = (v * unit).round();
    if ns >= u64::MAX as f64 {
        return Err(at(format!("{text:?} is too long a duration")));
    }
    Ok(ns as u64)
}

/// Column positions of a GPU trace header.
struct Columns {
    name: usize,
    duration: (usize, f64),
    device: Option<usize>,
    count: usize,
}

impl Columns {
    /// The header's columns if it is a GPU-trace-like header (a `Name` and a duration column).
    fn of(header: &[String]) -> Option<Columns> {
        let name = header.iter().position(|h| h == "Name")?;
        let duration = header
            .iter()
            .enumerate()
            .find_map(|(i, h)| duration_unit(h).map(|u| (i, u)))?;
        Some(Columns {
            name,
            duration,
            device: header.iter().position(|h| h == "Device"),
            count: header.len(),
        })
    }
}

/// Parses the text of a kernel-time file; `path` names it in errors.
pub fn parse(path: &str, text: &str) -> Result<Table, Error> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut header: Option<(Format, Vec<String>, Option<Columns>)> = None;
    let mut table = Table {
        format: Format::GpuTrace,
        rows: Vec::new(),
        skipped: 0,
    };
    let mut device: Option<String> = None;
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            Error::At {
                path: path.to_string(),
                line,
                message: format!("not CSV: {e}"),
            }
        })?;
        let line = record.position().map_or(0, |p| p.line());
        // Fields are trimmed, except where a name spans several (its spaces are its own).
        let raw: Vec<&str> = record.iter().collect();
        let fields: Vec<String> = raw.iter().map(|f| f.trim().to_string()).collect();
        if fields.iter().all(String::is_empty) {
            continue;
        }
        let Some((format, head, columns)) = &header else {
            if fields.len() == ORION.len() && fields.iter().zip(ORION).all(|(f, o)| f == o) {
                header = Some((Format::Orion, fields, None));
            } else if let Some(c) = Columns::of(&fields) {
                header = Some((Format::GpuTrace, fields, Some(c)));
            }
            continue;
        };
        table.format = *format;
        let (name, dur) = match columns {
            None => {
                // Orion: the last four fields are numbers, the name is everything before.
                if fields.len() < ORION.len() {
                    return Err(Error::At {
                        path: path.to_string(),
                        line,
                        message: format!(
                            "{}; Orion's rows have 5 ({})",
                            count(fields.len()),
                            ORION.join(",")
                        ),
                    });
                }
                let n = fields.len() - 4;
                let d = duration(path, line, (n + 3, "Duration"), &fields[n + 3], 1.0)?;
                (raw[..n].join(",").trim().to_string(), d)
            }
            Some(c) => {
                let name_last = c.name + 1 == c.count;
                if fields.len() < c.count || (fields.len() > c.count && !name_last) {
                    return Err(Error::At {
                        path: path.to_string(),
                        line,
                        message: format!("{}; the header has {}", count(fields.len()), c.count),
                    });
                }
                let (i, unit) = c.duration;
                let d = duration(path, line, (i, &head[i]), &fields[i], unit)?;
                if let Some(dc) = c.device {
                    let dev = &fields[dc];
                    if !priced_elsewhere(&fields[c.name]) {
                        match &device {
                            Some(first) if first != dev => {
                                table.skipped += 1;
                                continue;
                            }
                            Some(_) => {}
                            None => device = Some(dev.clone()),
                        }
                    }
                }
                // A name holding unquoted commas in the last column spans the extra fields.
                let name = if name_last {
                    raw[c.name..].join(",")
                } else {
                    raw[c.name].to_string()
                };
                (name.trim().to_string(), d)
            }
        };
        if name.is_empty() {
            return Err(Error::At {
                path: path.to_string(),
                line,
                message: "empty kernel name".into(),
            });
        }
        if priced_elsewhere(&name) {
            table.skipped += 1;
            continue;
        }
        table.rows.push(Row {
            name,
            duration_ns: dur,
            line,
        });
    }
    if header.is_none() {
        return Err(Error::File {
            path: path.to_string(),
            message: format!(
                "no header line: expected nsys's GPU trace CSV (a \"Name\" and a \"Duration (ns)\" \
                 column: nsys stats --report gputrace --format csv) or Orion's kernel-info CSV \
                 ({})",
                ORION.join(",")
            ),
        });
    }
    if table.rows.is_empty() {
        return Err(Error::File {
            path: path.to_string(),
            message: format!(
                "no kernel rows ({} rows of copies, memsets, NCCL kernels or other devices left out)",
                table.skipped
            ),
        });
    }
    Ok(table)
}
