//! The bf16 tiles of x86-64: `vdpbf16ps` on 512-bit and 256-bit vectors, and the tiles that widen bf16 to f32
//! for FMAs on cores without it (AVX2) or where it runs at half their rate (512-bit), each kind written once
//! ([`dot_tile`], [`widening_tile`]) over the vectors of its width ([`Bf16Lanes`]); and the rounding of A.

use std::arch::x86_64::*;

use super::{drive, round_row_scalar, row_block, Call, Prefetch, Tile, MAX_MR, NR};
use crate::cpu::gemm::avx2::Ymm;
use crate::cpu::gemm::avx512::Zmm;
use crate::cpu::gemm::tile::ask_b_ahead;
use crate::cpu::gemm::tile::Lanes;

/// Row `r`'s pair `q` of bf16 values, as one i32 to broadcast.
#[inline(always)]
unsafe fn pair(rows: &[*const u8], r: usize, q: usize) -> i32 {
    // SAFETY: the caller's row holds pair q.
    unsafe { (rows[r].add(4 * q) as *const i32).read_unaligned() }
}

/// [`round_row_avx512`] as a plain `unsafe fn`, to be chosen at run time.
///
/// # Safety
/// The CPU has AVX-512 BF16.
pub unsafe fn round_bf16_avx512(x: &[f32], out: &mut [u8]) {
    // SAFETY: forwarded.
    unsafe { round_row_avx512(x, out) }
}

/// Rounds a row of A to bf16 with `vcvtneps2bf16`, 16 values at a time.
///
/// # Safety
/// The CPU has AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16,avx512vl")]
unsafe fn round_row_avx512(x: &[f32], out: &mut [u8]) {
    let whole = x.len() / 16 * 16;
    for (i, chunk) in x[..whole].chunks_exact(16).enumerate() {
        // SAFETY: 16 floats read; 32 bytes written at byte 32·i < 2·whole ≤ out.len().
        unsafe {
            let h = _mm512_cvtneps_pbh(_mm512_loadu_ps(chunk.as_ptr()));
            _mm256_storeu_si256(
                out.as_mut_ptr().add(32 * i) as *mut __m256i,
                std::mem::transmute::<__m256bh, __m256i>(h),
            );
        }
    }
    // `vcvtneps2bf16` rounds to nearest even as `to_bf16` does (both keep a NaN a NaN).
    round_row_scalar(&x[whole..], &mut out[2 * whole..], 2);
}

/// Rounds a row of A to bf16 values held as f32, 8 at a time, as `to_bf16` does: `(bits + 0x7FFF + lsb) &
/// 0xFFFF0000`, a subnormal flushed to zero of its sign, a NaN passed through (it stays a NaN; its payload
/// does not matter, as it only makes NaNs).
///
/// # Safety
/// The CPU has AVX2; `out` is 4-byte aligned.
#[target_feature(enable = "avx2,fma")]
unsafe fn round_row_avx2(x: &[f32], out: &mut [u8]) {
    let whole = x.len() / 8 * 8;
    // SAFETY: the row's cells are 4-byte aligned f32s (the caller's contract).
    let cells =
        unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut f32, out.len() / 4) };
    for (chunk, dst) in x[..whole].chunks_exact(8).zip(cells.chunks_exact_mut(8)) {
        // SAFETY: 8 floats read and written.
        unsafe {
            let v = _mm256_loadu_ps(chunk.as_ptr());
            let bits = _mm256_castps_si256(v);
            let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(1));
            let up = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
            let rounded = _mm256_castsi256_ps(_mm256_and_si256(
                up,
                _mm256_set1_epi32(0xFFFF_0000_u32 as i32),
            ));
            // Exponent field zero: a zero or a subnormal, both become the zero of their sign.
            let exponent = _mm256_and_si256(bits, _mm256_set1_epi32(0x7F80_0000));
            let tiny = _mm256_castsi256_ps(_mm256_cmpeq_epi32(exponent, _mm256_setzero_si256()));
            let sign = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN)));
            let rounded = _mm256_blendv_ps(rounded, sign, tiny);
            let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v);
            _mm256_storeu_ps(dst.as_mut_ptr(), _mm256_blendv_ps(rounded, v, nan));
        }
    }
    round_row_scalar(&x[whole..], &mut out[4 * whole..], 4);
}

/// The vector operations the bf16 tiles need beyond the f32 tile's [`Lanes`], on 512-bit ([`Zmm`]) or 256-bit
/// ([`Ymm`]) vectors, so that each kind of tile is written once for both widths. As for `Lanes`, the methods are
/// only ever inlined into a `#[target_feature]` tile of their instruction set (`vdpbf16ps` needs AVX-512 BF16).
trait Bf16Lanes: Lanes {
    /// A vector of bf16 pairs, as `vdpbf16ps` takes them.
    type Pairs: Copy;
    /// The `LANES` bf16 pairs at `p` (a pair of depths per column) as f32 vectors of the even depths and of the
    /// odd ones: a bf16 value is the high half of its f32, so the even depth is its lane shifted left by 16 bits
    /// and the odd one its lane with the low 16 bits cleared, both exact.
    unsafe fn widen_pairs(p: *const u16) -> (Self::V, Self::V);
    /// The `LANES` bf16 pairs at `p`.
    unsafe fn load_pairs(p: *const u16) -> Self::Pairs;
    /// One pair (two bf16 in an i32) in every lane.
    unsafe fn splat_pair(pair: i32) -> Self::Pairs;
    /// `acc + a₀·b₀ + a₁·b₁` per lane (`vdpbf16ps`).
    unsafe fn dot_pairs(acc: Self::V, a: Self::Pairs, b: Self::Pairs) -> Self::V;
}

/// [`Bf16Lanes`] for one width, from its intrinsics.
macro_rules! bf16_lanes {
    (
        $lanes:ty, $v:ty, $int:ty, $pairs:ty,
        $load:ident, $set1:ident, $slli:ident, $and:ident, $cast:ident, $dot:ident
    ) => {
        impl Bf16Lanes for $lanes {
            type Pairs = $pairs;

            #[inline(always)]
            unsafe fn widen_pairs(p: *const u16) -> ($v, $v) {
                // SAFETY: the caller's contract.
                unsafe {
                    let v = $load(p as *const $int);
                    let high = $set1(0xFFFF_0000_u32 as i32);
                    ($cast($slli::<16>(v)), $cast($and(v, high)))
                }
            }
            #[inline(always)]
            unsafe fn load_pairs(p: *const u16) -> $pairs {
                // SAFETY: the caller's contract; bf16 vectors are reinterpreted bits.
                unsafe { std::mem::transmute($load(p as *const $int)) }
            }
            #[inline(always)]
            unsafe fn splat_pair(pair: i32) -> $pairs {
                // SAFETY: as above.
                unsafe { std::mem::transmute($set1(pair)) }
            }
            #[inline(always)]
            unsafe fn dot_pairs(acc: $v, a: $pairs, b: $pairs) -> $v {
                // SAFETY: the caller's contract.
                unsafe { $dot(acc, a, b) }
            }
        }
    };
}

bf16_lanes!(
    Zmm,
    __m512,
    __m512i,
    __m512bh,
    _mm512_loadu_si512,
    _mm512_set1_epi32,
    _mm512_slli_epi32,
    _mm512_and_si512,
    _mm512_castsi512_ps,
    _mm512_dpbf16_ps
);
bf16_lanes!(
    Ymm,
    __m256,
    __m256i,
    __m256bh,
    _mm256_loadu_si256,
    _mm256_set1_epi32,
    _mm256_slli_epi32,
    _mm256_and_si256,
    _mm256_castsi256_ps,
    _mm256_dpbf16_ps
);

/// `acc (+)=` a tile's accumulators: row r's vector s to columns `col0 + LANES·s..` of the tile's row r.
///
/// # Safety
/// Called from a tile of `L`'s instruction set; `col0 + VPR·LANES ≤ NR`.
#[inline(always)]
unsafe fn store_sums<L: Lanes, const MR: usize, const VPR: usize>(
    c: &[[L::V; VPR]; MR],
    acc: &mut [f32; MAX_MR * NR],
    col0: usize,
    accumulate: bool,
) {
    for (r, cr) in c.iter().enumerate() {
        for (s, &v) in cr.iter().enumerate() {
            // SAFETY: inside row r of the tile (the caller's contract).
            unsafe {
                let out = acc.as_mut_ptr().add(r * NR + col0 + L::LANES * s);
                let v = if accumulate {
                    L::add(L::load(out), v)
                } else {
                    v
                };
                L::store(out, v);
            }
        }
    }
}

/// The `vdpbf16ps` tile over `MR` rows on `L`'s vectors, `VPR` of them a row (`VPR · LANES = NR`): per pair of
/// depths, `VPR` loads of the panel and one `vdpbf16ps` per row and vector, with the row's pair of A broadcast.
///
/// # Safety
/// The tile's contract ([`Tile::tile`]), called from a tile compiled with AVX-512 BF16 (and VL for [`Ymm`]).
#[inline(always)]
unsafe fn dot_tile<L: Bf16Lanes, const MR: usize, const VPR: usize>(
    (a, a_rs, rows): (*const u8, usize, usize),
    (b, pairs): (*const u16, usize),
    acc: &mut [f32; MAX_MR * NR],
    accumulate: bool,
    b_ahead: usize,
) {
    debug_assert_eq!(VPR * L::LANES, NR);
    let p = crate::cpu::gemm::tile_rows::<MR>(a, a_rs, rows);
    // SAFETY: the loads stay inside the tile's rows and the panel (the trait's contract).
    unsafe {
        let mut c = [[L::zero(); VPR]; MR];
        for q in 0..pairs {
            let bp = b.add(q * NR * 2);
            ask_b_ahead(bp, b_ahead);
            let bv: [L::Pairs; VPR] =
                std::array::from_fn(|s| L::load_pairs(bp.add(2 * L::LANES * s)));
            for (r, cr) in c.iter_mut().enumerate() {
                let av = L::splat_pair(pair(&p, r, q));
                for (acc_s, &b_s) in cr.iter_mut().zip(&bv) {
                    *acc_s = L::dot_pairs(*acc_s, av, b_s);
                }
            }
        }
        store_sums::<L, MR, VPR>(&c, acc, 0, accumulate);
    }
}

/// The widening tile over `MR` rows on `L`'s vectors, for cores without `vdpbf16ps` or where it runs at half the
/// FMAs' rate: per strip of `2·LANES` columns and pair of depths, two loads of the panel widened to the even and
/// odd depths ([`Bf16Lanes::widen_pairs`]), and four FMAs a row with A's two values broadcast from its f32 cells.
/// The 256-bit tile makes two strips (16 registers hold one strip's accumulators), the 512-bit one a single strip.
///
/// # Safety
/// The tile's contract ([`Tile::tile`]) with A in f32 cells, called from a tile compiled for `L`'s instruction set.
#[inline(always)]
unsafe fn widening_tile<L: Bf16Lanes, const MR: usize>(
    (a, a_rs, rows): (*const u8, usize, usize),
    (b, pairs): (*const u16, usize),
    acc: &mut [f32; MAX_MR * NR],
    accumulate: bool,
    _b_ahead: usize,
) {
    let p = crate::cpu::gemm::tile_rows::<MR>(a, a_rs, rows);
    let strip = 2 * L::LANES;
    // SAFETY: as for `dot_tile`; A's cells are f32s.
    unsafe {
        for s in 0..NR / strip {
            let mut c = [[L::zero(); 2]; MR];
            for q in 0..pairs {
                let bp = b.add(q * NR * 2 + 2 * strip * s);
                let (even0, odd0) = L::widen_pairs(bp);
                let (even1, odd1) = L::widen_pairs(bp.add(2 * L::LANES));
                let (even, odd) = ([even0, even1], [odd0, odd1]);
                for (r, cr) in c.iter_mut().enumerate() {
                    let row = p[r] as *const f32;
                    let a0 = L::splat(*row.add(2 * q));
                    let a1 = L::splat(*row.add(2 * q + 1));
                    for h in 0..2 {
                        cr[h] = L::fmadd(a0, even[h], cr[h]);
                        cr[h] = L::fmadd(a1, odd[h], cr[h]);
                    }
                }
            }
            store_sums::<L, MR, 2>(&c, acc, strip * s, accumulate);
        }
    }
}

/// [`Tile`] for one x86 tile: its instruction set, how it rounds A (with `A_BYTES` where its cells are not bf16),
/// its body on its vectors, and `on_shorter_tile!` where a block's last 8 rows or fewer run on its tile of 4 or 8.
macro_rules! x86_tile {
    (
        $tile:ident,
        $features:literal,
        $round:ident
        $(, A_BYTES = $a_bytes:literal)?
        $(, ASKS_B_AHEAD = $asks:literal)?,
        body: $body:ident::<$lanes:ty $(, $vpr:literal)?>
        $(, $shorter:ident!)?
    ) => {
        impl<const MR: usize> Tile for $tile<MR> {
            const MR: usize = MR;
            $(const A_BYTES: usize = $a_bytes;)?
            $(const ASKS_B_AHEAD: bool = $asks;)?

            row_block_here_on!($features);

            unsafe fn round_row(x: &[f32], out: &mut [u8]) {
                // SAFETY: the caller runs on this tile's instruction set, `out` aligned for the cells.
                unsafe { $round(x, out) }
            }

            #[target_feature(enable = $features)]
            unsafe fn tile(
                a: *const u8,
                a_rs: usize,
                rows: usize,
                b: *const u16,
                pairs: usize,
                acc: &mut [f32; MAX_MR * NR],
                accumulate: bool,
                _prefetch: Prefetch,
            ) {
                // A block's last 8 rows or fewer on the tile of 4 or 8, where the tile has one.
                $($shorter!($tile, rows, (a, a_rs, rows, b, pairs, acc, accumulate, _prefetch));)?
                // SAFETY: forwarded, compiled for the tile's instruction set.
                unsafe {
                    $body::<$lanes, MR $(, $vpr)?>(
                        (a, a_rs, rows),
                        (b, pairs),
                        acc,
                        accumulate,
                        _prefetch.b_ahead(),
                    )
                }
            }
        }
    };
}

/// The 512-bit `vdpbf16ps` tile over `MR` rows: 12 for a block of rows (24 accumulators, two vectors of B and
/// A's broadcast in 32 registers); 1, 2, 4 or 8 for a product of that few rows.
pub struct Avx512<const MR: usize>;

x86_tile!(
    Avx512,
    "avx512f,avx512bf16,avx512vl,avx2,fma",
    round_row_avx512,
    ASKS_B_AHEAD = true,
    body: dot_tile::<Zmm, 2>,
    on_shorter_tile!
);

/// The 256-bit `vdpbf16ps` tile over `MR` rows: 6 for a block of rows (24 accumulators); 1, 2 or 4 for a
/// product of that few rows.
pub struct Avx512Ymm<const MR: usize>;

x86_tile!(
    Avx512Ymm,
    "avx512f,avx512bf16,avx512vl,avx2,fma",
    round_row_avx512,
    ASKS_B_AHEAD = true,
    body: dot_tile::<Ymm, 4>
);

/// The AVX2 widening tile over `MR` rows: 4 for a block of rows; 1 or 2 for a product of that few rows.
pub struct Avx2<const MR: usize>;

x86_tile!(
    Avx2,
    "avx2,fma",
    round_row_avx2,
    A_BYTES = 4,
    body: widening_tile::<Ymm>
);

/// The 512-bit widening tile over `MR` rows: 12 for a block of rows; 1, 2, 4 or 8 for a product of that few
/// rows. For cores whose `vdpbf16ps` runs at half their FMAs' rate (`Processor::half_rate_dpbf16`), where the 24
/// `vdpbf16ps` of a pair on the 12-row tile take as long as the 48 FMAs here, which add only four widening
/// operations.
pub struct Avx512Fma<const MR: usize>;

x86_tile!(
    Avx512Fma,
    "avx512f,avx512vl,avx2,fma",
    round_row_avx2,
    A_BYTES = 4,
    body: widening_tile::<Zmm>,
    on_shorter_tile!
);

#[target_feature(enable = "avx512f,avx512bf16,avx512vl,avx2,fma")]
pub unsafe fn run_avx512(call: &Call<'_>) {
    // SAFETY: forwarded.
    unsafe { on_tile_for_rows!(call.m, Avx512, drive(call)) }
}

#[target_feature(enable = "avx512f,avx512bf16,avx512vl,avx2,fma")]
pub unsafe fn run_avx512_ymm(call: &Call<'_>) {
    // SAFETY (each arm): forwarded.
    match call.m {
        1 => unsafe { drive::<Avx512Ymm<1>>(call) },
        2 => unsafe { drive::<Avx512Ymm<2>>(call) },
        3 | 4 => unsafe { drive::<Avx512Ymm<4>>(call) },
        // Seven or eight rows (a decoding step of 8) take the 512-bit tile of 8, which reads each panel once
        // where two 256-bit tiles of 4 read it twice (the 256-bit tile has no room for 8 rows of 4 vectors).
        7 | 8 => unsafe { drive::<Avx512<8>>(call) },
        _ => unsafe { drive::<Avx512Ymm<6>>(call) },
    }
}

#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
pub unsafe fn run_avx512_fma(call: &Call<'_>) {
    // SAFETY: forwarded.
    unsafe { on_tile_for_rows!(call.m, Avx512Fma, drive(call)) }
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn run_avx2(call: &Call<'_>) {
    // SAFETY (each arm): forwarded.
    match call.m {
        1 => unsafe { drive::<Avx2<1>>(call) },
        2 => unsafe { drive::<Avx2<2>>(call) },
        _ => unsafe { drive::<Avx2<4>>(call) },
    }
}
