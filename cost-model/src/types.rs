//! Collectives, data types and reduction operations as users name them (nccl-tests' names), with
//! NCCL's sizes and the nccl-tests bus-bandwidth conventions (nccl-tests 2.19.6 `src/<coll>.cu`,
//! `<Coll>GetBw`; `doc/PERFORMANCE.md`).

use crate::consts::Func;
use crate::error::{CostError, Result};
use serde::Serialize;
use std::str::FromStr;

/// A collective or point-to-point pattern that `predict` can price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Collective {
    /// `ncclAllReduce`.
    AllReduce,
    /// `ncclAllGather`.
    AllGather,
    /// `ncclReduceScatter`.
    ReduceScatter,
    /// `ncclBroadcast`.
    Broadcast,
    /// `ncclReduce`.
    Reduce,
    /// nccl-tests `alltoall_perf` (grouped send/recv to every peer).
    AllToAll,
    /// nccl-tests `sendrecv_perf` (each rank sends to rank+1, receives from rank-1).
    SendRecv,
    /// nccl-tests `gather_perf` (grouped sends to the root).
    Gather,
    /// nccl-tests `scatter_perf` (grouped sends from the root).
    Scatter,
}

impl Collective {
    /// All, in the order `predict --op all` prints them.
    pub const ALL: [Collective; 9] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllToAll,
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
            Collective::AllToAll => "alltoall",
            Collective::SendRecv => "sendrecv",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
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
            | Collective::AllToAll
            | Collective::Gather
            | Collective::Scatter => (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce | Collective::SendRecv => 1.0,
        }
    }
    /// Whether nccl-tests prints a root for it (otherwise root is -1).
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
    /// nccl-tests' element count and size for a requested byte size: AllGather, ReduceScatter,
    /// AllToAll, Gather and Scatter round the per-rank count down to 16-byte multiples
    /// (`(count/n) & ~(16/elt-1)`); returns (printed count, printed size in bytes).
    pub fn nccl_tests_count(self, bytes: u64, dtype: DataType, n: usize) -> (u64, u64) {
        let es = dtype.size() as u64;
        let count = bytes / es;
        match self {
            Collective::AllGather
            | Collective::ReduceScatter
            | Collective::AllToAll
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

impl FromStr for Collective {
    type Err = CostError;
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

/// `ncclDataType_t` with nccl-tests' names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum DataType {
    /// int8.
    Int8,
    /// uint8.
    Uint8,
    /// int32.
    Int32,
    /// uint32.
    Uint32,
    /// int64.
    Int64,
    /// uint64.
    Uint64,
    /// half.
    Float16,
    /// float.
    Float32,
    /// double.
    Float64,
    /// bfloat16.
    Bfloat16,
    /// f8e4m3.
    Float8e4m3,
    /// f8e5m2.
    Float8e5m2,
}

impl DataType {
    /// All types.
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
    /// fp8 types (NCCL pushes deep fp8 rings to the back of the selection).
    pub fn is_fp8(self) -> bool {
        matches!(self, DataType::Float8e4m3 | DataType::Float8e5m2)
    }
    /// Floating-point type (avg becomes PreMulSum instead of SumPostDiv).
    pub fn is_float(self) -> bool {
        !matches!(
            self,
            DataType::Int8
                | DataType::Uint8
                | DataType::Int32
                | DataType::Uint32
                | DataType::Int64
                | DataType::Uint64
        )
    }
}

impl FromStr for DataType {
    type Err = CostError;
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

/// `ncclRedOp_t` (built-in ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum RedOp {
    /// sum.
    Sum,
    /// prod.
    Prod,
    /// max.
    Max,
    /// min.
    Min,
    /// avg.
    Avg,
}

impl RedOp {
    /// The reduction an `ncclRedOp_t` value prices as: NCCL's built-in numbers (sum 0, prod 1,
    /// max 2, min 3, avg 4); PreMulSum ops (5 and up) are tuned as sums.
    pub fn from_nccl(op: i64) -> RedOp {
        match op {
            1 => RedOp::Prod,
            2 => RedOp::Max,
            3 => RedOp::Min,
            4 => RedOp::Avg,
            _ => RedOp::Sum,
        }
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

impl FromStr for RedOp {
    type Err = CostError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "sum" => RedOp::Sum,
            "prod" => RedOp::Prod,
            "max" => RedOp::Max,
            "min" => RedOp::Min,
            "avg" => RedOp::Avg,
            _ => {
                return Err(CostError::Query(format!(
                    "unknown reduction \"{s}\" (expected sum, prod, max, min or avg)"
                )))
            }
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
        assert_eq!(Collective::AllToAll.busbw_factor(4), 0.75);
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
            Collective::AllToAll
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
}
