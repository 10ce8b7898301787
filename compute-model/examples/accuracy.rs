//! Prints the compute model's accuracy report (ACCURACY.md's compute section) to stdout; with
//! `--constants`, the fitted parameters as `calibration.rs` holds them instead; with
//! `--breakdown WORKLOAD BOARD`, the modelled time per op of a training step; with
//! `--svg FILE`, also plots measured against predicted throughput (source held out, log-log,
//! the diagonal is a perfect prediction).

use compute_model::accuracy::report;
use plotters::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--breakdown") {
        let (w, board) = (
            args.get(i + 1).ok_or("--breakdown WORKLOAD BOARD")?,
            args.get(i + 2).ok_or("--breakdown WORKLOAD BOARD")?,
        );
        for (op, ms) in compute_model::accuracy::training::breakdown(w, board)? {
            println!("{ms:10.3} ms  {op}");
        }
        return Ok(());
    }
    let scored = report::score()?;
    if args.iter().any(|a| a == "--constants") {
        print!("{}", report::constants(&scored));
        return Ok(());
    }
    print!("{}", report::section(&scored));
    if let Some(i) = args.iter().position(|a| a == "--svg") {
        plot(args.get(i + 1).ok_or("--svg needs a file")?, &scored)?;
    }
    Ok(())
}

fn plot(path: &str, s: &report::Scored) -> Result<(), Box<dyn std::error::Error>> {
    // Each row relative to its own measurement would hide scale; plot throughput normalised to
    // the board's peak for GEMMs and to the measurement's own unit for training, on log axes.
    let gemm: Vec<(f64, f64)> = s
        .gemms
        .iter()
        .map(|g| (g.case.measured / 1e12, g.held_out / 1e12))
        .collect();
    let train: Vec<(f64, f64)> = s
        .training
        .iter()
        .map(|t| (t.case.measured, t.predicted))
        .collect();
    let root = SVGBackend::new(path, (1200, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    for (area, pts, title, unit) in [
        (&left, &gemm, "GEMM throughput", "TFLOP/s"),
        (
            &right,
            &train,
            "Training throughput",
            "tokens/s per GPU or images/s",
        ),
    ] {
        let vals: Vec<f64> = pts
            .iter()
            .flat_map(|p| [p.0, p.1])
            .filter(|v| *v > 0.0)
            .collect();
        let lo = vals.iter().copied().fold(f64::MAX, f64::min) / 1.5;
        let hi = vals.iter().copied().fold(0.0f64, f64::max) * 1.5;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{title}: measured vs predicted (source held out)"),
                ("sans-serif", 15),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc(format!("measured ({unit}, log)"))
            .y_desc(format!("predicted ({unit}, log)"))
            .draw()?;
        chart.draw_series(LineSeries::new(vec![(lo, lo), (hi, hi)], BLACK.mix(0.5)))?;
        let blue = BLUE.mix(0.8);
        chart.draw_series(pts.iter().map(|&p| Cross::new(p, 4, blue.stroke_width(1))))?;
    }
    root.present()?;
    Ok(())
}
