//! What the benchmarks in `benches/` share: the allocator they measure with and where the bundled
//! topologies are.

/// The allocator the `ncclsim` binary uses; `--features system-alloc` measures with the system
/// allocator instead. Declared here, it serves every benchmark binary (each links this library).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The path of a bundled topology file (`topologies/<name>`).
pub fn topology_file(name: &str) -> String {
    format!("{}/../topologies/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A one-node topology of `n` GPUs (A100-like, one PCIe link each, one CPU, one NIC) in which
/// every GPU has one NVLink to every other: `n * (n - 1)` `<nvlink>` elements, the worst case of
/// the file's size for its GPU count.
pub fn all_to_all_nvlink(n: usize) -> String {
    use std::fmt::Write;
    let bus = |i: usize| format!("0000:{:02x}:{:02x}.0", 1 + i / 32, i % 32);
    let mut s = String::from(
        "<system version=\"1\">\n <cpu numaid=\"0\" affinity=\"ffffffff\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"85\">\n",
    );
    for i in 0..n {
        let _ = writeln!(
            s,
            "  <pci busid=\"{}\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x20b0\" subsystem_vendor=\"0x10de\" subsystem_device=\"0x134f\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n   <gpu dev=\"{i}\" sm=\"80\" rank=\"{i}\" gdr=\"1\">",
            bus(i)
        );
        for j in (0..n).filter(|&j| j != i) {
            let _ = writeln!(
                s,
                "    <nvlink target=\"{}\" count=\"1\" tclass=\"0x030200\"/>",
                bus(j)
            );
        }
        s.push_str("   </gpu>\n  </pci>\n");
    }
    s.push_str("  <pci busid=\"0000:f0:00.0\" class=\"0x020700\" vendor=\"0x15b3\" device=\"0x101b\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"><nic><net name=\"mlx5_0\" dev=\"0\" speed=\"200000\" port=\"1\" latency=\"0\" guid=\"0x1\" maxconn=\"131072\" gdr=\"1\"/></nic></pci>\n </cpu>\n</system>\n");
    s
}
