//! Print ACCURACY.md (the calibration report) to stdout.
fn main() {
    print!("{}", cost_model::calibrated::accuracy_report());
}
