//! NCCL's vocabulary, defined once for every crate that names it: collectives (`ncclFunc_t`),
//! data types (`ncclDataType_t`) and reduction operations (`ncclRedOp_t`), each with its C value
//! (`TryFrom<i32>`), the name NCCL prints and the name nccl-tests gives it, with NCCL's sizes and
//! nccl-tests' bus-bandwidth conventions (NCCL 2.30.7 `src/nccl.h.in`,
//! `src/include/nccl_common.h`, `src/enqueue.cc` `ncclFuncToString` / `ncclDatatypeToString`;
//! nccl-tests 2.19.6 `src/<coll>.cu` `<Coll>GetBw`, `doc/PERFORMANCE.md`).

use crate::consts::Func;
use crate::error::{CostError, Result};
use serde::Serialize;
use std::str::FromStr;

/// The variant of `all` whose C value is `value`, else an error naming the value.
fn from_c<T: Copy>(
    all: &[T],
    c_value: impl Fn(T) -> i32,
    value: i32,
    what: &'static str,
    expected: &'static str,
) -> Result<T> {
    all.iter()
        .copied()
        .find(|&t| c_value(t) == value)
        .ok_or(CostError::NcclValue {
            what,
            value,
            expected,
        })
}

/// A collective or point-to-point pattern, numbered as NCCL's `ncclFunc_t`: the collective a
/// call of the C API names, and what `predict` can price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[repr(i32)]
pub enum Collective {
    /// `ncclAllReduce` (`ncclFuncAllReduce`).
    AllReduce = 4,
    /// `ncclAllGather` (`ncclFuncAllGather`).
    AllGather = 2,
    /// `ncclReduceScatter` (`ncclFuncReduceScatter`).
    ReduceScatter = 3,
    /// `ncclBroadcast` / `ncclBcast` (`ncclFuncBroadcast`).
    Broadcast = 0,
    /// `ncclReduce` (`ncclFuncReduce`).
    Reduce = 1,
    /// `ncclAlltoAll` (`ncclFuncAlltoAll`); nccl-tests `alltoall_perf`.
    AlltoAll = 8,
    /// A group of sends and receives (`ncclFuncSendRecv`); nccl-tests `sendrecv_perf` (each rank
    /// sends to rank+1, receives from rank-1).
    SendRecv = 5,
    /// `ncclGather` (`ncclFuncGather`); nccl-tests `gather_perf`.
    Gather = 10,
    /// `ncclScatter` (`ncclFuncScatter`); nccl-tests `scatter_perf`.
    Scatter = 9,
}

impl Collective {
    /// All, in the order `predict --op all` prints them.
    pub const ALL: [Collective; 9] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AlltoAll,
        Collective::SendRecv,
        Collective::Gather,
        Collective::Scatter,
    ];
    /// The CLI / nccl-tests name (`all_reduce` for `all_reduce_perf`).
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AlltoAll => "alltoall",
            Collective::SendRecv => "sendrecv",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
        }
    }
    /// The name NCCL prints (`ncclFuncToString`).
    pub fn nccl_name(self) -> &'static str {
        match self {
            Collective::AllReduce => "AllReduce",
            Collective::AllGather => "AllGather",
            Collective::ReduceScatter => "ReduceScatter",
            Collective::Broadcast => "Broadcast",
            Collective::Reduce => "Reduce",
            Collective::AlltoAll => "AlltoAll",
            Collective::SendRecv => "SendRecv",
            Collective::Gather => "Gather",
            Collective::Scatter => "Scatter",
        }
    }
    /// The collective of a tuned NCCL function.
    pub fn from_func(f: Func) -> Collective {
        match f {
            Func::AllReduce => Collective::AllReduce,
            Func::AllGather => Collective::AllGather,
            Func::ReduceScatter => Collective::ReduceScatter,
            Func::Broadcast => Collective::Broadcast,
            Func::Reduce => Collective::Reduce,
        }
    }
    /// The tuned NCCL function, `None` for point-to-point patterns.
    pub fn func(self) -> Option<Func> {
        Some(match self {
            Collective::AllReduce => Func::AllReduce,
            Collective::AllGather => Func::AllGather,
            Collective::ReduceScatter => Func::ReduceScatter,
            Collective::Broadcast => Func::Broadcast,
            Collective::Reduce => Func::Reduce,
            _ => return None,
        })
    }
    /// nccl-tests' busbw factor (`<Coll>GetBw`) for `n` ranks.
    pub fn busbw_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather
            | Collective::ReduceScatter
            | Collective::AlltoAll
            | Collective::Gather
            | Collective::Scatter => (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce | Collective::SendRecv => 1.0,
        }
    }
    /// Whether it has a root (nccl-tests prints -1 for the others).
    pub fn rooted(self) -> bool {
        matches!(
            self,
            Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter
        )
    }
    /// Whether it reduces (otherwise redop prints as `none`).
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce
        )
    }
    /// Elements of the send and receive buffers of rank `rank` for NCCL's `count` argument of
    /// the call (a per-rank block for AllGather, ReduceScatter, AlltoAll, Gather and Scatter);
    /// SendRecv as nccl-tests runs it, `count` each way.
    pub fn extents(self, count: usize, nranks: usize, rank: usize, root: usize) -> (usize, usize) {
        use Collective::*;
        let at_root = |n: usize| if rank == root { n } else { 0 };
        match self {
            AllReduce | SendRecv => (count, count),
            Reduce => (count, at_root(count)),
            Broadcast => (at_root(count), count),
            AllGather => (count, count * nranks),
            ReduceScatter => (count * nranks, count),
            AlltoAll => (count * nranks, count * nranks),
            Gather => (count, at_root(count * nranks)),
            Scatter => (at_root(count * nranks), count),
        }
    }
    /// nccl-tests' element count and size for a requested byte size: AllGather, ReduceScatter,
    /// AlltoAll, Gather and Scatter round the per-rank count down to 16-byte multiples
    /// (`(count/n) & ~(16/elt-1)`); returns (printed count, printed size in bytes).
    pub fn nccl_tests_count(self, bytes: u64, dtype: DataType, n: usize) -> (u64, u64) {
        let es = dtype.size() as u64;
        let count = bytes / es;
        match self {
            Collective::AllGather
            | Collective::ReduceScatter
            | Collective::AlltoAll
            | Collective::Gather
            | Collective::Scatter => {
                let align = (16 / es).max(1);
                let base = (count / n as u64) & !(align - 1);
                (base, base * n as u64 * es)
            }
            _ => (count, count * es),
        }
    }
}

impl TryFrom<i32> for Collective {
    type Error = CostError;
    /// From an `ncclFunc_t` value (the collectives above; not `ncclFuncSend`/`Recv` or the
    /// device API's functions).
    fn try_from(value: i32) -> Result<Self> {
        from_c(
            &Collective::ALL,
            |c| c as i32,
            value,
            "collective",
            "an ncclFunc_t collective",
        )
    }
}

impl FromStr for Collective {
    type Err = CostError;
    /// From the nccl-tests name, with or without `_perf`, underscores or case.
    fn from_str(s: &str) -> Result<Self> {
        let k = s.to_ascii_lowercase().replace('-', "_");
        let k = k.strip_suffix("_perf").unwrap_or(&k);
        Collective::ALL
            .into_iter()
            .find(|c| c.name() == k || c.name().replace('_', "") == k.replace('_', ""))
            .ok_or_else(|| {
                CostError::Query(format!(
                    "unknown collective \"{s}\" (expected one of {})",
                    Collective::ALL.map(|c| c.name()).join(", ")
                ))
            })
    }
}

/// `ncclDataType_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[repr(i32)]
pub enum DataType {
    /// `ncclInt8` / `ncclChar`; nccl-tests int8.
    Int8 = 0,
    /// `ncclUint8`; uint8.
    Uint8 = 1,
    /// `ncclInt32` / `ncclInt`; int32.
    Int32 = 2,
    /// `ncclUint32`; uint32.
    Uint32 = 3,
    /// `ncclInt64`; int64.
    Int64 = 4,
    /// `ncclUint64`; uint64.
    Uint64 = 5,
    /// `ncclFloat16` / `ncclHalf`; half.
    Float16 = 6,
    /// `ncclFloat32` / `ncclFloat`; float.
    Float32 = 7,
    /// `ncclFloat64` / `ncclDouble`; double.
    Float64 = 8,
    /// `ncclBfloat16`; bfloat16.
    Bfloat16 = 9,
    /// `ncclFloat8e4m3` (2.24+); f8e4m3.
    Float8e4m3 = 10,
    /// `ncclFloat8e5m2` (2.24+); f8e5m2.
    Float8e5m2 = 11,
}

impl DataType {
    /// All types, in C value order.
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8e4m3,
        DataType::Float8e5m2,
    ];
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8e4m3 | DataType::Float8e5m2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }
    /// nccl-tests' name.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Float16 => "half",
            DataType::Float32 => "float",
            DataType::Float64 => "double",
            DataType::Bfloat16 => "bfloat16",
            DataType::Float8e4m3 => "f8e4m3",
            DataType::Float8e5m2 => "f8e5m2",
        }
    }
    /// The name NCCL prints (`ncclDatatypeToString`, which names `ncclUint8` too).
    pub fn nccl_name(self) -> &'static str {
        match self {
            DataType::Int8 => "ncclInt8",
            DataType::Uint8 => "ncclUint8",
            DataType::Int32 => "ncclInt32",
            DataType::Uint32 => "ncclUint32",
            DataType::Int64 => "ncclInt64",
            DataType::Uint64 => "ncclUint64",
            DataType::Float16 => "ncclFloat16",
            DataType::Float32 => "ncclFloat32",
            DataType::Float64 => "ncclFloat64",
            DataType::Bfloat16 => "ncclBfloat16",
            DataType::Float8e4m3 => "ncclFloat8e4m3",
            DataType::Float8e5m2 => "ncclFloat8e5m2",
        }
    }
    /// fp8 types (NCCL pushes deep fp8 rings to the back of the selection).
    pub fn is_fp8(self) -> bool {
        matches!(self, DataType::Float8e4m3 | DataType::Float8e5m2)
    }
    /// Integer type (ncclAvg sums then divides instead of scaling each input).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DataType::Int8
                | DataType::Uint8
                | DataType::Int32
                | DataType::Uint32
                | DataType::Int64
                | DataType::Uint64
        )
    }
    /// Floating-point type (avg becomes PreMulSum instead of SumPostDiv).
    pub fn is_float(self) -> bool {
        !self.is_integer()
    }
}

impl TryFrom<i32> for DataType {
    type Error = CostError;
    /// From the `ncclDataType_t` value.
    fn try_from(value: i32) -> Result<Self> {
        from_c(
            &DataType::ALL,
            |d| d as i32,
            value,
            "datatype",
            "an ncclDataType_t",
        )
    }
}

impl FromStr for DataType {
    type Err = CostError;
    /// From the nccl-tests name or a common alias (`fp16`, `bf16`, `float32`, `int`, ...).
    fn from_str(s: &str) -> Result<Self> {
        let k = s.to_ascii_lowercase();
        let alias = match k.as_str() {
            "float16" | "fp16" => "half",
            "float32" | "fp32" => "float",
            "float64" | "fp64" => "double",
            "bf16" => "bfloat16",
            "char" => "int8",
            "int" => "int32",
            other => other,
        };
        DataType::ALL
            .into_iter()
            .find(|d| d.name() == alias)
            .ok_or_else(|| {
                CostError::Query(format!(
                    "unknown data type \"{s}\" (expected one of {})",
                    DataType::ALL.map(|d| d.name()).join(", ")
                ))
            })
    }
}

/// The built-in `ncclRedOp_t` values. Values from [`RedOp::FIRST_DYNAMIC`] to
/// [`RedOp::MAX_VALUE`] are operations a communicator created (`ncclRedOpCreatePreMulSum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[repr(i32)]
pub enum RedOp {
    /// `ncclSum`; nccl-tests sum.
    Sum = 0,
    /// `ncclProd`; prod.
    Prod = 1,
    /// `ncclMax`; max.
    Max = 2,
    /// `ncclMin`; min.
    Min = 3,
    /// `ncclAvg`; avg.
    Avg = 4,
}

impl RedOp {
    /// The built-in operations, in C value order.
    pub const ALL: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg];
    /// `ncclNumOps`: the first value `ncclRedOpCreatePreMulSum` hands out.
    pub const FIRST_DYNAMIC: i32 = 5;
    /// `ncclMaxRedOp` for a 4-byte enum: the largest value an operation can have.
    pub const MAX_VALUE: i32 = 0x7fff_ffff;

    /// Whether an `ncclRedOp_t` value names an operation a communicator created (PreMulSum).
    pub fn is_dynamic(op: i32) -> bool {
        op >= RedOp::FIRST_DYNAMIC
    }

    /// The reduction an `ncclRedOp_t` value prices as: a built-in one as itself; PreMulSum ops
    /// (and any other value) are tuned as sums.
    pub fn from_nccl(op: i64) -> RedOp {
        i32::try_from(op)
            .ok()
            .and_then(|v| RedOp::try_from(v).ok())
            .unwrap_or(RedOp::Sum)
    }

    /// nccl-tests' name.
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
            RedOp::Avg => "avg",
        }
    }
    /// The name of the C value (`nccl.h`).
    pub fn nccl_name(self) -> &'static str {
        match self {
            RedOp::Sum => "ncclSum",
            RedOp::Prod => "ncclProd",
            RedOp::Max => "ncclMax",
            RedOp::Min => "ncclMin",
            RedOp::Avg => "ncclAvg",
        }
    }
    /// `ncclNvlsSupported(devRedOp, type)` (device.h): sum or min/max on 32/64-bit integers and
    /// 16-bit floats, sum only on float and double.
    pub fn nvls_supported(self, t: DataType) -> bool {
        use DataType::*;
        match t {
            Int32 | Uint32 | Int64 | Uint64 | Float16 | Bfloat16 => {
                matches!(self, RedOp::Sum | RedOp::Max | RedOp::Min)
            }
            Float32 | Float64 => self == RedOp::Sum,
            _ => false,
        }
    }
    /// Whether the device op is PreMulSum or SumPostDiv (avg): PAT ReduceScatter skips those.
    pub fn is_scaled(self, _t: DataType) -> bool {
        self == RedOp::Avg
    }
}

impl TryFrom<i32> for RedOp {
    type Error = CostError;
    /// From a built-in `ncclRedOp_t` value; created operations are the runtime's to resolve.
    fn try_from(value: i32) -> Result<Self> {
        from_c(
            &RedOp::ALL,
            |o| o as i32,
            value,
            "reduction op",
            "a built-in ncclRedOp_t",
        )
    }
}

impl FromStr for RedOp {
    type Err = CostError;
    /// From the nccl-tests name.
    fn from_str(s: &str) -> Result<Self> {
        RedOp::ALL
            .into_iter()
            .find(|o| o.name() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                CostError::Query(format!(
                    "unknown reduction \"{s}\" (expected sum, prod, max, min or avg)"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busbw_factors_follow_nccl_tests() {
        // nccl-tests `<Coll>GetBw`: AllReduce 2(n-1)/n, AG/RS/AlltoAll/Gather/Scatter (n-1)/n, others 1.
        assert_eq!(Collective::AllReduce.busbw_factor(8), 1.75);
        assert_eq!(Collective::AllGather.busbw_factor(8), 0.875);
        assert_eq!(Collective::ReduceScatter.busbw_factor(16), 15.0 / 16.0);
        assert_eq!(Collective::AlltoAll.busbw_factor(4), 0.75);
        assert_eq!(Collective::Broadcast.busbw_factor(8), 1.0);
        assert_eq!(Collective::SendRecv.busbw_factor(8), 1.0);
    }

    #[test]
    fn nccl_tests_counts() {
        // all_gather with 8 ranks, -b 1M float: per-rank count 32768, size 1 MiB.
        assert_eq!(
            Collective::AllGather.nccl_tests_count(1 << 20, DataType::Float32, 8),
            (32768, 1 << 20)
        );
        // 8 B over 8 ranks of float rounds to zero elements per rank.
        assert_eq!(
            Collective::AllGather.nccl_tests_count(8, DataType::Float32, 8),
            (0, 0)
        );
        assert_eq!(
            Collective::AllReduce.nccl_tests_count(1000, DataType::Float64, 8),
            (125, 1000)
        );
    }

    #[test]
    fn names_parse_and_reject() {
        assert_eq!(
            "all_reduce".parse::<Collective>().unwrap(),
            Collective::AllReduce
        );
        assert_eq!(
            "allreduce".parse::<Collective>().unwrap(),
            Collective::AllReduce
        );
        assert_eq!(
            "alltoall_perf".parse::<Collective>().unwrap(),
            Collective::AlltoAll
        );
        assert!("allreduse"
            .parse::<Collective>()
            .unwrap_err()
            .to_string()
            .contains("all_reduce"));
        assert_eq!("bf16".parse::<DataType>().unwrap(), DataType::Bfloat16);
        assert!("float128".parse::<DataType>().is_err());
        assert!(RedOp::Sum.nvls_supported(DataType::Float32));
        assert!(!RedOp::Max.nvls_supported(DataType::Float32));
        assert!(!RedOp::Sum.nvls_supported(DataType::Int8));
    }

    #[test]
    fn c_values_are_ncclh_values() {
        use Collective as C;
        use DataType as D;
        use RedOp as R;
        let funcs = [
            (C::Broadcast, 0),
            (C::Reduce, 1),
            (C::AllGather, 2),
            (C::ReduceScatter, 3),
        ];
        let funcs = funcs
            .into_iter()
            .chain([(C::AllReduce, 4), (C::SendRecv, 5)]);
        let funcs = funcs.chain([(C::AlltoAll, 8), (C::Scatter, 9), (C::Gather, 10)]);
        for (c, v) in funcs {
            assert_eq!(C::try_from(v).unwrap(), c);
        }
        for (v, d) in D::ALL.into_iter().enumerate() {
            assert_eq!(D::try_from(v as i32).unwrap(), d);
        }
        assert_eq!(D::try_from(9).unwrap(), D::Bfloat16);
        assert_eq!(D::try_from(11).unwrap().nccl_name(), "ncclFloat8e5m2");
        let ops = [
            (R::Sum, 0),
            (R::Prod, 1),
            (R::Max, 2),
            (R::Min, 3),
            (R::Avg, 4),
        ];
        for (o, v) in ops {
            assert_eq!(R::try_from(v).unwrap(), o);
            assert_eq!(R::from_nccl(v as i64), o);
        }
        assert_eq!(R::FIRST_DYNAMIC, R::ALL.len() as i32);
        assert_eq!(R::from_nccl(R::FIRST_DYNAMIC as i64), R::Sum);
    }

    #[test]
    fn bad_c_values_are_named() {
        let e = |r: Result<String>| r.unwrap_err().to_string();
        assert_eq!(
            e(DataType::try_from(12).map(|d| d.name().into())),
            "datatype 12 is not an ncclDataType_t"
        );
        assert_eq!(
            e(DataType::try_from(-3).map(|d| d.name().into())),
            "datatype -3 is not an ncclDataType_t"
        );
        assert_eq!(
            e(RedOp::try_from(5).map(|o| o.name().into())),
            "reduction op 5 is not a built-in ncclRedOp_t"
        );
        for send_or_recv in [6, 7, 11] {
            assert!(
                e(Collective::try_from(send_or_recv).map(|c| c.name().into()))
                    .starts_with(&format!("collective {send_or_recv} is not"))
            );
        }
    }

    #[test]
    fn nccl_names() {
        assert_eq!(Collective::AlltoAll.nccl_name(), "AlltoAll");
        assert_eq!(Collective::AllReduce.nccl_name(), "AllReduce");
        assert_eq!(DataType::Bfloat16.nccl_name(), "ncclBfloat16");
        assert_eq!(RedOp::Avg.nccl_name(), "ncclAvg");
    }
}
