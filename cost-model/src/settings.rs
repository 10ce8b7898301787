//! The NCCL settings the tuning model reads (`NCCL_ALGO`, `NCCL_PROTO`, thread counts, net
//! overhead, PAT, LL128 over C2C, thread thresholds) and NCCL's `parseList` for the algorithm and
//! protocol lists.

use crate::consts::{Algo, Func, Proto, N_ALGOS, N_FUNCS, N_PROTOS};
use crate::error::{CostError, Result};
use serde::Serialize;
use topo::NcclVersion;

/// Tuning settings. `Default` is NCCL's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct TunerSettings {
    /// `NCCL_ALGO` list.
    pub algo: Option<String>,
    /// `NCCL_PROTO` list.
    pub proto: Option<String>,
    /// `NCCL_NTHREADS`.
    pub nthreads: Option<i32>,
    /// `NCCL_LL128_NTHREADS`.
    pub ll128_nthreads: Option<i32>,
    /// `NCCL_NET_OVERHEAD` in ns.
    pub net_overhead_ns: Option<i64>,
    /// `NCCL_PAT_ENABLE` (0, 1, 2 = auto).
    pub pat_enable: Option<i32>,
    /// `NCCL_LL128_C2C` (default 1).
    pub ll128_c2c: Option<i32>,
    /// `NCCL_THREAD_THRESHOLDS` ("t0 t1 t2 r0 r1 r2": Tree then Ring, per protocol).
    pub thread_thresholds: Option<String>,
    /// `CUDART_VERSION` the library was built with (only the 11.8 + sm90 rule reads it); default 12090.
    pub cudart_version: Option<i32>,
    /// Release to reproduce; `None` takes the plan's.
    pub version: Option<NcclVersion>,
}

impl TunerSettings {
    /// Read from a lookup function (environment, `--env` list, test map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let int =
            |name: &str| -> Result<Option<i64>> {
                match get(name) {
                    None => Ok(None),
                    Some(v) => topo::settings::parse_c_int(&v).map(Some).ok_or_else(|| {
                        CostError::Setting {
                            name: name.into(),
                            value: v.clone(),
                            msg: "expected an integer".into(),
                        }
                    }),
                }
            };
        let version = match get("NCCLSIM_NCCL_VERSION") {
            None => None,
            Some(v) => Some(v.parse::<NcclVersion>().map_err(|e| CostError::Setting {
                name: "NCCLSIM_NCCL_VERSION".into(),
                value: v.clone(),
                msg: e.to_string(),
            })?),
        };
        Ok(TunerSettings {
            algo: get("NCCL_ALGO"),
            proto: get("NCCL_PROTO"),
            nthreads: int("NCCL_NTHREADS")?.map(|x| x as i32),
            ll128_nthreads: int("NCCL_LL128_NTHREADS")?.map(|x| x as i32),
            net_overhead_ns: int("NCCL_NET_OVERHEAD")?,
            pat_enable: int("NCCL_PAT_ENABLE")?.map(|x| x as i32),
            ll128_c2c: int("NCCL_LL128_C2C")?.map(|x| x as i32),
            thread_thresholds: get("NCCL_THREAD_THRESHOLDS"),
            cudart_version: int("NCCLSIM_CUDART_VERSION")?.map(|x| x as i32),
            version,
        })
    }
    /// Read from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// What NCCL silently does with settings it cannot fully use, one line each naming the
    /// variable: `NCCL_THREAD_THRESHOLDS` is read with `sscanf("%ld %ld %ld %ld %ld %ld")` (NCCL
    /// 2.30.7 src/graph/tuning.cc), so reading stops at the first token that is not a number and
    /// every threshold not read, or negative, keeps its default.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(t) = &self.thread_thresholds {
            let vals: Vec<i64> = t
                .split_whitespace()
                .map_while(|x| x.parse::<i64>().ok())
                .take(6)
                .collect();
            if vals.is_empty() {
                out.push(format!(
                    "NCCL_THREAD_THRESHOLDS={t}: no number read; NCCL keeps every default threshold"
                ));
            } else if vals.len() < 6 {
                out.push(format!(
                    "NCCL_THREAD_THRESHOLDS={t}: {} of 6 numbers read; NCCL keeps the defaults of the rest",
                    vals.len()
                ));
            }
            if vals.iter().any(|v| *v < 0) {
                out.push(format!(
                    "NCCL_THREAD_THRESHOLDS={t}: negative thresholds keep their defaults"
                ));
            }
        }
        out
    }
}

/// NCCL's `parseList` (tuning.cc): `"elem,elem;func:elem,..."`, `^` negates a list, names are
/// case-insensitive, only the first entry may lack a `func:` prefix. `list[f][e]` starts as the
/// caller's defaults and is overwritten for every function an entry names. Releases before 2.24 take
/// no prefixes: the whole string is one list for every function.
pub fn parse_list<const E: usize>(
    var: &str,
    s: &str,
    elems: &[&str; E],
    with_prefixes: bool,
    list: &mut [[i32; E]; N_FUNCS],
) -> Result<()> {
    let bad = |msg: String| CostError::Setting {
        name: var.into(),
        value: s.into(),
        msg,
    };
    let entries: Vec<&str> = s.split(';').filter(|t| !t.is_empty()).collect();
    for (i, entry) in entries.iter().enumerate() {
        let mut parts = entry.split(':').filter(|t| !t.is_empty());
        let first = parts.next().unwrap_or("");
        let (prefix, elem_list) = match parts.next() {
            Some(l) if with_prefixes => (Some(first), l),
            Some(_) => {
                return Err(bad(format!(
                    "function prefixes ('{first}:') need NCCL 2.24 or newer"
                )))
            }
            None => {
                if i != 0 {
                    return Err(bad("all entries except the first must have a prefix".into()));
                }
                (None, first)
            }
        };
        let (negate, elem_list) = match elem_list.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, elem_list),
        };
        let (unset, set) = if negate { (1, 0) } else { (0, 1) };
        let mut found = false;
        for f in Func::ALL {
            if let Some(p) = prefix {
                if !p.eq_ignore_ascii_case(f.name()) {
                    continue;
                }
            }
            found = true;
            let row = &mut list[f as usize];
            for v in row.iter_mut() {
                *v = unset;
            }
            for elem in elem_list.split(',').filter(|t| !t.is_empty()) {
                match elems.iter().position(|e| e.eq_ignore_ascii_case(elem)) {
                    Some(e) => row[e] = set,
                    None => {
                        return Err(bad(format!(
                            "unrecognized element \"{elem}\" (expected one of {})",
                            elems.join(", ")
                        )))
                    }
                }
            }
        }
        if !found {
            return Err(bad(format!(
                "unrecognized function prefix \"{}\" (expected one of {})",
                prefix.unwrap_or(""),
                Func::ALL.map(|f| f.name()).join(", ")
            )));
        }
    }
    Ok(())
}

/// Names of the algorithms as `NCCL_ALGO` accepts them.
pub fn algo_names() -> [&'static str; N_ALGOS] {
    Algo::ALL.map(|a| a.name())
}
/// Names of the protocols as `NCCL_PROTO` accepts them.
pub fn proto_names() -> [&'static str; N_PROTOS] {
    Proto::ALL.map(|p| p.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_thresholds_nccl_cannot_read_are_warned_about() {
        let w = |v: &str| {
            TunerSettings::from_lookup(|k| (k == "NCCL_THREAD_THRESHOLDS").then(|| v.to_string()))
                .unwrap()
                .warnings()
        };
        assert_eq!(
            w("abc"),
            ["NCCL_THREAD_THRESHOLDS=abc: no number read; NCCL keeps every default threshold"]
        );
        assert!(w("1 2")[0].contains("2 of 6 numbers read"));
        assert!(w("-1 8 8 8 8 8")[0].contains("negative thresholds keep their defaults"));
        assert!(w("8 8 8 64 64 64").is_empty());
    }

    fn protos(s: &str) -> Result<[[i32; 3]; 5]> {
        let mut l = [[1, 2, 1]; 5];
        parse_list("NCCL_PROTO", s, &proto_names(), true, &mut l)?;
        Ok(l)
    }

    #[test]
    fn examples_from_nccl_comments() {
        // "LL,Simple;allreduce:^LL": LL and Simple everywhere, everything but LL for AllReduce.
        let l = protos("LL,Simple;allreduce:^LL").unwrap();
        assert_eq!(l[Func::Broadcast as usize], [1, 0, 1]);
        assert_eq!(l[Func::AllReduce as usize], [0, 1, 1]);
        // "^LL128;allreduce:LL128"
        let l = protos("^LL128;allreduce:LL128").unwrap();
        assert_eq!(l[Func::AllGather as usize], [1, 0, 1]);
        assert_eq!(l[Func::AllReduce as usize], [0, 1, 0]);
        let mut a = [[1; 7]; 5];
        parse_list(
            "NCCL_ALGO",
            "ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring",
            &algo_names(),
            true,
            &mut a,
        )
        .unwrap();
        assert_eq!(a[Func::AllReduce as usize], [1, 0, 1, 0, 0, 0, 0]);
        assert_eq!(a[Func::Broadcast as usize], [0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(a[Func::Reduce as usize], [0, 1, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn errors_name_the_problem() {
        let e = protos("LL;Simple").unwrap_err().to_string();
        assert!(e.contains("must have a prefix"), "{e}");
        let e = protos("LL,Fast").unwrap_err().to_string();
        assert!(e.contains("\"Fast\""), "{e}");
        let e = protos("allgatherv:LL").unwrap_err().to_string();
        assert!(e.contains("allgatherv"), "{e}");
        let mut l = [[1, 2, 1]; 5];
        let e = parse_list("NCCL_PROTO", "allreduce:LL", &proto_names(), false, &mut l)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2.24"), "{e}");
    }
}
