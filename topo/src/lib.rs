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
pub mod hash;
pub mod lint;
pub mod mnnvl;
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
pub use mnnvl::{FabricInfo, NicGuids, NvlDomains};
pub use path::{LinkType, PathType};
pub use paths::{GdrMode, Path, Topology};
pub use settings::TopoSettings;
pub use system::{BuildOptions, CliqueRank, HostXml, NodeKind, System};
pub use version::NcclVersion;
pub use xml::{XStr, XmlElement};

/// Read and parse a topology (or graph) XML file.
pub fn read_xml(path: &str) -> Result<XmlElement> {
    xml::parse(&read_text(path)?, path)
}

/// Read a topology (or graph) file as text: at most [`MAX_XML_BYTES`], valid UTF-8 (the error
/// names the line and column of the first bad byte).
pub fn read_text(path: &str) -> Result<String> {
    use std::io::Read;
    let io = |source| TopoError::Io {
        file: path.to_string(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_XML_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_XML_BYTES {
        return Err(TopoError::Syntax {
            at: error::Location {
                file: path.to_string(),
                line: 1,
                col: 1,
            },
            msg: format!(
                "larger than {} MiB; not a topology or graph file",
                MAX_XML_BYTES >> 20
            ),
        });
    }
    match String::from_utf8(bytes) {
        Ok(t) => Ok(t),
        Err(e) => {
            let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let good = std::str::from_utf8(good).unwrap_or_default();
            let line = good.matches('\n').count() + 1;
            let col = good.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            Err(TopoError::Syntax {
                at: error::Location {
                    file: path.to_string(),
                    line,
                    col,
                },
                msg: "not valid UTF-8".into(),
            })
        }
    }
}

/// The largest topology or graph file read (the largest real ones are a few MiB).
pub const MAX_XML_BYTES: u64 = 64 << 20;
