//! Print ACCURACY.md (the calibration report) to stdout; with `--svg FILE`, also plot measured
//! against predicted time per operation for NCCL mode and for the calibrated model with the
//! row's system held out (log-log, the diagonal is a perfect prediction).
use cost_model::accuracy::score;
use cost_model::calibration::ROWS;
use plotters::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    print!("{}", cost_model::accuracy::accuracy_report());
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--svg") {
        let path = args.get(i + 1).ok_or("--svg needs a file")?;
        plot(path)?;
    }
    Ok(())
}

/// Time per operation (µs) from a row's value (busbw GB/s, or the time itself).
fn time_us(index: usize, is_time: bool, v: f64) -> f64 {
    if is_time {
        return v;
    }
    let r = &ROWS[index];
    let factor = r.coll.busbw_factor(r.nodes * r.ppn);
    r.bytes as f64 / (1000.0 * v / factor)
}

fn plot(path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let rows = score();
    let pts = |f: &dyn Fn(&cost_model::accuracy::Scored) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .map(|s| {
                (
                    time_us(s.index, s.is_time, s.measured),
                    time_us(s.index, s.is_time, f(s)),
                )
            })
            .collect()
    };
    let nccl = pts(&|s| s.nccl);
    let held = pts(&|s| s.held_out);
    let all: Vec<f64> = nccl
        .iter()
        .chain(held.iter())
        .flat_map(|p| [p.0, p.1])
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let lo = all.iter().copied().fold(f64::MAX, f64::min) / 1.5;
    let hi = all.iter().copied().fold(0.0f64, f64::max) * 1.5;
    let root = SVGBackend::new(path, (900, 820)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Measured vs predicted time per operation (calibration set)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("measured time (µs, log scale)")
        .y_desc("predicted time (µs, log scale)")
        .draw()?;
    chart
        .draw_series(LineSeries::new(vec![(lo, lo), (hi, hi)], BLACK.mix(0.5)))?
        .label("exact")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.5)));
    let red = RED.mix(0.7);
    chart
        .draw_series(nccl.iter().map(|&p| Circle::new(p, 4, red.stroke_width(1))))?
        .label("NCCL mode")
        .legend(move |(x, y)| Circle::new((x + 9, y), 4, red.stroke_width(1)));
    let blue = BLUE.mix(0.8);
    chart
        .draw_series(held.iter().map(|&p| Cross::new(p, 4, blue.stroke_width(1))))?
        .label("calibrated, system held out")
        .legend(move |(x, y)| Cross::new((x + 9, y), 4, blue.stroke_width(1)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
