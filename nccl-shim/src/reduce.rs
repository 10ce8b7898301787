//! Elementwise reductions on host memory, for every `ncclDataType_t` and reduction.
//!
//! One definition of the arithmetic serves the data path and the tests' reference: inputs are
//! combined in rank order (`((x0 op x1) op x2) ...`), each step rounded to the element type
//! (fp16 / bf16 / fp8 compute in f32 and round to nearest even after every step; fp8 saturates
//! to the largest finite value, as CUDA's `__NV_SATFINITE` conversions do). Integer sums and
//! products wrap. PreMulSum multiplies each input by the scalar (rounded to the element type)
//! before summing; ncclAvg is PreMulSum by 1/nranks on floating types and a sum divided by
//! nranks (truncating) on integer types, as NCCL 2.30.7 builds it (`src/enqueue.cc`,
//! `hostToDevRedOp`).

use crate::types::{DataType, RedOp, Reduction};
use half::{bf16, f16};

/// One element type's arithmetic.
pub trait Elem: Copy + Send + Sync + 'static {
    /// `a + b`.
    fn add(a: Self, b: Self) -> Self;
    /// `a * b`.
    fn mul(a: Self, b: Self) -> Self;
    /// The larger.
    fn max(a: Self, b: Self) -> Self;
    /// The smaller.
    fn min(a: Self, b: Self) -> Self;
    /// The element whose little-endian bits are the low bytes of `bits`.
    fn from_bits(bits: u64) -> Self;
    /// `a / n` (integers only; floats never divide).
    fn div(a: Self, n: u64) -> Self;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            fn from_bits(bits: u64) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                let n = b.len();
                b.copy_from_slice(&bits.to_le_bytes()[..n]);
                <$t>::from_le_bytes(b)
            }
            #[inline(always)]
            fn div(a: Self, n: u64) -> Self { a / (n as $t) }
        }
    )*};
}
int_elem!(i8, u8, i32, u32, i64, u64);

macro_rules! float_elem {
    ($t:ty, $bits:ty) => {
        impl Elem for $t {
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self {
                a + b
            }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self {
                a * b
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                if b > a {
                    b
                } else {
                    a
                }
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                if b < a {
                    b
                } else {
                    a
                }
            }
            fn from_bits(bits: u64) -> Self {
                <$t>::from_bits(bits as $bits)
            }
            fn div(a: Self, _n: u64) -> Self {
                a
            }
        }
    };
}
float_elem!(f32, u32);
float_elem!(f64, u64);
float_elem!(f16, u16);
float_elem!(bf16, u16);

/// An 8-bit float format: (exponent bits, mantissa bits) and its codes.
struct Fp8Format {
    /// The value of every code 0..=255 (NaN where the format has NaN).
    decode: [f32; 256],
    /// Non-negative finite codes in increasing value order with their values.
    positive: Vec<(u8, f32)>,
    /// Code of NaN.
    nan: u8,
}

impl Fp8Format {
    fn build(exp_bits: u32, man_bits: u32, has_inf: bool) -> Fp8Format {
        let bias = (1i32 << (exp_bits - 1)) - 1;
        let mut decode = [0f32; 256];
        for (code, slot) in decode.iter_mut().enumerate() {
            let c = code as u32;
            let sign = if c & 0x80 != 0 { -1.0 } else { 1.0 };
            let e = ((c >> man_bits) & ((1 << exp_bits) - 1)) as i32;
            let m = c & ((1 << man_bits) - 1);
            let top = (1 << exp_bits) - 1;
            let v = if has_inf && e == top {
                if m == 0 {
                    f32::INFINITY
                } else {
                    f32::NAN
                }
            } else if !has_inf && e == top && m == (1 << man_bits) - 1 {
                f32::NAN
            } else if e == 0 {
                (m as f32) / (1 << man_bits) as f32 * 2f32.powi(1 - bias)
            } else {
                (1.0 + (m as f32) / (1 << man_bits) as f32) * 2f32.powi(e - bias)
            };
            *slot = sign * v;
        }
        let mut positive: Vec<(u8, f32)> = (0u8..0x80)
            .map(|c| (c, decode[c as usize]))
            .filter(|(_, v)| v.is_finite())
            .collect();
        positive.sort_by(|a, b| a.1.total_cmp(&b.1));
        Fp8Format {
            decode,
            positive,
            nan: 0x7f,
        }
    }

    /// Round to nearest, ties to the even code, saturating to the largest finite value.
    fn encode(&self, x: f32) -> u8 {
        if x.is_nan() {
            return self.nan;
        }
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        let a = x.abs();
        let idx = self.positive.partition_point(|(_, v)| *v < a);
        let code = if idx == self.positive.len() {
            self.positive[idx - 1].0
        } else if idx == 0 || self.positive[idx].1 == a {
            self.positive[idx].0
        } else {
            let (lo, lv) = self.positive[idx - 1];
            let (hi, hv) = self.positive[idx];
            if a - lv < hv - a || (a - lv == hv - a && lo % 2 == 0) {
                lo
            } else {
                hi
            }
        };
        // Negative zero stays a zero of the input's sign.
        code | sign
    }
}

fn e4m3() -> &'static Fp8Format {
    static F: std::sync::OnceLock<Fp8Format> = std::sync::OnceLock::new();
    F.get_or_init(|| Fp8Format::build(4, 3, false))
}

fn e5m2() -> &'static Fp8Format {
    static F: std::sync::OnceLock<Fp8Format> = std::sync::OnceLock::new();
    F.get_or_init(|| Fp8Format::build(5, 2, true))
}

/// `__nv_fp8_e4m3` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct F8E4M3(pub u8);
/// `__nv_fp8_e5m2` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct F8E5M2(pub u8);

macro_rules! fp8_elem {
    ($t:ident, $fmt:ident) => {
        impl $t {
            /// The value as f32.
            pub fn to_f32(self) -> f32 {
                $fmt().decode[self.0 as usize]
            }
            /// Rounded from f32.
            pub fn from_f32(x: f32) -> Self {
                $t($fmt().encode(x))
            }
        }
        impl Elem for $t {
            fn add(a: Self, b: Self) -> Self {
                Self::from_f32(a.to_f32() + b.to_f32())
            }
            fn mul(a: Self, b: Self) -> Self {
                Self::from_f32(a.to_f32() * b.to_f32())
            }
            fn max(a: Self, b: Self) -> Self {
                if b.to_f32() > a.to_f32() {
                    b
                } else {
                    a
                }
            }
            fn min(a: Self, b: Self) -> Self {
                if b.to_f32() < a.to_f32() {
                    b
                } else {
                    a
                }
            }
            fn from_bits(bits: u64) -> Self {
                $t(bits as u8)
            }
            fn div(a: Self, _n: u64) -> Self {
                a
            }
        }
    };
}
fp8_elem!(F8E4M3, e4m3);
fp8_elem!(F8E5M2, e5m2);

/// `acc = acc op x`, elementwise (x is the next rank's input, `scalar` its PreMulSum scalar).
#[inline]
fn combine<T: Elem>(acc: &mut [T], x: &[T], red: Reduction, scalar: u64) {
    match red {
        Reduction::Op(RedOp::Sum | RedOp::Avg) | Reduction::SumPostDiv { .. } => {
            acc.iter_mut().zip(x).for_each(|(a, b)| *a = T::add(*a, *b))
        }
        Reduction::Op(RedOp::Prod) => acc.iter_mut().zip(x).for_each(|(a, b)| *a = T::mul(*a, *b)),
        Reduction::Op(RedOp::Max) => acc.iter_mut().zip(x).for_each(|(a, b)| *a = T::max(*a, *b)),
        Reduction::Op(RedOp::Min) => acc.iter_mut().zip(x).for_each(|(a, b)| *a = T::min(*a, *b)),
        Reduction::PreMulSum { .. } => {
            let s = T::from_bits(scalar);
            acc.iter_mut()
                .zip(x)
                .for_each(|(a, b)| *a = T::add(*a, T::mul(*b, s)))
        }
    }
}

/// `acc = first` prepared for combining: scaled for PreMulSum.
#[inline]
fn start<T: Elem>(acc: &mut [T], first: &[T], red: Reduction, scalar: u64) {
    match red {
        Reduction::PreMulSum { .. } => {
            let s = T::from_bits(scalar);
            acc.iter_mut()
                .zip(first)
                .for_each(|(a, b)| *a = T::mul(*b, s))
        }
        _ => acc.copy_from_slice(first),
    }
}

/// The final step: integer averages divide.
#[inline]
fn finish<T: Elem>(acc: &mut [T], red: Reduction) {
    if let Reduction::SumPostDiv { divisor } = red {
        acc.iter_mut().for_each(|a| *a = T::div(*a, divisor));
    }
}

/// Reduces `inputs` (equal-length byte slices of `dtype` elements, in rank order) into `out`.
/// `out` must be aligned for the element type; inputs may be unaligned.
fn reduce_typed<T: Elem>(out: &mut [u8], inputs: &[&[u8]], red: Reduction, scalars: &[u64]) {
    let n = out.len() / std::mem::size_of::<T>();
    // SAFETY: `out` is aligned for T (checked by the caller) and holds n elements; any bit
    // pattern is a valid T for these plain numeric types.
    let acc = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<T>(), n) };
    let mut scratch: Vec<T> = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let x: &[T] = if (input.as_ptr() as usize) % std::mem::align_of::<T>() == 0 {
            // SAFETY: aligned, n elements long, plain numeric type.
            unsafe { std::slice::from_raw_parts(input.as_ptr().cast::<T>(), n) }
        } else {
            scratch.clear();
            scratch.extend((0..n).map(|k| {
                // SAFETY: k < n elements inside `input`; read_unaligned handles alignment.
                unsafe { input.as_ptr().cast::<T>().add(k).read_unaligned() }
            }));
            &scratch
        };
        let scalar = scalars.get(i).copied().unwrap_or(match red {
            Reduction::PreMulSum { scalar, .. } => scalar,
            _ => 0,
        });
        if i == 0 {
            start(acc, x, red, scalar);
        } else {
            combine(acc, x, red, scalar);
        }
    }
    finish(acc, red);
}

/// Reduces equal-length inputs (in rank order) into `out` (aligned to 8 bytes). For PreMulSum,
/// `scalars[i]` is input i's scalar (each rank scales its own input); when `scalars` is empty
/// the reduction's own scalar applies to every input.
pub fn reduce(dtype: DataType, red: Reduction, out: &mut [u8], inputs: &[&[u8]], scalars: &[u64]) {
    debug_assert!(inputs.iter().all(|i| i.len() == out.len()));
    if inputs.is_empty() {
        return;
    }
    match dtype {
        DataType::Int8 => reduce_typed::<i8>(out, inputs, red, scalars),
        DataType::Uint8 => reduce_typed::<u8>(out, inputs, red, scalars),
        DataType::Int32 => reduce_typed::<i32>(out, inputs, red, scalars),
        DataType::Uint32 => reduce_typed::<u32>(out, inputs, red, scalars),
        DataType::Int64 => reduce_typed::<i64>(out, inputs, red, scalars),
        DataType::Uint64 => reduce_typed::<u64>(out, inputs, red, scalars),
        DataType::Float16 => reduce_typed::<f16>(out, inputs, red, scalars),
        DataType::Float32 => reduce_typed::<f32>(out, inputs, red, scalars),
        DataType::Float64 => reduce_typed::<f64>(out, inputs, red, scalars),
        DataType::Bfloat16 => reduce_typed::<bf16>(out, inputs, red, scalars),
        DataType::Float8e4m3 => reduce_typed::<F8E4M3>(out, inputs, red, scalars),
        DataType::Float8e5m2 => reduce_typed::<F8E5M2>(out, inputs, red, scalars),
    }
}

/// The bits of `value` converted to `dtype` (rounded to nearest), for PreMulSum scalars given
/// as host values and for ncclAvg's 1/nranks.
pub fn scalar_bits(dtype: DataType, value: f64) -> u64 {
    match dtype {
        DataType::Int8 => value as i8 as u8 as u64,
        DataType::Uint8 => value as u8 as u64,
        DataType::Int32 => value as i32 as u32 as u64,
        DataType::Uint32 => value as u32 as u64,
        DataType::Int64 => value as i64 as u64,
        DataType::Uint64 => value as u64,
        DataType::Float16 => f16::from_f64(value).to_bits() as u64,
        DataType::Float32 => (value as f32).to_bits() as u64,
        DataType::Float64 => value.to_bits(),
        DataType::Bfloat16 => bf16::from_f64(value).to_bits() as u64,
        DataType::Float8e4m3 => F8E4M3::from_f32(value as f32).0 as u64,
        DataType::Float8e5m2 => F8E5M2::from_f32(value as f32).0 as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Copy>(v: &[T]) -> Vec<u8> {
        // SAFETY: plain numeric values viewed as bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
            .to_vec()
    }

    #[test]
    fn float_sum_is_in_rank_order() {
        let a = [1e8f32, 1.0];
        let b = [-1e8f32, 1.0];
        let c = [1.0f32, 1e-8];
        let mut out = vec![0u64; 1];
        // SAFETY: `out` is a live vector of at least that many bytes; u8 has no alignment or validity needs.
        let o = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), 8) };
        reduce(
            DataType::Float32,
            Reduction::SUM,
            o,
            &[&bytes(&a), &bytes(&b), &bytes(&c)],
            &[],
        );
        let r: [f32; 2] = [
            f32::from_le_bytes(o[0..4].try_into().unwrap()),
            f32::from_le_bytes(o[4..8].try_into().unwrap()),
        ];
        assert_eq!(r, [(1e8f32 + -1e8) + 1.0, (1.0f32 + 1.0) + 1e-8]);
    }

    #[test]
    fn integer_average_divides_after_summing() {
        let red = Reduction::builtin(RedOp::Avg, DataType::Int32, 3);
        let mut out = vec![0u64; 1];
        // SAFETY: `out` is a live vector of at least that many bytes; u8 has no alignment or validity needs.
        let o = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), 4) };
        reduce(
            DataType::Int32,
            red,
            o,
            &[&bytes(&[1i32]), &bytes(&[2i32]), &bytes(&[4i32])],
            &[],
        );
        assert_eq!(i32::from_le_bytes(o.try_into().unwrap()), 2);
    }

    #[test]
    fn fp8_round_trips_and_saturates() {
        for c in 0u8..=255 {
            let v = F8E4M3(c).to_f32();
            if v.is_nan() {
                continue;
            }
            assert_eq!(F8E4M3::from_f32(v).to_f32(), v, "e4m3 code {c:#x}");
        }
        assert_eq!(F8E4M3::from_f32(1e6).to_f32(), 448.0);
        assert_eq!(F8E5M2::from_f32(1e9).to_f32(), 57344.0);
        assert_eq!(F8E5M2::from_f32(-1e9).to_f32(), -57344.0);
        // 1.0625 lies halfway between 1.0 (even code) and 1.125 in e4m3.
        assert_eq!(F8E4M3::from_f32(1.0625).to_f32(), 1.0);
    }

    #[test]
    fn premulsum_scales_each_input() {
        let red = Reduction::PreMulSum {
            scalar: scalar_bits(DataType::Float64, 0.5),
            on_device: false,
        };
        let mut out = vec![0u64; 1];
        // SAFETY: `out` is a live vector of at least that many bytes; u8 has no alignment or validity needs.
        let o = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), 8) };
        reduce(
            DataType::Float64,
            red,
            o,
            &[&bytes(&[3.0f64]), &bytes(&[5.0f64])],
            &[],
        );
        assert_eq!(f64::from_le_bytes(o.try_into().unwrap()), 4.0);
    }
}
