//! Compute in the run's traces (`NCCLSIM_TRACE=DIR`): every launch through the compute door
//! (`Core::launch_compute`: torch ops, cuBLAS and cuBLASLt GEMMs, eagerly and at each graph
//! replay) is a complete event of category `compute` in `DIR/compute-<host>-<pid>.json`, a
//! Chrome-trace / Perfetto JSON array beside the NCCL trace of the same process: the kernel's
//! name, its stream's virtual start and duration, the device and its board's name, the stream,
//! FLOPs, bytes, the units and precision it was priced on, a GEMM's shape, the fused attention
//! kernel it is, the `cudaProfilerStart` range it ran in, the training steps the program marked
//! before it (`mark`; each mark is also a `step_end` instant event), under the virtual clock the host's
//! time when it was issued (`issued_us`), and what its caller adds (`detail`: torch's shapes and
//! dtype). Events are buffered and the file is rewritten complete (valid JSON) at every flush;
//! `libncclsim_cuda.so` flushes at exit. `ncclsim trace kernels DIR` lists them with the NCCL
//! operations.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// Events buffered before they are written.
const FLUSH_EVERY: usize = 512;

/// The trace of this process's compute: its directory, and the file once there is an event
/// (a process that computes nothing leaves no file).
#[derive(Debug)]
pub(crate) struct Trace {
    dir: std::path::PathBuf,
    writer: Option<Writer>,
}

impl Trace {
    /// A trace into `dir`, made if missing (a directory that cannot be made is an error now).
    pub fn new(dir: &Path) -> std::io::Result<Trace> {
        std::fs::create_dir_all(dir)?;
        Ok(Trace {
            dir: dir.to_path_buf(),
            writer: None,
        })
    }

    /// Queues one launch, opening the file at the first.
    pub fn add(&mut self, pid: u32, l: &Launch<'_>) -> std::io::Result<()> {
        let w = match &mut self.writer {
            Some(w) => w,
            None => self.writer.insert(Writer::open(&self.dir)?),
        };
        w.add(pid, l)
    }

    /// Queues the end of the program's `mark`-th training step (marked `by` its optimizer or
    /// profiler) at `at_ns`, opening the file if this is its first event.
    pub fn step_end(&mut self, pid: u32, mark: u64, by: &str, at_ns: u64) -> std::io::Result<()> {
        let w = match &mut self.writer {
            Some(w) => w,
            None => self.writer.insert(Writer::open(&self.dir)?),
        };
        let event = serde_json::json!({
            "name": "step_end",
            "cat": "step",
            "ph": "i",
            "s": "p",
            "pid": pid,
            "tid": 0,
            "ts": at_ns as f64 / 1e3,
            "args": {"mark": mark, "by": by},
        });
        w.push(event.to_string())
    }

    /// Writes the queued events.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.writer.as_mut().map_or(Ok(()), Writer::flush)
    }
}

/// The open trace file of this process's compute.
#[derive(Debug)]
pub(crate) struct Writer {
    file: File,
    pending: Vec<String>,
    written: usize,
    /// Where the closing bracket goes.
    tail: u64,
}

/// One launch as the trace shows it.
/// Where a compute launch was placed: its virtual (start, end), and how much longer it took
/// than alone for the communication kernels beside it (`sharing`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    pub times: (crate::SimTime, crate::SimTime),
    pub shared: crate::SimDuration,
}

pub(crate) struct Launch<'a> {
    pub name: &'a str,
    pub stream: u64,
    /// The host's virtual time when it issued the launch (under the virtual clock).
    pub issued_ns: Option<u64>,
    pub start_ns: u64,
    pub duration_ns: u64,
    /// The part of `duration_ns` due to communication kernels holding multiprocessors.
    pub shared_ns: u64,
    pub device: i32,
    pub gpu: &'a str,
    pub cost: &'a compute_model::KernelCost,
    pub range: Option<u64>,
    /// The training steps the program marked as ended before it (`step_mark`).
    pub mark: u64,
    /// A JSON object of the caller's, merged into the event's arguments.
    pub detail: Option<&'a str>,
}

impl Writer {
    /// Opens `dir/compute-<host>-<pid>.json` (the directory made if missing).
    pub fn open(dir: &Path) -> std::io::Result<Writer> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!(
            "compute-{}-{}.json",
            host_name(),
            std::process::id()
        ));
        let mut file = File::create(path)?;
        file.write_all(b"[\n")?;
        let tail = file.stream_position()?;
        file.write_all(b"]\n")?;
        Ok(Writer {
            file,
            pending: Vec::new(),
            written: 0,
            tail,
        })
    }

    /// Queues one launch; writes the queue when it is full.
    pub fn add(&mut self, pid: u32, l: &Launch<'_>) -> std::io::Result<()> {
        let (unit, precision) = match l.cost.unit {
            compute_model::Unit::Vector(p) => ("vector", p),
            compute_model::Unit::Tensor(p) => ("tensor", p),
        };
        let mut args = serde_json::json!({
            "device": l.device,
            "gpu": l.gpu,
            "stream": l.stream,
            "flops": l.cost.flops,
            "bytes": l.cost.bytes,
            "unit": unit,
            "precision": precision.name(),
            "gemm": l.cost.gemm.map(|g| [g.batch, g.m, g.n, g.k]),
            "attention": l.cost.attention.map(|a| serde_json::json!({
                "library": a.library.name(),
                "backward": a.backward,
                "causal": a.causal,
            })),
            "range": l.range,
            "mark": l.mark,
            "issued_us": l.issued_ns.map(|ns| ns as f64 / 1e3),
            "shared_us": l.shared_ns as f64 / 1e3,
        });
        if let Some(serde_json::Value::Object(extra)) =
            l.detail.and_then(|d| serde_json::from_str(d).ok())
        {
            if let serde_json::Value::Object(a) = &mut args {
                a.extend(extra);
            }
        }
        let event = serde_json::json!({
            "name": l.name,
            "cat": "compute",
            "ph": "X",
            "pid": pid,
            "tid": l.stream,
            "ts": l.start_ns as f64 / 1e3,
            "dur": l.duration_ns as f64 / 1e3,
            "args": args,
        });
        self.push(event.to_string())
    }

    /// Queues one event; writes the queue when it is full.
    fn push(&mut self, event: String) -> std::io::Result<()> {
        self.pending.push(event);
        if self.pending.len() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the queued events, leaving the file a complete JSON array.
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let sep = if self.written == 0 { "" } else { ",\n" };
        let text = format!("{sep}{}", self.pending.join(",\n"));
        self.file.seek(SeekFrom::Start(self.tail))?;
        self.file.write_all(text.as_bytes())?;
        self.tail = self.file.stream_position()?;
        self.file.write_all(b"\n]\n")?;
        let end = self.file.stream_position()?;
        self.file.set_len(end)?;
        self.written += self.pending.len();
        self.pending.clear();
        Ok(())
    }
}

/// The host name programs see (`gethostname`, the simulated node's under `ncclsim run`).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` has room for 256 bytes, the length passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "host".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_a_json_array_after_every_flush() {
        let dir =
            std::env::temp_dir().join(format!("ncclsim-compute-trace-{}", std::process::id()));
        let mut w = Writer::open(&dir).unwrap();
        let cost = compute_model::KernelCost {
            flops: 2.0 * 8.0 * 8.0 * 8.0,
            bytes: 768.0,
            unit: compute_model::Unit::Tensor(compute_model::Precision::Bf16),
            gemm: Some(compute_model::Gemm {
                batch: 1,
                m: 8,
                n: 8,
                k: 8,
            }),
            attention: None,
        };
        let launch = |start_ns, detail| Launch {
            name: "aten::mm",
            stream: 7,
            issued_ns: None,
            start_ns,
            duration_ns: 2500,
            shared_ns: 0,
            device: 1,
            gpu: "NVIDIA H100 80GB HBM3",
            cost: &cost,
            range: Some(0),
            mark: 0,
            detail,
        };
        let path = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        w.add(1, &launch(1000, Some(r#"{"dtype":"bfloat16"}"#)))
            .unwrap();
        w.flush().unwrap();
        w.add(1, &launch(4000, None)).unwrap();
        w.flush().unwrap();
        let events: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(events.len(), 2);
        let a = &events[0]["args"];
        assert_eq!(
            (events[0]["ts"].as_f64(), events[0]["dur"].as_f64()),
            (Some(1.0), Some(2.5))
        );
        assert_eq!(
            (a["unit"].as_str(), a["precision"].as_str()),
            (Some("tensor"), Some("bf16"))
        );
        assert_eq!(a["gemm"], serde_json::json!([1, 8, 8, 8]));
        assert_eq!(a["dtype"], "bfloat16");
        assert_eq!(events[1]["ts"].as_f64(), Some(4.0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
