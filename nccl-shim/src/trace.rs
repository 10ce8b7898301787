//! `NCCLSIM_TRACE=DIR`: a Chrome-trace / Perfetto JSON file per process
//! (`DIR/ncclsim-<host>-<pid>.json`, opens in ui.perfetto.dev) with every NCCL operation on its
//! stream's virtual timeline (communicator, op, bytes, type, root or peer, algorithm, protocol,
//! channels, predicted and waited microseconds) and each communicator's plan summary.
//!
//! The file is a JSON array that is complete after every event: each event is written over the
//! closing bracket and the bracket written again, so the file stays valid JSON whenever the
//! process stops, `kill -9` included.

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
        let dir = std::env::var("NCCLSIM_TRACE").ok()?;
        if let Err(e) = std::fs::create_dir_all(&dir) {
            crate::error::warn(&format!("NCCLSIM_TRACE={dir}: {e}"));
            return None;
        }
        let path = format!(
            "{dir}/ncclsim-{}-{}.json",
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

/// Escapes a string for JSON.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Appends one event (a JSON object) to the process's trace.
pub fn event(json: &str) {
    let Some(w) = writer() else { return };
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

/// A complete event ("ph":"X") on a stream's timeline, times in nanoseconds of virtual time.
pub fn span(name: &str, stream: u64, start_ns: u64, dur_ns: u64, args: &str) {
    event(&format!(
        "{{\"name\":{},\"cat\":\"nccl\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{{args}}}}}",
        json_str(name),
        std::process::id(),
        stream,
        start_ns as f64 / 1e3,
        dur_ns as f64 / 1e3
    ));
}

/// An instant event ("ph":"i") with arguments, e.g. a communicator's plan at init.
pub fn instant(name: &str, ts_ns: u64, args: &str) {
    event(&format!(
        "{{\"name\":{},\"cat\":\"nccl\",\"ph\":\"i\",\"s\":\"p\",\"pid\":{},\"tid\":0,\"ts\":{:.3},\"args\":{{{args}}}}}",
        json_str(name),
        std::process::id(),
        ts_ns as f64 / 1e3
    ));
}
