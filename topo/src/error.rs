//! The one error type of the `topo` crate.

use std::fmt;

/// Where in an input something is: file (or `<input>`), 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    /// File name as the user gave it, or `<input>` for in-memory text.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub col: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// Everything that can go wrong while reading or modelling a topology.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// The file could not be read.
    #[error("{file}: {source}")]
    Io {
        /// The path.
        file: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not well-formed XML (or not the XML subset NCCL topology files use).
    #[error("{at}: {msg}")]
    Syntax {
        /// Where.
        at: Location,
        /// What.
        msg: String,
    },
    /// The XML is well-formed but violates what NCCL requires (missing attribute, bad value...).
    #[error("{at}: <{element}> {msg}")]
    Semantic {
        /// Where the element starts.
        at: Location,
        /// Element name.
        element: String,
        /// What is wrong.
        msg: String,
    },
    /// The topology cannot be used as asked (no GPU, unknown GPU model, bad edit...).
    #[error("{0}")]
    Model(String),
    /// A setting (environment variable or command-line value) has a value NCCL would not accept.
    #[error("{name}={value}: {msg}")]
    Setting {
        /// Variable name.
        name: String,
        /// Its value.
        value: String,
        /// Why it is rejected.
        msg: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = TopoError> = std::result::Result<T, E>;
