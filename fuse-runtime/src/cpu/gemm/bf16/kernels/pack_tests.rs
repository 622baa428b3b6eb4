//! The AVX-512 BF16 packer of an operand B against the portable one, word for word.

use super::{pack_natively, pack_operand, round_row_scalar, Bf16Kernel, NR};
use crate::cpu::gemm::Strided;

/// Values of every kind the rounding meets: normal ones (ties to even among them), zeros of both signs,
/// subnormals, infinities and NaNs, drawn by a fixed xorshift.
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let bits = state as u32;
            match state >> 60 {
                0 => f32::from_bits(bits & 0x807F_FFFF), // zero or subnormal
                1 => f32::INFINITY.copysign(f32::from_bits(bits)),
                2 => f32::NAN,
                // A tie: the 16 bits dropped are exactly half of the last kept one.
                3 => f32::from_bits((bits & 0xFFFF_0000) | 0x8000).clamp(-1e30, 1e30),
                _ => (bits as i32 as f32) * 1e-9,
            }
        })
        .collect()
}

#[test]
fn the_native_packer_writes_the_portable_packers_words() {
    if !Bf16Kernel::Avx512.runs_here() {
        println!("skipped: this CPU has no AVX-512 BF16, so the native packer does not run");
        return;
    }
    // (k, n): an encoder head's keys and values, odd depths and widths, a panel and a half, one element.
    let shapes = [
        (32, 128),
        (128, 32),
        (31, 5),
        (33, 17),
        (2, 33),
        (100, 47),
        (1, 1),
        (65, 64),
    ];
    for (seed, &(k, n)) in shapes.iter().enumerate() {
        // Depths contiguous (keys read transposed, each key padded), then columns contiguous (values, each row
        // padded).
        for (what, rs, cs) in [("depth-contiguous", 1, k + 3), ("row-contiguous", n + 5, 1)] {
            let b = values((k - 1) * rs + (n - 1) * cs + 1, seed as u64 + 1);
            let view = Strided::new(b.as_ptr(), rs as isize, cs as isize);
            let words = k.div_ceil(2) * n.next_multiple_of(NR);
            let (mut portable, mut native) =
                (vec![0xDEAD_BEEF_u32; words], vec![0xFEED_F00D_u32; words]);
            let mut spare = vec![0u32; k.div_ceil(2) + 2 * n.next_multiple_of(NR) + n];
            // SAFETY: B's k×n elements lie in `b`; the panels hold `words`; the CPU runs the native packer and
            // the scalar rounding runs everywhere.
            unsafe {
                pack_operand(view, (k, n), &mut portable, &mut spare, |x, out| {
                    round_row_scalar(x, out, 2)
                });
                assert!(
                    pack_natively(view, (k, n), &mut native),
                    "{what} {k}×{n} not packed"
                );
            }
            for (i, (p, q)) in portable.iter().zip(&native).enumerate() {
                assert_eq!(
                    p, q,
                    "{what} {k}×{n}: word {i} is {q:#010x}, the portable packer's {p:#010x}"
                );
            }
        }
    }
}

#[test]
fn an_operand_strided_both_ways_is_left_to_the_portable_packer() {
    if !Bf16Kernel::Avx512.runs_here() {
        println!("skipped: this CPU has no AVX-512 BF16, so the native packer does not run");
        return;
    }
    let b = values(64, 9);
    let mut panels = vec![7u32; 4 * NR];
    // SAFETY: a 4×4 B at strides 8 and 2 lies in `b`; the panels hold 2 × 32 words.
    let packed = unsafe { pack_natively(Strided::new(b.as_ptr(), 8, 2), (4, 4), &mut panels) };
    assert!(!packed);
    assert!(panels.iter().all(|&w| w == 7), "it wrote while declining");
}
