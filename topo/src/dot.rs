//! Graphviz DOT of a topology (petgraph's DOT writer over an undirected view of the links).

use crate::paths::Topology;
use crate::print::node_line;
use petgraph::dot::{Config, Dot};
use petgraph::graph::UnGraph;

/// DOT text: one vertex per node, one edge per pair of opposite links labelled `TYPE bw`.
pub fn to_dot(t: &Topology) -> String {
    let sys = &t.system;
    let mut g: UnGraph<String, String> = UnGraph::new_undirected();
    let idx: Vec<_> = sys
        .graph
        .node_indices()
        .map(|n| g.add_node(node_line(sys.node(n))))
        .collect();
    for e in sys.graph.edge_indices() {
        let (a, b) = sys.graph.edge_endpoints(e).expect("edge of this graph");
        let l = sys.graph[e];
        // Draw each pair of opposite links once; keep one-way links.
        let has_reverse = sys
            .graph
            .edges_connecting(b, a)
            .any(|r| r.weight().ty == l.ty);
        if has_reverse && a.index() > b.index() {
            continue;
        }
        let arrow = if has_reverse { "" } else { " (one way)" };
        g.add_edge(
            idx[a.index()],
            idx[b.index()],
            format!("{} {:.1}{arrow}", l.ty.name(), l.bw),
        );
    }
    format!(
        "{:?}",
        Dot::with_attr_getters(
            &g,
            &[Config::EdgeNoLabel, Config::NodeNoLabel],
            &|_, e| format!("label = \"{}\"", e.weight()),
            &|_, (_, w)| {
                let shape = if w.starts_with("GPU") {
                    "box, style=filled, fillcolor=palegreen"
                } else if w.starts_with("NET") || w.starts_with("NIC") {
                    "box, style=filled, fillcolor=lightblue"
                } else if w.starts_with("CPU") {
                    "ellipse, style=filled, fillcolor=lightgrey"
                } else {
                    "ellipse"
                };
                format!("label = \"{w}\", shape = {shape}")
            },
        )
    )
}
