//! The one error type of the `cost-model` crate.

/// What can go wrong while building or querying a cost model.
#[derive(Debug, thiserror::Error)]
pub enum CostError {
    /// A setting (environment variable, `--env`, `--set`) NCCL or we would not accept.
    #[error("{name}={value}: {msg}")]
    Setting {
        /// Variable or key.
        name: String,
        /// Its value.
        value: String,
        /// Why it is rejected.
        msg: String,
    },
    /// A query NCCL would reject (no algorithm available, bad size, unknown name).
    #[error("{0}")]
    Query(String),
    /// A C value that names none of an NCCL enum's values (`ncclDataType_t`, a built-in
    /// `ncclRedOp_t`, an `ncclFunc_t` collective).
    #[error("{what} {value} is not {expected}")]
    NcclValue {
        /// What the value was given as ("datatype").
        what: &'static str,
        /// The value.
        value: i32,
        /// The enum it is not a value of ("an ncclDataType_t").
        expected: &'static str,
    },
    /// Errors from the topology layer (topology edits, loading).
    #[error(transparent)]
    Topo(#[from] topo::TopoError),
}

/// Result alias for this crate.
pub type Result<T, E = CostError> = std::result::Result<T, E>;
