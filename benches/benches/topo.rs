//! Topology layer: parse + graph + paths for one 8-GPU node, and a 1024-node cluster of that node
//! (identical hosts share one computed topology, so this should cost about one node, not 1024);
//! `topo check` and parse + paths on a 258-GPU node with all-to-all NVLinks (66,306 links).

use benches::{all_to_all_nvlink, topology_file};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::Arc;
use topo::{Cluster, Completion, TopoSettings};

fn bench(c: &mut Criterion) {
    let s = TopoSettings::default();
    for name in ["dgx-a100.xml", "dgx-h100.xml"] {
        let text = std::fs::read_to_string(topology_file(name)).unwrap();
        c.bench_function(&format!("topo/parse+paths 1 node {name}"), |b| {
            b.iter(|| {
                let xml = Arc::new(topo::xml::parse(black_box(&text), name).unwrap());
                let hosts = vec![(name.to_string(), xml)];
                black_box(Cluster::from_hosts(&hosts, &s, Completion::default()).unwrap())
            })
        });
    }
    let text = std::fs::read_to_string(topology_file("dgx-a100.xml")).unwrap();
    c.bench_function("topo/parse+paths 1024 nodes dgx-a100", |b| {
        b.iter(|| {
            let xml = Arc::new(topo::xml::parse(black_box(&text), "dgx-a100.xml").unwrap());
            let hosts: Vec<_> = (0..1024)
                .map(|_| ("dgx-a100.xml".to_string(), xml.clone()))
                .collect();
            black_box(Cluster::from_hosts(&hosts, &s, Completion::default()).unwrap())
        })
    });
    let big = all_to_all_nvlink(258);
    let mut g = c.benchmark_group("topo-large");
    g.sample_size(10);
    g.bench_function("check 258 GPUs all-to-all NVLink", |b| {
        b.iter(|| {
            let root = topo::xml::parse(black_box(&big), "a2a.xml").unwrap();
            black_box(topo::lint::check(&big, &root, "a2a.xml"))
        })
    });
    g.bench_function("parse+paths 258 GPUs all-to-all NVLink", |b| {
        b.iter(|| {
            let xml = Arc::new(topo::xml::parse(black_box(&big), "a2a.xml").unwrap());
            let hosts = vec![("a2a.xml".to_string(), xml)];
            black_box(Cluster::from_hosts(&hosts, &s, Completion::default()).unwrap())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
