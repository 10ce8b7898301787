//! The compute model against the published measurements, ACCURACY.md's compute section kept
//! equal to the report, and the constants in `calibration.rs` kept equal to the fit.

use compute_model::accuracy::report::{self, HEADING};
use compute_model::calibration::{Class, CLASS_EFFICIENCY, GEMM_EFFICIENCY};

/// Where the hand-run section after the compute model's starts in ACCURACY.md: published
/// multi-node runs predicted by running the jobs (`scripts/accuracy-at-scale.sh`), too long to
/// run in a test.
const AT_SCALE_SECTION: &str = "\n# Training runs at scale";

#[test]
fn accuracy_md_has_the_generated_compute_section() {
    let s = report::score().unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../ACCURACY.md");
    let file = std::fs::read_to_string(path).unwrap_or_default();
    let at = file.find(&format!("\n{HEADING}")).map(|i| i + 1);
    let (before, rest) = file.split_at(at.unwrap_or(file.len()));
    let end = rest.find(AT_SCALE_SECTION).unwrap_or(rest.len());
    let (on_disk, after) = rest.split_at(end);
    let now = report::section(&s);
    if on_disk != now {
        if std::env::var("UPDATE_ACCURACY").is_ok() {
            let sep = if at.is_some() { "" } else { "\n" };
            std::fs::write(path, format!("{before}{sep}{now}{after}")).unwrap();
        } else {
            panic!("ACCURACY.md's compute section is stale: regenerate with `UPDATE_ACCURACY=1 cargo test -p compute-model --test accuracy`");
        }
    }
}

#[test]
fn calibration_constants_are_the_fit() {
    let s = report::score().unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 6e-4;
    assert_eq!(GEMM_EFFICIENCY.len(), s.gemm_fit.by_arch.len());
    for &(arch, class, e) in GEMM_EFFICIENCY {
        let fit = s.gemm_fit.by_arch[&(arch, class)];
        assert!(
            close(e, fit),
            "{arch:?} {class:?}: {e} in calibration.rs, fit {fit}; regenerate with --constants"
        );
    }
    assert_eq!(CLASS_EFFICIENCY.len(), s.gemm_fit.by_class.len());
    for &(class, e) in CLASS_EFFICIENCY {
        assert!(close(e, s.gemm_fit.by_class[&class]), "{class:?}");
    }
}

/// The fitted fractions are physical: a GEMM reaches between a third of peak and peak (boards
/// power-limited below their boost clock sit low).
#[test]
fn fitted_parameters_are_physical() {
    for &(arch, class, e) in GEMM_EFFICIENCY {
        assert!((0.3..=1.06).contains(&e), "{arch:?} {class:?} {e}");
        assert_ne!(class, Class::Vector);
    }
}

/// Where the model stands today on rows it was not fitted to; a change that loses ground fails.
/// Training rows are priced with no parameter fitted to them: kernels at their own speed (the
/// GEMM fit), attention at its library's, launches at the host's time per op. Their target is
/// 10% (ACCURACY.md); what the kernel model does not yet see of a training step (ACCURACY.md's
/// largest errors) leaves them at about 33% today, which this bound holds.
#[test]
fn held_out_errors_stay_where_they_are() {
    let s = report::score().unwrap();
    let gemm = report::gemm_target(&s);
    let training = report::training_target(&s);
    println!("GEMM >= 2048 held out {gemm:.1}%, training {training:.1}%");
    assert!(gemm <= 10.0, "{gemm}");
    assert!(training <= 33.0, "{training}");
    // Every evaluable row is scored: 124 GEMM rows, 32 training rows.
    assert_eq!(s.gemms.len(), 124);
    assert_eq!(s.training.len(), 32);
}

/// The sets kept out of the fit: every row of `checks.csv` is priced (none falls through to a
/// default board), and the model stays within the GEMM target on them.
#[test]
fn sets_kept_out_of_the_fit_check_it() {
    let s = report::score().unwrap();
    assert!(s.checks_skipped.is_empty(), "{:?}", s.checks_skipped);
    assert_eq!(s.checks.len(), 62);
    let checks = report::checks_target(&s);
    println!("GEMM on the sets kept out of the fit: median {checks:.1}%");
    assert!(checks <= 10.0, "{checks}");
    // ResNet-50 on one GPU (NVIDIA's tables and Lambda's runs), where the model stands today
    // (39%; the target is 10%).
    assert_eq!(s.training_checks.len(), 18);
    let training = report::training_checks_target(&s);
    println!("training on the sets kept out of the fit: median {training:.1}%");
    assert!(training <= 40.0, "{training}");
}
