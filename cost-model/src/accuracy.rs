//! How well each mode predicts the calibration set: every row priced by NCCL mode, by the
//! calibrated model fitted to all rows, fitted without the row's system (leave-one-system-out)
//! and fitted without the row's publication (leave-one-source-out), and the report ACCURACY.md
//! is generated from.

use crate::calibrated::{fit, fitted, row_model, Fit, HwClass, FAMILIES};
use crate::calibration::{Measured, Row, System, ROWS};
use crate::query::Mode;
use serde::Serialize;
use statrs::statistics::{Data, Median, OrderStatistics};
use std::sync::OnceLock;
use topo::NcclVersion;

mod nvl72;
pub use nvl72::{nvl72_checks, nvl72_section, nvl72_summary, Nvl72Check};

/// A calibration row priced by both modes.
#[derive(Debug, Clone, Serialize)]
pub struct Scored {
    /// Row index in `ROWS`.
    pub index: usize,
    /// Class.
    pub class: HwClass,
    /// Measured value (busbw GB/s or time µs).
    pub measured: f64,
    /// Whether the value is a time (otherwise busbw).
    pub is_time: bool,
    /// NCCL's choice.
    pub algo: String,
    /// NCCL mode.
    pub nccl: f64,
    /// Calibrated mode.
    pub calibrated: f64,
    /// Calibrated mode fitted without this row's system (leave-one-system-out).
    pub held_out: f64,
    /// Calibrated mode fitted without any row of this row's source (leave-one-source-out).
    pub held_src: f64,
}

impl Scored {
    /// Absolute % error of NCCL mode.
    pub fn err_nccl(&self) -> f64 {
        100.0 * (self.nccl - self.measured).abs() / self.measured
    }
    /// Absolute % error of calibrated mode.
    pub fn err_cal(&self) -> f64 {
        100.0 * (self.calibrated - self.measured).abs() / self.measured
    }
    /// Absolute % error of the held-out fit.
    pub fn err_held_out(&self) -> f64 {
        100.0 * (self.held_out - self.measured).abs() / self.measured
    }
    /// Absolute % error of the leave-one-source-out fit.
    pub fn err_held_src(&self) -> f64 {
        100.0 * (self.held_src - self.measured).abs() / self.measured
    }
    /// The row's size band (`BANDS`).
    pub fn band(&self) -> usize {
        band_of(ROWS[self.index].bytes)
    }
}

/// Size bands of the report: latency-bound, pipeline ramp, bandwidth-bound, asymptotic.
pub const BANDS: [&str; 4] = ["< 64 KB", "64 KB - 16 MB", "16 MB - 512 MB", ">= 512 MB"];

/// The band of a size (nccl-tests size column).
pub fn band_of(bytes: u64) -> usize {
    match bytes {
        b if b < 64 << 10 => 0,
        b if b < 16 << 20 => 1,
        b if b < 512 << 20 => 2,
        _ => 3,
    }
}

static SCORED: OnceLock<Vec<Scored>> = OnceLock::new();

/// Score every calibration row with both modes, with a leave-one-system-out fit and with a
/// leave-one-source-out fit (computed once per process; one fit per held-out group).
pub fn score() -> &'static [Scored] {
    SCORED.get_or_init(score_rows)
}

fn score_rows() -> Vec<Scored> {
    use std::collections::HashMap;
    let full = fitted();
    let mut by_system: HashMap<(System, bool, &str), Fit> = HashMap::new();
    let mut by_source: HashMap<&str, Fit> = HashMap::new();
    let mut out = Vec::new();
    for (i, r) in ROWS.iter().enumerate() {
        if r.coll.func().is_none() {
            continue;
        }
        let nccl = row_model(r, Mode::Nccl);
        let dt = crate::DataType::Float32;
        let op = crate::RedOp::Sum;
        let Ok(pn) = nccl.predict(r.coll, r.bytes, dt, op) else {
            continue;
        };
        let with = |fit: &Fit| {
            let mut m = row_model(r, Mode::Calibrated);
            m.calibration.params = fit.class(HwClass::of(m.shape()));
            m.predict(r.coll, r.bytes, dt, op)
                .expect("same selection as NCCL mode")
        };
        let pc = with(full);
        let held = by_system
            .entry((r.system.hardware(), r.nodes > 1, r.source))
            .or_insert_with(|| {
                let others: Vec<Row> = ROWS
                    .iter()
                    .filter(|o| !same_system(o, r))
                    .copied()
                    .collect();
                fit(&others)
            });
        let ph = with(held);
        let held_src = by_source.entry(source_key(r.source)).or_insert_with(|| {
            let others: Vec<Row> = ROWS
                .iter()
                .filter(|o| source_key(o.source) != source_key(r.source))
                .copied()
                .collect();
            fit(&others)
        });
        let ps = with(held_src);
        let (measured, is_time, vn, vc, vh, vs) = match r.measured {
            Measured::BusBw(b) => (b, false, pn.busbw, pc.busbw, ph.busbw, ps.busbw),
            Measured::TimeUs(t) => (t, true, pn.time_us, pc.time_us, ph.time_us, ps.time_us),
        };
        out.push(Scored {
            index: i,
            class: HwClass::of(nccl.shape()),
            measured,
            is_time,
            algo: format!("{}/{}", pn.algo, pn.proto),
            nccl: vn,
            calibrated: vc,
            held_out: vh,
            held_src: vs,
        });
    }
    out
}

/// The publication a source string names: the repository, or the repository and issue/PR
/// number (one vendor guide's several result files are one source).
pub fn source_key(source: &str) -> &str {
    let mut ends = source.match_indices(' ').map(|(i, _)| i);
    let first = ends.next().unwrap_or(source.len());
    let rest = &source[first..];
    if rest.starts_with(" issue ") || rest.starts_with(" PR ") {
        let second = ends.next().unwrap_or(source.len());
        let third = ends.next().unwrap_or(source.len());
        let _ = second;
        &source[..third]
    } else {
        &source[..first]
    }
}

fn same_system(a: &Row, b: &Row) -> bool {
    a.system.hardware() == b.system.hardware()
        && (a.nodes > 1) == (b.nodes > 1)
        && a.source == b.source
}

/// Median and maximum of a list of errors.
pub fn median_max(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut d = Data::new(v.to_vec());
    (d.median(), d.percentile(100))
}

/// What the calibration set covers: rows, systems (as published), NCCL releases stated, sources
/// (publications), collectives, multi-node rows, size bands.
#[derive(Debug, Clone, Serialize)]
pub struct Coverage {
    /// Rows.
    pub rows: usize,
    /// Distinct systems as published (labels).
    pub systems: usize,
    /// Distinct hardware systems per source, single- and multi-node apart (the groups
    /// leave-one-system-out holds out).
    pub system_groups: usize,
    /// Distinct NCCL releases stated.
    pub releases: Vec<&'static str>,
    /// Distinct sources (`source_key`).
    pub sources: usize,
    /// Rows that are not AllReduce.
    pub non_allreduce: usize,
    /// Multi-node rows.
    pub multi_node: usize,
    /// Rows per band (`BANDS`).
    pub per_band: [usize; 4],
}

/// The coverage of the calibration set.
pub fn coverage() -> Coverage {
    let mut labels: Vec<&str> = ROWS.iter().map(|r| r.label).collect();
    labels.sort();
    labels.dedup();
    let mut releases: Vec<&'static str> = ROWS.iter().filter_map(|r| r.nccl).collect();
    releases.sort_by_key(|v| v.parse::<NcclVersion>().ok());
    releases.dedup();
    let mut sources: Vec<&str> = ROWS.iter().map(|r| source_key(r.source)).collect();
    sources.sort();
    sources.dedup();
    let mut groups: Vec<(String, bool, &str)> = ROWS
        .iter()
        .map(|r| (r.system.hardware().name(), r.nodes > 1, r.source))
        .collect();
    groups.sort();
    groups.dedup();
    let mut per_band = [0; 4];
    for r in ROWS {
        per_band[band_of(r.bytes)] += 1;
    }
    Coverage {
        rows: ROWS.len(),
        systems: labels.len(),
        system_groups: groups.len(),
        releases,
        sources: sources.len(),
        non_allreduce: ROWS
            .iter()
            .filter(|r| r.coll != crate::types::Collective::AllReduce)
            .count(),
        multi_node: ROWS.iter().filter(|r| r.nodes > 1).count(),
        per_band,
    }
}

/// ACCURACY.md, generated from the calibration set (a test keeps the checked-in file equal).
pub fn accuracy_report() -> String {
    let rows = score();
    let mut s = intro(&coverage());
    s += &held_out_tables(rows);
    s += &limits();
    s += &class_table(rows);
    s += &nvl72_section();
    s += &rows_table(rows);
    s += &parameters(fitted());
    s += &systems();
    s
}

/// Median and maximum of one error over some scored rows, as the tables print them.
fn mm(sel: &[&Scored], e: fn(&Scored) -> f64) -> String {
    let (m, x) = median_max(&sel.iter().map(|x| e(x)).collect::<Vec<_>>());
    format!("{m:.1}% / {x:.1}%")
}

/// The title, what the columns mean and what the data covers.
fn intro(cov: &Coverage) -> String {
    let mut s = String::new();
    s += "# Accuracy of the cost model\n\n";
    s += "Generated by `cargo run -p cost-model --example accuracy` from the calibration set in\n";
    s += "`cost-model/src/calibration.rs` (published nccl-tests results, each row with its source).\n";
    s += "A test fails when this file and the generated report differ. The plot `docs/accuracy.svg`\n";
    s += "comes from the same run (`-- --svg docs/accuracy.svg`).\n\n";
    s += "- **NCCL mode**: NCCL's own tuning model (the NCCL release of the row when it is stated and 2.18+, else 2.30.7).\n";
    s += "- **Calibrated**: NCCL's selection, with times from the calibrated model (`cost-model/src/calibrated.rs`).\n";
    s += "  - **system held out** (the headline): fitted without any row of the same system and source (leave-one-system-out): how it does on hardware it has not seen.\n";
    s += "  - **source held out**: fitted without any row of the same publication (leave-one-source-out; one vendor guide's result files are one source).\n";
    s += "  - **fitted to all**: fitted to every row, the row itself included (what `--mode calibrated` uses).\n\n";
    s += "Errors are absolute percentages of busbw (GB/s), or of the time (µs) for rows published as times.\n\n";
    s += &format!(
        "Data: {} rows, {} systems as published ({} held-out groups: hardware x single/multi-node x source), {} sources, NCCL releases stated: {}; {} multi-node rows, {} rows not AllReduce; rows per band: {}.\n\n",
        cov.rows,
        cov.systems,
        cov.system_groups,
        cov.sources,
        cov.releases.join(", "),
        cov.multi_node,
        cov.non_allreduce,
        BANDS
            .iter()
            .zip(cov.per_band)
            .map(|(b, n)| format!("{b}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    s
}

/// Errors per size band in every column, the targets and the largest held-out errors.
fn held_out_tables(rows: &[Scored]) -> String {
    let mut s = String::new();
    s += "## Measurements the fit has not seen\n\n";
    s += "Median / maximum absolute error per size band.\n\n";
    s += "| size band | n | NCCL mode | calibrated, system held out | calibrated, source held out | calibrated, fitted to all |\n";
    s += "|---|---|---|---|---|---|\n";
    for b in 0..=BANDS.len() {
        let sel: Vec<&Scored> = rows
            .iter()
            .filter(|x| b == BANDS.len() || x.band() == b)
            .collect();
        s += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            BANDS.get(b).copied().unwrap_or("all sizes"),
            sel.len(),
            mm(&sel, Scored::err_nccl),
            mm(&sel, Scored::err_held_out),
            mm(&sel, Scored::err_held_src),
            mm(&sel, Scored::err_cal),
        );
    }
    let band_rows = |b: usize| -> Vec<&Scored> { rows.iter().filter(|x| x.band() == b).collect() };
    let med = |sel: &[&Scored], e: fn(&Scored) -> f64| {
        median_max(&sel.iter().map(|x| e(x)).collect::<Vec<_>>())
    };
    let yes = |ok: bool| if ok { "met" } else { "not met" };
    let (big, mid, small) = (band_rows(3), band_rows(2), band_rows(0));
    let (bh, bx) = med(&big, Scored::err_held_out);
    let bn = med(&big, Scored::err_nccl).0;
    let mh = med(&mid, Scored::err_held_out).0;
    let sh = med(&small, Scored::err_held_out).0;
    let sn = med(&small, Scored::err_nccl).0;
    s += "\nTargets on the system-held-out column:\n\n";
    s += "| target | value | |\n|---|---|---|\n";
    s += &format!(
        "| >= 512 MB: median <= 4% and below NCCL mode's ({bn:.1}%) | {bh:.1}% | {} |\n",
        yes(bh <= 4.0 && bh < bn)
    );
    s += &format!(
        "| >= 512 MB: maximum <= 15% | {bx:.1}% | {} |\n",
        yes(bx <= 15.0)
    );
    s += &format!(
        "| 16 MB - 512 MB: median <= 10% | {mh:.1}% | {} |\n",
        yes(mh <= 10.0)
    );
    s += &format!(
        "| < 64 KB: median <= 25% and below NCCL mode's ({sn:.1}%) | {sh:.1}% | {} |\n",
        yes(sh <= 25.0 && sh < sn)
    );
    let mut worst: Vec<&Scored> = rows.iter().collect();
    worst.sort_by(|a, b| b.err_held_out().total_cmp(&a.err_held_out()));
    s += "\nLargest system-held-out errors: ";
    s += &worst
        .iter()
        .take(6)
        .map(|x| {
            let r = &ROWS[x.index];
            format!(
                "#{} {} {} {:.0}%",
                x.index + 1,
                r.label,
                crate::calibration::size_label(r.bytes),
                x.err_held_out()
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    s += ".\n";
    s
}

/// What the model leaves out, and the plot.
fn limits() -> String {
    let mut s = String::new();
    s += "\nWhat the model leaves out, and where the largest held-out errors come from:\n\n";
    s += "- Network transports: NCCL's per-hop network latencies are kept, so a slower transport's small-message time (AWS EFA, 68 µs at 2 nodes; GCP's TCP-offload GPUDirect-TCPXO, 123 µs) is under-predicted by half or more. The tree-level term follows the NIC bandwidth but has no per-transport latency: held out, TCPXO's mid sizes (32 GB/s at 16 MB on 8x 200G) are priced with the level size of the other systems and come out about twice as fast; the set's only other TCP-offload rows are from the same machine type (below). That run passes GCP's TCPXO environment (`-x ${HOST_VARS}`) without printing it; GCP's published profiles set `NCCL_BUFFSIZE` 8 MiB and a tuner plugin, and either turn NVLS off with `NCCL_ALGO=Ring,Tree` and `NCCL_PROTO=Simple` or allow Simple and LL128 with 128 KiB NVLSTree chunks. The large sizes rule the first out: 339 GB/s at 8 GB is more than a ring can carry over 8x 200G NICs and more than NCCL's own Ring and Tree estimates for two such nodes (192 and 141 GB/s); only NVLSTree (383 GB/s) reaches it. Since the profile's tuner table is not published either, the rows keep NCCL's own choice. A second TCPXO source (dstack's AllGather, Google's LL128 profile) is slower than predicted at mid sizes too (16 MB over-predicted by 45% held out) and within 2.5-3% from 512 MB on.\n";
    s += "- Tuner plugins: the AWS p5 rows ran NCCL 2.27.7 (`NCCL_BUFFSIZE` 8 MiB) with aws-ofi-nccl's tuner, which on a p5.48xlarge with 8 GPUs per node picks the algorithm and protocol from a table of regions in (size, ranks) (`src/tuner/nccl_ofi_regions.cpp`, the same from v1.15 to v1.17) on more than 2 nodes. Those rows record its choice: Tree/LL128 up to about 300 MB, Ring/LL128 to 1-2 GB, then Ring/Simple or NVLSTree/Simple. The measured plateaus change where the regions do (4 nodes: 273-280 GB/s with Ring/LL128 from 256 MB to 1 GB, 348 GB/s with Ring/Simple at 2 GB), and NCCL's own LL128 bandwidth is within 1.2-4.4% of those rings from 1 GB to 2 GB (and 0.1-1.3% at 512 MB on 4 and 8 nodes; 16 nodes' 512 MB row is 12% below it).\n";
    s += "- LL128 across nodes pays no node-level fill, but the p5 rings climb to their LL128 plateau later than that: 4 nodes at 64 MB and 8 nodes at 128 MB come out 42-44% fast held out (4 nodes at 128 MB 9%), and Tree/LL128 at 64-256 MB 13-21% fast. The rings' climb depends on the data per node alone: against the busbw of each node count's largest LL128 size, they reach 0.54-0.56 of it at 16 MB per node (4 and 8 nodes), 0.82-0.83 at 32 MB per node (4, 8 and 16 nodes) and 0.975-0.994 at 64 MB per node. That is the reading of a cost per ring step, whose data is the size over the channels and the ranks; a fill time (the model's ramps, with the fill growing with the node count) climbs far more gradually: from 0.55 at 16 MB per node it would reach only 0.65-0.83 at 64 MB per node. the set's only other LL128 rings across nodes (TCPXO's AllGather on 2 nodes) reach 0.59 of their Simple plateau (188.5 GB/s) at 16 MB per node, like the p5 rings, but 0.41 at 8 MB and 0.25 at 4 MB per node, where the p5 rings have no rows: more than a curve through the p5 points falling as the square of the size would give (0.23 at 8 MB), so the set does not yet settle the curve's form.\n";
    s += "- Scale: AWS p5 at 32 nodes with NVLSTree takes a near-constant 3.4-3.7 ms beyond a 343 GB/s bandwidth time from 512 MB to 8 GB (157 GB/s at 512 MB, 321 at 8 GB). The other sources' NVLSTree rows are all on 2 nodes; with the node-level fill growing with the node count and a tree paying up to its 10 levels' worth below the fill, the 512 MB row comes within 4% held out and 1 GB-8 GB within 1%.\n";
    s += "- PCIe boxes: the bus bandwidth is a fraction of the GPU's PCIe link per path. With GPU peer-to-peer a ring reaches about the link's bandwidth within one socket (RTX 4090s at 24.6-26 GB/s on Gen4) and less across sockets; staged through host memory, about 0.6 of it. The host-memory figure is the CPU's and its memory's, which the model does not see: two one-socket 4-GPU RTX 5090 boxes without P2P reach 35 GB/s (4 of 8 GPUs, on one socket of two Xeon 8480+) and 27 GB/s (EPYC Genoa, sockets not stated) and predict each other to 22-27% (the first run forced 8 channels and 256 threads per block, `NCCL_MIN_NCHANNELS=8 NCCL_NTHREADS=256`, the second ran NCCL's defaults, 2 channels on that ring; the fractions do not depend on the channel count); the first is the row that sets the >= 512 MB maximum (22%), the other above 15% being TCPXO's 1 GB row (18%). A communicator planned from a topology file is priced by the plan's `gpu_p2p` (NCCL's peer-to-peer check over its node's GPUs).\n";
    s += "- One-node pipelines share one stage size: for NVLS (4 stages at 40 GB/s per channel) it gives a shorter fill than the Azure H100 rows at 8-32 MB show (about 10% over-predicted held out), and GB200's 16 MB LL128 row is under-predicted by 16%.\n";
    s += "- The Azure guide's rows come from one process driving every GPU of the node (`-g 8`, in-place busbw, NVLS forced on H100/H200, Ring on GB200); the rows record the forced algorithm, the launch mode is in the shared latency.\n";
    s += "\n![measured vs predicted time per operation, NCCL mode and calibrated with the system held out](docs/accuracy.svg)\n";
    s
}

/// Errors per hardware class.
fn class_table(rows: &[Scored]) -> String {
    let mut s = String::new();
    s += "\nPer hardware class (system held out):\n\n";
    s += "| class | n | NCCL mode | calibrated, system held out | calibrated, source held out |\n";
    s += "|---|---|---|---|---|\n";
    for c in HwClass::ALL {
        let sel: Vec<&Scored> = rows.iter().filter(|x| x.class == c).collect();
        if sel.is_empty() {
            continue;
        }
        s += &format!(
            "| {} | {} | {} | {} | {} |\n",
            c.name(),
            sel.len(),
            mm(&sel, Scored::err_nccl),
            mm(&sel, Scored::err_held_out),
            mm(&sel, Scored::err_held_src),
        );
    }
    s
}

/// Every row with its predictions in each column.
fn rows_table(rows: &[Scored]) -> String {
    let mut s = String::new();
    s += "\n## Rows\n\n";
    s += "| # | system | nodes x GPUs | collective | size | NCCL algo/proto | measured | NCCL mode | err | system held out | err | source held out | err | fitted to all | err | NCCL | source |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for sc in rows {
        let r = &ROWS[sc.index];
        let unit = if sc.is_time { " µs" } else { "" };
        s += &format!(
            "| {} | {} | {}x{} | {} | {} | {} | {:.2}{unit} | {:.2} | {:.1}% | {:.2} | {:.1}% | {:.2} | {:.1}% | {:.2} | {:.1}% | {} | {} |\n",
            sc.index + 1,
            r.label,
            r.nodes,
            r.ppn,
            r.coll.name(),
            crate::calibration::size_label(r.bytes),
            sc.algo,
            sc.measured,
            sc.nccl,
            sc.err_nccl(),
            sc.held_out,
            sc.err_held_out(),
            sc.held_src,
            sc.err_held_src(),
            sc.calibrated,
            sc.err_cal(),
            r.nccl.unwrap_or("-"),
            r.source
        );
    }
    s
}

/// The fitted parameters per class and what they mean.
fn parameters(fit: &Fit) -> String {
    let mut s = String::new();
    s += "\n## Fitted parameters\n\n";
    s += "Fitted to all rows; `±` is one standard error from the least-squares covariance (at the chosen stage size and fill time; 0 where the parameter is not fitted).\n\n";
    s += "| class | rows | lat_fixed (µs) | eta ring | eta tree | eta nvls | eta nvls-tree | eta ring LL128 | eta tree LL128 | stage size (KiB, one node) | fill time (µs, several nodes) | tree level (KiB per channel) | PCIe busbw / link (P2P one socket / P2P across / host one socket / host across) |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    let opt = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
    for p in &fit.classes {
        let eta = |k: usize| {
            if p.se.eta[k] > 0.0 {
                format!("{:.3} ± {:.3}", p.eta[k], p.se.eta[k])
            } else {
                "-".into()
            }
        };
        let multi = p.class == HwClass::MultiNode;
        let stage = if multi || p.stage_bytes <= 0.0 {
            "-".into()
        } else {
            format!("{:.0}", p.stage_bytes / 1024.0)
        };
        let fill = if !multi || p.fill_us <= 0.0 {
            "-".into()
        } else {
            format!("{:.1} x nodes^{:.2}", p.fill_us, p.node_exp)
        };
        let level = if p.level_bytes <= 0.0 {
            "-".into()
        } else {
            format!(
                "{:.0} ± {:.0}",
                p.level_bytes / 1024.0,
                p.se.level_bytes / 1024.0
            )
        };
        s += &format!(
            "| {} | {} | {:.2} ± {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} / {} |\n",
            p.class.name(),
            p.n_rows,
            p.lat_fixed,
            p.se.lat_fixed,
            eta(0),
            eta(1),
            eta(2),
            eta(3),
            eta(4),
            eta(5),
            stage,
            fill,
            level,
            opt(p.pcie_eff[0]),
            opt(p.pcie_eff[1]),
            opt(p.pcie_eff[2]),
            opt(p.pcie_eff[3]),
        );
    }
    s += &format!(
        "\nWhat the parameters mean: `lat_fixed` is the launch and completion time per operation NCCL's model leaves out, shared by all classes (NCCL's own per-step and per-hop latencies are kept); `eta` is the fraction of NCCL's modelled path bandwidth an algorithm family ({}) achieves (protocol and link efficiency; rings and trees with LL128 are families of their own, as NCCL prices LL128 with its own factors; `-`: no rows of that family, NCCL's bandwidth is kept). A Simple transfer, or an LL128 one on one node, whose bandwidth time is `x` takes `x (1 + T / (x + T))` (LL has no chunk pipeline and pays none; across nodes LL128 reaches NCCL's LL128 bandwidth without it, and its efficiency is fitted to its rows of 256 MB and more): about `T` more once `x` is well above the fill time `T`, at most twice `x` below it; a tree across nodes takes `x (1 + T / (x + T / D))` with `D` its levels crossed, up to `D + 1` times `x`, since each level forwards a whole chunk before the next starts where a ring step moves a slice. On one node `T` = stage size x stages / channel bandwidth: the stage size (shared by the NVLink classes, chosen on a grid) is the data a pipeline stage holds per channel before the next runs at full rate, the stages are those a slice crosses (`2 (n - 1)` GPUs for a ring AllReduce, 4 for NVLS: scatter, switch reduce, switch multicast, gather) and the channel bandwidth is the graph's `bwIntra`, so the fill follows the GPU count and link speed of a system never seen. On several nodes `T` = fill time x nodes^exponent, and a tree (Tree, NVLSTree) adds `2 ceil(log2 nodes)` levels, each taking the tree-level data at the graph's per-channel network bandwidth (`bwInter`). PCIe boxes: the bus bandwidth is a fraction of the GPU's PCIe link bandwidth (NCCL's figure, 24 GB/s for Gen4 x16 and 48 for Gen5 x16, so it follows the PCIe generation), one fraction per path: GPU peer-to-peer or staged through host memory (NCCL's SHM transport, e.g. GeForce boards with NVIDIA's driver), the ring within one CPU socket or across sockets (NCCL's path type SYS); each is the median of its rows of 16 MB and more, and a path without rows takes the median of the same kind on either socket count. `±` on the tree level is its least-squares standard error; the stage size and fill time are grid choices. For scale (NCCL 2.30.7): a Simple step is 512 KiB (the 4 MiB buffer of `src/init.cc` over `NCCL_STEPS` = 8), an NVLS chunk 128 KiB (`NCCL_NVLS_CHUNKSIZE`, `src/transport/nvls.cc`), and the 16 NVLS channels of an H100 put 2 MiB of such chunks through each NIC. Times are priced with NCCL 2.30.7's tables whatever release made the selection.\n\n",
        FAMILIES.join(", ")
    );
    s
}

/// How each system's shape was obtained.
fn systems() -> String {
    let mut s = String::new();
    s += "Systems and how their shapes were obtained:\n\n";
    let mut seen: Vec<System> = Vec::new();
    for r in ROWS {
        let hw = r.system.hardware();
        if !seen.contains(&hw) {
            seen.push(hw);
            s += &format!("- {}: {}\n", hw.name(), hw.derivation());
        }
    }
    s
}
