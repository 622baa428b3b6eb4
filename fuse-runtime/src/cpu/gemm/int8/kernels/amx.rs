//! The AMX int8 tile: `tdpbusd` on tile registers (`crate::cpu::amx`), 16 rows by one panel (32 columns).
//!
//! A panel's quads of depths are laid out as `tdpbusd` reads its second operand (16 quads of a 16-column half
//! panel are one tile register, at the panel's stride of 128 bytes between quads), and the quantised rows of A
//! are its first operand as they lie, so neither is copied. Per activation group (128 to 512 depths: 2 to 8
//! steps of 64), the tile makes the group's i32 sums in two sum tiles and stores them to a block on the stack;
//! the group's last quads short of a step are added there with `vpdpbusd`, and the sums dequantised into the
//! tile's f32 sums as the vector tiles do.
//!
//! The groups alternate between two pairs of sum tiles (`tmm0`/`tmm1`, `tmm2`/`tmm3`) and two blocks on the
//! stack, and a group is dequantised only after the next group's products are issued: the vector work then
//! overlaps the tile products, and reads sums stored a group earlier instead of waiting for the store just made.
//!
//! Rows past the tile's (a tile of 16 over 5 rows) read the quantised rows that follow, which the driver's
//! scratch and [`super::super::QuantB::quantised_len`] hold (see `ROWS_PAST`): AMX computes each row of C from
//! that row of A alone, and their sums are never dequantised, so what those rows hold is never seen.

use std::arch::asm;
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::super::quantize_x86::{quantize_groups_u8_avx512, quantize_rows_u8_avx512};
use super::x86::dequant16;
use super::{panels, Call, Groups, Quantised, Tile, MAX_MR, NR};
use crate::cpu::amx::{Configured, PANEL_ROW_BYTES, ROWS, STEP};

/// Quantised rows an AMX tile may read past a product's last: its 16 rows less the one it has.
pub const ROWS_PAST: usize = ROWS - 1;

/// One group's i32 sums of a tile (16 rows of a panel), where its sum tiles are stored.
#[repr(C, align(64))]
struct GroupSums([i32; ROWS * NR]);

/// Sum tiles `$c0`/`$c1` zeroed, one step of products into them, and their store.
macro_rules! sum_tiles {
    ($zero:ident, $step:ident, $store:ident, $c0:literal, $c1:literal) => {
        /// Zeroes this pair of sum tiles.
        ///
        /// # Safety
        /// The tiles are configured and the process may run AMX-INT8.
        #[inline(always)]
        unsafe fn $zero() {
            // SAFETY: the caller's contract.
            unsafe { asm!(concat!("tilezero ", $c0), concat!("tilezero ", $c1), options(nostack, nomem)) };
        }

        /// One step: A's 16 rows of 64 bytes at `a` (stride `a_rs`) times the panel's 16 quads at `b` (its two
        /// halves of 16 columns) into this pair of sum tiles.
        ///
        /// # Safety
        /// The tiles are configured and the process may run AMX-INT8; A's 16 rows of 64 bytes and the panel's
        /// 16 rows of 128 bytes are readable.
        #[inline(always)]
        unsafe fn $step(a: *const u8, a_rs: usize, b: *const u8) {
            // SAFETY: the caller's contract.
            unsafe {
                asm!(
                    "tileloadd tmm6, [{b} + {bs}*1]",
                    "tileloadd tmm7, [{b} + {bs}*1 + 64]",
                    "tileloadd tmm4, [{a} + {as_}*1]",
                    concat!("tdpbusd ", $c0, ", tmm4, tmm6"),
                    concat!("tdpbusd ", $c1, ", tmm4, tmm7"),
                    b = in(reg) b, bs = in(reg) PANEL_ROW_BYTES, a = in(reg) a, as_ = in(reg) a_rs,
                    options(nostack, readonly),
                )
            };
        }

        /// Stores this pair of sum tiles to `sums`.
        ///
        /// # Safety
        /// The tiles are configured and the process may run AMX-INT8.
        #[inline(always)]
        unsafe fn $store(sums: &mut MaybeUninit<GroupSums>) {
            // SAFETY: the caller's contract; `sums` holds 16 rows of 128 bytes.
            unsafe {
                asm!(
                    concat!("tilestored [{s} + {rs}*1], ", $c0),
                    concat!("tilestored [{s} + {rs}*1 + 64], ", $c1),
                    s = in(reg) sums.as_mut_ptr(), rs = in(reg) PANEL_ROW_BYTES, options(nostack),
                )
            };
        }
    };
}

sum_tiles!(zero_even, step_even, store_even, "tmm0", "tmm1");
sum_tiles!(zero_odd, step_odd, store_odd, "tmm2", "tmm3");

/// The AMX tile over 16 rows.
pub struct Amx;

impl Tile for Amx {
    const MR: usize = ROWS;

    panels_here_on!(
        /// [`panels`] with the tile registers configured for it, and released after.
        ///
        /// # Safety
        /// As [`panels`]; the process may run AMX-INT8 ([`crate::cpu::amx::features`]).
        "avx512f,avx512vl,avx512vnni,avx2,fma",
        // SAFETY: the kernel is chosen only where `amx::features` reports AMX-INT8 (the caller's contract).
        let _tiles = unsafe { Configured::full_tiles() }
    );

    // AMX-INT8 comes with AVX-512, which the quantiser runs on.
    quantize_groups_on!(quantize_groups_u8_avx512, quantize_rows_u8_avx512);

    /// # Safety
    /// The trait's, except that rows `rows..16` are read from the 16 rows at `a` (see the module
    /// documentation); the tile registers are configured as full tiles.
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma")]
    unsafe fn tile(
        groups: &Groups,
        a: *const u8,
        a_rs: usize,
        rows: usize,
        b: *const i8,
        acc: &mut [f32; MAX_MR * NR],
        accumulate: bool,
    ) {
        let mut ints = [MaybeUninit::<GroupSums>::uninit(), MaybeUninit::uninit()];
        let b = b as *const u8;
        // SAFETY: every tile load stays inside A's 16 rows and the panel over the groups' quads, the stores
        // inside `ints`; the groups' arrays cover the tile's rows (the trait's contract); tiles are configured.
        // A group's block is read only after its store.
        unsafe {
            let mut q0 = 0;
            for g in 0..groups.count {
                let quads = groups.quads(g);
                let whole = q0 + quads / STEP * STEP;
                let odd = g % 2 == 1;
                if odd {
                    zero_odd();
                } else {
                    zero_even();
                }
                for q in (q0..whole).step_by(STEP) {
                    let (a_q, b_q) = (a.add(4 * q), b.add(q * PANEL_ROW_BYTES));
                    if odd {
                        step_odd(a_q, a_rs, b_q);
                    } else {
                        step_even(a_q, a_rs, b_q);
                    }
                }
                if g > 0 {
                    let last = &mut ints[usize::from(!odd)];
                    finish_group(groups, g - 1, a, a_rs, rows, b, last, acc, accumulate);
                }
                if odd {
                    store_odd(&mut ints[1]);
                } else {
                    store_even(&mut ints[0]);
                }
                q0 += quads;
            }
            let last = &mut ints[(groups.count - 1) % 2];
            finish_group(
                groups,
                groups.count - 1,
                a,
                a_rs,
                rows,
                b,
                last,
                acc,
                accumulate,
            );
        }
    }
}

/// Group `g`'s stored i32 sums: its quads past the last whole step added, then dequantised into rows
/// `0..rows` of `acc`.
///
/// # Safety
/// As [`Amx::tile`]'s; `ints` holds the group's stored sums.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn finish_group(
    groups: &Groups,
    g: usize,
    a: *const u8,
    a_rs: usize,
    rows: usize,
    b: *const u8,
    ints: &mut MaybeUninit<GroupSums>,
    acc: &mut [f32; MAX_MR * NR],
    accumulate: bool,
) {
    let quads = groups.quads(g);
    let q0 = g * groups.group_quads;
    let whole = q0 + quads / STEP * STEP;
    // SAFETY: the caller's contract; the sum tiles' store wrote all of `ints`.
    unsafe {
        let ints = ints.assume_init_mut();
        if whole < q0 + quads {
            last_quads(a, a_rs, rows, b, whole..q0 + quads, ints);
        }
        let col_sums = groups.col_sums(g);
        for r in 0..rows {
            let row = groups.row(r, rows, g);
            for s in 0..NR / 16 {
                let at = r * NR + 16 * s;
                let v = _mm512_loadu_si512(ints.0.as_ptr().add(at) as *const __m512i);
                let out = acc.as_mut_ptr().add(at);
                dequant16(v, row, col_sums.add(16 * s), out, accumulate || g > 0);
            }
        }
    }
}

/// Adds quads `range` (fewer than a step) to the group's i32 sums of rows `0..rows` with `vpdpbusd`.
///
/// # Safety
/// As [`Amx::tile`]'s, on AVX-512 VNNI.
#[inline(always)]
unsafe fn last_quads(
    a: *const u8,
    a_rs: usize,
    rows: usize,
    b: *const u8,
    range: std::ops::Range<usize>,
    ints: &mut GroupSums,
) {
    // SAFETY: row r of A holds the range's quads, the panel the same quads of NR lanes; `ints` MR rows of NR.
    unsafe {
        for r in 0..rows {
            let out = ints.0.as_mut_ptr().add(r * NR) as *mut __m512i;
            let mut sums = [_mm512_loadu_si512(out), _mm512_loadu_si512(out.add(1))];
            for q in range.clone() {
                let av =
                    _mm512_set1_epi32((a.add(r * a_rs + 4 * q) as *const i32).read_unaligned());
                let bp = b.add(q * PANEL_ROW_BYTES);
                for (h, sum) in sums.iter_mut().enumerate() {
                    let bv = _mm512_loadu_si512(bp.add(64 * h) as *const __m512i);
                    *sum = _mm512_dpbusd_epi32(*sum, av, bv);
                }
            }
            _mm512_storeu_si512(out, sums[0]);
            _mm512_storeu_si512(out.add(1), sums[1]);
        }
    }
}

/// Runs `call` on the AMX tile; a product of 8 rows or fewer (a decoding step) on the 512-bit `vpdpbusd` tiles,
/// which do not compute rows they throw away (both read A's rows as bytes, so `pre` serves either).
///
/// # Safety
/// The process may run AMX-INT8; the operands satisfy `QuantB::gemm`'s contract, and `pre`, when given, holds
/// the call's rows and [`ROWS_PAST`] more.
#[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma")]
pub unsafe fn run_amx(call: &Call<'_>, pre: Option<Quantised>) {
    // SAFETY (each arm): forwarded.
    match call.m {
        0..=8 => unsafe { super::x86::run_vnni512(call, pre) },
        _ => unsafe { super::drive::<Amx>(call, pre) },
    }
}
