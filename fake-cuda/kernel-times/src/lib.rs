//! Measured kernel durations that override the compute model's (`NCCLSIM_KERNEL_TIMES`).
//!
//! A user profiles one iteration on one real GPU (nsys's GPU trace report, or Orion's
//! kernel-info file, see [`mod@parse`]) and every simulated GPU takes the measured durations for
//! the launches they match; launches that match nothing keep the compute model's time. Each
//! simulated device matches on its own: its launches are counted separately.
//!
//! Matching ([`MatchBy`], `NCCLSIM_KERNEL_TIMES_MATCH`):
//! - `name` (default): the k-th launch on a device whose name matches X takes the k-th measured
//!   duration of X, cycling through X's measured occurrences when the run launches X more often
//!   than the file lists it (one profiled iteration replayed for every step). A launch matches
//!   by its full name (whitespace ignored), else by its base name: the qualified function name
//!   without return type, template arguments and parameters (`void at::native::elementwise_kernel<128,
//!   4, ...>(...)` is `at::native::elementwise_kernel`; a mangled name such as `_Z6vecAddPfS_S_i`
//!   is `vecAdd`, so a raw kernel's registered name finds the demangled name nsys prints).
//!   Torch ops are named as the dispatcher names them (`aten::mm`, as `ncclsim trace kernels`
//!   lists them), cuBLAS GEMMs by the cuBLAS function called (`cublasSgemm_v2`,
//!   `cublasGemmEx`, `cublasLtMatmul`), raw kernels by the name `__cudaRegisterFunction` gave.
//! - `order`: the k-th launch on a device takes the k-th duration of the file, whatever the
//!   names, cycling through the file: for a program that launches the same kernels in the same
//!   order as the profiled one (a C program's kernels and GEMMs; not torch ops, some of which
//!   are several kernels on a real GPU and some none).
//!
//! What consults the table: torch ops and cuBLAS and cuBLASLt GEMMs, priced through the core's
//! `launch_compute`, and raw `cudaLaunchKernel`/`<<<>>>` launches (which otherwise take no time).
//! NCCL operations and copies never do.

#![forbid(unsafe_code)]

pub mod parse;

pub use parse::{parse, Format, Row, Table};
use std::collections::HashMap;

/// Why a kernel-time file or setting was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line of the file is wrong.
    #[error("{path}:{line}: {message}")]
    At {
        /// The file.
        path: String,
        /// 1-based line.
        line: u64,
        /// What is wrong, naming the column.
        message: String,
    },
    /// The file as a whole is wrong.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The matching rule is not one of `name`, `order`.
    #[error("NCCLSIM_KERNEL_TIMES_MATCH={0:?}: expected name or order")]
    Match(String),
}

/// How launches find their measured durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatchBy {
    /// By name and occurrence.
    #[default]
    Name,
    /// By launch order.
    Order,
}

impl std::str::FromStr for MatchBy {
    type Err = Error;
    fn from_str(s: &str) -> Result<MatchBy, Error> {
        match s {
            "name" => Ok(MatchBy::Name),
            "order" => Ok(MatchBy::Order),
            _ => Err(Error::Match(s.to_string())),
        }
    }
}

/// Where one device is in the table.
#[derive(Debug, Default)]
struct Cursor {
    /// Launches that consulted the table (order matching).
    launches: usize,
    /// Launches matched per table key (name matching).
    seen: HashMap<String, usize>,
}

/// A kernel-time table with each device's position in it.
#[derive(Debug)]
pub struct KernelTimes {
    by: MatchBy,
    in_order: Vec<u64>,
    by_name: HashMap<String, Vec<u64>>,
    by_base: HashMap<String, Vec<u64>>,
    devices: HashMap<usize, Cursor>,
}

/// A full name's key: the name without whitespace (`float *` and `float*` are one).
fn full_key(name: &str) -> String {
    name.split_whitespace().collect()
}

/// The qualified function name of an Itanium-mangled name (`_Z6vecAddPfS_S_i` -> `vecAdd`,
/// `_ZN2at6native4fillEv` -> `at::native::fill`, the anonymous namespace as nsys prints it),
/// or None if `name` is not one this reads (only the name is read, never the signature).
fn mangled_base(name: &str) -> Option<String> {
    let s = name.strip_prefix("_Z")?;
    let s = s.strip_prefix('L').unwrap_or(s);
    let (mut rest, nested) = match s.strip_prefix('N') {
        Some(r) => (r.trim_start_matches(['K', 'V', 'r']), true),
        None => (s, false),
    };
    let mut parts: Vec<String> = Vec::new();
    if nested {
        if let Some(r) = rest.strip_prefix("St") {
            parts.push("std".into());
            rest = r;
        }
    }
    loop {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            break;
        }
        let len: usize = rest[..digits].parse().ok()?;
        let id = rest.get(digits..digits + len)?;
        parts.push(if id.starts_with("_GLOBAL__N") {
            "(anonymous namespace)".into()
        } else {
            id.to_string()
        });
        rest = &rest[digits + len..];
        if !nested {
            break;
        }
    }
    (!parts.is_empty()).then(|| parts.join("::"))
}

/// A name's base key: the qualified function name without return type, template arguments
/// and parameters (mangled names read by their Itanium encoding), whitespace removed.
pub fn base_name(name: &str) -> String {
    if let Some(b) = mangled_base(name.trim()) {
        return full_key(&b);
    }
    const ANON: &str = "(anonymous namespace)";
    let s = name.trim();
    let s = s.strip_prefix("void ").unwrap_or(s);
    // The anonymous namespace holds a parenthesis that does not start the parameters; Orion
    // writes it as `(anonymous namespace)` where ncu wrote `<unnamed>`.
    let s = s.replace("<unnamed>", ANON).replace(ANON, "\u{1}");
    let end = s.find(['<', '(']).unwrap_or(s.len());
    full_key(&s[..end].replace('\u{1}', ANON))
}

impl KernelTimes {
    /// A table matched by `by`.
    pub fn new(table: Table, by: MatchBy) -> KernelTimes {
        let mut by_name: HashMap<String, Vec<u64>> = HashMap::new();
        let mut by_base: HashMap<String, Vec<u64>> = HashMap::new();
        for r in &table.rows {
            by_name
                .entry(full_key(&r.name))
                .or_default()
                .push(r.duration_ns);
            by_base
                .entry(base_name(&r.name))
                .or_default()
                .push(r.duration_ns);
        }
        KernelTimes {
            by,
            in_order: table.rows.iter().map(|r| r.duration_ns).collect(),
            by_name,
            by_base,
            devices: HashMap::new(),
        }
    }

    /// Reads and parses `path`.
    pub fn read(path: &str, by: MatchBy) -> Result<KernelTimes, Error> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_string(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            Error::At {
                path: path.to_string(),
                line: 1 + good.iter().filter(|&&b| b == b'\n').count() as u64,
                message: "not UTF-8 text".into(),
            }
        })?;
        Ok(KernelTimes::new(parse(path, &text)?, by))
    }

    /// The table `NCCLSIM_KERNEL_TIMES` (`file`) and `NCCLSIM_KERNEL_TIMES_MATCH` (`by`) name,
    /// None when no file is named.
    pub fn from_settings(
        file: Option<&str>,
        by: Option<&str>,
    ) -> Result<Option<KernelTimes>, Error> {
        let by = by.map(str::parse).transpose()?.unwrap_or_default();
        match file {
            Some(f) if !f.is_empty() => KernelTimes::read(f, by).map(Some),
            _ => Ok(None),
        }
    }

    /// The matching rule.
    pub fn match_by(&self) -> MatchBy {
        self.by
    }

    /// The measured duration for the next launch of `name` on `device`, or None if the table
    /// has none for it (the model's time then stands). Counts the launch.
    pub fn duration(&mut self, device: usize, name: &str) -> Option<u64> {
        let cursor = self.devices.entry(device).or_default();
        if self.by == MatchBy::Order {
            let d = self.in_order[cursor.launches % self.in_order.len()];
            cursor.launches += 1;
            return Some(d);
        }
        let full = full_key(name);
        let (key, times) = match self.by_name.get(&full) {
            Some(t) => (full, t),
            None => {
                let base = base_name(name);
                let t = self.by_base.get(&base)?;
                (format!("\u{1}{base}"), t)
            }
        };
        let k = cursor.seen.entry(key).or_default();
        let d = times[*k % times.len()];
        *k += 1;
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mangled_names_read_to_their_function_names() {
        assert_eq!(mangled_base("_Z6vecAddPfS_S_i").as_deref(), Some("vecAdd"));
        assert_eq!(
            mangled_base("_ZN2at6native4fillEv").as_deref(),
            Some("at::native::fill")
        );
        assert_eq!(
            mangled_base("_ZN12_GLOBAL__N_14stepEPf").as_deref(),
            Some("(anonymous namespace)::step")
        );
        assert_eq!(mangled_base("_ZNSt4sortEv").as_deref(), Some("std::sort"));
        assert_eq!(mangled_base("_ZL4tinyv").as_deref(), Some("tiny"));
        assert_eq!(mangled_base("vecAdd"), None);
        assert_eq!(mangled_base("_Z99x"), None);
    }

    #[test]
    fn base_names_drop_return_type_templates_and_parameters() {
        assert_eq!(
            base_name("vecAdd(float *, float *, float *, int)"),
            "vecAdd"
        );
        assert_eq!(
            base_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)"),
            "at::native::vectorized_elementwise_kernel"
        );
        assert_eq!(
            base_name("void at::native::(anonymous namespace)::max_pool_forward_nchw<float>(int)"),
            "at::native::(anonymousnamespace)::max_pool_forward_nchw"
        );
        assert_eq!(
            base_name("void at::native::<unnamed>::max_pool_forward_nchw"),
            "at::native::(anonymousnamespace)::max_pool_forward_nchw"
        );
        assert_eq!(
            base_name("_ZN2at6native12_GLOBAL__N_121max_pool_forward_nchwIfEEvi"),
            "at::native::(anonymousnamespace)::max_pool_forward_nchw"
        );
        assert_eq!(base_name("aten::mm"), "aten::mm");
        assert_eq!(base_name("_Z6vecAddPfS_S_i"), "vecAdd");
    }

    fn table(rows: &[(&str, u64)]) -> Table {
        Table {
            format: Format::GpuTrace,
            rows: rows
                .iter()
                .enumerate()
                .map(|(i, &(n, d))| Row {
                    name: n.into(),
                    duration_ns: d,
                    line: i as u64 + 2,
                })
                .collect(),
            skipped: 0,
        }
    }

    #[test]
    fn name_matching_takes_occurrences_in_turn_and_cycles() {
        let t = table(&[("aten::mm", 100), ("aten::relu", 7), ("aten::mm", 300)]);
        let mut k = KernelTimes::new(t, MatchBy::Name);
        let run: Vec<Option<u64>> = [
            "aten::mm",
            "aten::mm",
            "aten::add",
            "aten::mm",
            "aten::relu",
        ]
        .iter()
        .map(|n| k.duration(0, n))
        .collect();
        assert_eq!(run, [Some(100), Some(300), None, Some(100), Some(7)]);
        // Another device starts from the first occurrence.
        assert_eq!(k.duration(3, "aten::mm"), Some(100));
        assert_eq!(k.duration(0, "aten::mm"), Some(300));
    }

    #[test]
    fn name_matching_finds_demangled_kernels_by_base_name() {
        let t = table(&[
            ("vecAdd(float *, float *, float *, int)", 5_000),
            ("void scale<float>(float *, int)", 6_000),
            ("void scale<double>(double *, int)", 8_000),
        ]);
        let mut k = KernelTimes::new(t, MatchBy::Name);
        assert_eq!(k.duration(0, "_Z6vecAddPfS_S_i"), Some(5_000));
        assert_eq!(
            k.duration(0, "vecAdd(float*, float*, float*, int)"),
            Some(5_000)
        );
        // Full names first: the double instantiation by its own name.
        assert_eq!(
            k.duration(0, "void scale<double>(double*, int)"),
            Some(8_000)
        );
        // Base names share the occurrences of every instantiation, in file order.
        assert_eq!(k.duration(0, "_Z5scaleIfEvPT_i"), Some(6_000));
        assert_eq!(k.duration(0, "_Z5scaleIfEvPT_i"), Some(8_000));
        assert_eq!(k.duration(0, "other"), None);
    }

    #[test]
    fn order_matching_ignores_names_and_cycles_per_device() {
        let t = table(&[("ampere_sgemm_128x64_nn", 10), ("vecAdd", 20), ("x", 30)]);
        let mut k = KernelTimes::new(t, MatchBy::Order);
        let d: Vec<_> = (0..5).map(|_| k.duration(1, "cublasSgemm_v2")).collect();
        assert_eq!(d, [Some(10), Some(20), Some(30), Some(10), Some(20)]);
        assert_eq!(k.duration(2, "anything"), Some(10));
    }

    #[test]
    fn settings_choose_the_file_and_the_rule() {
        assert!(KernelTimes::from_settings(None, None).unwrap().is_none());
        assert!(KernelTimes::from_settings(Some(""), Some("order"))
            .unwrap()
            .is_none());
        let e = KernelTimes::from_settings(Some("/x"), Some("names")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "NCCLSIM_KERNEL_TIMES_MATCH=\"names\": expected name or order"
        );
        let e = KernelTimes::from_settings(Some("/nonexistent/kt.csv"), None).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/kt.csv: "), "{e}");
        let dir = std::env::temp_dir().join(format!("kernel-times-utf8-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("kt.csv");
        std::fs::write(&file, b"Name,Duration (ns)\nx,1\n\xff,3\n").unwrap();
        let e = KernelTimes::read(file.to_str().unwrap(), MatchBy::Name).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}:3: not UTF-8 text", file.display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
