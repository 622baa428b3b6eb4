//! The AMX bf16 tile: `tdpbf16ps` on tile registers (`crate::cpu::amx`), one panel (32 columns) by 16 or 32
//! rows.
//!
//! A panel's pairs of depths are laid out as `tdpbf16ps` reads its second operand: 16 pairs of a 16-column half
//! panel are one tile register of 16 rows of 64 bytes, at the panel's stride of 128 bytes between pairs. The
//! rounded rows of A are its first operand as they lie in the scratch (16 rows of 16 pairs). So neither operand
//! is copied: per step of 16 pairs, the tile of 32 rows loads two tiles of A and two of B and runs four
//! `tdpbf16ps` (each 16×16×32 multiply-adds) into the four sum tiles `tmm0`–`tmm3`, which it writes to the
//! tile's f32 sums after the depth block. The sum tiles `tmm0` and `tmm1` hold rows 0–15 (columns 0–15 and
//! 16–31), `tmm2` and `tmm3` rows 16–31; A's rows are loaded into `tmm4` and `tmm5`, B's half panels into `tmm6`
//! and `tmm7`. The depth block's last pairs short of a step of 16 run on `vdpbf16ps` over those sums.
//!
//! Rows past the block's (a tile of 32 over 20 rows) read the scratch's following rows, inside the row block the
//! driver sized to a multiple of the tile: AMX computes each row of C from that row of A alone, and the driver
//! writes only the block's rows, so what those rows hold is never seen.

use std::arch::asm;
use std::arch::x86_64::*;

use super::{row_block, Call, Prefetch, Tile, MAX_MR, NR};
use crate::cpu::amx::{Configured, PANEL_ROW_BYTES, ROWS, ROW_BYTES, STEP};

/// One step of `tdpbf16ps`: A's `MR` rows of 64 bytes at `a` (stride `a_rs`) times 16 rows of a panel at `b`
/// (its two halves of 16 columns) into the sum tiles.
///
/// # Safety
/// The tiles are configured ([`Configured`]) and the process may run AMX-BF16; A's `MR` rows of 64
/// bytes and the panel's 16 rows of 128 bytes are readable.
#[inline(always)]
unsafe fn step<const MR: usize>(a: *const u8, a_rs: usize, b: *const u8) {
    const { assert!(MR == ROWS || MR == 2 * ROWS, "one or two rows of sum tiles") };
    // SAFETY: the caller's contract.
    unsafe {
        asm!(
            "tileloadd tmm6, [{b} + {bs}*1]",
            "tileloadd tmm7, [{b} + {bs}*1 + 64]",
            "tileloadd tmm4, [{a} + {as_}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            b = in(reg) b, bs = in(reg) PANEL_ROW_BYTES, a = in(reg) a, as_ = in(reg) a_rs,
            options(nostack, readonly),
        );
        if MR == 2 * ROWS {
            asm!(
                "tileloadd tmm5, [{a} + {as_}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                a = in(reg) a.wrapping_add(ROWS * a_rs), as_ = in(reg) a_rs,
                options(nostack, readonly),
            );
        }
    }
}

/// Zeroes the sum tiles.
///
/// # Safety
/// The tiles are configured.
#[inline(always)]
unsafe fn zero() {
    // SAFETY: the caller's contract.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        )
    };
}

/// Loads the sum tiles of `MR` rows from `sums` (rows of 32 values, [`PANEL_ROW_BYTES`] apart).
///
/// # Safety
/// The tiles are configured; `sums` holds `MR` rows.
#[inline(always)]
unsafe fn load<const MR: usize>(sums: *const u8) {
    // SAFETY: the caller's contract.
    unsafe {
        asm!(
            "tileloadd tmm0, [{s} + {rs}*1]",
            "tileloadd tmm1, [{s} + {rs}*1 + 64]",
            s = in(reg) sums, rs = in(reg) PANEL_ROW_BYTES, options(nostack, readonly),
        );
        if MR == 2 * ROWS {
            asm!(
                "tileloadd tmm2, [{s} + {rs}*1]",
                "tileloadd tmm3, [{s} + {rs}*1 + 64]",
                s = in(reg) sums.wrapping_add(ROWS * PANEL_ROW_BYTES), rs = in(reg) PANEL_ROW_BYTES,
                options(nostack, readonly),
            );
        }
    }
}

/// Stores the sum tiles of `MR` rows to `sums`, as [`load`] reads them.
///
/// # Safety
/// The tiles are configured; `sums` holds `MR` writable rows.
#[inline(always)]
unsafe fn store<const MR: usize>(sums: *mut u8) {
    // SAFETY: the caller's contract.
    unsafe {
        asm!(
            "tilestored [{s} + {rs}*1], tmm0",
            "tilestored [{s} + {rs}*1 + 64], tmm1",
            s = in(reg) sums, rs = in(reg) PANEL_ROW_BYTES, options(nostack),
        );
        if MR == 2 * ROWS {
            asm!(
                "tilestored [{s} + {rs}*1], tmm2",
                "tilestored [{s} + {rs}*1 + 64], tmm3",
                s = in(reg) sums.wrapping_add(ROWS * PANEL_ROW_BYTES), rs = in(reg) PANEL_ROW_BYTES,
                options(nostack),
            );
        }
    }
}

/// The AMX tile over `MR` rows: 16 (two sum tiles) or 32 (four).
pub struct Amx<const MR: usize>;

impl<const MR: usize> Tile for Amx<MR> {
    const MR: usize = MR;
    const SPREADS_PREFETCH: bool = true;

    row_block_here_on!(
        /// [`row_block`] with the tile registers configured for it, and released after.
        ///
        /// # Safety
        /// As [`row_block`]; the process may run AMX-BF16 ([`crate::cpu::amx::features`]).
        "avx512f,avx512bf16,avx512vl,avx2,fma",
        // SAFETY: the kernel is chosen only where `amx::features` reports AMX-BF16 (the caller's contract).
        let _tiles = unsafe { Configured::full_tiles() }
    );

    unsafe fn round_row(x: &[f32], out: &mut [u8]) {
        // SAFETY: the caller runs on this tile's instruction set (AMX-BF16 implies AVX-512 BF16).
        unsafe { super::x86::round_bf16_avx512(x, out) }
    }

    /// One part of `prefetch`'s lines is asked for before each step: asked for all at once before the tile, as
    /// they were, they held W2's 64-row products back (22–48 % faster spread, BENCHMARKS.md, twenty-ninth run).
    ///
    /// # Safety
    /// The trait's, except that rows `rows..MR` are read from the `MR` rows at `a` (inside the driver's row
    /// block: see the module documentation); the tile registers are configured as full tiles.
    #[target_feature(enable = "avx512f,avx512bf16,avx512vl,avx2,fma")]
    unsafe fn tile(
        a: *const u8,
        a_rs: usize,
        _rows: usize,
        b: *const u16,
        pairs: usize,
        acc: &mut [f32; MAX_MR * NR],
        accumulate: bool,
        mut prefetch: Prefetch,
    ) {
        let sums = acc.as_mut_ptr() as *mut u8;
        let steps = pairs / STEP;
        // SAFETY: every tile load and store stays inside A's MR rows of `pairs` pairs, the panel's `pairs` pairs
        // and the sums (MR rows of NR floats); the tiles are configured (the caller's contract).
        unsafe {
            if accumulate {
                load::<MR>(sums);
            } else {
                zero();
            }
            for i in 0..steps {
                prefetch.issue();
                let b_step = (b as *const u8).add(i * STEP * PANEL_ROW_BYTES);
                step::<MR>(a.add(i * ROW_BYTES), a_rs, b_step);
            }
            store::<MR>(sums);
            let done = steps * STEP;
            if done < pairs {
                last_pairs::<MR>(a, a_rs, b, done..pairs, acc);
            }
        }
    }
}

/// Adds pairs `range` of the block to the tile's sums with `vdpbf16ps` (fewer than a step of 16).
///
/// # Safety
/// As [`Amx::tile`]'s, on AVX-512 BF16.
#[inline(always)]
unsafe fn last_pairs<const MR: usize>(
    a: *const u8,
    a_rs: usize,
    b: *const u16,
    range: std::ops::Range<usize>,
    acc: &mut [f32; MAX_MR * NR],
) {
    // SAFETY: row r of A holds the range's pairs, the panel the same pairs of NR lanes; the sums MR rows of NR.
    unsafe {
        for r in 0..MR {
            let out = acc.as_mut_ptr().add(r * NR);
            let mut sums = [_mm512_loadu_ps(out), _mm512_loadu_ps(out.add(16))];
            for q in range.clone() {
                let pair = (a.add(r * a_rs + 4 * q) as *const i32).read_unaligned();
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair));
                let bp = b.add(q * NR * 2);
                for (h, sum) in sums.iter_mut().enumerate() {
                    let bv: __m512bh =
                        std::mem::transmute(_mm512_loadu_si512(bp.add(32 * h) as *const __m512i));
                    *sum = _mm512_dpbf16_ps(*sum, av, bv);
                }
            }
            _mm512_storeu_ps(out, sums[0]);
            _mm512_storeu_ps(out.add(16), sums[1]);
        }
    }
}

/// Runs `call` on the AMX tiles; a product of 8 rows or fewer (a decoding step) on the 512-bit `vdpbf16ps`
/// tiles, which do not compute rows they throw away (models hand those to [`super::super::Bf16Kernel::for_rows`]'s
/// choice, which is the widening tile from 3 rows on an Intel core).
///
/// # Safety
/// The process may run AMX-BF16; the operands satisfy `Bf16B::gemm`'s contract.
#[target_feature(enable = "avx512f,avx512bf16,avx512vl,avx2,fma")]
pub unsafe fn run_amx(call: &Call<'_>) {
    // SAFETY (each arm): forwarded.
    match call.m {
        0..=8 => unsafe { super::x86::run_avx512(call) },
        9..=16 => unsafe { super::drive::<Amx<16>>(call) },
        _ => unsafe { super::drive::<Amx<32>>(call) },
    }
}
