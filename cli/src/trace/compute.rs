//! The compute operations of a run's traces (`compute-*.json`, written by the fake CUDA core
//! for every launch through its compute door: torch ops and cuBLAS GEMMs) repriced on another topology's GPUs with the compute model.

use compute_model::{Gemm, GpuSpec, KernelCost, Precision, Unit};
use topo::xml::XmlElement;

/// One traced compute operation.
pub struct ComputeOp {
    /// Process that ran it.
    pub pid: u64,
    /// Virtual start in the run, µs.
    pub ts_us: f64,
    /// Modelled duration in the run, µs.
    pub dur_us: f64,
    /// The `cudaProfilerStart` range it ran in.
    pub range: Option<u64>,
    /// The training steps its process marked as ended before it.
    pub mark: u64,
    /// The board it ran on, as the driver names it (`args.gpu`), when the trace says.
    pub gpu: Option<String>,
    /// When the host issued it, µs of virtual time (`args.issued_us`, under the virtual clock).
    pub issued_us: Option<f64>,
    /// What limits its modelled time on its board, when the trace names the board.
    pub limit: Option<compute_model::Limit>,
    /// What it did.
    pub cost: KernelCost,
}

fn unit(args: &serde_json::Value) -> Unit {
    let p = match args["precision"].as_str().unwrap_or("f32") {
        "f64" => Precision::F64,
        "tf32" => Precision::Tf32,
        "f16" => Precision::F16,
        "bf16" => Precision::Bf16,
        "f8" => Precision::F8,
        _ => Precision::F32,
    };
    if args["unit"] == "tensor" {
        Unit::Tensor(p)
    } else {
        Unit::Vector(p)
    }
}

/// A matrix product's shape (`args.gemm`: batch, m, n, k), when the op is one.
fn gemm(args: &serde_json::Value) -> Option<Gemm> {
    let d: Vec<u64> = args["gemm"]
        .as_array()?
        .iter()
        .map(|v| v.as_u64())
        .collect::<Option<_>>()?;
    match d[..] {
        [batch, m, n, k] if batch > 0 && m > 0 && n > 0 && k > 0 => Some(Gemm { batch, m, n, k }),
        _ => None,
    }
}

/// A fused attention kernel (`args.attention`: library, backward, causal), when the op is one.
fn attention(args: &serde_json::Value) -> Option<compute_model::Attention> {
    let a = &args["attention"];
    Some(compute_model::Attention {
        library: compute_model::attention::Library::from_name(a["library"].as_str()?)?,
        backward: a["backward"].as_bool().unwrap_or(false),
        causal: a["causal"].as_bool().unwrap_or(false),
    })
}

/// Every compute event of the traces in `dir`.
pub fn read(dir: &str) -> Result<Vec<ComputeOp>, String> {
    let mut out = Vec::new();
    for (_, events) in super::trace_files(dir)? {
        for e in &events {
            if e["cat"] != "compute" || e["ph"] != "X" {
                continue;
            }
            let a = &e["args"];
            let cost = KernelCost {
                flops: a["flops"].as_f64().unwrap_or(0.0),
                bytes: a["bytes"].as_f64().unwrap_or(0.0),
                unit: unit(a),
                gemm: gemm(a),
                attention: attention(a),
            };
            let gpu = a["gpu"].as_str().map(str::to_string);
            let limit = gpu
                .as_deref()
                .and_then(topo::profiles::gpu_by_name)
                .map(|m| compute_model::limit(&compute_model::spec(m.keys[0]), &cost));
            out.push(ComputeOp {
                pid: e["pid"].as_u64().unwrap_or(0),
                ts_us: e["ts"].as_f64().unwrap_or(0.0),
                dur_us: e["dur"].as_f64().unwrap_or(0.0),
                range: a["range"].as_u64(),
                mark: a["mark"].as_u64().unwrap_or(0),
                gpu,
                issued_us: a["issued_us"].as_f64(),
                limit,
                cost,
            });
        }
    }
    Ok(out)
}

/// The board of a topology file's GPUs (its first `<gpu>`: by the PCI device id of the `<pci>`
/// holding it, else by its `sm`), as the fake CUDA core identifies it.
pub fn gpu_of(path: &str) -> Result<GpuSpec, String> {
    let root = topo::read_xml(path).map_err(|e| e.to_string())?;
    let mut found: Option<(Option<u32>, Option<i32>)> = None;
    fn visit(e: &XmlElement, found: &mut Option<(Option<u32>, Option<i32>)>) {
        if found.is_some() {
            return;
        }
        if let Some(g) = e.children.iter().find(|c| c.name == "gpu") {
            let device = e
                .get("device")
                .and_then(|d| u32::from_str_radix(d.trim_start_matches("0x"), 16).ok());
            *found = Some((device, g.get("sm").and_then(|s| s.parse().ok())));
            return;
        }
        for c in &e.children {
            visit(c, found);
        }
    }
    visit(&root, &mut found);
    let (device, sm) = found.ok_or_else(|| format!("{path}: no <gpu> element"))?;
    let model = device
        .and_then(topo::profiles::gpu_by_pci_device)
        .or_else(|| sm.and_then(topo::profiles::gpu_by_sm))
        .ok_or_else(|| format!("{path}: unknown GPU (PCI device {device:?}, sm {sm:?})"))?;
    Ok(compute_model::spec(model.keys[0]))
}

/// One op's duration on `gpu`, µs: its traced duration scaled by the model's ratio between
/// `gpu` and the board it ran on, so a duration the run took from a kernel-time table
/// (`NCCLSIM_KERNEL_TIMES`, measured on a real GPU) carries over as the measurement scaled;
/// an op whose board the trace does not name is priced by the model alone.
fn repriced_us(o: &ComputeOp, gpu: &GpuSpec) -> f64 {
    let new = compute_model::price(gpu, &o.cost) as f64 / 1e3;
    let old = o
        .gpu
        .as_deref()
        .and_then(topo::profiles::gpu_by_name)
        .map(|m| compute_model::price(&compute_model::spec(m.keys[0]), &o.cost) as f64 / 1e3);
    match old {
        Some(old) if old > 0.0 => o.dur_us * new / old,
        _ => new,
    }
}

/// (traced, repriced) compute time per process, µs (averaged over the processes that computed).
pub fn reprice(ops: &[ComputeOp], gpu: &GpuSpec) -> (f64, f64) {
    let procs = ops
        .iter()
        .map(|o| o.pid)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        .max(1) as f64;
    let traced: f64 = ops.iter().map(|o| o.dur_us).sum();
    let repriced: f64 = ops.iter().map(|o| repriced_us(o, gpu)).sum();
    (traced / procs, repriced / procs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_topologies_name_their_boards() {
        let a100 = gpu_of("../topologies/dgx-a100.xml").unwrap();
        let h100 = gpu_of("../topologies/dgx-h100.xml").unwrap();
        assert_eq!(a100.peaks.bf16, 312.0);
        assert_eq!(h100.peaks.bf16, 989.5);
        let ops = [ComputeOp {
            pid: 1,
            ts_us: 0.0,
            dur_us: 10.0,
            range: None,
            mark: 0,
            gpu: None,
            issued_us: None,
            limit: None,
            cost: KernelCost {
                flops: 2e12,
                bytes: 0.0,
                unit: Unit::Tensor(Precision::Bf16),
                gemm: None,
                attention: None,
            },
        }];
        let (t, on_h100) = reprice(&ops, &h100);
        let e = compute_model::calibration::efficiency(&h100, Unit::Tensor(Precision::Bf16));
        assert_eq!(t, 10.0);
        assert!(
            (on_h100 - (2e12 / (e * 989.5e12) * 1e6 + 3.0)).abs() < 1e-3,
            "{on_h100}"
        );
    }

    /// A duration measured on an A100 (twice what the model gives there) moves to the H100
    /// as the measurement times the model's A100-to-H100 ratio, not as the model's H100 time.
    #[test]
    fn a_measured_duration_is_scaled_not_replaced() {
        let a100 = compute_model::spec("A100-SXM4");
        let h100 = gpu_of("../topologies/dgx-h100.xml").unwrap();
        let cost = KernelCost {
            flops: 4e12,
            bytes: 1e9,
            unit: Unit::Tensor(Precision::Bf16),
            gemm: None,
            attention: None,
        };
        let model = |g: &GpuSpec| compute_model::price(g, &cost) as f64 / 1e3;
        let op = |gpu: Option<&str>| ComputeOp {
            pid: 1,
            ts_us: 0.0,
            dur_us: 2.0 * model(&a100),
            range: None,
            mark: 0,
            gpu: gpu.map(str::to_string),
            issued_us: None,
            limit: None,
            cost,
        };
        let named = [op(Some("NVIDIA A100-SXM4-80GB"))];
        let (_, scaled) = reprice(&named, &h100);
        let want = 2.0 * model(&h100);
        assert!((scaled - want).abs() < 1e-6 * want, "{scaled} vs {want}");
        // Without the board, the model prices the op on the H100 by itself.
        let (_, modelled) = reprice(&[op(None)], &h100);
        assert!((modelled - model(&h100)).abs() < 1e-9, "{modelled}");
    }
}
