//! NCCL mode against the hand-derived numbers of docs/worked-examples.md, NCCL's
//! selection rules and the TUNING table format.

use cost_model::calibration::System;
use cost_model::*;
use topo::NcclVersion;

fn model(shape: &CommShape, env: &[(&str, &str)]) -> CostModel {
    let st = TunerSettings::from_lookup(|k| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
    .unwrap();
    CostModel::new(shape, &st, NcclVersion::DEFAULT, Mode::Nccl).unwrap()
}

const AR: usize = Func::AllReduce as usize;

/// (busBw, latency) of AllReduce for an algorithm/protocol: NCCL stores algBw, busBw is
/// algBw * nsteps / nRanks for Ring and NVLS, algBw * 2 for Tree.
fn bus_lat(m: &CostModel, a: Algo, p: Proto) -> (f32, f32) {
    let n = m.shape().n_ranks as f32;
    let alg = m.nccl.bandwidths[AR][a as usize][p as usize];
    let bus = match a {
        Algo::Ring | Algo::Nvls | Algo::NvlsTree => alg * 2.0 * (n - 1.0) / n,
        _ => alg * 2.0,
    };
    (bus, m.nccl.latencies[AR][a as usize][p as usize])
}

fn close(x: f32, y: f32, tol: f32) -> bool {
    (x - y).abs() <= tol
}

#[test]
fn dgx_a100_allreduce_matches_reference_4_5() {
    let m = model(&System::DgxA100.shape(1, 8, false), &[]);
    let cases = [
        (Algo::Ring, Proto::Simple, 240.0, 56.0),
        (Algo::Ring, Proto::Ll128, 220.8, 40.6),
        (Algo::Ring, Proto::Ll, 87.7, 15.0),
        (Algo::Tree, Proto::Simple, 220.8, 64.4),
    ];
    for (a, p, bus, lat) in cases {
        let (b, l) = bus_lat(&m, a, p);
        println!(
            "DGX A100 AllReduce {}/{}: busBw {b:.1} latency {l:.1}",
            a.name(),
            p.name()
        );
        assert!(
            close(b, bus, 0.05),
            "{}/{} busBw {b} != {bus}",
            a.name(),
            p.name()
        );
        assert!(
            close(l, lat, 0.05),
            "{}/{} latency {l} != {lat}",
            a.name(),
            p.name()
        );
    }
    // Stored algorithm bandwidths: Ring Simple 240*8/14, Tree Simple 220.8/2.
    assert!(close(
        m.nccl.bandwidths[AR][Algo::Ring as usize][2],
        137.14,
        0.01
    ));
    assert!(close(
        m.nccl.bandwidths[AR][Algo::Tree as usize][2],
        110.4,
        0.01
    ));
}

#[test]
fn dgx_h100_nvls_and_crossover_match_reference_4_5() {
    let m = model(&System::DgxH100.shape(1, 8, true), &[]);
    let (bus, lat) = bus_lat(&m, Algo::Nvls, Proto::Simple);
    println!("DGX H100 AllReduce NVLS: busBw {bus:.1} latency {lat:.1}");
    assert!(close(bus, 476.0, 0.1), "NVLS busBw {bus}");
    assert_eq!(lat, 25.0);
    let (bus, lat) = bus_lat(&m, Algo::Ring, Proto::Ll);
    assert!(
        close(bus, 141.0, 0.01) && close(lat, 15.0, 0.01),
        "{bus} {lat}"
    );
    // Tree LL128: 31.5 us and algBw 128.8 (balanced tree on one node).
    let tl = m.nccl.latencies[AR][Algo::Tree as usize][1];
    let tb = m.nccl.bandwidths[AR][Algo::Tree as usize][1];
    assert!(close(tl, 31.5, 0.01) && close(tb, 128.8, 0.01), "{tl} {tb}");
    // Crossover Ring LL -> NVLS: 15 + S/80571 = 25 + S/272000 gives S = 1.145 MB.
    let pick = |b: u64| {
        m.predict(Collective::AllReduce, b, DataType::Float32, RedOp::Sum)
            .unwrap()
    };
    let mut cross = 0;
    let mut b = 64 << 10;
    while b < 8 << 20 {
        if pick(b).algo == "NVLS" {
            cross = b;
            break;
        }
        b += 4096;
    }
    println!("DGX H100 Ring LL -> NVLS crossover at {cross} bytes");
    assert!(
        (1_100_000..1_200_000).contains(&cross),
        "crossover at {cross}"
    );
    assert_eq!(
        (pick(cross - 4096).algo, pick(cross - 4096).proto),
        ("Ring", "LL")
    );
    // Tree LL128 never wins on this system.
    for e in 3..34 {
        assert_ne!(pick(1 << e).algo, "Tree");
    }
}

#[test]
fn dgx_a100_two_nodes_bus_bw_uses_bw_intra() {
    // docs/worked-examples.md: 2 nodes x 8 A100, ring 8 x 24: busBw = 8*24 = 192 (nNodes <= 2 uses bwIntra).
    let m = model(&System::DgxA100.shape(2, 8, false), &[]);
    let (bus, _) = bus_lat(&m, Algo::Ring, Proto::Simple);
    let n = 16.0;
    assert!(
        close(bus, 192.0 * 1.0, 0.05) || close(bus * n / (2.0 * (n - 1.0)), 192.0 * n / 30.0, 0.05)
    );
    assert!(close(bus, 192.0, 0.05), "{bus}");
    // Multi-node ring latency: nsteps 30, 2 inter steps at NET Simple 14 (+0 latencyInter),
    // intra steps max(3.4, 3 * net overhead 1.0) = 3.4: 8.4 + 28*3.4 + 2*14 = 131.6.
    let l = m.nccl.latencies[AR][Algo::Ring as usize][2];
    assert!(close(l, 131.6, 0.01), "{l}");
    // The ring plateau multiplies it by 1.4 (sm80) once nBytes/(nChannels*nRanks) >= 64.
    let t_small = m
        .nccl
        .algo_time(Func::AllReduce, Algo::Ring, Proto::Simple, 16 * 16 * 63, 1);
    let t_big = m
        .nccl
        .algo_time(Func::AllReduce, Algo::Ring, Proto::Simple, 16 * 16 * 64, 1);
    assert!(close(t_small - 131.6, 0.0, 0.2), "{t_small}");
    assert!(close(t_big - 131.6 * 1.4, 0.0, 0.2), "{t_big}");
}

#[test]
fn channels_and_threads_follow_topo_get_algo_info() {
    let m = model(&System::DgxA100.shape(1, 8, false), &[]);
    let p = m
        .predict(Collective::AllReduce, 8, DataType::Float32, RedOp::Sum)
        .unwrap();
    // Ring LL: threshold 8*nRanks = 64; channels shrink to 1, threads 512 -> 64, then the
    // 3-warp minimum gives 96.
    assert_eq!(
        (p.algo, p.proto, p.channels, p.threads),
        ("Ring", "LL", 1, 96)
    );
    let p = m
        .predict(
            Collective::AllReduce,
            1 << 30,
            DataType::Float32,
            RedOp::Sum,
        )
        .unwrap();
    // Ring Simple at 1 GB: all 24 channels, 512 threads + one sync warp.
    assert_eq!(
        (p.algo, p.proto, p.channels, p.threads),
        ("Ring", "Simple", 24, 544)
    );
    // busbw at 1 GB approaches 240: time = 56 + 2^30/137142.9.
    assert!(close(p.busbw as f32, 238.3, 0.1), "{}", p.busbw);
    let h = model(&System::DgxH100.shape(1, 8, true), &[]);
    let p = h
        .predict(
            Collective::AllReduce,
            1 << 30,
            DataType::Float32,
            RedOp::Sum,
        )
        .unwrap();
    assert_eq!((p.algo, p.channels, p.threads), ("NVLS", 16, 640));
}

#[test]
fn tie_order_keeps_lower_algorithm_then_protocol() {
    // Make Tree and Ring identical: 1 node, the same graph for both; Tree Simple and Ring Simple
    // then still differ (latency), but with NCCL_PROTO=Simple and equal tables the scan keeps the
    // first (Tree) on a tie. Build the tie directly on the cost table.
    let m = model(&System::DgxA100.shape(1, 8, false), &[]);
    let mut t = [[-1.0f32; 3]; 7];
    t[Algo::Tree as usize][2] = 10.0;
    t[Algo::Ring as usize][0] = 10.0;
    t[Algo::Ring as usize][2] = 10.0;
    let info = m.nccl.algo_info(&t, 1 << 20).unwrap();
    assert_eq!((info.algo, info.proto), (Algo::Tree, Proto::Simple));
    t[Algo::Tree as usize][2] = 10.5;
    let info = m.nccl.algo_info(&t, 1 << 20).unwrap();
    assert_eq!((info.algo, info.proto), (Algo::Ring, Proto::Ll));
}

#[test]
fn nccl_algo_and_proto_lists_restrict_the_choice() {
    let s = System::DgxH100.shape(1, 8, true);
    let m = model(&s, &[("NCCL_ALGO", "^NVLS")]);
    let p = m
        .predict(
            Collective::AllReduce,
            1 << 30,
            DataType::Float32,
            RedOp::Sum,
        )
        .unwrap();
    assert_eq!(p.algo, "Ring");
    let m = model(
        &s,
        &[
            ("NCCL_PROTO", "Simple"),
            ("NCCL_ALGO", "allreduce:tree;allgather:ring"),
        ],
    );
    let p = m
        .predict(Collective::AllReduce, 4096, DataType::Float32, RedOp::Sum)
        .unwrap();
    assert_eq!((p.algo, p.proto), ("Tree", "Simple"));
    // Broadcast only has Ring, which "allreduce:tree" leaves enabled for Broadcast.
    let e = model(
        &s,
        &[
            ("NCCL_ALGO", "allreduce:tree;allgather:nvls"),
            ("NCCL_PROTO", "LL"),
        ],
    )
    .predict(
        Collective::AllGather,
        1 << 20,
        DataType::Float32,
        RedOp::Sum,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("No algorithm/protocol available for function AllGather"),
        "{e}"
    );
    assert!(e.contains("NCCL_PROTO was set to LL"), "{e}");
    // NVLS needs a supported op/type: max on float is not, so Ring takes over at 1 GB.
    let m = model(&s, &[]);
    let p = m
        .predict(
            Collective::AllReduce,
            1 << 30,
            DataType::Float32,
            RedOp::Max,
        )
        .unwrap();
    assert_eq!(p.algo, "Ring");
    // Bad lists are rejected with NCCL's message.
    let st = TunerSettings {
        algo: Some("ring;tree".into()),
        ..Default::default()
    };
    let e = CostModel::new(&s, &st, NcclVersion::DEFAULT, Mode::Nccl)
        .unwrap_err()
        .to_string();
    assert!(e.contains("must have a prefix"), "{e}");
}

#[test]
fn ll128_needs_nvlink_inside_the_node() {
    // PCIe boxes get no LL128 (typeIntra > NVB).
    let m = model(&System::Rtx5090Box.shape(1, 4, false), &[]);
    for f in 0..5 {
        for a in 0..7 {
            assert_eq!(m.nccl.bandwidths[f][a][Proto::Ll128 as usize], 0.0);
        }
    }
    let m = model(&System::DgxA100.shape(1, 8, false), &[]);
    assert!(m.nccl.bandwidths[AR][Algo::Ring as usize][1] > 0.0);
}

#[test]
fn single_rank_is_free_ring_simple() {
    let mut s = System::DgxA100.shape(1, 8, false);
    s.n_ranks = 1;
    s.local_ranks = vec![1];
    let m = model(&s, &[]);
    assert!(m.nccl.tuning_table().is_empty());
    let p = m
        .predict(
            Collective::AllReduce,
            1 << 20,
            DataType::Float32,
            RedOp::Sum,
        )
        .unwrap();
    assert_eq!((p.algo, p.proto, p.time_us), ("Ring", "Simple", 0.0));
}

#[test]
fn version_profiles_change_the_model() {
    let s = System::DgxA100.shape(1, 8, false);
    let v219: NcclVersion = "2.19".parse().unwrap();
    let m = CostModel::new(&s, &TunerSettings::default(), v219, Mode::Nccl).unwrap();
    // <= 2.22: Tree Simple latency 0 + 2*7*28 = 392; Ring LL busBw min(87.7, 240/4) = 60.
    assert!(close(
        m.nccl.latencies[AR][Algo::Tree as usize][2],
        392.0,
        0.01
    ));
    let (bus, _) = bus_lat(&m, Algo::Ring, Proto::Ll);
    assert!(close(bus, 60.0, 0.01), "{bus}");
    // No PAT column in the table before 2.23: two blocks of three algorithms.
    assert_eq!(m.nccl.tuning_table().len(), 2 * 8);
    assert_eq!(model(&s, &[]).nccl.tuning_table().len(), 3 * 8);
}

#[test]
fn tuning_table_snapshot_dgx_a100() {
    let m = model(&System::DgxA100.shape(1, 8, false), &[]);
    let mut lines = m.nccl.tuning_table();
    lines.push(m.nccl.thread_thresholds_line());
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn tuning_table_snapshot_dgx_h100_two_nodes() {
    let m = model(&System::DgxH100.shape(2, 8, true), &[]);
    insta::assert_snapshot!(m.nccl.tuning_table().join("\n"));
}

#[test]
fn the_fp8_ring_penalty_steers_the_choice_but_is_not_the_time() {
    // NCCL 2.30 (src/graph/tuning.cc, ncclTopoGetAlgoTime) multiplies a ring's time by 1024
    // for fp8 data over more than 8 ranks, so that another algorithm wins where one exists;
    // where the ring is still chosen (Reduce, Broadcast), it runs in the ring's time.
    let m = model(&System::DgxA100.shape(2, 8, false), &[]);
    for coll in [Collective::Reduce, Collective::Broadcast] {
        let op = RedOp::Sum;
        let f8 = m.predict(coll, 3000, DataType::Float8e4m3, op).unwrap();
        let i8 = m.predict(coll, 3000, DataType::Int8, op).unwrap();
        assert_eq!((f8.algo, f8.proto), (i8.algo, i8.proto));
        assert_eq!(f8.algo, "Ring");
        assert!(
            f8.time_us > 0.0 && f8.time_us == i8.time_us,
            "{} vs {}",
            f8.time_us,
            i8.time_us
        );
    }
    let table = m
        .nccl
        .cost_table(Func::Reduce, 3000, DataType::Float8e4m3, RedOp::Sum, 1);
    let plain = m
        .nccl
        .algo_time(Func::Reduce, Algo::Ring, Proto::Ll, 3000, 1);
    assert_eq!(
        table[Algo::Ring as usize][Proto::Ll as usize],
        plain * 1024.0
    );
}
