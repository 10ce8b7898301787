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
    /// Errors from the topology layer (topology edits, loading).
    #[error(transparent)]
    Topo(#[from] topo::TopoError),
}

/// Result alias for this crate.
pub type Result<T, E = CostError> = std::result::Result<T, E>;
