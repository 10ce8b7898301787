//! `NCCLSIM_TRACE=DIR`: a Chrome-trace / Perfetto JSON file per process
//! (`DIR/ncclsim-<host>-<pid>.json`, opens in ui.perfetto.dev) with every NCCL operation on its
//! stream's virtual timeline (communicator, op, bytes, type, root or peer, algorithm, protocol,
//! channels, predicted and waited microseconds) and each communicator's plan summary.
//!
//! The file is a JSON array that is complete after every event: each event is written over the
//! closing bracket and the bracket written again, so the file stays valid JSON whenever the
//! process stops, `kill -9` included.

use crate::clock::{SimDuration, SimTime};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::sync::{Mutex, OnceLock};

struct Writer {
    file: File,
    events: usize,
}

fn writer() -> Option<&'static Mutex<Writer>> {
    static W: OnceLock<Option<Mutex<Writer>>> = OnceLock::new();
    W.get_or_init(|| {
        let dir = fake_cuda_client::run_env().ok()?.trace.as_ref()?;
        if let Err(e) = std::fs::create_dir_all(dir) {
            crate::error::warn(&format!("NCCLSIM_TRACE={}: {e}", dir.display()));
            return None;
        }
        let path = format!(
            "{}/ncclsim-{}-{}.json",
            dir.display(),
            crate::error::host_name(),
            std::process::id()
        );
        match File::create(&path).and_then(|mut f| f.write_all(b"[\n]\n").map(|_| f)) {
            Ok(file) => Some(Mutex::new(Writer { file, events: 0 })),
            Err(e) => {
                crate::error::warn(&format!("NCCLSIM_TRACE: {path}: {e}"));
                None
            }
        }
    })
    .as_ref()
}

/// Whether tracing is on.
pub fn enabled() -> bool {
    writer().is_some()
}

/// Event arguments: a JSON object.
pub type Args = serde_json::Map<String, serde_json::Value>;

/// One Chrome-trace event (the Trace Event Format's field names).
#[derive(serde::Serialize)]
struct Event<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    /// An instant event's scope ("p": the process).
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    pid: u32,
    tid: u64,
    /// Microseconds of virtual time.
    ts: f64,
    /// A complete event's length in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    args: &'a Args,
}

/// The arguments a `json!({...})` object literal gives (anything else gives none).
pub fn args(v: serde_json::Value) -> Args {
    match v {
        serde_json::Value::Object(m) => m,
        _ => Args::new(),
    }
}

/// `x` rounded to three decimals, the precision the trace and report give.
pub fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// Appends one event to the process's trace.
fn event(e: &Event<'_>) {
    let Some(w) = writer() else { return };
    let Ok(json) = serde_json::to_string(e) else {
        return;
    };
    let Ok(mut w) = w.lock() else { return };
    let sep = if w.events == 0 { "" } else { ",\n" };
    // Overwrite the closing "]\n" (2 bytes) and write it again after the event.
    let r = w
        .file
        .seek(SeekFrom::End(-2))
        .and_then(|_| w.file.write_all(format!("{sep}{json}\n]\n").as_bytes()));
    if r.is_ok() {
        w.events += 1;
    }
}

/// A complete event ("ph":"X") on a stream's timeline.
pub fn span(name: &str, stream: u64, start: SimTime, dur: SimDuration, args: &Args) {
    event(&Event {
        name,
        cat: "nccl",
        ph: "X",
        s: None,
        pid: std::process::id(),
        tid: stream,
        ts: start.as_micros_f64(),
        dur: Some(dur.as_micros_f64()),
        args,
    });
}

/// An instant event ("ph":"i") with arguments, e.g. a communicator's plan at init.
pub fn instant(name: &str, ts: SimTime, args: &Args) {
    event(&Event {
        name,
        cat: "nccl",
        ph: "i",
        s: Some("p"),
        pid: std::process::id(),
        tid: 0,
        ts: ts.as_micros_f64(),
        dur: None,
        args,
    });
}
