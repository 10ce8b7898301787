//! `--query-gpu`, `--query-compute-apps` (CSV), `dmon` and `nvlink --status`.

use crate::gpu::{enabled, watts, Gpu};
use crate::nvml::Nvml;
use crate::table::{process_name, timestamp, System};
use std::ffi::{c_int, c_uint};

/// `--format=csv[,noheader][,nounits]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Format {
    pub header: bool,
    pub units: bool,
}

pub fn parse_format(text: &str) -> Result<Format, String> {
    let mut f = Format {
        header: true,
        units: true,
    };
    let mut csv = false;
    for part in text.split(',').map(str::trim) {
        match part {
            "csv" => csv = true,
            "noheader" => f.header = false,
            "nounits" => f.units = false,
            _ => return Err(format!("\"{part}\" is not a valid format option.")),
        }
    }
    if !csv {
        return Err("Only CSV format is supported: --format=csv.".into());
    }
    Ok(f)
}

/// A GPU field: its canonical name, unit, and value (None prints `[N/A]`).
struct Field {
    name: &'static str,
    unit: &'static str,
    value: fn(&Gpu, &System, u32) -> Option<String>,
}

fn n<T: ToString>(v: Option<T>) -> Option<String> {
    v.map(|v| v.to_string())
}

/// The `--query-gpu` fields: (names it is asked by, the field).
fn gpu_field(name: &str) -> Option<Field> {
    let f = |name, unit, value| Some(Field { name, unit, value });
    match name {
        "index" => f("index", "", |g, _, _| n(Some(g.index))),
        "name" | "gpu_name" => f("name", "", |g, _, _| Some(g.name.clone())),
        "uuid" | "gpu_uuid" => f("uuid", "", |g, _, _| Some(g.uuid.clone())),
        "serial" => f("serial", "", |_, _, _| None),
        "pci.bus_id" | "gpu_bus_id" => f("pci.bus_id", "", |g, _, _| Some(g.bus_id.clone())),
        "pci.bus" => f("pci.bus", "", |g, _, _| {
            g.bus_id.split(':').nth(1).map(|b| format!("0x{b}"))
        }),
        "pci.domain" => f("pci.domain", "", |g, _, _| {
            g.bus_id
                .split(':')
                .next()
                .map(|d| format!("0x{}", &d[d.len().saturating_sub(4)..]))
        }),
        "driver_version" => f("driver_version", "", |_, s, _| Some(s.driver.clone())),
        "count" => f("count", "", |_, _, c| n(Some(c))),
        "timestamp" => f("timestamp", "", |_, _, _| Some(timestamp())),
        "pstate" => f("pstate", "", |g, _, _| g.pstate_text()),
        "compute_cap" => f("compute_cap", "", |g, _, _| {
            g.compute_cap.map(|(a, b)| format!("{a}.{b}"))
        }),
        "temperature.gpu" => f("temperature.gpu", "", |g, _, _| n(g.temperature)),
        "temperature.memory" => f("temperature.memory", "", |_, _, _| None),
        "power.draw" | "power.draw.instant" | "power.draw.average" => {
            f("power.draw", "W", |g, _, _| g.power_mw.map(watts))
        }
        "power.limit" | "enforced.power.limit" => {
            f("power.limit", "W", |g, _, _| g.limit_mw.map(watts))
        }
        "power.default_limit" => f("power.default_limit", "W", |g, _, _| {
            g.default_limit_mw.map(watts)
        }),
        "power.min_limit" => f("power.min_limit", "W", |g, _, _| {
            g.limit_range_mw.map(|r| watts(r.0))
        }),
        "power.max_limit" => f("power.max_limit", "W", |g, _, _| {
            g.limit_range_mw.map(|r| watts(r.1))
        }),
        "power.management" => f("power.management", "", |g, _, _| {
            g.limit_mw.map(|_| "Enabled".to_string())
        }),
        "memory.total" => f("memory.total", "MiB", |g, _, _| n(g.memory_mib(0))),
        "memory.free" => f("memory.free", "MiB", |g, _, _| n(g.memory_mib(1))),
        "memory.used" => f("memory.used", "MiB", |g, _, _| n(g.memory_mib(2))),
        "memory.reserved" => f("memory.reserved", "MiB", |g, _, _| n(g.memory.map(|_| 0))),
        "utilization.gpu" => f("utilization.gpu", "%", |g, _, _| {
            n(g.utilization.map(|u| u.0))
        }),
        "utilization.memory" => f("utilization.memory", "%", |g, _, _| {
            n(g.utilization.map(|u| u.1))
        }),
        "clocks.gr" | "clocks.current.graphics" => {
            f("clocks.current.graphics", "MHz", |g, _, _| n(g.clocks[0]))
        }
        "clocks.sm" | "clocks.current.sm" => {
            f("clocks.current.sm", "MHz", |g, _, _| n(g.clocks[1]))
        }
        "clocks.mem" | "clocks.current.memory" => {
            f("clocks.current.memory", "MHz", |g, _, _| n(g.clocks[2]))
        }
        "clocks.video" | "clocks.current.video" => {
            f("clocks.current.video", "MHz", |g, _, _| n(g.clocks[3]))
        }
        "clocks.max.gr" | "clocks.max.graphics" => {
            f("clocks.max.graphics", "MHz", |g, _, _| n(g.max_clocks[0]))
        }
        "clocks.max.sm" => f("clocks.max.sm", "MHz", |g, _, _| n(g.max_clocks[1])),
        "clocks.max.mem" | "clocks.max.memory" => {
            f("clocks.max.memory", "MHz", |g, _, _| n(g.max_clocks[2]))
        }
        "fan.speed" => f("fan.speed", "%", |g, _, _| n(g.fan)),
        "persistence_mode" => f("persistence_mode", "", |g, _, _| {
            g.persistence.map(|p| enabled(p).into())
        }),
        "ecc.mode.current" => f("ecc.mode.current", "", |g, _, _| {
            g.ecc.map(|e| enabled(e).into())
        }),
        "ecc.mode.pending" => f("ecc.mode.pending", "", |g, _, _| {
            g.ecc.map(|e| enabled(e).into())
        }),
        "mig.mode.current" => f("mig.mode.current", "", |g, _, _| {
            g.mig.map(|m| enabled(m).into())
        }),
        "mig.mode.pending" => f("mig.mode.pending", "", |g, _, _| {
            g.mig.map(|m| enabled(m).into())
        }),
        "compute_mode" => f("compute_mode", "", |g, _, _| {
            g.compute_mode_text().map(Into::into)
        }),
        "display_active" => f("display_active", "", |g, _, _| {
            g.display_active.map(|a| enabled(a).into())
        }),
        "display_mode" => f("display_mode", "", |_, _, _| Some("Disabled".into())),
        "vbios_version" => f("vbios_version", "", |_, _, _| None),
        _ => None,
    }
}

/// Every name `--query-gpu` takes (aliases included), for `--help-query-gpu`.
pub const GPU_FIELDS: &[&str] = &[
    "index",
    "name",
    "gpu_name",
    "uuid",
    "gpu_uuid",
    "serial",
    "pci.bus_id",
    "gpu_bus_id",
    "pci.bus",
    "pci.domain",
    "driver_version",
    "count",
    "timestamp",
    "pstate",
    "compute_cap",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "power.draw.instant",
    "power.draw.average",
    "power.limit",
    "enforced.power.limit",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
    "power.management",
    "memory.total",
    "memory.free",
    "memory.used",
    "memory.reserved",
    "utilization.gpu",
    "utilization.memory",
    "clocks.gr",
    "clocks.current.graphics",
    "clocks.sm",
    "clocks.current.sm",
    "clocks.mem",
    "clocks.current.memory",
    "clocks.video",
    "clocks.current.video",
    "clocks.max.gr",
    "clocks.max.graphics",
    "clocks.max.sm",
    "clocks.max.mem",
    "clocks.max.memory",
    "fan.speed",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.mode.pending",
    "mig.mode.current",
    "mig.mode.pending",
    "compute_mode",
    "display_active",
    "display_mode",
    "vbios_version",
];

/// Every name `--query-compute-apps` takes.
pub const APP_FIELDS: &[&str] = &[
    "pid",
    "process_name",
    "name",
    "used_memory",
    "used_gpu_memory",
    "gpu_uuid",
    "gpu_bus_id",
    "gpu_name",
];

/// `--help-query-gpu` / `--help-query-compute-apps`: the fields, with their units.
pub fn help_fields(apps: bool) -> String {
    let mut out = String::from(if apps {
        "List of valid properties to query for the switch \"--query-compute-apps=\":\n\n"
    } else {
        "List of valid properties to query for the switch \"--query-gpu=\":\n\n"
    });
    for name in if apps { APP_FIELDS } else { GPU_FIELDS } {
        let unit = if apps {
            app_field(name).map(|f| f.1)
        } else {
            gpu_field(name).map(|f| f.unit)
        };
        match unit {
            Some("") | None => out += &format!("\"{name}\"\n"),
            Some(u) => out += &format!("\"{name}\" [{u}]\n"),
        }
    }
    out += "\nExample: nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader\n";
    out
}

/// A `--query-compute-apps` field: (canonical name, unit).
fn app_field(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "pid" => ("pid", ""),
        "process_name" | "name" => ("process_name", ""),
        "used_memory" | "used_gpu_memory" => ("used_gpu_memory", "MiB"),
        "gpu_uuid" => ("gpu_uuid", ""),
        "gpu_bus_id" => ("gpu_bus_id", ""),
        "gpu_name" => ("gpu_name", ""),
        _ => return None,
    })
}

fn invalid_field(name: &str, help: &str) -> String {
    format!("Field \"{name}\" is not a valid field to query.\n\nPlease run 'nvidia-smi {help}' for help.")
}

fn csv_row(cells: &[String]) -> String {
    cells.join(", ") + "\n"
}

pub fn query_gpu(
    fields: &str,
    format: Format,
    sys: &System,
    gpus: &[Gpu],
    count: u32,
) -> Result<String, String> {
    let fields: Vec<Field> = fields
        .split(',')
        .map(str::trim)
        .map(|name| gpu_field(name).ok_or_else(|| invalid_field(name, "--help-query-gpu")))
        .collect::<Result<_, _>>()?;
    let mut out = String::new();
    if format.header {
        let head: Vec<String> = fields
            .iter()
            .map(|f| {
                if f.unit.is_empty() || !format.units {
                    f.name.to_string()
                } else {
                    format!("{} [{}]", f.name, f.unit)
                }
            })
            .collect();
        out += &csv_row(&head);
    }
    for g in gpus {
        let cells: Vec<String> = fields
            .iter()
            .map(|f| match (f.value)(g, sys, count) {
                None => "[N/A]".into(),
                Some(v) if f.unit.is_empty() || !format.units => v,
                Some(v) => format!("{v} {}", f.unit),
            })
            .collect();
        out += &csv_row(&cells);
    }
    Ok(out)
}

pub fn query_compute_apps(fields: &str, format: Format, gpus: &[Gpu]) -> Result<String, String> {
    let fields: Vec<(&str, &str)> = fields
        .split(',')
        .map(str::trim)
        .map(|name| app_field(name).ok_or_else(|| invalid_field(name, "--help-query-compute-apps")))
        .collect::<Result<_, _>>()?;
    let mut out = String::new();
    if format.header {
        let head: Vec<String> = fields
            .iter()
            .map(|(n, u)| {
                if u.is_empty() || !format.units {
                    n.to_string()
                } else {
                    format!("{n} [{u}]")
                }
            })
            .collect();
        out += &csv_row(&head);
    }
    for g in gpus {
        for (pid, used) in &g.processes {
            let cells: Vec<String> = fields
                .iter()
                .map(|(name, _)| match *name {
                    "pid" => pid.to_string(),
                    "process_name" => process_name(*pid),
                    "used_gpu_memory" if format.units => format!("{} MiB", Gpu::mib(*used)),
                    "used_gpu_memory" => Gpu::mib(*used).to_string(),
                    "gpu_uuid" => g.uuid.clone(),
                    "gpu_bus_id" => g.bus_id.clone(),
                    _ => g.name.clone(),
                })
                .collect();
            out += &csv_row(&cells);
        }
    }
    Ok(out)
}

/// `dmon`: one line per GPU per sample, `count` samples `delay` seconds apart, printed as
/// they are taken.
pub fn dmon(nvml: &Nvml, indices: &[u32], count: u32, delay: u32) {
    use std::io::Write;
    println!("# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk");
    println!("# Idx      W      C      C      %      %      %      %    MHz    MHz");
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for sample in 0..count {
        if sample > 0 {
            std::thread::sleep(std::time::Duration::from_secs(u64::from(delay)));
        }
        for &i in indices {
            let Some(g) = Gpu::read(nvml, i) else {
                continue;
            };
            let line = format!(
                "{:>5} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
                g.index,
                dash(g.power_mw.map(|p| (p / 1000).to_string())),
                dash(g.temperature.map(|t| t.to_string())),
                "-",
                dash(g.utilization.map(|u| u.0.to_string())),
                dash(g.utilization.map(|u| u.1.to_string())),
                dash(g.utilization.map(|_| "0".to_string())),
                dash(g.utilization.map(|_| "0".to_string())),
                dash(g.clocks[2].map(|c| c.to_string())),
                dash(g.clocks[1].map(|c| c.to_string())),
            );
            print!("{line}");
        }
        let _ = std::io::stdout().flush();
    }
}

/// Per-link bandwidth of an NVLink generation (GB/s), as nvidia-smi prints it.
fn link_speed(version: u32) -> &'static str {
    match version {
        1 => "20 GB/s",
        2 => "25.781 GB/s",
        3 => "25 GB/s",
        4 => "26.562 GB/s",
        _ => "50 GB/s",
    }
}

/// `nvlink --status`: each GPU's links and their speeds.
pub fn nvlink_status(nvml: &Nvml, gpus: &[Gpu]) -> String {
    let mut out = String::new();
    for g in gpus {
        out += &format!("GPU {}: {} (UUID: {})\n", g.index, g.name, g.uuid);
        for link in 0..18 {
            let Some(state) = nvml.value_at::<c_int>(c"nvmlDeviceGetNvLinkState", g.handle, link)
            else {
                break;
            };
            let speed = if state != 0 {
                let v = nvml
                    .value_at::<c_uint>(c"nvmlDeviceGetNvLinkVersion", g.handle, link)
                    .unwrap_or(0);
                link_speed(v)
            } else {
                "<inactive>"
            };
            out += &format!("\t Link {link}: {speed}\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_field_is_answered() {
        for name in GPU_FIELDS {
            assert!(gpu_field(name).is_some(), "{name}");
        }
        for name in APP_FIELDS {
            assert!(app_field(name).is_some(), "{name}");
        }
        assert!(gpu_field("warp.drive").is_none());
        assert!(help_fields(false).contains("\"memory.total\" [MiB]\n"));
    }
}
