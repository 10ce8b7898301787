//! Cost-model speed: one query in NCCL mode and in calibrated mode (NCCL's tuners run on every
//! collective), a full nccl-tests table (8 B .. 8 GB, every collective), and a 1..1024-node
//! sweep (plan + model + a 1 GB query).

use cost_model::nccl_tests::sizes;
use cost_model::*;
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;

fn model(nodes: usize) -> CostModel {
    model_in(nodes, Mode::Nccl)
}

fn model_in(nodes: usize, mode: Mode) -> CostModel {
    let s = planner::PlannerSettings::default();
    let path = benches::topology_file("dgx-h100.xml");
    let c = topo::Cluster::load(&path, nodes, &s.topo, None).unwrap();
    let plan = planner::Planner::new(c, s).plan_world().unwrap();
    CostModel::from_plan(&plan, &TunerSettings::default(), mode).unwrap()
}

fn bench(c: &mut Criterion) {
    let m = model(2);
    c.bench_function("cost/one query AllReduce 1 MB (DGX H100 x2)", |b| {
        b.iter(|| {
            m.predict(
                Collective::AllReduce,
                black_box(1 << 20),
                DataType::Float32,
                RedOp::Sum,
            )
            .unwrap()
        })
    });
    // Calibrated mode: NCCL's selection, then the calibrated time (the fit itself runs once per
    // process, when the first calibrated model is built, outside the timed loop).
    let cal = model_in(2, Mode::Calibrated);
    c.bench_function(
        "cost/one query AllReduce 1 MB calibrated (DGX H100 x2)",
        |b| {
            b.iter(|| {
                cal.predict(
                    Collective::AllReduce,
                    black_box(1 << 20),
                    DataType::Float32,
                    RedOp::Sum,
                )
                .unwrap()
            })
        },
    );
    let all = sizes(8, 8 << 30, 2);
    c.bench_function("cost/table 8 B..8 GB x 9 collectives (DGX H100 x2)", |b| {
        b.iter(|| {
            let mut t = 0.0;
            for coll in Collective::ALL {
                for &s in &all {
                    let (_, bytes) = coll.nccl_tests_count(s, DataType::Float32, 16);
                    t += m
                        .predict(coll, bytes, DataType::Float32, RedOp::Sum)
                        .unwrap()
                        .time_us;
                }
            }
            t
        })
    });
    let mut g = c.benchmark_group("cost");
    g.sample_size(10);
    g.bench_function("node sweep 1..1024 (plan + model + query, DGX H100)", |b| {
        b.iter(|| {
            let mut n = 1;
            let mut t = 0.0;
            while n <= 1024 {
                t += model(n)
                    .predict(
                        Collective::AllReduce,
                        1 << 30,
                        DataType::Float32,
                        RedOp::Sum,
                    )
                    .unwrap()
                    .time_us;
                n *= 2;
            }
            t
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
