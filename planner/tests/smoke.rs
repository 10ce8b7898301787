use planner::search::Searcher;
use planner::{Pattern, PlannerSettings, TopoGraph};

#[test]
fn smoke() {
    for (f, n) in [
        ("dgx-a100.xml", 1),
        ("dgx-a100.xml", 2),
        ("dgx-h100.xml", 1),
        ("dgx-h100.xml", 2),
    ] {
        let s = PlannerSettings::default();
        let path = format!("{}/../topologies/{f}", env!("CARGO_MANIFEST_DIR"));
        let c = topo::Cluster::load(&path, n, &s.topo, None).unwrap();
        let t = &c.nodes[0].topo;
        let mut se = Searcher::new(t, &s);
        let mut ring = TopoGraph::new(0, Pattern::Ring, 1, 32);
        se.compute(&mut ring, None);
        let mut tree = TopoGraph::new(1, Pattern::BalancedTree, ring.n_channels, ring.n_channels);
        se.compute(&mut tree, None);
        let mut nvls = TopoGraph::new(3, Pattern::Nvls, 1, 64);
        se.compute(&mut nvls, None);
        for g in [&ring, &tree, &nvls] {
            eprintln!(
                "{f} x{n}: pattern {} crossNic {} nCh {} bw {}/{} type {}/{} same {} steps {}",
                g.pattern.number(),
                g.cross_nic,
                g.n_channels,
                g.bw_intra,
                g.bw_inter,
                g.type_intra,
                g.type_inter,
                g.same_channels,
                se.steps
            );
            let ng = t.system.count(topo::NodeKind::Gpu);
            for c in 0..g.n_channels as usize {
                eprintln!(
                    "  {:?} {:x?}",
                    g.channel(c, ng),
                    &g.inter.get(c * 2..c * 2 + 2)
                );
            }
        }
    }
}
