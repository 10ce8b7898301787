//! Prints the compute model's accuracy report (ACCURACY.md's compute section) to stdout.

fn main() {
    let rows =
        compute_model::accuracy::measurements::parse(compute_model::accuracy::measurements::CSV)
            .unwrap_or_else(|e| {
                eprintln!("{e}");
                std::process::exit(1)
            });
    let (cases, skipped) = compute_model::accuracy::measurements::gemm_cases(&rows);
    let (scores, fit) = compute_model::accuracy::score_gemms(&cases);
    for s in &scores {
        println!(
            "{:3} {:10} {:45.45} meas {:8.1} implied {:.3} all {:+6.1}% held {:+6.1}%",
            s.case.line,
            s.case.board,
            s.case.label,
            s.case.measured / 1e12,
            s.implied,
            s.all_error(),
            s.held_out_error()
        );
    }
    print!("{}", compute_model::accuracy::report::constants(&fit));
    println!("skipped {skipped:?}");
    print!("{}", compute_model::accuracy::report::gemm_section(&scores));
}
