//! The default summary table, `-L`, and `-q` (`-d` sections) in nvidia-smi's layouts.

use crate::gpu::{enabled, or_na, watts, Gpu};

/// The versions the header lines print.
pub struct System {
    pub driver: String,
    pub cuda: String,
}

/// The wall-clock time in nvidia-smi's form, e.g. `Thu Nov 26 23:10:00 2026`.
pub fn timestamp() -> String {
    let mut t: libc::time_t = 0;
    let mut tm: libc::tm = unsafe_zeroed_tm();
    // SAFETY: valid pointers to locals; localtime_r fills `tm`.
    unsafe {
        libc::time(&mut t);
        libc::localtime_r(&t, &mut tm);
    }
    let mut buf = [0u8; 64];
    // SAFETY: a writable buffer of the length passed, a NUL-terminated format, a filled `tm`.
    let n = unsafe {
        libc::strftime(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%a %b %e %H:%M:%S %Y".as_ptr(),
            &tm,
        )
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn unsafe_zeroed_tm() -> libc::tm {
    // SAFETY: `tm` is a plain C struct of integers and a pointer; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Width inside the outer border of the summary table.
const INNER: usize = 89;

fn boxed(content: &str) -> String {
    let mut s: String = content.chars().take(INNER).collect();
    while s.chars().count() < INNER {
        s.push(' ');
    }
    format!("|{s}|")
}

fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

pub fn summary(sys: &System, gpus: &[Gpu]) -> String {
    let rule = format!("+{}+", "-".repeat(INNER));
    // The three column groups' rules: outer ends, fill, and the joints between groups.
    let cols = |start: char, fill: &str, end: char| {
        format!(
            "{start}{}+{}+{}{end}",
            fill.repeat(41),
            fill.repeat(24),
            fill.repeat(22)
        )
    };
    let mut out = vec![timestamp(), rule.clone()];
    out.push(boxed(&format!(
        " NVIDIA-SMI {:<22} Driver Version: {:<14} CUDA Version: {:<9}",
        sys.driver, sys.driver, sys.cuda
    )));
    out.push(cols('|', "-", '+'));
    out.push("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |".into());
    out.push("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |".into());
    out.push("|                                         |                        |               MIG M. |".into());
    out.push(cols('|', "=", '|'));
    for g in gpus {
        let persistence = match g.persistence {
            Some(true) => "On",
            Some(false) => "Off",
            None => "N/A",
        };
        let disp = match g.display_active {
            Some(true) => "On",
            Some(false) => "Off",
            None => "N/A",
        };
        let ecc = if g.ecc == Some(true) { "0" } else { "N/A" };
        out.push(format!(
            "| {:>3}  {:<29}{:>4}  | {:>18} {:>3} | {:>20} |",
            g.index,
            clip(&g.name, 29),
            persistence,
            g.bus_id,
            disp,
            ecc
        ));
        let fan = g
            .fan
            .map(|f| format!("{f}%"))
            .unwrap_or_else(|| "N/A".into());
        let temp = g
            .temperature
            .map(|t| format!("{t}C"))
            .unwrap_or_else(|| "N/A".into());
        let draw = g
            .power_mw
            .map(|p| format!("{}W", p / 1000))
            .unwrap_or_else(|| "N/A".into());
        let cap = g
            .limit_mw
            .map(|p| format!("{}W", p / 1000))
            .unwrap_or_else(|| "N/A".into());
        let used = or_na(g.memory_mib(2)) + "MiB";
        let total = or_na(g.memory_mib(0)) + "MiB";
        let util = g
            .utilization
            .map(|u| format!("{}%", u.0))
            .unwrap_or_else(|| "N/A".into());
        out.push(format!(
            "| {:>3}  {:>4}    {:<4}{:>14} / {:>5} | {:>10} / {:>9} | {:>8}{:>12} |",
            fan,
            temp,
            or_na(g.pstate_text()),
            draw,
            cap,
            used,
            total,
            util,
            or_na(g.compute_mode_text())
        ));
        let mig = g.mig.map(enabled).unwrap_or("N/A");
        out.push(format!("|{:41}|{:24}| {:>20} |", "", "", mig));
        out.push(cols('+', "-", '+'));
    }
    out.push(String::new());
    out.push(rule.clone());
    out.push(boxed(" Processes:"));
    out.push(boxed(
        "  GPU   GI   CI              PID   Type   Process name                        GPU Memory",
    ));
    out.push(boxed(
        "        ID   ID                                                               Usage     ",
    ));
    out.push(format!("|{}|", "=".repeat(INNER)));
    let mut any = false;
    for g in gpus {
        for (pid, used) in &g.processes {
            any = true;
            out.push(boxed(&format!(
                "  {:>3}   N/A  N/A  {:>15}      C   {:<33}{:>10}",
                g.index,
                pid,
                clip(&process_name(*pid), 33),
                format!("{}MiB", Gpu::mib(*used))
            )));
        }
    }
    if !any {
        out.push(boxed("  No running processes found"));
    }
    out.push(rule);
    out.join("\n") + "\n"
}

/// A process's name as `/proc` has it (its command line's first word, else `comm`).
pub fn process_name(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|c| {
            c.split(|&b| b == 0)
                .next()
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
        })
        .or_else(|| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .map(|s| s.trim_end().to_string())
        })
        .unwrap_or_else(|| "N/A".into())
}

pub fn list(gpus: &[Gpu]) -> String {
    gpus.iter()
        .map(|g| format!("GPU {}: {} (UUID: {})\n", g.index, g.name, g.uuid))
        .collect()
}

/// `-q` sections `-d` can select.
pub const SECTIONS: &[&str] = &[
    "MEMORY",
    "UTILIZATION",
    "ECC",
    "TEMPERATURE",
    "POWER",
    "CLOCK",
    "COMPUTE",
    "PIDS",
    "PERFORMANCE",
];

/// A `key : value` line with the colon where nvidia-smi puts it.
fn kv(out: &mut Vec<String>, depth: usize, key: &str, value: impl std::fmt::Display) {
    let k = format!("{}{key}", "    ".repeat(depth));
    out.push(format!("{k:<42}: {value}"));
}

fn head(out: &mut Vec<String>, depth: usize, title: &str) {
    out.push(format!("{}{title}", "    ".repeat(depth)));
}

fn mhz(v: Option<u32>) -> String {
    v.map(|v| format!("{v} MHz"))
        .unwrap_or_else(|| "N/A".into())
}

fn celsius(v: Option<u32>) -> String {
    v.map(|v| format!("{v} C")).unwrap_or_else(|| "N/A".into())
}

fn w(v: Option<u32>) -> String {
    v.map(|v| format!("{} W", watts(v)))
        .unwrap_or_else(|| "N/A".into())
}

fn mib(v: Option<u64>) -> String {
    v.map(|v| format!("{v} MiB"))
        .unwrap_or_else(|| "N/A".into())
}

/// `-q`: every section, or those `display` names.
pub fn query(sys: &System, gpus: &[Gpu], attached: u32, display: &[String]) -> String {
    let all = display.is_empty();
    let on = |s: &str| all || display.iter().any(|d| d == s);
    let mut out = vec![
        String::new(),
        "==============NVSMI LOG==============".into(),
        String::new(),
    ];
    kv(&mut out, 0, "Timestamp", timestamp());
    kv(&mut out, 0, "Driver Version", &sys.driver);
    kv(&mut out, 0, "CUDA Version", &sys.cuda);
    out.push(String::new());
    kv(&mut out, 0, "Attached GPUs", attached);
    for g in gpus {
        out.push(format!("GPU {}", g.bus_id));
        if all {
            general(&mut out, g);
        }
        if on("PERFORMANCE") {
            kv(&mut out, 1, "Performance State", or_na(g.pstate_text()));
            head(&mut out, 1, "Clocks Event Reasons");
            let idle = g
                .throttle
                .map(|t| if t & 1 != 0 { "Active" } else { "Not Active" });
            kv(&mut out, 2, "Idle", or_na(idle));
        }
        if on("MEMORY") {
            head(&mut out, 1, "FB Memory Usage");
            kv(&mut out, 2, "Total", mib(g.memory_mib(0)));
            kv(&mut out, 2, "Reserved", mib(g.memory.map(|_| 0)));
            kv(&mut out, 2, "Used", mib(g.memory_mib(2)));
            kv(&mut out, 2, "Free", mib(g.memory_mib(1)));
        }
        if on("COMPUTE") {
            kv(&mut out, 1, "Compute Mode", or_na(g.compute_mode_text()));
        }
        if on("UTILIZATION") {
            head(&mut out, 1, "Utilization");
            let pct = |v: Option<u32>| v.map(|v| format!("{v} %")).unwrap_or_else(|| "N/A".into());
            kv(&mut out, 2, "Gpu", pct(g.utilization.map(|u| u.0)));
            kv(&mut out, 2, "Memory", pct(g.utilization.map(|u| u.1)));
            kv(&mut out, 2, "Encoder", pct(g.utilization.map(|_| 0)));
            kv(&mut out, 2, "Decoder", pct(g.utilization.map(|_| 0)));
        }
        if on("ECC") {
            head(&mut out, 1, "ECC Mode");
            kv(&mut out, 2, "Current", or_na(g.ecc.map(enabled)));
            kv(&mut out, 2, "Pending", or_na(g.ecc.map(enabled)));
        }
        if on("TEMPERATURE") {
            head(&mut out, 1, "Temperature");
            kv(&mut out, 2, "GPU Current Temp", celsius(g.temperature));
            kv(&mut out, 2, "GPU Shutdown Temp", celsius(g.thresholds[0]));
            kv(&mut out, 2, "GPU Slowdown Temp", celsius(g.thresholds[1]));
            kv(
                &mut out,
                2,
                "GPU Max Operating Temp",
                celsius(g.thresholds[3]),
            );
            kv(&mut out, 2, "Memory Current Temp", "N/A");
            kv(
                &mut out,
                2,
                "Memory Max Operating Temp",
                celsius(g.thresholds[2]),
            );
        }
        if on("POWER") {
            head(&mut out, 1, "GPU Power Readings");
            kv(&mut out, 2, "Power Draw", w(g.power_mw));
            kv(&mut out, 2, "Current Power Limit", w(g.limit_mw));
            kv(&mut out, 2, "Requested Power Limit", w(g.limit_mw));
            kv(&mut out, 2, "Default Power Limit", w(g.default_limit_mw));
            kv(
                &mut out,
                2,
                "Min Power Limit",
                w(g.limit_range_mw.map(|r| r.0)),
            );
            kv(
                &mut out,
                2,
                "Max Power Limit",
                w(g.limit_range_mw.map(|r| r.1)),
            );
        }
        if on("CLOCK") {
            let names = ["Graphics", "SM", "Memory", "Video"];
            head(&mut out, 1, "Clocks");
            for (n, v) in names.iter().zip(g.clocks) {
                kv(&mut out, 2, n, mhz(v));
            }
            head(&mut out, 1, "Applications Clocks");
            kv(&mut out, 2, "Graphics", mhz(g.max_clocks[0]));
            kv(&mut out, 2, "Memory", mhz(g.max_clocks[2]));
            head(&mut out, 1, "Max Clocks");
            for (n, v) in names.iter().zip(g.max_clocks) {
                kv(&mut out, 2, n, mhz(v));
            }
        }
        if on("PIDS") {
            if g.processes.is_empty() {
                kv(&mut out, 1, "Processes", "None");
            } else {
                head(&mut out, 1, "Processes");
                for (pid, used) in &g.processes {
                    kv(&mut out, 2, "GPU instance ID", "N/A");
                    kv(&mut out, 2, "Compute instance ID", "N/A");
                    kv(&mut out, 2, "Process ID", pid);
                    kv(&mut out, 2, "Type", "C");
                    kv(&mut out, 2, "Name", process_name(*pid));
                    kv(
                        &mut out,
                        2,
                        "Used GPU Memory",
                        format!("{} MiB", Gpu::mib(*used)),
                    );
                }
            }
        }
        out.push(String::new());
    }
    out.join("\n") + "\n"
}

fn general(out: &mut Vec<String>, g: &Gpu) {
    kv(out, 1, "Product Name", &g.name);
    kv(out, 1, "Display Mode", "Disabled");
    kv(
        out,
        1,
        "Display Active",
        or_na(g.display_active.map(enabled)),
    );
    kv(
        out,
        1,
        "Persistence Mode",
        or_na(g.persistence.map(enabled)),
    );
    head(out, 1, "MIG Mode");
    kv(out, 2, "Current", or_na(g.mig.map(enabled)));
    kv(out, 2, "Pending", or_na(g.mig.map(enabled)));
    kv(out, 1, "GPU UUID", &g.uuid);
    kv(out, 1, "Minor Number", g.index);
    head(out, 1, "PCI");
    let parts: Vec<&str> = g.bus_id.split([':', '.']).collect();
    if let [domain, bus, device, _] = parts[..] {
        kv(out, 2, "Bus", format!("0x{bus}"));
        kv(out, 2, "Device", format!("0x{device}"));
        kv(
            out,
            2,
            "Domain",
            format!("0x{}", &domain[domain.len().saturating_sub(4)..]),
        );
    }
    kv(out, 2, "Bus Id", &g.bus_id);
    kv(out, 1, "Fan Speed", or_na(g.fan.map(|f| format!("{f} %"))));
}
