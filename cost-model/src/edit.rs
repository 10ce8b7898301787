//! Topology edits for what-if studies.
