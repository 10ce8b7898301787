//! Buffer bounds against the built `libnccl.so.2` (`tests/c/nccl_bounds.c`): a buffer is
//! checked against the allocation it points into, by element count, on the communicator's
//! device. A `cudaMalloc` allocation ends where the program asked, not at the end of the
//! core's allocation granule nor at the next allocation beside it; memory the driver's
//! `cuMem*` API mapped is one buffer across the mappings of one reserved range (PyTorch's
//! expandable segments), and ends with that range; another process's allocation opened with
//! `cudaIpcOpenMemHandle` ends where its exporter asked, not with the page mapped.

use fake_cuda_test_support as support;
use std::path::Path;
use std::process::Command;

const INVALID_ARGUMENT: i32 = 4;
const UNHANDLED_CUDA_ERROR: i32 = 1;

/// The result lines as (case, code, message).
fn results(out: &str) -> Vec<(String, i32, String)> {
    out.lines()
        .filter_map(|l| l.strip_prefix("result case="))
        .map(|l| {
            let (case, rest) = l.split_once(" code=").expect("code");
            let (code, msg) = rest.split_once(" msg=").expect("msg");
            (
                case.to_string(),
                code.parse().expect("code"),
                msg.to_string(),
            )
        })
        .collect()
}

#[test]
fn buffers_are_checked_against_their_exact_allocation() {
    let dir = support::scratch_dir("nccl-bounds");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = support::build_c(
        &dir,
        &[
            ("libnccl.so", "libnccl.so.2"),
            ("libcudart12.so", "libcudart.so.12"),
            ("libcuda_driver.so", "libcuda.so.1"),
        ],
        &here.join("tests/c/nccl_bounds.c"),
        &[here.join("include")],
        &[],
        "nccl_bounds",
        0,
    );
    let out = support::run_ok(
        Command::new(&exe)
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NCCLSIM_TOPO")
            .env_remove("NCCL_TOPO_FILE")
            .env_remove("NCCLSIM_NODE")
            .env_remove("NCCL_DEBUG")
            .env("NCCLSIM_TIMEOUT", "30")
            .env("NCCLSIM_HOST_MEMORY", "64M"),
    );
    let got = results(&out);
    let case = |name: &str| {
        got.iter()
            .find(|r| r.0 == name)
            .unwrap_or_else(|| panic!("no result {name}:\n{out}"))
    };
    for ok in ["exact", "vmm_chain", "host_memory_fits", "ipc_exact"] {
        assert_eq!(case(ok).1, 0, "{ok}: {}", case(ok).2);
    }
    // (case, what the message must name)
    let refused = [
        (
            "slack",
            vec!["recvbuff 0x", "101 elements", "400 bytes", "by 4 bytes"],
        ),
        ("send_slack", vec!["sendbuff 0x", "400 bytes", "by 4 bytes"]),
        ("next", vec!["recvbuff 0x", "4096 bytes", "by 4096 bytes"]),
        ("other_device", vec!["recvbuff 0x", "device 1", "device 0"]),
        (
            "vmm_next_range",
            vec!["recvbuff 0x", "4194304 bytes", "by 64 bytes"],
        ),
        ("vmm_tail", vec!["recvbuff 0x", "by 4 bytes"]),
        (
            "ipc_slack",
            vec![
                "recvbuff 0x",
                "101 elements",
                "IPC-opened allocation 0x",
                "of 400 bytes",
                "by 4 bytes",
            ],
        ),
        (
            "ipc_send_slack",
            vec![
                "sendbuff 0x",
                "IPC-opened allocation",
                "400 bytes",
                "by 4 bytes",
            ],
        ),
        (
            "ipc_inside",
            vec!["recvbuff 0x", "(starting 200 bytes into it)", "by 4 bytes"],
        ),
    ];
    for (name, needles) in refused {
        let (_, code, msg) = case(name);
        assert_eq!(*code, INVALID_ARGUMENT, "{name}: {msg}");
        for n in needles {
            assert!(msg.contains(n), "{name}: '{msg}' lacks '{n}'");
        }
        eprintln!("{name}: {msg}");
    }
    // Device memory the host cannot back: a CUDA error, as a failed allocation inside NCCL.
    let (_, code, msg) = case("host_memory");
    assert_eq!(*code, UNHANDLED_CUDA_ERROR, "host_memory: {msg}");
    for n in [
        "out of host memory",
        "134217728 bytes",
        "NCCLSIM_HOST_MEMORY",
    ] {
        assert!(msg.contains(n), "host_memory: '{msg}' lacks '{n}'");
    }
    assert_eq!(
        case("next_intact").1,
        0,
        "the refused call wrote the next allocation"
    );
}
