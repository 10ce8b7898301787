//! `ncclCommSplit` semantics (NCCL 2.30.7 `src/init.cc` `commGetSplitInfo`): ranks with the same
//! color form a child; children order ranks by ascending key, ties in parent-rank order;
//! `NCCL_SPLIT_NOCOLOR` (-1, any negative color here) takes part but gets no child. Plus the two
//! ways the CLI describes splits: parallelism dimensions (`tp=8,dp=2`, innermost first, as
//! Megatron lays ranks out) and a color/key expression of `rank` (`color=rank/8,key=rank`).

use crate::comm::{Member, Planner};
use crate::error::{PlanError, Result};
use crate::plan::CommPlan;

/// Color of ranks that take no part in any child.
pub const NOCOLOR: i64 = -1;

/// Children of a split: (color, parent ranks in child rank order), in ascending color order.
pub fn split_groups(colors: &[(i64, i64)]) -> Vec<(i64, Vec<usize>)> {
    let mut cs: Vec<i64> = colors.iter().map(|c| c.0).filter(|&c| c >= 0).collect();
    cs.sort_unstable();
    cs.dedup();
    cs.into_iter()
        .map(|color| {
            let mut ranks: Vec<usize> = (0..colors.len())
                .filter(|&r| colors[r].0 == color)
                .collect();
            // Stable: ties keep parent order.
            ranks.sort_by_key(|&r| colors[r].1);
            (color, ranks)
        })
        .collect()
}

/// One parallelism dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dim {
    /// Name (`tp`, `dp`, `pp`, ...).
    pub name: String,
    /// Size.
    pub size: usize,
}

/// A split description.
#[derive(Debug, Clone, PartialEq)]
pub enum SplitSpec {
    /// `tp=8,dp=2`: dimensions, innermost (consecutive ranks) first. Their product must be the
    /// world size.
    Dims(Vec<Dim>),
    /// `color=EXPR[,key=EXPR]` over `rank` (and `nranks`).
    Expr {
        /// Name for the children.
        name: String,
        /// Color expression.
        color: Expr,
        /// Key expression (default: `rank`).
        key: Option<Expr>,
    },
}

/// Parse `tp=8,dp=2`.
pub fn parse_dims(s: &str) -> Result<SplitSpec> {
    let mut dims = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (n, v) = part.split_once('=').ok_or_else(|| {
            PlanError::Split(format!(
                "--split {s}: '{part}' is not NAME=SIZE (e.g. tp=8,dp=2)"
            ))
        })?;
        let size: usize = v.trim().parse().ok().filter(|&x| x > 0).ok_or_else(|| {
            PlanError::Split(format!(
                "--split {s}: size of '{n}' must be a positive integer"
            ))
        })?;
        let name = n.trim().to_string();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(PlanError::Split(format!(
                "--split {s}: '{n}' is not a dimension name"
            )));
        }
        if dims.iter().any(|d: &Dim| d.name == name) {
            return Err(PlanError::Split(format!(
                "--split {s}: '{name}' given twice"
            )));
        }
        dims.push(Dim { name, size });
    }
    if dims.is_empty() {
        return Err(PlanError::Split(format!("--split '{s}': no dimension")));
    }
    Ok(SplitSpec::Dims(dims))
}

/// Parse `color=rank/8,key=rank` (optionally `name=...` for the children's name).
pub fn parse_split_by(s: &str, index: usize) -> Result<SplitSpec> {
    let mut color = None;
    let mut key = None;
    let mut name = format!("split{index}_");
    for part in split_top(s) {
        let (k, v) = part.split_once('=').ok_or_else(|| {
            PlanError::Split(format!(
                "--split-by '{s}': '{part}' is not color=EXPR, key=EXPR or name=NAME"
            ))
        })?;
        match k.trim() {
            "color" => color = Some(Expr::parse(v).map_err(|e| bad(s, &e))?),
            "key" => key = Some(Expr::parse(v).map_err(|e| bad(s, &e))?),
            "name" => name = v.trim().to_string(),
            other => {
                return Err(PlanError::Split(format!(
                    "--split-by '{s}': unknown field '{other}' (color, key, name)"
                )))
            }
        }
    }
    let color =
        color.ok_or_else(|| PlanError::Split(format!("--split-by '{s}': no color=EXPR")))?;
    Ok(SplitSpec::Expr { name, color, key })
}

fn bad(s: &str, e: &str) -> PlanError {
    PlanError::Split(format!("--split-by '{s}': {e}"))
}

/// Split at top-level commas (not inside parentheses).
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The longest `--split-by` expression, in tokens.
pub const MAX_EXPR_TOKENS: usize = 256;

/// An integer expression over `rank` and `nranks` with `+ - * / %` and parentheses (C integer
/// semantics: division truncates).
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A number.
    Num(i64),
    /// `rank`.
    Rank,
    /// `nranks`.
    NRanks,
    /// Unary minus.
    Neg(Box<Expr>),
    /// Binary operation.
    Bin(char, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// Parse.
    pub fn parse(s: &str) -> Result<Expr, String> {
        let toks = tokenize(s)?;
        // Bounds the depth of the tree (and of its evaluation) whatever the shape.
        if toks.len() > MAX_EXPR_TOKENS {
            return Err(format!(
                "longer than {MAX_EXPR_TOKENS} numbers, names and operators"
            ));
        }
        let mut p = 0;
        let e = parse_sum(&toks, &mut p)?;
        if p != toks.len() {
            return Err(format!("unexpected '{}' in '{s}'", toks[p]));
        }
        Ok(e)
    }
    /// Evaluate.
    pub fn eval(&self, rank: i64, nranks: i64) -> Result<i64, String> {
        Ok(match self {
            Expr::Num(n) => *n,
            Expr::Rank => rank,
            Expr::NRanks => nranks,
            Expr::Neg(e) => {
                let v = e.eval(rank, nranks)?;
                v.checked_neg()
                    .ok_or_else(|| format!("-({v}) overflows 64 bits"))?
            }
            Expr::Bin(op, a, b) => {
                let (a, b) = (a.eval(rank, nranks)?, b.eval(rank, nranks)?);
                let v = match op {
                    '+' => a.checked_add(b),
                    '-' => a.checked_sub(b),
                    '*' => a.checked_mul(b),
                    '/' | '%' if b == 0 => return Err("division by zero".into()),
                    '/' => a.checked_div(b),
                    '%' => a.checked_rem(b),
                    _ => unreachable!("parser only builds + - * / %"),
                };
                v.ok_or_else(|| format!("({a}) {op} ({b}) overflows 64 bits"))?
            }
        })
    }
}

fn tokenize(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let cs: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let st = i;
            while i < cs.len() && cs[i].is_ascii_digit() {
                i += 1;
            }
            out.push(cs[st..i].iter().collect());
        } else if c.is_ascii_alphabetic() {
            let st = i;
            while i < cs.len() && (cs[i].is_ascii_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            out.push(cs[st..i].iter().collect());
        } else if "+-*/%()".contains(c) {
            out.push(c.to_string());
            i += 1;
        } else {
            return Err(format!("unexpected character '{c}' in '{s}'"));
        }
    }
    Ok(out)
}

fn parse_sum(t: &[String], p: &mut usize) -> Result<Expr, String> {
    let mut e = parse_prod(t, p)?;
    while *p < t.len() && (t[*p] == "+" || t[*p] == "-") {
        let op = t[*p].chars().next().unwrap_or('+');
        *p += 1;
        e = Expr::Bin(op, Box::new(e), Box::new(parse_prod(t, p)?));
    }
    Ok(e)
}
fn parse_prod(t: &[String], p: &mut usize) -> Result<Expr, String> {
    let mut e = parse_atom(t, p)?;
    while *p < t.len() && (t[*p] == "*" || t[*p] == "/" || t[*p] == "%") {
        let op = t[*p].chars().next().unwrap_or('*');
        *p += 1;
        e = Expr::Bin(op, Box::new(e), Box::new(parse_atom(t, p)?));
    }
    Ok(e)
}
fn parse_atom(t: &[String], p: &mut usize) -> Result<Expr, String> {
    let Some(tok) = t.get(*p) else {
        return Err("expression ends early".into());
    };
    *p += 1;
    match tok.as_str() {
        "-" => Ok(Expr::Neg(Box::new(parse_atom(t, p)?))),
        "(" => {
            let e = parse_sum(t, p)?;
            if t.get(*p).map(String::as_str) != Some(")") {
                return Err("missing ')'".into());
            }
            *p += 1;
            Ok(e)
        }
        "rank" => Ok(Expr::Rank),
        "nranks" => Ok(Expr::NRanks),
        s if s.chars().all(|c| c.is_ascii_digit()) => s
            .parse()
            .map(Expr::Num)
            .map_err(|_| format!("number '{s}' is too large")),
        s => Err(format!("unknown name '{s}' (use rank, nranks, numbers)")),
    }
}

/// (color, key) of every parent rank.
pub type ColorKeys = Vec<(i64, i64)>;

/// Colors and keys of every parent rank for a spec; for `Dims`, one (name, colors) per dimension.
pub fn colors(spec: &SplitSpec, nranks: usize) -> Result<Vec<(String, ColorKeys)>> {
    match spec {
        SplitSpec::Dims(dims) => {
            let prod = dims
                .iter()
                .try_fold(1usize, |p, d| p.checked_mul(d.size))
                .filter(|&p| p == nranks);
            let Some(_) = prod else {
                let prod = dims
                    .iter()
                    .try_fold(1u128, |p, d| p.checked_mul(d.size as u128))
                    .map_or("more than 2^128".to_string(), |p| p.to_string());
                return Err(PlanError::Split(format!(
                    "--split {}: the sizes multiply to {prod} but the world has {nranks} ranks",
                    dims.iter()
                        .map(|d| format!("{}={}", d.name, d.size))
                        .collect::<Vec<_>>()
                        .join(",")
                )));
            };
            let mut out = Vec::new();
            let mut stride = 1;
            for d in dims {
                let cs = (0..nranks)
                    .map(|r| {
                        let color = (r / (stride * d.size)) * stride + r % stride;
                        let key = (r / stride) % d.size;
                        (color as i64, key as i64)
                    })
                    .collect();
                out.push((d.name.clone(), cs));
                stride *= d.size;
            }
            Ok(out)
        }
        SplitSpec::Expr { name, color, key } => {
            let n = nranks as i64;
            let mut cs = Vec::with_capacity(nranks);
            for r in 0..n {
                let c = color
                    .eval(r, n)
                    .map_err(|e| PlanError::Split(format!("--split-by color at rank {r}: {e}")))?;
                let k = match key {
                    Some(k) => k.eval(r, n).map_err(|e| {
                        PlanError::Split(format!("--split-by key at rank {r}: {e}"))
                    })?,
                    None => r,
                };
                cs.push((if c < 0 { NOCOLOR } else { c }, k));
            }
            Ok(vec![(name.clone(), cs)])
        }
    }
}

/// A planned job: the world communicator and its split children.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobPlan {
    /// The world communicator.
    pub world: CommPlan,
    /// Children, dimension by dimension, in color order.
    pub splits: Vec<CommPlan>,
}

impl JobPlan {
    /// The JSON form (`docs/plan-json.md`): `{"world": CommPlan, "splits": [CommPlan, ...]}`.
    pub fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        let splits = self
            .splits
            .iter()
            .map(CommPlan::to_json)
            .collect::<serde_json::Result<Vec<_>>>()?;
        Ok(serde_json::json!({ "world": self.world.to_json()?, "splits": splits }))
    }
}

impl Planner {
    /// Plan the world over `members` and every split in `specs`.
    ///
    /// Every communicator's members are worked out first, so that all their host searches
    /// (independent of each other) run in parallel before the communicators are put together;
    /// the world is planned first, then the children in parallel. Errors are reported in order
    /// (the world's first, then the first failing child's), whatever the thread count.
    pub fn plan_job(&self, members: &[Member], specs: &[SplitSpec]) -> Result<JobPlan> {
        let comms = || -> Result<Vec<(String, Vec<Member>)>> {
            let mut comms = Vec::new();
            for spec in specs {
                for (name, cs) in colors(spec, members.len())? {
                    for (i, (_color, ranks)) in split_groups(&cs).into_iter().enumerate() {
                        let m: Vec<Member> = ranks.iter().map(|&r| members[r]).collect();
                        comms.push((format!("{name}{i}"), m));
                    }
                }
            }
            Ok(comms)
        };
        let comms = comms();
        let mut all: Vec<Vec<Member>> = vec![members.to_vec()];
        if let Ok(c) = &comms {
            all.extend(c.iter().map(|(_, m)| m.clone()));
        }
        self.prefetch(&all);
        // The world's errors come first, as when it is planned on its own.
        let world = self.plan(members, "world", None)?;
        let comms = comms?;
        use rayon::prelude::*;
        let splits: Vec<Result<CommPlan>> = comms
            .par_iter()
            .map(|(name, m)| self.plan(m, name, Some(&world)))
            .collect();
        let splits = splits.into_iter().collect::<Result<Vec<_>>>()?;
        Ok(JobPlan { world, splits })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_parent_order_and_nocolor_is_left_out() {
        let cs = [(1, 5), (0, 0), (1, 5), (-1, 0), (1, 2)];
        let g = split_groups(&cs);
        assert_eq!(g, vec![(0, vec![1]), (1, vec![4, 0, 2])]);
    }

    #[test]
    fn tp_dp_layout() {
        let spec = parse_dims("tp=8,dp=2").unwrap();
        let c = colors(&spec, 16).unwrap();
        let tp = split_groups(&c[0].1);
        let dp = split_groups(&c[1].1);
        assert_eq!(tp.len(), 2);
        assert_eq!(tp[1].1, (8..16).collect::<Vec<_>>());
        assert_eq!(dp.len(), 8);
        assert_eq!(dp[3].1, vec![3, 11]);
        assert!(colors(&spec, 12)
            .unwrap_err()
            .to_string()
            .contains("multiply to 16"));
    }

    #[test]
    fn expressions() {
        let s = parse_split_by("color=rank/8, key=-(rank%8)", 0).unwrap();
        let c = colors(&s, 16).unwrap();
        assert_eq!(c[0].1[9], (1, -1));
        assert_eq!(Expr::parse("(rank+1)*2%5").unwrap().eval(3, 8), Ok(3));
        assert!(parse_split_by("color=rank/", 0).is_err());
        assert!(parse_split_by("colour=rank", 0).is_err());
        let z = parse_split_by("color=rank/0", 0).unwrap();
        assert!(colors(&z, 4)
            .unwrap_err()
            .to_string()
            .contains("division by zero"));
    }

    #[test]
    fn overflow_is_an_error() {
        for e in [
            "color=(-9223372036854775807-1)/(0-1)",
            "color=(-9223372036854775807-1)%(0-1)",
            "color=9223372036854775807*9223372036854775807",
            "color=9223372036854775807+rank",
            "color=-(-9223372036854775807-1)",
        ] {
            let s = parse_split_by(e, 0).unwrap();
            let err = colors(&s, 4).unwrap_err().to_string();
            assert!(err.contains("overflows"), "{e}: {err}");
        }
    }

    #[test]
    fn sizes_that_wrap_do_not_multiply_to_the_world() {
        let spec = parse_dims("tp=3,dp=12297829382473034416").unwrap();
        let err = colors(&spec, 16).unwrap_err().to_string();
        assert!(err.contains("multiply to 36893488147419103248"), "{err}");
        let spec = parse_dims("a=4294967296,b=4294967296,c=4294967296,d=4294967296,e=2").unwrap();
        let err = colors(&spec, 16).unwrap_err().to_string();
        assert!(err.contains("multiply to more than"), "{err}");
    }

    #[test]
    fn deep_or_long_expressions_are_refused() {
        for e in [
            format!("color={}1{}", "(".repeat(30_000), ")".repeat(30_000)),
            format!("color={}1", "-".repeat(30_000)),
            format!("color=1{}", "+1".repeat(30_000)),
        ] {
            let err = parse_split_by(&e, 0).unwrap_err().to_string();
            assert!(err.contains("longer than"), "{err}");
        }
    }
}
