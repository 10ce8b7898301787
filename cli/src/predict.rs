//! `ncclsim predict`: nccl-tests-shaped prediction tables (table, CSV, JSON) and busbw plots.

use clap::Args;
use cost_model::nccl_tests::{self, TableInfo};
use cost_model::{Collective, CostModel, DataType, Mode, Prediction, RedOp};
use plotters::prelude::*;
use topo::XmlElement;

/// Arguments shared by `predict` and `whatif`: where the system comes from and the NCCL settings.
#[derive(Args, Clone)]
pub struct SystemArgs {
    /// Topology XML file of one node.
    #[arg(long)]
    pub topo: String,
    /// Number of identical nodes.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = crate::parse_nodes)]
    pub nodes: usize,
    /// GPU model to complete skeleton files with.
    #[arg(long)]
    pub gpu: Option<String>,
    /// NIC speed for NIC slots without <net> (e.g. 200G).
    #[arg(long)]
    pub nic_speed: Option<String>,
    /// NCCL release to reproduce (2.18 .. 2.30).
    #[arg(long)]
    pub nccl_version: Option<String>,
    /// NCCL settings, e.g. --env NCCL_ALGO=Ring (NCCL_* variables of the environment are read too).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// GPUs per NVLink domain spanning nodes (multi-node NVLink, e.g. 72 for an NVL72 rack).
    /// Default: nodes whose NVLinks go to an external NVSwitch fabric (GB200/GB300 trays) form
    /// domains of up to 72 GPUs; other nodes none. `--env NCCL_MNNVL_ENABLE=0` turns it off.
    #[arg(long = "nvl-domain", value_name = "GPUS")]
    pub nvl_domain: Option<usize>,
    /// Identity of the NICs of nodes built from one file when an NVLink domain's nodes are
    /// fused: per-host (default: each node's NICs are its own, as on real trays) or as-file (the
    /// file's `guid`s on every node, as NCCL reads one NCCL_TOPO_FILE given to every host; equal
    /// GUIDs are one NIC to NCCL's search).
    #[arg(long = "nic-guids", value_name = "MODE", default_value = "per-host", value_parser = ["per-host", "as-file"])]
    pub nic_guids: String,
}

/// Arguments of the size sweep.
#[derive(Args, Clone)]
pub struct SweepArgs {
    /// Collective: all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv,
    /// gather, scatter, or all.
    #[arg(long, default_value = "all_reduce")]
    pub op: String,
    /// Smallest size (K/M/G suffixes are powers of 1024).
    #[arg(short = 'b', long = "minbytes", default_value = "8")]
    pub min_bytes: String,
    /// Largest size.
    #[arg(short = 'e', long = "maxbytes", default_value = "8G")]
    pub max_bytes: String,
    /// Multiplicative step.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub step_factor: u64,
    /// Data type (nccl-tests names: float, half, bfloat16, double, int32, ...).
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub dtype: String,
    /// Reduction (sum, prod, max, min, avg).
    #[arg(short = 'o', long = "redop", default_value = "sum")]
    pub redop: String,
    /// Timing model.
    #[arg(long, default_value = "nccl", value_parser = ["nccl", "calibrated"])]
    pub mode: String,
}

/// `ncclsim predict`.
#[derive(Args)]
pub struct PredictArgs {
    #[command(flatten)]
    pub system: SystemArgs,
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Algorithms NCCL may use (NCCL_ALGO syntax, e.g. Ring or ^NVLS or allreduce:tree).
    #[arg(long)]
    pub algo: Option<String>,
    /// Protocols NCCL may use (NCCL_PROTO syntax).
    #[arg(long)]
    pub proto: Option<String>,
    /// Output format.
    #[arg(long, default_value = "table", value_parser = ["table", "csv", "json"])]
    pub format: String,
    /// Write an SVG of busbw vs size (one line per algorithm/protocol, NCCL's choice highlighted);
    /// with several collectives, one file per collective (NAME-all_gather.svg, ...).
    #[arg(long)]
    pub plot: Option<String>,
}

/// A ready system: the cost model of the world communicator plus what the table header shows.
pub struct Built {
    /// The model.
    pub model: CostModel,
    /// `(rank, dev, busid, model)` of the world's ranks.
    pub devices: Vec<(usize, i32, String, String)>,
    /// One-line summary.
    pub summary: String,
}

/// What the sweep options ask for.
pub struct Sweep {
    /// Collectives (`--op`), in order.
    pub colls: Vec<Collective>,
    /// Message sizes in bytes (`-b`, `-e`, `-f`).
    pub sizes: Vec<u64>,
    /// Element type (`-d`).
    pub dtype: DataType,
    /// Reduction operation (`-o`).
    pub op: RedOp,
    /// Cost model mode (`--mode`).
    pub mode: Mode,
}

/// Parse the sweep options.
pub fn parse_sweep(s: &SweepArgs) -> Result<Sweep, String> {
    let colls = if s.op == "all" {
        Collective::ALL.to_vec()
    } else {
        s.op.split(',')
            .map(|o| o.parse::<Collective>().map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?
    };
    let min = nccl_tests::parse_size(&s.min_bytes)
        .ok_or_else(|| format!("-b {}: expected a size like 8, 1M or 8G", s.min_bytes))?;
    let max = nccl_tests::parse_size(&s.max_bytes)
        .ok_or_else(|| format!("-e {}: expected a size like 8, 1M or 8G", s.max_bytes))?;
    if min > max {
        return Err(format!("-b {min} is larger than -e {max}"));
    }
    let sizes = nccl_tests::sizes(min, max, s.step_factor);
    if sizes.is_empty() {
        return Err(format!(
            "-b {} -e {}: no message size in the range (sizes start at 1 byte)",
            s.min_bytes, s.max_bytes
        ));
    }
    let dtype = s.dtype.parse::<DataType>().map_err(|e| e.to_string())?;
    let op = s.redop.parse::<RedOp>().map_err(|e| e.to_string())?;
    let mode = s.mode.parse::<Mode>().map_err(|e| e.to_string())?;
    Ok(Sweep {
        colls,
        sizes,
        dtype,
        op,
        mode,
    })
}

/// Build the world communicator's cost model from a topology (optionally edited).
pub fn build(
    sys: &SystemArgs,
    extra_env: &[(String, String)],
    edits: &[cost_model::edit::Edit],
    mode: Mode,
) -> Result<Built, String> {
    let mut pairs = crate::plan::env_pairs(&sys.env, sys.nccl_version.as_deref())?;
    pairs.extend(extra_env.iter().cloned());
    let psettings = crate::plan::planner_settings(&pairs)?;
    let tsettings = crate::plan::tuner_settings(&pairs)?;
    let mut xml: XmlElement = topo::read_xml(&sys.topo).map_err(|e| e.to_string())?;
    let nodes = cost_model::edit::apply_all(&mut xml, edits)
        .map_err(|e| e.to_string())?
        .unwrap_or(sys.nodes);
    crate::check_nodes(nodes)?;
    let xml = std::sync::Arc::new(xml);
    let hosts: Vec<(String, std::sync::Arc<XmlElement>)> = (0..nodes)
        .map(|_| (sys.topo.clone(), xml.clone()))
        .collect();
    let gpu = sys
        .gpu
        .as_deref()
        .map(topo::profiles::gpu_model)
        .transpose()
        .map_err(|e| e.to_string())?;
    let nic = sys
        .nic_speed
        .as_deref()
        .map(topo::profiles::parse_nic_speed)
        .transpose()
        .map_err(|e| e.to_string())?;
    let completion = topo::Completion {
        gpu,
        nic_speed_mbps: nic,
    };
    let mut cluster = topo::Cluster::from_hosts(&hosts, &psettings.topo, completion)
        .map_err(|e| e.to_string())?;
    cluster
        .set_nvl_domains(crate::nvl_domains(sys.nvl_domain))
        .map_err(|e| e.to_string())?;
    cluster.nic_guids = crate::nic_guids(&sys.nic_guids);
    let plan = planner::Planner::new(cluster, psettings)
        .plan_world()
        .map_err(|e| e.to_string())?;
    let model = CostModel::from_plan(&plan, &tsettings, mode).map_err(|e| e.to_string())?;
    let gpu_name = |sm: i32| format!("sm{sm}");
    let devices = plan
        .ranks
        .iter()
        .map(|r| (r.rank, r.dev, r.busid.clone(), gpu_name(r.sm)))
        .collect();
    let s = model.shape();
    let summary = format!(
        "{} ranks on {} node(s), NCCL {} {} mode; ring {}x{:.1}/{:.1} GB/s, tree {}x{:.1}/{:.1}, {} coll channels{}",
        s.n_ranks,
        s.n_nodes,
        model.nccl.profile.version,
        match mode {
            Mode::Nccl => "nccl",
            Mode::Calibrated => "calibrated",
        },
        s.ring.n_channels,
        s.ring.bw_intra,
        s.ring.bw_inter,
        s.tree.n_channels,
        s.tree.bw_intra,
        s.tree.bw_inter,
        s.n_channels,
        if s.nvls_support {
            format!(", NVLS {}x{:.1} ({} channels)", s.nvls.n_channels, s.nvls.bw_intra, s.nvls_channels)
        } else {
            String::new()
        }
    );
    Ok(Built {
        model,
        devices,
        summary,
    })
}

/// One collective's rows: (count, prediction) per size, nccl-tests' size rounding applied.
pub fn rows(
    m: &CostModel,
    coll: Collective,
    sizes: &[u64],
    dtype: DataType,
    op: RedOp,
) -> Result<Vec<(u64, Prediction)>, String> {
    let n = m.shape().n_ranks;
    sizes
        .iter()
        .map(|&b| {
            let (count, bytes) = coll.nccl_tests_count(b, dtype, n);
            m.predict(coll, bytes, dtype, op)
                .map(|p| (count, p))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// `ncclsim predict`.
pub fn run(args: &PredictArgs) -> Result<(), String> {
    let Sweep {
        colls,
        sizes,
        dtype,
        op,
        mode,
    } = parse_sweep(&args.sweep)?;
    let mut extra = Vec::new();
    if let Some(a) = &args.algo {
        extra.push(("NCCL_ALGO".to_string(), a.clone()));
    }
    if let Some(p) = &args.proto {
        extra.push(("NCCL_PROTO".to_string(), p.clone()));
    }
    let built = build(&args.system, &extra, &[], mode)?;
    let m = &built.model;
    let mut json = Vec::new();
    if args.format == "csv" {
        println!("{}", nccl_tests::CSV_HEADER);
    }
    for &coll in &colls {
        let info = TableInfo {
            coll,
            dtype,
            op,
            min_bytes: sizes[0],
            max_bytes: *sizes.last().unwrap_or(&sizes[0]),
            step_factor: args.sweep.step_factor,
            devices: &built.devices,
            model: built.summary.clone(),
        };
        let rs = rows(m, coll, &sizes, dtype, op)?;
        match args.format.as_str() {
            "csv" => {
                for (c, p) in &rs {
                    println!("{}", nccl_tests::csv_row(&info, *c, p));
                }
            }
            "json" => json.push(serde_json::json!({
                "collective": coll.name(),
                "summary": built.summary,
                "rows": rs.iter().map(|(c, p)| serde_json::json!({
                    "size": p.bytes, "count": c, "type": dtype.name(), "time_us": p.time_us,
                    "algbw": p.algbw, "busbw": p.busbw, "algo": p.algo, "proto": p.proto,
                    "channels": p.channels, "threads": p.threads})).collect::<Vec<_>>(),
            })),
            _ => {
                for l in nccl_tests::header(&info) {
                    println!("{l}");
                }
                let mut bw = Vec::new();
                for (c, p) in &rs {
                    println!("{}", nccl_tests::row(&info, *c, p));
                    bw.push(p.busbw);
                    bw.push(p.busbw);
                }
                for l in nccl_tests::footer(&info, &bw) {
                    println!("{l}");
                }
            }
        }
        if let Some(out) = &args.plot {
            let path = if colls.len() > 1 {
                let stem = out.strip_suffix(".svg").unwrap_or(out);
                format!("{stem}-{}.svg", coll.name())
            } else {
                out.clone()
            };
            plot(m, coll, &sizes, dtype, op, &path, &built.summary)?;
            eprintln!("wrote {path}");
        }
    }
    if args.format == "json" {
        println!(
            "{}",
            serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}

/// SVG of busbw vs size: every algorithm/protocol NCCL considers, and NCCL's choice on top.
pub fn plot(
    m: &CostModel,
    coll: Collective,
    sizes: &[u64],
    dtype: DataType,
    op: RedOp,
    path: &str,
    caption: &str,
) -> Result<(), String> {
    let n = m.shape().n_ranks;
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut chosen = Vec::new();
    for &b in sizes {
        let (_, bytes) = coll.nccl_tests_count(b, dtype, n);
        if bytes == 0 {
            continue;
        }
        for p in m.candidates(coll, bytes, dtype, op) {
            let name = format!("{}/{}", p.algo, p.proto);
            match series.iter_mut().find(|(k, _)| *k == name) {
                Some((_, v)) => v.push((bytes as f64, p.busbw)),
                None => series.push((name, vec![(bytes as f64, p.busbw)])),
            }
        }
        if let Ok(p) = m.predict(coll, bytes, dtype, op) {
            chosen.push((bytes as f64, p.busbw));
        }
    }
    let lines: Vec<Line> = series
        .into_iter()
        .map(|(k, v)| (k, v, false))
        .chain(std::iter::once(("NCCL's choice".to_string(), chosen, true)))
        .collect();
    draw(path, &format!("{} - {caption}", coll.name()), &lines)
}

/// A plotted line: name, (bytes, busbw) points, highlighted.
pub type Line = (String, Vec<(f64, f64)>, bool);

/// Draw busbw-vs-size lines (log2 x axis); `true` marks the highlighted line.
pub fn draw(path: &str, title: &str, lines: &[Line]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{path}: {e}");
    let xs = lines.iter().flat_map(|l| l.1.iter().map(|p| p.0));
    let (mut xmin, mut xmax) = (f64::MAX, 1.0f64);
    for x in xs {
        xmin = xmin.min(x);
        xmax = xmax.max(x);
    }
    if xmin == f64::MAX {
        return Err(format!("{path}: nothing to plot"));
    }
    let ymax = lines
        .iter()
        .flat_map(|l| l.1.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin.max(1.0)..xmax * 1.01).log_scale(), 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("size (bytes, log scale)")
        .y_desc("busbw (GB/s)")
        .x_label_formatter(&|v| cost_model::calibration::size_label(v.round() as u64))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, pts, hi)) in lines.iter().enumerate() {
        let color = if *hi {
            BLACK.to_rgba()
        } else {
            Palette99::pick(i).to_rgba()
        };
        let style = ShapeStyle {
            color,
            filled: false,
            stroke_width: if *hi { 3 } else { 1 },
        };
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), style))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
