//! NCCL topology XML in and out, the topology graph NCCL builds from it, and NCCL's paths.
//!
//! Reproduces NCCL 2.30.7 (`src/graph/xml.cc`, `topo.cc`, `paths.cc`, the `ncclTopoSearchInit` part of
//! `search.cc`); older behaviour (2.18-2.29) through [`NcclVersion`]. This crate knows nothing about
//! channel search or cost: those live in `planner` and `cost-model`.
//!
//! ```no_run
//! let cluster = topo::Cluster::load("topologies/dgx-a100.xml", 2, &topo::TopoSettings::default(), None).unwrap();
//! println!("{}", topo::print::system(&cluster.nodes[0].topo).join("\n"));
//! ```

#![forbid(unsafe_code)]

pub mod cluster;
pub mod consts;
pub mod dot;
pub mod error;
pub mod fusion;
pub mod lint;
pub mod path;
pub mod paths;
pub mod print;
pub mod profiles;
pub mod settings;
pub mod system;
pub mod version;
pub mod xml;

pub use cluster::{Cluster, ClusterNode, Completion};
pub use error::{Result, TopoError};
pub use path::{LinkType, PathType};
pub use paths::{GdrMode, Path, Topology};
pub use settings::TopoSettings;
pub use system::{BuildOptions, HostXml, NodeKind, System};
pub use version::NcclVersion;
pub use xml::{XStr, XmlElement};

/// Read and parse a topology (or graph) XML file.
pub fn read_xml(path: &str) -> Result<XmlElement> {
    let text = std::fs::read_to_string(path).map_err(|source| TopoError::Io {
        file: path.to_string(),
        source,
    })?;
    xml::parse(&text, path)
}
