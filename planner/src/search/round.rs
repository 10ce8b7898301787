//! NCCL's float rounding of bandwidths in the search (NCCL 2.30.7 `src/graph/search.cc`,
//! `SUB_ROUND`, and `roundf`). The speed arrays themselves are in `crate::consts`, chosen per
//! release by `crate::profile::Profile::speeds`.

/// `SUB_ROUND`: subtract and round to 1e-3 in single precision.
pub(super) fn sub_round(a: f32, b: f32) -> f32 {
    round_half_away((a - b) * 1000.0) / 1000.0
}

/// `roundf` (halfway cases away from zero) without the libm call it compiles to on baseline
/// x86-64; bit-identical to [`f32::round`].
#[inline]
pub(super) fn round_half_away(x: f32) -> f32 {
    // From 2^23 on every f32 is an integer (and NaN/inf round to themselves).
    if x.is_nan() || x.abs() >= 8_388_608.0 {
        return x;
    }
    let t = x as i32 as f32; // truncation toward zero, exact in this range
    let f = x - t; // exact: the fraction of x
    let r = if f >= 0.5 {
        t + 1.0
    } else if f <= -0.5 {
        t - 1.0
    } else {
        t
    };
    // Keep the sign of zero as roundf does (e.g. -0.3 -> -0.0).
    if r == 0.0 {
        0.0f32.copysign(x)
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_half_away_matches_roundf_on_edges() {
        for x in [
            0.0f32,
            -0.0,
            0.3,
            -0.3,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            0.499_999_97,
            -0.499_999_97,
            8_388_607.5,
            -8_388_607.5,
            8_388_608.0,
            1e20,
            -1e20,
            f32::INFINITY,
            f32::NEG_INFINITY,
            239_999.5,
        ] {
            assert_eq!(round_half_away(x).to_bits(), x.round().to_bits(), "{x}");
        }
        assert!(round_half_away(f32::NAN).is_nan());
    }

    proptest! {
        #[test]
        fn round_half_away_matches_roundf(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            prop_assume!(!x.is_nan());
            prop_assert_eq!(round_half_away(x).to_bits(), x.round().to_bits());
        }

        #[test]
        fn round_half_away_matches_roundf_on_bandwidths(a in 0.0f32..5000.0, b in 0.0f32..500.0) {
            let x = (a - b) * 1000.0;
            prop_assert_eq!(round_half_away(x).to_bits(), x.round().to_bits());
        }
    }
}
