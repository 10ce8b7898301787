//! The data movement of operations: reductions of every rank's input range in rank order
//! through an L2-sized block, and copies that write peers' buffers with streaming stores.

use crate::reduce;
use crate::types::{DataType, Reduction};
use std::cell::RefCell;

/// Bytes reduced per step (fits in L2 with a few inputs in flight).
const BLOCK_BYTES: usize = 64 << 10;

/// Inputs whose slices a reduction keeps on the stack (more: on the heap).
const STACK_INPUTS: usize = 16;

thread_local! {
    static SCRATCH: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// What a reduction computes: element type, reduction, and each input's PreMulSum scalar.
#[derive(Clone, Copy)]
pub(crate) struct Arith<'a> {
    pub(crate) dtype: DataType,
    pub(crate) red: Reduction,
    pub(crate) scalars: &'a [u64],
}

/// Reduces `len` bytes at `inputs[q] + in_off` (in rank order) and writes the result at each
/// of `outputs + out_off`.
///
/// # Safety
/// Each `inputs[q] + in_off` must be readable and each `outputs[i] + out_off` writable for
/// `len` bytes, and no other thread may write those input ranges or touch those output ranges
/// during the call.
pub(crate) unsafe fn reduce_range(
    a: Arith<'_>,
    inputs: &[usize],
    in_off: usize,
    outputs: &[usize],
    out_off: usize,
    len: usize,
) {
    let Arith {
        dtype,
        red,
        scalars,
    } = a;
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < BLOCK_BYTES / 8 {
            s.resize(BLOCK_BYTES / 8, 0);
        }
        let esz = dtype.size();
        let block = BLOCK_BYTES / esz * esz;
        let mut done = 0;
        while done < len {
            let b = block.min(len - done);
            // SAFETY: the scratch holds BLOCK_BYTES >= b bytes, aligned to 8.
            let tmp = unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), b) };
            let (mut stack, mut heap);
            let ins: &mut [&[u8]] = if inputs.len() <= STACK_INPUTS {
                stack = [&[][..]; STACK_INPUTS];
                &mut stack[..inputs.len()]
            } else {
                heap = vec![&[][..]; inputs.len()];
                &mut heap
            };
            for (slot, &p) in ins.iter_mut().zip(inputs) {
                // SAFETY: each input range is readable and not written during the call (this
                // function's contract).
                *slot = unsafe { std::slice::from_raw_parts((p + in_off + done) as *const u8, b) };
            }
            reduce::reduce(dtype, red, tmp, ins, scalars);
            for &o in outputs {
                // SAFETY: `tmp` holds `b` bytes; each output range is writable and ours alone
                // during the call (this function's contract).
                unsafe { copy(tmp.as_ptr() as usize, o + out_off + done, b) };
            }
            done += b;
        }
    });
}

/// Copies `len` bytes. Destinations are other ranks' buffers that this rank will not read
/// again, so large copies use streaming stores: they skip reading the destination's cache
/// lines first, which halves the memory traffic of writing (the data path is bound by it).
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes (the ranges may overlap), and no
/// other thread may write `src`'s range or touch `dst`'s range during the call.
#[inline]
pub(crate) unsafe fn copy(src: usize, dst: usize, len: usize) {
    if len == 0 || src == dst {
        return;
    }
    let overlap = src < dst + len && dst < src + len;
    if overlap || len < 4096 {
        // SAFETY: both ranges are valid and not touched by other threads during the call (this
        // function's contract); `ptr::copy` allows overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        return;
    }
    // SAFETY: as above, and the ranges do not overlap.
    unsafe { stream_copy(src as *const u8, dst as *mut u8, len) };
}

/// Copies `len` bytes with streaming stores.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, and the ranges must not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_copy(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let head = dst.align_offset(16).min(len);
    // SAFETY: (whole function) non-overlapping ranges of `len` valid bytes (this function's
    // contract); SSE2
    // is part of the x86_64 baseline; stores are to 16-byte aligned addresses.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 64 <= len {
            let a = _mm_loadu_si128(src.add(i).cast::<__m128i>());
            let b = _mm_loadu_si128(src.add(i + 16).cast::<__m128i>());
            let c = _mm_loadu_si128(src.add(i + 32).cast::<__m128i>());
            let d = _mm_loadu_si128(src.add(i + 48).cast::<__m128i>());
            _mm_stream_si128(dst.add(i).cast::<__m128i>(), a);
            _mm_stream_si128(dst.add(i + 16).cast::<__m128i>(), b);
            _mm_stream_si128(dst.add(i + 32).cast::<__m128i>(), c);
            _mm_stream_si128(dst.add(i + 48).cast::<__m128i>(), d);
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
        _mm_sfence();
    }
}

/// Copies `len` bytes.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, and the ranges must not overlap.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn stream_copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: this function's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}
