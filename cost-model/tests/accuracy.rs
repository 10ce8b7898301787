//! The calibrated model against the calibration set, and ACCURACY.md kept equal to the report.

use cost_model::calibrated::{accuracy_report, median_max, score};

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

#[test]
fn calibrated_beats_nccl_mode() {
    let rows = score();
    assert_eq!(rows.len(), cost_model::calibration::ROWS.len());
    let (nccl_med, nccl_max) = median_max(&rows.iter().map(|r| r.err_nccl()).collect::<Vec<_>>());
    let (cal_med, cal_max) = median_max(&rows.iter().map(|r| r.err_cal()).collect::<Vec<_>>());
    println!("median/max abs % error: NCCL {nccl_med:.1}/{nccl_max:.1}, calibrated {cal_med:.1}/{cal_max:.1}");
    assert!(cal_med < nccl_med && cal_max < nccl_max);
    // At 1 GB and above the median is within 5% and every row within 10%.
    let big: Vec<(&str, f64)> = rows
        .iter()
        .filter(|r| !r.is_time && cost_model::calibration::ROWS[r.index].bytes >= 1 << 30)
        .map(|r| (cost_model::calibration::ROWS[r.index].label, r.err_cal()))
        .collect();
    let (m, _) = median_max(&big.iter().map(|b| b.1).collect::<Vec<_>>());
    assert!(m < 5.0, "median error at >= 1 GB is {m}");
    for (label, e) in &big {
        assert!(*e <= 10.0, "{label}: calibrated error {e:.1}% > 10%");
    }
}

#[test]
fn fit_is_deterministic_and_physical() {
    let a = cost_model::calibrated::fit(cost_model::calibration::ROWS);
    let b = cost_model::calibrated::fit(cost_model::calibration::ROWS);
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
    }
}
