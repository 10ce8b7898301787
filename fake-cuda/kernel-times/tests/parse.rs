//! The kernel-time files a user brings: an nsys GPU trace CSV (with nsys's progress messages,
//! copies, an NCCL kernel and a second device in it) and an Orion kernel-info CSV, written by
//! hand in the tools' layouts; and the errors bad files get.

use kernel_times::{parse, Format, KernelTimes, MatchBy};

fn data(name: &str) -> (String, String) {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

#[test]
fn nsys_gputrace_keeps_the_first_devices_kernels_in_order() {
    let (path, text) = data("gputrace.csv");
    let t = parse(&path, &text).unwrap();
    assert_eq!(t.format, Format::GpuTrace);
    let rows: Vec<(&str, u64, u64)> = t
        .rows
        .iter()
        .map(|r| (r.name.as_str(), r.duration_ns, r.line))
        .collect();
    assert_eq!(
        rows,
        [
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char *, 1>>(int, T2, T3)",
                1921,
                5
            ),
            ("ampere_sgemm_128x64_nn", 48511, 6),
            ("vecAdd(float *, float *, float *, int)", 3200, 7),
            ("ampere_sgemm_128x64_nn", 47988, 10),
        ]
    );
    // Two copies/memsets, the NCCL kernel and device 1's kernel.
    assert_eq!(t.skipped, 4);
}

#[test]
fn orion_kernel_info_reads_names_with_commas() {
    let (path, text) = data("orion.csv");
    let t = parse(&path, &text).unwrap();
    assert_eq!(t.format, Format::Orion);
    let rows: Vec<(&str, u64)> = t
        .rows
        .iter()
        .map(|r| (r.name.as_str(), r.duration_ns))
        .collect();
    assert_eq!(
        rows,
        [
            ("Conv", 100480),
            ("BatchNorm", 40480),
            ("void at::native::vectorized_elementwise_kernel", 32512),
            ("void at::native::(anonymous namespace)::max_pool_forward_nchw", 34464),
            ("void cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)", 5152),
            ("Conv", 99872),
        ]
    );
    let mut k = KernelTimes::new(t, MatchBy::Name);
    assert_eq!(k.duration(0, "Conv"), Some(100480));
    assert_eq!(k.duration(0, "Conv"), Some(99872));
    assert_eq!(k.duration(0, "Conv"), Some(100480));
    // nsys's full name of a kernel Orion cut at its template arguments.
    assert_eq!(
        k.duration(0, "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int, T2, T3)"),
        Some(32512)
    );
}

#[test]
fn other_duration_units_are_converted() {
    let t = parse("f", "Name,Duration(nsec)\nk,12\n").unwrap();
    assert_eq!(t.rows[0].duration_ns, 12);
    let t = parse("f", "\"Duration (us)\",\"Name\"\n2.5,k\n").unwrap();
    assert_eq!(t.rows[0].duration_ns, 2500);
    let t = parse("f", "Start(sec),Duration (ms),Name\n0.1,0.004,k\n").unwrap();
    assert_eq!(t.rows[0].duration_ns, 4000);
}

fn error(text: &str) -> String {
    parse("kt.csv", text).unwrap_err().to_string()
}

#[test]
fn bad_files_name_file_line_and_column() {
    assert_eq!(
        error("\"Start (ns)\",\"Duration (ns)\",\"Name\"\n1,5,a\n2,fast,b\n"),
        "kt.csv:3: column 2 (\"Duration (ns)\"): \"fast\" is not a number"
    );
    assert_eq!(
        error("Name,Duration (ns)\na,-4\n"),
        "kt.csv:2: column 2 (\"Duration (ns)\"): \"-4\" is not a duration (finite, not negative)"
    );
    assert_eq!(
        error("Name,Duration (ns)\na,\n"),
        "kt.csv:2: column 2 (\"Duration (ns)\"): empty duration"
    );
    assert_eq!(
        error("Duration (ns),Name,Strm\n1,a,7\n2,b\n"),
        "kt.csv:3: 2 fields; the header has 3"
    );
    assert_eq!(
        error("Name,Profile,Memory_footprint,SM_usage,Duration\nConv,1,0,98\n"),
        "kt.csv:2: 4 fields; Orion's rows have 5 (Name,Profile,Memory_footprint,SM_usage,Duration)"
    );
    assert_eq!(
        error("Name,Profile,Memory_footprint,SM_usage,Duration\nConv,1,0,98,1e999\n"),
        "kt.csv:2: column 5 (\"Duration\"): \"1e999\" is not a duration (finite, not negative)"
    );
    assert_eq!(
        error("Name,Duration (ns)\n,4\n"),
        "kt.csv:2: empty kernel name"
    );
    assert!(error("Kernel,Time\na,4\n").starts_with("kt.csv: no header line: expected nsys's"));
    assert!(error("Name,Duration (fortnights)\na,4\n").starts_with("kt.csv: no header line"));
    assert_eq!(
        error("Name,Duration (ns)\n[CUDA memset],4\n"),
        "kt.csv: no kernel rows (1 rows of copies, memsets, NCCL kernels or other devices left out)"
    );
    assert!(error("Name,Duration (ns)\n\"a,4\n").starts_with("kt.csv:"));
}
