//! The calibrated model against the calibration set, and ACCURACY.md kept equal to the report.

use cost_model::accuracy::{accuracy_report, median_max, score, Scored, BANDS};
use cost_model::calibration::ROWS;

/// Where the compute model's section (its own crate's report) starts in ACCURACY.md.
const COMPUTE_SECTION: &str = "\n# Accuracy of the compute model";

#[test]
fn accuracy_md_is_the_generated_report() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../ACCURACY.md");
    let file = std::fs::read_to_string(path).unwrap_or_default();
    let split = file.find(COMPUTE_SECTION).unwrap_or(file.len());
    let (on_disk, rest) = file.split_at(split);
    let now = accuracy_report();
    if on_disk != now {
        if std::env::var("UPDATE_ACCURACY").is_ok() {
            std::fs::write(path, now + rest).unwrap();
        } else {
            panic!("ACCURACY.md is stale: regenerate with `UPDATE_ACCURACY=1 cargo test -p cost-model --test accuracy`");
        }
    }
}

fn band(b: usize) -> Vec<&'static Scored> {
    score().iter().filter(|s| s.band() == b).collect()
}

fn med(v: &[&Scored], e: fn(&Scored) -> f64) -> f64 {
    median_max(&v.iter().map(|s| e(s)).collect::<Vec<_>>()).0
}

#[test]
fn every_row_is_scored_and_fitted_calibration_beats_nccl_mode() {
    let rows = score();
    assert_eq!(rows.len(), ROWS.len());
    let all: Vec<&Scored> = rows.iter().collect();
    assert!(med(&all, Scored::err_cal) < med(&all, Scored::err_nccl));
    // Fitted to all rows, the large sizes are within a few percent.
    assert!(med(&band(3), Scored::err_cal) < 3.0);
}

/// The headline (leave-one-system-out) medians per band stay where they are today: >= 512 MB
/// within 4% and below NCCL mode's, 16-512 MB within 10% and < 64 KB within 25% and below NCCL
/// mode's (the accuracy targets); 64 KB - 16 MB within 20% and below NCCL mode's. A change that
/// loses ground fails here.
#[test]
fn held_out_medians_per_band() {
    let big = band(3);
    let (h, n) = (med(&big, Scored::err_held_out), med(&big, Scored::err_nccl));
    println!("{}: held out {h:.1}%, NCCL mode {n:.1}%", BANDS[3]);
    assert!(h <= 4.0 && h < n);
    let mid = band(2);
    let (h, n) = (med(&mid, Scored::err_held_out), med(&mid, Scored::err_nccl));
    println!("{}: held out {h:.1}%, NCCL mode {n:.1}%", BANDS[2]);
    assert!(h <= 10.0 && h < n);
    let ramp = band(1);
    let (h, n) = (
        med(&ramp, Scored::err_held_out),
        med(&ramp, Scored::err_nccl),
    );
    println!("{}: held out {h:.1}%, NCCL mode {n:.1}%", BANDS[1]);
    assert!(h <= 20.0 && h < n);
    let small = band(0);
    let (h, n) = (
        med(&small, Scored::err_held_out),
        med(&small, Scored::err_nccl),
    );
    println!("{}: held out {h:.1}%, NCCL mode {n:.1}%", BANDS[0]);
    assert!(h <= 25.0 && h < n);
}

#[test]
fn fit_is_deterministic_and_physical() {
    let a = cost_model::calibrated::fit(ROWS);
    let b = cost_model::calibrated::fit(ROWS);
    assert_eq!(a, b);
    for c in &a.classes {
        for e in c.eta {
            assert!((0.3..=1.6).contains(&e), "{:?}", c);
        }
        // A fixed time no shorter than nothing, a fill time inside the grid (0.5 µs .. 8 ms),
        // a node exponent between constant and linear, a stage size inside its grid (1 KiB ..
        // 16 MiB), a tree level of at most 64 MiB.
        assert!(c.lat_fixed >= 0.0, "{:?}", c);
        assert!(
            c.fill_us == 0.0 || (0.5..=8192.0).contains(&c.fill_us),
            "{:?}",
            c
        );
        assert!((0.0..=1.0).contains(&c.node_exp), "{:?}", c);
        assert!(
            c.stage_bytes == 0.0 || (1024.0..=16.0 * 1048576.0).contains(&c.stage_bytes),
            "{:?}",
            c
        );
        assert!((0.0..=64.0 * 1048576.0).contains(&c.level_bytes), "{:?}", c);
        // Standard errors are finite and non-negative.
        for e in c.se.eta.iter().chain([&c.se.lat_fixed, &c.se.level_bytes]) {
            assert!(e.is_finite() && *e >= 0.0, "{:?}", c);
        }
    }
    // The fitted classes with data have their own efficiency and a latency shared by all.
    let lat: Vec<f64> = a.classes.iter().map(|c| c.lat_fixed).collect();
    assert!(lat.windows(2).all(|w| w[0] == w[1]));
    // The NVLink single-node classes share one stage size, and it is fitted (the set has
    // single-node rows on the ramp).
    use cost_model::calibrated::HwClass;
    let stage: Vec<f64> = [
        HwClass::NvSwitchAmpere,
        HwClass::NvSwitchHopper,
        HwClass::NvLinkDirect,
    ]
    .iter()
    .map(|&c| a.class(c).stage_bytes)
    .collect();
    assert!(stage.windows(2).all(|w| w[0] == w[1]) && stage[0] > 0.0);
    assert!(a.classes.iter().any(|c| c.se.lat_fixed > 0.0));
}

/// For one algorithm and protocol, calibrated time grows with size (the fill term adds at most
/// the bandwidth time again, or once per level for a tree across nodes, and nothing is
/// subtracted). Where NCCL switches algorithm or protocol
/// the calibrated time may step down: calibrated mode keeps NCCL's choice even where its own
/// costs would rank the candidates differently.
#[test]
fn calibrated_time_is_monotonic_in_size_per_algorithm() {
    use cost_model::calibration::System;
    use cost_model::*;
    for (sys, nodes, ppn, nvls) in [
        (System::DgxH100, 1, 8, true),
        (System::DgxH100, 4, 8, true),
        (System::DgxA100, 2, 8, false),
        (System::Rtx2080TiBridge, 1, 2, false),
    ] {
        let shape = sys.shape(nodes, ppn, nvls);
        let st = TunerSettings::default();
        let cal =
            CostModel::new(&shape, &st, topo::NcclVersion::DEFAULT, Mode::Calibrated).unwrap();
        let mut last: Option<(&str, &str, f64)> = None;
        for k in 3..34 {
            let bytes = 1u64 << k;
            let p = cal
                .predict(Collective::AllReduce, bytes, DataType::Float32, RedOp::Sum)
                .unwrap();
            assert!(p.time_us.is_finite() && p.time_us > 0.0, "{sys:?} {bytes}");
            if let Some((a, pr, t)) = last {
                if (a, pr) == (p.algo, p.proto) {
                    assert!(p.time_us >= t, "{sys:?} {bytes}: {} < {t}", p.time_us);
                }
            }
            last = Some((p.algo, p.proto, p.time_us));
        }
    }
}

/// The calibrated model prices NCCL's choice: the algorithm and protocol never change.
#[test]
fn calibrated_mode_keeps_nccl_selection_on_every_row() {
    use cost_model::calibrated::row_model;
    use cost_model::query::Mode;
    for r in ROWS {
        let (dt, op) = (cost_model::DataType::Float32, cost_model::RedOp::Sum);
        let n = row_model(r, Mode::Nccl)
            .predict(r.coll, r.bytes, dt, op)
            .unwrap();
        let c = row_model(r, Mode::Calibrated)
            .predict(r.coll, r.bytes, dt, op)
            .unwrap();
        assert_eq!((n.algo, n.proto), (c.algo, c.proto), "{}", r.label);
    }
}

/// A row that records its run's algorithm (forced, or a tuner plugin's choice) is priced with
/// that algorithm, and with its protocol when it records one: the selection the row model makes
/// is the recorded one, on every such row.
#[test]
fn rows_are_priced_with_the_algorithm_and_protocol_they_record() {
    use cost_model::calibrated::row_model;
    use cost_model::query::Mode;
    let mut tuned = 0;
    for r in ROWS {
        let Some(a) = r.algo else { continue };
        let (dt, op) = (cost_model::DataType::Float32, cost_model::RedOp::Sum);
        let p = row_model(r, Mode::Nccl)
            .predict(r.coll, r.bytes, dt, op)
            .unwrap();
        assert_eq!(p.algo, a.name(), "{} {}", r.label, r.bytes);
        if let Some(pr) = r.proto {
            assert_eq!(p.proto, pr.name(), "{} {}", r.label, r.bytes);
            tuned += 1;
        }
    }
    // The AWS p5 rows of 4 nodes and more: aws-ofi-nccl's tuner chose for them.
    assert_eq!(tuned, 36);
}

/// One GB200 NVL72 rack, held out (CoreWeave's table, never fitted): calibrated mode within 10%
/// at every size from 1 to 8 GB, where NCCL mode's NVLS bandwidth is 25-48% high.
#[test]
fn one_nvl72_rack_is_within_ten_percent_held_out() {
    use cost_model::accuracy::nvl72_checks;
    let checks = nvl72_checks();
    let one: Vec<_> = checks
        .iter()
        .filter(|c| c.racks == 1 && (1 << 30..=8 << 30).contains(&c.bytes))
        .collect();
    assert_eq!(one.len(), 4);
    for c in one {
        println!(
            "{} B: measured {:.1}, calibrated {:.1}, NCCL {:.1}",
            c.bytes,
            c.measured(),
            c.calibrated,
            c.nccl
        );
        assert!(c.err_cal() < 10.0, "{c:?}");
        assert!(c.err_cal() < c.err_nccl(), "{c:?}");
    }
}

/// NVLSTree across NVL72 racks moves each GPU's data through its rack's NVLink switches as NVLS
/// on one rack does, and over the network besides: in calibrated mode two racks never get more
/// bus bandwidth than one rack at the same size (beyond the busbw factor, 2(n-1)/n, of 144
/// ranks against 72), on either plan of the racks.
#[test]
fn two_nvl72_racks_are_no_faster_than_one() {
    use cost_model::accuracy::nvl72_checks;
    let checks = nvl72_checks();
    let factor = |n: f64| 2.0 * (n - 1.0) / n;
    let scale = factor(144.0) / factor(72.0);
    let mut compared = 0;
    for two in checks.iter().filter(|c| c.racks == 2) {
        let Some(one) = checks.iter().find(|c| c.racks == 1 && c.bytes == two.bytes) else {
            continue;
        };
        for (a, b) in [
            (two.calibrated, one.calibrated),
            (two.calibrated_shared, one.calibrated_shared),
        ] {
            assert!(
                a <= b * scale * (1.0 + 1e-9),
                "{} B: 2 racks {a:.1} > 1 rack {b:.1}",
                two.bytes
            );
        }
        compared += 1;
    }
    assert!(compared >= 4, "sizes with both 1 and 2 racks: {compared}");
}
