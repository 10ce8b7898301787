//! `nvidia-smi` for programs under `ncclsim run`: NVIDIA's System Management Interface over the
//! fake NVML (`libnvidia-ml.so.1`), so environment checks and monitors see the simulated node's
//! GPUs. `ncclsim run` puts this program first on the command's `PATH`.
//!
//! Supported: the summary table, `-L`, `-q` (`-d` sections), `-i`, `--query-gpu` and
//! `--query-compute-apps` with `--format=csv[,noheader][,nounits]` (`--help-query-gpu`,
//! `--help-query-compute-apps`), `-l`, `topo -m`, `nvlink --status`, `dmon`. Anything else is
//! refused as nvidia-smi refuses it, with exit status 2.

mod gpu;
mod nvml;
mod query;
mod table;
mod topo;

use gpu::Gpu;
use nvml::Nvml;
use std::process::ExitCode;
use table::System;

const USAGE_HINT: &str = "Please run 'nvidia-smi -h' for help.";

/// Exit status 2: a supplied argument or flag is invalid (nvidia-smi's code).
fn invalid(message: &str) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(2)
}

/// What the command line asks for.
#[derive(Default)]
struct Options {
    list: bool,
    query: bool,
    display: Vec<String>,
    ids: Option<String>,
    query_gpu: Option<String>,
    query_apps: Option<String>,
    format: Option<String>,
    help: bool,
    /// `--help-query-gpu` (false) or `--help-query-compute-apps` (true).
    help_fields: Option<bool>,
    version: bool,
    /// `-l SEC`: repeat the report every SEC seconds until interrupted.
    loop_secs: Option<u64>,
}

/// `--name=value`, or `--name value` / `-n value`.
fn value(
    arg: &str,
    names: &[&str],
    rest: &mut std::slice::Iter<String>,
) -> Option<Result<String, String>> {
    for name in names {
        if let Some(v) = arg.strip_prefix(&format!("{name}=")) {
            return Some(Ok(v.to_string()));
        }
        if arg == *name {
            return Some(
                rest.next()
                    .cloned()
                    .ok_or_else(|| format!("Option {name} requires a value.")),
            );
        }
    }
    None
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = value(a, &["-i", "--id"], &mut it) {
            o.ids = Some(v?);
        } else if let Some(v) = value(a, &["-d", "--display"], &mut it) {
            o.display = v?
                .split(',')
                .map(|s| s.trim().to_ascii_uppercase())
                .collect();
        } else if let Some(v) = value(a, &["--query-gpu"], &mut it) {
            o.query_gpu = Some(v?);
        } else if let Some(v) = value(a, &["--query-compute-apps"], &mut it) {
            o.query_apps = Some(v?);
        } else if let Some(v) = value(a, &["--format"], &mut it) {
            o.format = Some(v?);
        } else if let Some(v) = value(a, &["-l", "--loop"], &mut it) {
            let v = v?;
            let secs = v.parse::<u64>().ok().filter(|&s| s > 0);
            o.loop_secs =
                Some(secs.ok_or_else(|| format!("Invalid loop interval \"{v}\". {USAGE_HINT}"))?);
        } else {
            match a.as_str() {
                "-L" | "--list-gpus" => o.list = true,
                "-q" | "--query" => o.query = true,
                "-h" | "--help" => o.help = true,
                "--help-query-gpu" => o.help_fields = Some(false),
                "--help-query-compute-apps" => o.help_fields = Some(true),
                "--version" => o.version = true,
                _ => {
                    return Err(format!(
                        "Invalid combination of input arguments. {USAGE_HINT}"
                    ))
                }
            }
        }
    }
    Ok(o)
}

/// The GPUs `-i` names (indices, bus ids or UUIDs, comma separated), else all.
fn select(nvml: &Nvml, ids: Option<&str>) -> Result<Vec<Gpu>, ExitCode> {
    let count = nvml.count();
    let all: Vec<Gpu> = (0..count).filter_map(|i| Gpu::read(nvml, i)).collect();
    let Some(ids) = ids else {
        return Ok(all);
    };
    let mut chosen = Vec::new();
    for id in ids.split(',').map(str::trim) {
        let found = all.iter().position(|g| {
            id.parse::<u32>().ok() == Some(g.index)
                || g.uuid.eq_ignore_ascii_case(id)
                || g.bus_id.eq_ignore_ascii_case(id)
                || g.bus_id
                    .to_ascii_lowercase()
                    .ends_with(&id.to_ascii_lowercase())
        });
        match found {
            Some(i) => chosen.push(i),
            None => {
                eprintln!("No devices were found");
                return Err(ExitCode::from(6));
            }
        }
    }
    let mut all: Vec<Option<Gpu>> = all.into_iter().map(Some).collect();
    Ok(chosen.into_iter().filter_map(|i| all[i].take()).collect())
}

fn help() -> &'static str {
    "NVIDIA System Management Interface -- ncclsim's, over the simulated node's NVML.\n\n\
     nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...\n\n\
     \x20   -h,   --help                Print usage information and exit.\n\
     \x20   -L,   --list-gpus           Display a list of GPUs connected to the system.\n\
     \x20   -i,   --id=                 Target a specific GPU (index, PCI bus id or UUID).\n\
     \x20   -q,   --query               Display GPU or Unit info.\n\
     \x20   -d,   --display=            Display only selected information: MEMORY,\n\
     \x20                               UTILIZATION, ECC, TEMPERATURE, POWER, CLOCK,\n\
     \x20                               COMPUTE, PIDS, PERFORMANCE.\n\
     \x20   --query-gpu=                Information about GPU (index, name, uuid, pci.bus_id,\n\
     \x20                               memory.total, power.draw, clocks.sm, ...).\n\
     \x20   --query-compute-apps=       List of active compute processes (pid, process_name,\n\
     \x20                               used_memory, gpu_uuid, gpu_bus_id).\n\
     \x20   --format=                   csv, with optional noheader and nounits.\n\
     \x20   --help-query-gpu            The fields --query-gpu takes.\n\
     \x20   --help-query-compute-apps   The fields --query-compute-apps takes.\n\
     \x20   -l,   --loop=               Repeat the report every SEC seconds.\n\n\
     \x20   topo -m                     Display the GPUDirect communication matrix.\n\
     \x20   nvlink --status [-i N]      Display NVLink status.\n\
     \x20   dmon [-c COUNT] [-d SECS] [-i N]  Device monitoring.\n"
}

fn load() -> Result<Nvml, ExitCode> {
    Nvml::load().map_err(|e| {
        println!("{}", e.message);
        ExitCode::from(e.code)
    })
}

fn system(nvml: &Nvml) -> System {
    let driver = nvml
        .system_string(c"nvmlSystemGetDriverVersion")
        .unwrap_or_else(|| "N/A".into());
    let cuda = nvml
        .cuda_driver_version()
        .map(|v| format!("{}.{}", v / 1000, v % 1000 / 10))
        .unwrap_or_else(|| "N/A".into());
    System { driver, cuda }
}

/// `nvidia-smi nvlink ...` and `nvidia-smi dmon ...`: their own small option sets.
fn subcommand(cmd: &str, args: &[String]) -> ExitCode {
    let mut ids = None;
    let mut count = u32::MAX;
    let mut delay = 1;
    let mut status = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let number = |v: Option<&String>| v.and_then(|v| v.parse::<u32>().ok());
        match (cmd, a.as_str()) {
            (_, "-i" | "--id") => ids = it.next().cloned(),
            ("nvlink", "-s" | "--status") => status = true,
            ("dmon", "-c" | "--count") => match number(it.next()) {
                Some(n) => count = n,
                None => return invalid(&format!("Invalid count. {USAGE_HINT}")),
            },
            ("dmon", "-d" | "--delay") => match number(it.next()) {
                Some(n) => delay = n,
                None => return invalid(&format!("Invalid delay. {USAGE_HINT}")),
            },
            _ => {
                return invalid(&format!(
                    "Invalid combination of input arguments. {USAGE_HINT}"
                ))
            }
        }
    }
    let nvml = match load() {
        Ok(n) => n,
        Err(code) => return code,
    };
    let gpus = match select(&nvml, ids.as_deref()) {
        Ok(g) => g,
        Err(code) => return code,
    };
    if cmd == "nvlink" {
        if !status {
            return invalid(&format!(
                "Invalid combination of input arguments. {USAGE_HINT}"
            ));
        }
        print!("{}", query::nvlink_status(&nvml, &gpus));
    } else {
        let indices: Vec<u32> = gpus.iter().map(|g| g.index).collect();
        query::dmon(&nvml, &indices, count, delay);
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("topo") => {
            if !matches!(&args[1..], [m] if m == "-m" || m == "--matrix") {
                return invalid(&format!(
                    "Invalid combination of input arguments. {USAGE_HINT}"
                ));
            }
            return match topo::matrix() {
                Ok(m) => {
                    print!("{m}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("Failed to read the topology: {e}");
                    ExitCode::from(255)
                }
            };
        }
        Some(cmd @ ("nvlink" | "dmon")) => return subcommand(cmd, &args[1..]),
        _ => {}
    }
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => return invalid(&e),
    };
    if o.help {
        print!("{}", help());
        return ExitCode::SUCCESS;
    }
    if let Some(apps) = o.help_fields {
        print!("{}", query::help_fields(apps));
        return ExitCode::SUCCESS;
    }
    let format = match (&o.format, o.query_gpu.is_some() || o.query_apps.is_some()) {
        (Some(f), true) => match query::parse_format(f) {
            Ok(f) => Some(f),
            Err(e) => return invalid(&format!("{e}\n{USAGE_HINT}")),
        },
        (None, true) => {
            return invalid(&format!("Format option is required. {USAGE_HINT}"));
        }
        (Some(_), false) => {
            return invalid(&format!(
                "Invalid combination of input arguments. {USAGE_HINT}"
            ));
        }
        (None, false) => None,
    };
    if !o.display.is_empty() && !o.query {
        return invalid(&format!("-d requires -q. {USAGE_HINT}"));
    }
    if let Some(bad) = o
        .display
        .iter()
        .find(|d| !table::SECTIONS.contains(&d.as_str()))
    {
        return invalid(&format!("Invalid display option: {bad}. {USAGE_HINT}"));
    }
    let nvml = match load() {
        Ok(n) => n,
        Err(code) => return code,
    };
    let sys = system(&nvml);
    if o.version {
        println!("NVIDIA-SMI version  : {}", sys.driver);
        println!("DRIVER version      : {}", sys.driver);
        println!("CUDA Version        : {}", sys.cuda);
        return ExitCode::SUCCESS;
    }
    let count = nvml.count();
    if count == 0 {
        println!("No devices were found");
        return ExitCode::from(6);
    }
    loop {
        let gpus = match select(&nvml, o.ids.as_deref()) {
            Ok(g) => g,
            Err(code) => return code,
        };
        match report(&o, format.unwrap_or_default(), &sys, &gpus, count) {
            Ok(t) => print!("{t}"),
            Err(e) => return invalid(&e),
        }
        let Some(secs) = o.loop_secs else {
            return ExitCode::SUCCESS;
        };
        let _ = std::io::Write::flush(&mut std::io::stdout());
        std::thread::sleep(std::time::Duration::from_secs(secs));
    }
}

/// One report: the CSV query, the list, `-q`, or the summary table.
fn report(
    o: &Options,
    format: query::Format,
    sys: &System,
    gpus: &[Gpu],
    count: u32,
) -> Result<String, String> {
    if let Some(fields) = &o.query_gpu {
        query::query_gpu(fields, format, sys, gpus, count)
    } else if let Some(fields) = &o.query_apps {
        query::query_compute_apps(fields, format, gpus)
    } else if o.list {
        Ok(table::list(gpus))
    } else if o.query {
        Ok(table::query(sys, gpus, count, &o.display))
    } else {
        Ok(table::summary(sys, gpus))
    }
}
