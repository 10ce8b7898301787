//! NCCL's channel search, ring and tree construction, split communicators and plan formats.
//!
//! Reproduces NCCL 2.30.7 (`src/graph/search.cc`, `connect.cc`, `trees.cc`, `rings.cc`, the graph
//! and channel parts of `src/init.cc`, `ncclCommSplit`), with older releases' deltas behind the
//! version profile in [`topo::NcclVersion`]. Knows nothing about cost: that is `cost-model`.

#![forbid(unsafe_code)]

pub mod comm;
pub mod consts;
pub mod error;
pub mod format;
pub mod graph;
pub mod graph_xml;
pub mod plan;
pub mod profile;
pub mod search;
pub mod settings;
pub mod split;

pub use comm::{world_members, Member, Planner};
pub use error::PlanError;
pub use graph::{Pattern, TopoGraph};
pub use plan::{ChannelRank, CommGraphs, CommPlan, NodeSearch, RankInfo};
pub use settings::PlannerSettings;
pub use split::{JobPlan, SplitSpec};
pub use topo;
