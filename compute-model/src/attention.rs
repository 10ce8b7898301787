//! Fused attention kernels as their libraries run them.
//!
//! torch's scaled dot-product attention dispatches to one of three fused kernels: FlashAttention-2
//! (`_scaled_dot_product_flash_attention`), the memory-efficient CUTLASS kernel
//! (`_scaled_dot_product_efficient_attention`) or cuDNN's (`_scaled_dot_product_cudnn_attention`).
//! They reach very different fractions of the tensor cores' peak on the same board, so each is
//! priced at its own published fraction, not at the GEMM classes' fitted efficiency.
//!
//! The work a kernel does is the FLOP count torch's formula gives (`torch/utils/flop_counter.py`,
//! `sdpa_flop_count` and `sdpa_backward_flop_count`: `4 b h s_q s_k d` forward, five matrix
//! products backward, the recomputed scores `Q K^T` among them: 2.5 times the forward, as the
//! FlashAttention papers count it, so their utilisation figures apply to it), except that the
//! formula ignores the mask: a causal kernel skips the blocks above the diagonal, about half of
//! them.
//!
//! Fractions of the dense tensor-core peak of the inputs' precision, from the kernels' papers:
//! - FlashAttention-2 on A100 (Dao, "FlashAttention-2", 2023, section 4.1): forward up to 73%,
//!   backward up to 63% of the theoretical peak (head dimension 128, long sequences).
//! - FlashAttention-2 on H100 (Shah et al., "FlashAttention-3", 2024, section 1): 35% of the
//!   peak (it uses Ampere's `mma.sync` instructions, not Hopper's asynchronous `wgmma`/TMA).
//! - cuDNN's fused attention on Hopper and later runs Hopper's instructions, as
//!   FlashAttention-3 does, which reaches 75% forward (740 TFLOP/s BF16) and 1.5-1.75x
//!   FlashAttention-2's speed backward (the same paper): taken as 75% and 55%. On earlier
//!   architectures cuDNN is taken as FlashAttention-2's figure.
//! - The memory-efficient kernel: two thirds of FlashAttention-2's rate (FlashAttention-2's
//!   benchmarks against xformers' CUTLASS kernel show it 1.3-2x faster).
//!
//! Boards without their own figure: Ada and GA10x run FlashAttention-2 as A100 does (the same
//! instructions; an assumption); Blackwell as Hopper (FlashAttention-2's instructions leave
//! its new tensor-core paths unused; an assumption). Shorter sequences, which fill fewer thread
//! blocks, are not modelled: the figures are those of long sequences.

use crate::Arch;

/// Which fused attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    /// FlashAttention-2 (torch's flash backend).
    Flash,
    /// The memory-efficient CUTLASS kernel (xformers').
    MemEfficient,
    /// cuDNN's fused attention.
    Cudnn,
}

/// A fused attention kernel: which one, which pass, whether masked causally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attention {
    /// The library's kernel.
    pub library: Library,
    /// The backward pass (gradients of Q, K and V).
    pub backward: bool,
    /// A causal mask (the kernel skips the masked blocks).
    pub causal: bool,
}

impl Library {
    /// Its name in traces: `flash`, `mem-efficient`, `cudnn`.
    pub fn name(self) -> &'static str {
        match self {
            Library::Flash => "flash",
            Library::MemEfficient => "mem-efficient",
            Library::Cudnn => "cudnn",
        }
    }

    /// From its name in traces.
    pub fn from_name(name: &str) -> Option<Library> {
        [Library::Flash, Library::MemEfficient, Library::Cudnn]
            .into_iter()
            .find(|l| l.name() == name)
    }
}

impl Attention {
    /// The code the C boundary uses for `library` (1 flash, 2 memory-efficient, 3 cuDNN; 0 is
    /// "not an attention kernel").
    pub fn from_code(library: u32, backward: bool, causal: bool) -> Option<Option<Attention>> {
        let library = match library {
            0 => return Some(None),
            1 => Library::Flash,
            2 => Library::MemEfficient,
            3 => Library::Cudnn,
            _ => return None,
        };
        Some(Some(Attention {
            library,
            backward,
            causal,
        }))
    }

    /// The work the kernel does for the FLOPs torch's formula counts (the backward's
    /// recomputation is among them): half under a causal mask.
    pub fn work(&self, counted_flops: f64) -> f64 {
        if self.causal {
            counted_flops * 0.5
        } else {
            counted_flops
        }
    }

    /// The fraction of the tensor cores' dense peak the kernel reaches on `arch`.
    pub fn efficiency(&self, arch: Arch) -> f64 {
        let hopper_class = matches!(arch, Arch::Hopper | Arch::Blackwell);
        let flash = match (hopper_class, self.backward) {
            (true, _) => 0.35,
            (false, false) => 0.73,
            (false, true) => 0.63,
        };
        match self.library {
            Library::Flash => flash,
            Library::MemEfficient => flash * 2.0 / 3.0,
            Library::Cudnn if hopper_class => {
                if self.backward {
                    0.55
                } else {
                    0.75
                }
            }
            Library::Cudnn => flash,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_halves_the_counted_work() {
        let a = Attention {
            library: Library::Flash,
            backward: true,
            causal: true,
        };
        // torch's backward count (five products, 2.5 forwards) already holds the recomputation.
        assert_eq!(a.work(10.0), 5.0);
        assert_eq!(Attention::from_code(0, false, false), Some(None));
        assert_eq!(Attention::from_code(9, false, false), None);
        // FlashAttention-2 runs at less than half its Ampere fraction on Hopper.
        assert!(a.efficiency(Arch::Hopper) < 0.6 * a.efficiency(Arch::Ampere));
    }
}
