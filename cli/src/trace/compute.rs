//! The compute operations of a run's traces (`compute-*.json`, written by ncclsim's Python
//! package) repriced on another topology's GPUs with the compute model.

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

/// Every compute event of the traces in `dir`.
pub fn read(dir: &str) -> Result<Vec<ComputeOp>, String> {
    let mut out = Vec::new();
    for (_, events) in super::trace_files(dir)? {
        for e in &events {
            if e["cat"] != "compute" || e["ph"] != "X" {
                continue;
            }
            let a = &e["args"];
            out.push(ComputeOp {
                pid: e["pid"].as_u64().unwrap_or(0),
                ts_us: e["ts"].as_f64().unwrap_or(0.0),
                dur_us: e["dur"].as_f64().unwrap_or(0.0),
                range: a["range"].as_u64(),
                cost: KernelCost {
                    flops: a["flops"].as_f64().unwrap_or(0.0),
                    bytes: a["bytes"].as_f64().unwrap_or(0.0),
                    unit: unit(a),
                    gemm: gemm(a),
                },
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

/// (traced, repriced) compute time per process, µs (averaged over the processes that computed).
pub fn reprice(ops: &[ComputeOp], gpu: &GpuSpec) -> (f64, f64) {
    let procs = ops
        .iter()
        .map(|o| o.pid)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        .max(1) as f64;
    let traced: f64 = ops.iter().map(|o| o.dur_us).sum();
    let repriced: f64 = ops
        .iter()
        .map(|o| compute_model::price(gpu, &o.cost) as f64 / 1e3)
        .sum();
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
            cost: KernelCost {
                flops: 2e12,
                bytes: 0.0,
                unit: Unit::Tensor(Precision::Bf16),
                gemm: None,
            },
        }];
        let (t, on_h100) = reprice(&ops, &h100);
        let e = compute_model::calibration::efficiency(&h100, Unit::Tensor(Precision::Bf16));
        let s = compute_model::calibration::sustained(h100.arch);
        assert_eq!(t, 10.0);
        assert!(
            (on_h100 - (2e12 / (e * 989.5e12) * 1e6 + 3.0) / s).abs() < 1e-3,
            "{on_h100}"
        );
    }
}
