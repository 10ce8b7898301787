//! Property test of collective correctness: random collective, data type, reduction, rank
//! count (1..=8 ranks as threads of this process, `ncclCommInitAll`) and count (tiny, odd,
//! block-sized), random input bits; every rank's output must equal a reference computed
//! here in rank order with the library's arithmetic, bit for bit.

use nccl::testing::api::*;
use nccl::testing::reduce;
use nccl::testing::types::{Collective, DataType, RedOp, Reduction};
use proptest::prelude::*;
use std::ffi::c_void;

const KINDS: [Collective; 8] = [
    Collective::AllReduce,
    Collective::Reduce,
    Collective::Broadcast,
    Collective::AllGather,
    Collective::ReduceScatter,
    Collective::AlltoAll,
    Collective::Gather,
    Collective::Scatter,
];

fn dev_alloc(dev: i32, bytes: usize) -> usize {
    nccl::testing::cuda::set_device(dev).expect("set device");
    nccl::testing::cuda::malloc(dev, bytes.max(1)).expect("malloc")
}

/// Random bits that are valid (non-NaN) values of the type, so max/min comparisons are
/// well-defined in the reference and the library alike.
fn input(dtype: DataType, seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n * dtype.size());
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = (x % 17) as f64 - 8.0;
        let bits = match dtype {
            DataType::Float16
            | DataType::Bfloat16
            | DataType::Float32
            | DataType::Float64
            | DataType::Float8e4m3
            | DataType::Float8e5m2 => reduce::scalar_bits(dtype, v / 4.0),
            _ => x,
        };
        out.extend_from_slice(&bits.to_le_bytes()[..dtype.size()]);
    }
    out
}

fn reference(
    kind: Collective,
    dtype: DataType,
    red: Reduction,
    n: usize,
    count: usize,
    root: usize,
    inputs: &[Vec<u8>],
) -> Vec<Vec<u8>> {
    let es = dtype.size();
    let b = count * es;
    let mut out = vec![Vec::new(); n];
    let red_all = |off: usize, len: usize| {
        let mut acc = vec![0u64; len.div_ceil(8)];
        // SAFETY: test buffers and handles come from the calls above and outlive this use; lengths match their allocations.
        let a = unsafe { std::slice::from_raw_parts_mut(acc.as_mut_ptr().cast::<u8>(), len) };
        let ins: Vec<&[u8]> = inputs.iter().map(|i| &i[off..off + len]).collect();
        reduce::reduce(dtype, red, a, &ins, &[]);
        a.to_vec()
    };
    for (r, o) in out.iter_mut().enumerate() {
        *o = match kind {
            Collective::AllReduce => red_all(0, b),
            Collective::Reduce => {
                if r == root {
                    red_all(0, b)
                } else {
                    Vec::new()
                }
            }
            Collective::Broadcast => inputs[root][..b].to_vec(),
            Collective::AllGather => inputs.iter().flat_map(|i| i[..b].to_vec()).collect(),
            Collective::ReduceScatter => red_all(r * b, b),
            Collective::AlltoAll => inputs
                .iter()
                .flat_map(|i| i[r * b..(r + 1) * b].to_vec())
                .collect(),
            Collective::Gather => {
                if r == root {
                    inputs.iter().flat_map(|i| i[..b].to_vec()).collect()
                } else {
                    Vec::new()
                }
            }
            Collective::Scatter => inputs[root][r * b..(r + 1) * b].to_vec(),
            Collective::SendRecv => unreachable!("not among KINDS"),
        };
    }
    out
}

fn run_case(
    kind: Collective,
    dtype: DataType,
    op: i32,
    n: usize,
    count: usize,
    root: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let mut comms = vec![0usize; n];
    // SAFETY: test buffers and handles come from the calls above and outlive this use; lengths match their allocations.
    let rc = unsafe { ncclCommInitAll(comms.as_mut_ptr().cast(), n as i32, std::ptr::null()) };
    prop_assert_eq!(rc, 0);
    let es = dtype.size();
    let (se, _) = kind.extents(count, n, 0, root);
    let send_elems = match kind {
        Collective::ReduceScatter | Collective::AlltoAll | Collective::Scatter => count * n,
        _ => count,
    }
    .max(se);
    let inputs: Vec<Vec<u8>> = (0..n)
        .map(|r| input(dtype, seed ^ (r as u64 * 0x9e37_79b9), send_elems))
        .collect();
    let red = Reduction::builtin(RedOp::try_from(op).expect("a built-in op"), dtype, n);
    let want = reference(kind, dtype, red, n, count, root, &inputs);
    let mut bufs = Vec::new();
    for (r, inp) in inputs.iter().enumerate() {
        let s = dev_alloc(r as i32, send_elems * es);
        let (_, re) = kind.extents(count, n, r, root);
        let d = dev_alloc(r as i32, (re.max(1)) * es);
        // SAFETY: test buffers and handles come from the calls above and outlive this use; lengths match their allocations.
        unsafe { std::ptr::copy_nonoverlapping(inp.as_ptr(), s as *mut u8, inp.len()) };
        bufs.push((s, d, re));
    }
    // SAFETY: test buffers and handles come from the calls above and outlive this use; lengths match their allocations.
    unsafe { ncclGroupStart() };
    for r in 0..n {
        let (s, d, _) = bufs[r];
        let (s, d) = (s as *const c_void, d as *mut c_void);
        let c = comms[r];
        let t = dtype as i32;
        let stream = 0u64;
        // SAFETY: test buffers and handles come from the calls above and outlive this use; lengths match their allocations.
        let rc = unsafe {
            match kind {
                Collective::AllReduce => ncclAllReduce(s, d, count, t, op, c, stream),
                Collective::Reduce => ncclReduce(s, d, count, t, op, root as i32, c, stream),
                Collective::Broadcast => ncclBroadcast(s, d, count, t, root as i32, c, stream),
                Collective::AllGather => ncclAllGather(s, d, count, t, c, stream),
                Collective::ReduceScatter => ncclReduceScatter(s, d, count, t, op, c, stream),
                Collective::AlltoAll => ncclAlltoAll(s, d, count, t, c, stream),
                Collective::Gather => ncclGather(s, d, count, t, root as i32, c, stream),
                Collective::Scatter => ncclScatter(s, d, count, t, root as i32, c, stream),
                Collective::SendRecv => unreachable!("not among KINDS"),
            }
        };
        prop_assert_eq!(rc, 0, "enqueue on rank {}", r);
    }
    // SAFETY: test buffers and handles come from the calls above and outlive this use; lengths match their allocations.
    let rc = unsafe { ncclGroupEnd() };
    prop_assert_eq!(rc, 0);
    for r in 0..n {
        let (_, d, re) = bufs[r];
        // SAFETY: test buffers and handles come from the calls above and outlive this use; lengths match their allocations.
        let got = unsafe { std::slice::from_raw_parts(d as *const u8, re * es) };
        prop_assert!(
            got == &want[r][..],
            "{:?} {:?} op {} n {} count {} root {}: rank {} differs",
            kind,
            dtype,
            op,
            n,
            count,
            root,
            r
        );
    }
    for (r, (s, d, _)) in bufs.into_iter().enumerate() {
        nccl::testing::cuda::set_device(r as i32).expect("device");
        nccl::testing::cuda::free(s).expect("free");
        nccl::testing::cuda::free(d).expect("free");
        // SAFETY: test buffers and handles come from the calls above and outlive this use; lengths match their allocations.
        prop_assert_eq!(unsafe { ncclCommDestroy(comms[r]) }, 0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn every_collective_type_and_op_matches_the_rank_order_reference(
        kind in 0usize..8,
        dtype in 0i32..12,
        op in 0i32..5,
        n in 1usize..=8,
        count in prop_oneof![0usize..4, 1usize..200, 16_000usize..70_000],
        root in 0usize..8,
        seed in any::<u64>(),
    ) {
        let dtype = DataType::try_from(dtype).expect("type");
        run_case(KINDS[kind], dtype, op, n, count, root % n, seed)?;
    }
}
