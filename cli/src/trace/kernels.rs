//! `ncclsim trace kernels DIR`: one process's GPU work in launch order, in the columns of nsys's
//! GPU trace report (`nsys stats --report gputrace --format csv`), so tools that read that
//! report (kernel-level schedulers, per-kernel time tables) read ours.
//!
//! Rows are the compute operations the fake CUDA core traced (`compute-*.json`: aten ops named
//! as the dispatcher names them, e.g. `aten::mm`, and cuBLAS/cuBLASLt GEMMs by the function
//! called, e.g. `cublasGemmEx`) and the NCCL operations of
//! `libnccl.so.2`'s trace (`ncclsim-*.json`, named like NCCL's device kernels:
//! `ncclDevKernel_AllReduce_Sum_f32_RING_LL`), with their virtual start and modelled duration.
//! Only the work inside the program's `cudaProfilerStart`/`Stop` ranges is listed when it has
//! any, else the whole run. Grid, block, register and shared-memory columns are empty: the
//! simulation does not choose launch configurations.

use std::collections::BTreeMap;

/// nsys's GPU trace columns, in its order.
const COLUMNS: [&str; 21] = [
    "Start (ns)",
    "Duration (ns)",
    "CorrId",
    "GrdX",
    "GrdY",
    "GrdZ",
    "BlkX",
    "BlkY",
    "BlkZ",
    "Reg/Trd",
    "StcSMem (MB)",
    "DymSMem (MB)",
    "Bytes (MB)",
    "Throughput (MB/s)",
    "SrcMemKd",
    "DstMemKd",
    "Device",
    "Ctx",
    "GreenCtx",
    "Strm",
    "Name",
];

/// One row.
struct Kernel {
    start_ns: f64,
    dur_ns: f64,
    device: Option<u64>,
    stream: u64,
    name: String,
    in_range: bool,
}

/// NCCL's device-kernel name for a traced operation (NCCL 2.19+ `ncclDevKernel_<coll>[_<redop>_
/// <type>]_<ALGO>_<PROTO>`; send/receive batches are `ncclDevKernel_SendRecv`).
fn nccl_kernel_name(op: &str, a: &serde_json::Value) -> String {
    let algo = a["algo"].as_str().unwrap_or("RING").to_ascii_uppercase();
    let proto = a["proto"].as_str().unwrap_or("SIMPLE").to_ascii_uppercase();
    let ty = match a["type"].as_str().unwrap_or("Float32") {
        "Int8" => "i8",
        "Uint8" => "u8",
        "Int32" => "i32",
        "Uint32" => "u32",
        "Int64" => "i64",
        "Uint64" => "u64",
        "Float16" => "f16",
        "Float64" => "f64",
        "Bfloat16" => "bf16",
        "Float8e4m3" => "f8e4m3",
        "Float8e5m2" => "f8e5m2",
        _ => "f32",
    };
    let red = match a["op"].as_i64().unwrap_or(0) {
        1 => "Prod",
        2 => "Max",
        3 => "Min",
        4 => "SumPostDiv",
        n if n >= 5 => "PreMulSum",
        _ => "Sum",
    };
    match op {
        "AllReduce" | "Reduce" | "ReduceScatter" => {
            format!("ncclDevKernel_{op}_{red}_{ty}_{algo}_{proto}")
        }
        "AllGather" | "Broadcast" => format!("ncclDevKernel_{op}_{algo}_{proto}"),
        _ => "ncclDevKernel_SendRecv".to_string(),
    }
}

/// Every traced process's rows, by process id.
fn read(dir: &str) -> Result<BTreeMap<u64, Vec<Kernel>>, String> {
    let mut out: BTreeMap<u64, Vec<Kernel>> = BTreeMap::new();
    for (_, events) in super::trace_files(dir)? {
        for e in events.iter().filter(|e| e["ph"] == "X") {
            let a = &e["args"];
            let compute = e["cat"] == "compute";
            let name = e["name"].as_str().unwrap_or("?");
            out.entry(e["pid"].as_u64().unwrap_or(0))
                .or_default()
                .push(Kernel {
                    start_ns: e["ts"].as_f64().unwrap_or(0.0) * 1e3,
                    dur_ns: e["dur"].as_f64().unwrap_or(0.0) * 1e3,
                    device: a["device"].as_u64(),
                    stream: if compute {
                        a["stream"].as_u64()
                    } else {
                        e["tid"].as_u64()
                    }
                    .unwrap_or(0),
                    name: if compute {
                        name.to_string()
                    } else {
                        nccl_kernel_name(name, a)
                    },
                    in_range: if compute {
                        a["range"].is_u64()
                    } else {
                        a["step"].is_u64()
                    },
                });
        }
    }
    Ok(out)
}

/// Prints the kernel list of process `pid` (default: the first traced process).
pub fn print(dir: &str, pid: Option<u64>, format: &str) -> Result<(), String> {
    let mut all = read(dir)?;
    if all.is_empty() {
        return Err(format!(
            "{dir}: no traced operations; run with --trace {dir}"
        ));
    }
    let pids: Vec<u64> = all.keys().copied().collect();
    let pid = pid.unwrap_or(pids[0]);
    let mut rows = all
        .remove(&pid)
        .ok_or_else(|| format!("{dir}: no process {pid} in the traces (processes: {pids:?})"))?;
    if rows.iter().any(|k| k.in_range) {
        rows.retain(|k| k.in_range);
    }
    rows.sort_by(|a, b| a.start_ns.total_cmp(&b.start_ns));
    // A process drives one device in the common case: NCCL rows take its compute rows' device.
    let device = rows.iter().find_map(|k| k.device).unwrap_or(0);
    let csv = format == "csv";
    if csv {
        println!("{}", COLUMNS.map(|c| format!("\"{c}\"")).join(","));
    } else {
        println!(
            "# process {pid}: {} operations in launch order (processes traced: {pids:?})",
            rows.len()
        );
        println!(
            "{:>16} {:>14} {:>6} {:>18}  Name",
            "Start (ns)", "Duration (ns)", "Device", "Strm"
        );
    }
    for (corr, k) in rows.iter().enumerate() {
        let dev = k.device.unwrap_or(device);
        if csv {
            println!(
                "{:.0},{:.0},{},,,,,,,,,,,,,,{},1,,{},\"{}\"",
                k.start_ns,
                k.dur_ns,
                corr + 1,
                dev,
                k.stream,
                k.name.replace('"', "\"\"")
            );
        } else {
            println!(
                "{:>16.0} {:>14.0} {:>6} {:>18}  {}",
                k.start_ns, k.dur_ns, dev, k.stream, k.name
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_and_nccl_rows_in_launch_order_within_the_profiled_range() {
        let dir = std::env::temp_dir().join(format!("ncclsim-kernels-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("compute-h-7.json"),
            r#"[{"name":"aten::mm","cat":"compute","ph":"X","pid":7,"tid":0,"ts":10.0,"dur":5.0,
                 "args":{"device":3,"stream":0,"range":0}},
                {"name":"aten::normal_","cat":"compute","ph":"X","pid":7,"tid":0,"ts":1.0,"dur":3.0,
                 "args":{"device":3,"stream":0,"range":null}}]"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("ncclsim-h-7.json"),
            r#"[{"name":"AllReduce","cat":"nccl","ph":"X","pid":7,"tid":5,"ts":15.0,"dur":70.0,
                 "args":{"type":"Bfloat16","op":0,"algo":"Ring","proto":"LL128","step":0}},
                {"name":"comm_init","cat":"nccl","ph":"i","pid":7,"args":{}}]"#,
        )
        .unwrap();
        let all = read(dir.to_str().unwrap()).unwrap();
        let rows = &all[&7];
        assert_eq!(rows.len(), 3);
        let nccl = rows.iter().find(|k| k.name.starts_with("nccl")).unwrap();
        assert_eq!(nccl.name, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL128");
        assert_eq!(
            (nccl.start_ns, nccl.dur_ns, nccl.stream),
            (15000.0, 70000.0, 5)
        );
        // The profiled range holds the GEMM and the all-reduce, not the earlier random fill.
        assert_eq!(rows.iter().filter(|k| k.in_range).count(), 2);
        assert!(print(dir.to_str().unwrap(), Some(7), "csv").is_ok());
        assert!(print(dir.to_str().unwrap(), Some(8), "csv")
            .unwrap_err()
            .contains("no process 8"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
