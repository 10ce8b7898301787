//! The per-SM speed arrays `ncclTopoCompute` tries (NCCL 2.30.7 `src/graph/search.cc`,
//! `speedArrayIntra`/`speedArrayInter` and their sm90/sm100 variants, per release) and NCCL's
//! float rounding (`SUB_ROUND`, `roundf`).

/// Per-SM speed arrays (GB/s per channel) for a version: (intra, inter).
pub fn speed_arrays(cc_min: i32, version: topo::NcclVersion) -> (Vec<f32>, Vec<f32>) {
    let v = |a: &[f32]| a.to_vec();
    // Blackwell arrays from 2.25; before, sm100 takes the sm90 ones.
    if cc_min >= 100 && version.at_least(2, 25) {
        let intra: Vec<f32> = if version.at_least(2, 29) {
            v(&[
                90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
            ])
        } else if version.at_least(2, 27) {
            v(&[
                90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
            ])
        } else {
            v(&[90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0])
        };
        let tail = [
            48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
            0.24, 0.12,
        ];
        let inter: Vec<f32> = if version.at_least(2, 30) {
            [96.0, 86.0, 80.0]
                .iter()
                .chain(tail.iter())
                .copied()
                .collect()
        } else if version.at_least(2, 29) {
            [96.0, 80.0].iter().chain(tail.iter()).copied().collect()
        } else if version.at_least(2, 28) {
            [96.0].iter().chain(tail.iter()).copied().collect()
        } else {
            let mut sm90 = speed_arrays(90, version).1;
            if version.at_least(2, 27) {
                sm90[0] = 47.9;
            }
            sm90
        };
        return (intra, inter);
    }
    if cc_min >= 90 {
        let intra = if version.at_least(2, 21) {
            v(&[
                60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
            ])
        } else if version.at_least(2, 19) {
            v(&[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0])
        } else {
            v(&[60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0])
        };
        let inter = v(&[
            48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
            0.24, 0.12,
        ]);
        return (intra, inter);
    }
    (
        v(&[
            40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
        ]),
        v(&[
            48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
            2.4, 1.2, 0.24, 0.12,
        ]),
    )
}

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
