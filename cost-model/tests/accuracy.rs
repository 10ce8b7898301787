//! The calibrated model against the calibration set, and ACCURACY.md kept equal to the report.

use cost_model::accuracy::{accuracy_report, median_max, score, Scored, BANDS};
use cost_model::calibration::ROWS;

#[test]
fn accuracy_md_is_the_generated_report() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../ACCURACY.md");
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    let now = accuracy_report();
    if on_disk != now {
        if std::env::var("UPDATE_ACCURACY").is_ok() {
            std::fs::write(path, &now).unwrap();
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
/// within 4% and below NCCL mode's (the accuracy target); 16-512 MB within 15% and < 64 KB
/// within 45% and below NCCL mode's (the targets, 10% and 25%, are not reached yet: see
/// ACCURACY.md). A change that loses ground fails here.
#[test]
fn held_out_medians_per_band() {
    let big = band(3);
    let (h, n) = (med(&big, Scored::err_held_out), med(&big, Scored::err_nccl));
    println!("{}: held out {h:.1}%, NCCL mode {n:.1}%", BANDS[3]);
    assert!(h <= 4.0 && h < n);
    let mid = band(2);
    let h = med(&mid, Scored::err_held_out);
    println!("{}: held out {h:.1}%", BANDS[2]);
    assert!(h <= 15.0);
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
    assert!(h <= 45.0 && h < n);
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
        assert!(
            c.gamma <= 1.0 && c.lat_scale > 0.0 && c.lat_fixed >= 0.0,
            "{:?}",
            c
        );
        // More network load on a GPU's PCIe link never makes the network faster.
        assert!(c.net_load_coef >= 0.0, "{:?}", c);
        let (lo, hi) = c.contention_range;
        assert!(lo <= hi && hi <= 1.5, "{:?}", c);
        // Standard errors are finite and non-negative.
        for e in c.se.eta.iter().chain([&c.se.lat_fixed, &c.se.lat_scale]) {
            assert!(e.is_finite() && *e >= 0.0, "{:?}", c);
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
