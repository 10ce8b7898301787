//! The planner's error type: what can stop a communicator from being planned (NCCL reports
//! these from `ncclCommInitRank`/`ncclCommSplit` as `ncclInvalidArgument`/`ncclInvalidUsage`, or
//! from `ncclTopoGetGraphFromXml` for a bad `NCCL_GRAPH_FILE`).

use topo::TopoError;

/// Everything that can go wrong while planning a communicator or a job.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The topology layer failed (reading a file, building a host's topology, NIC fusion).
    #[error(transparent)]
    Topo(#[from] TopoError),
    /// A communicator without members.
    #[error("communicator {comm}: no ranks")]
    NoRanks {
        /// The communicator's name.
        comm: String,
    },
    /// A member on a host the cluster does not have.
    #[error(
        "communicator {comm}: rank {rank} is on host {host} but the cluster has {hosts} host(s)"
    )]
    NoSuchHost {
        /// The communicator's name.
        comm: String,
        /// The offending rank.
        rank: usize,
        /// Its host index.
        host: usize,
        /// How many hosts the cluster has.
        hosts: usize,
    },
    /// Two members on the same GPU.
    #[error("communicator {comm}: rank {rank} and rank {earlier} both use <gpu dev=\"{dev}\"> of host {host} ({file}); NCCL needs one rank per GPU")]
    DuplicateGpu {
        /// The communicator's name.
        comm: String,
        /// The later of the two ranks.
        rank: usize,
        /// The earlier one.
        earlier: usize,
        /// Where the host's topology came from.
        file: String,
        /// Host index.
        host: usize,
        /// The GPU's `dev`.
        dev: i32,
    },
    /// A member names a GPU its host does not have.
    #[error("communicator {comm}: host {host} ({file}) has no GPU with dev {dev}")]
    NoSuchGpu {
        /// The communicator's name.
        comm: String,
        /// Host index.
        host: usize,
        /// Where the host's topology came from.
        file: String,
        /// The first missing `dev` (-1 when the count differs for another reason).
        dev: i32,
    },
    /// An `NCCL_GRAPH_FILE` NCCL would reject (message with file, line and column).
    #[error("{0}")]
    GraphFile(String),
    /// A split description that cannot be used (`--split`, `--split-by`, or one that does not
    /// fit the world).
    #[error("{0}")]
    Split(String),
    /// The operating system refused a thread for a large node's search.
    #[error("cannot start a search thread: {0}")]
    Thread(String),
}

/// Result alias for this crate.
pub type Result<T, E = PlanError> = std::result::Result<T, E>;
