//! Planner: the 2-node DGX A100 TP=8/DP=2 job (world + 2 TP + 8 DP communicators, each with its
//! own graph search, as NCCL does at init), the same job on DGX H100 (with NVLS), a
//! 1024-node x 8-GPU world, the world's growth with the node count (1,024 to 65,536 identical
//! DGX A100 hosts: linear, since identical hosts share one search) and one 258-GPU node with
//! all-to-all NVLinks. Searches run NCCL's own step budgets, so these numbers are dominated
//! by how many steps NCCL's search takes.

use benches::{all_to_all_nvlink, topology_file};
use criterion::{criterion_group, criterion_main, Criterion};
use planner::split::parse_dims;
use planner::{Planner, PlannerSettings};
use std::hint::black_box;
use topo::Cluster;

fn bench(c: &mut Criterion) {
    let s = PlannerSettings::default();
    let two = Cluster::load(&topology_file("dgx-a100.xml"), 2, &s.topo, None).unwrap();
    let members = planner::world_members(&two);
    let spec = [parse_dims("tp=8,dp=2").unwrap()];
    c.bench_function("planner/tp8 dp2 job, 2 x dgx-a100 (11 comms)", |b| {
        b.iter(|| {
            black_box(
                Planner::new(two.clone(), s.clone())
                    .plan_job(&members, &spec)
                    .unwrap(),
            )
        })
    });
    let h2 = Cluster::load(&topology_file("dgx-h100.xml"), 2, &s.topo, None).unwrap();
    let h2_members = planner::world_members(&h2);
    c.bench_function("planner/tp8 dp2 job, 2 x dgx-h100 (11 comms, NVLS)", |b| {
        b.iter(|| {
            black_box(
                Planner::new(h2.clone(), s.clone())
                    .plan_job(&h2_members, &spec)
                    .unwrap(),
            )
        })
    });
    c.bench_function("planner/world 2 x dgx-a100", |b| {
        b.iter(|| black_box(Planner::new(two.clone(), s.clone()).plan_world().unwrap()))
    });
    let one = Cluster::load(&topology_file("dgx-a100.xml"), 1, &s.topo, None).unwrap();
    c.bench_function("planner/world 1 x dgx-a100", |b| {
        b.iter(|| black_box(Planner::new(one.clone(), s.clone()).plan_world().unwrap()))
    });
    let h = Cluster::load(&topology_file("dgx-h100.xml"), 1, &s.topo, None).unwrap();
    c.bench_function("planner/world 1 x dgx-h100 (ring, tree, nvls)", |b| {
        b.iter(|| black_box(Planner::new(h.clone(), s.clone()).plan_world().unwrap()))
    });
    // Multi-node NVLink: one GB200 NVL72 rack (18 trays fused into one 72-GPU topology), and
    // two domains of two trays with a TP job inside the domains.
    let rack = Cluster::load(&topology_file("gb200-nvl72-tray.xml"), 18, &s.topo, None).unwrap();
    c.bench_function("planner/world 18 x gb200 tray (one NVL72 clique)", |b| {
        b.iter(|| black_box(Planner::new(rack.clone(), s.clone()).plan_world().unwrap()))
    });
    // Trays' NICs their own (the default) and the tray file's GUIDs on every tray.
    for (guids, label) in [
        (topo::NicGuids::PerHost, "per-tray NICs"),
        (topo::NicGuids::AsFile, "--nic-guids as-file"),
    ] {
        let mut doms =
            Cluster::load(&topology_file("gb200-nvl72-tray.xml"), 4, &s.topo, None).unwrap();
        doms.set_nvl_domains(topo::NvlDomains::Gpus(8)).unwrap();
        doms.nic_guids = guids;
        let dom_members = planner::world_members(&doms);
        c.bench_function(
            &format!("planner/tp8 dp2 job, 2 NVLink domains of 2 gb200 trays, {label}"),
            |b| {
                b.iter(|| {
                    black_box(
                        Planner::new(doms.clone(), s.clone())
                            .plan_job(&dom_members, &spec)
                            .unwrap(),
                    )
                })
            },
        );
        let mut racks =
            Cluster::load(&topology_file("gb200-nvl72-tray.xml"), 36, &s.topo, None).unwrap();
        racks.nic_guids = guids;
        c.bench_function(
            &format!("planner/world 36 x gb200 tray (two NVL72 racks), {label}"),
            |b| b.iter(|| black_box(Planner::new(racks.clone(), s.clone()).plan_world().unwrap())),
        );
    }
    let big = Cluster::load(&topology_file("dgx-a100.xml"), 1024, &s.topo, None).unwrap();
    let mut g = c.benchmark_group("planner-large");
    g.sample_size(10);
    g.bench_function("world 1024 x dgx-a100 (8192 ranks)", |b| {
        b.iter(|| black_box(Planner::new(big.clone(), s.clone()).plan_world().unwrap()))
    });
    g.finish();
    let mut g = c.benchmark_group("planner-scale");
    g.sample_size(10);
    for nodes in [1024, 4096, 16384, 65536] {
        let cl = Cluster::load(&topology_file("dgx-a100.xml"), nodes, &s.topo, None).unwrap();
        g.bench_function(format!("world {nodes} x dgx-a100"), |b| {
            b.iter(|| black_box(Planner::new(cl.clone(), s.clone()).plan_world().unwrap()))
        });
    }
    let text = all_to_all_nvlink(258);
    let xml = std::sync::Arc::new(topo::xml::parse(&text, "a2a.xml").unwrap());
    let hosts = vec![("a2a.xml".to_string(), xml)];
    let a2a = Cluster::from_hosts(&hosts, &s.topo, topo::Completion::default()).unwrap();
    g.bench_function("world 1 x 258 GPUs all-to-all NVLink", |b| {
        b.iter(|| black_box(Planner::new(a2a.clone(), s.clone()).plan_world().unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
