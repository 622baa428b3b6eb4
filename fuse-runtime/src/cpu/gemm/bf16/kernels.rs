//! The bf16 driver and its register tiles. The driver ([`drive`]) is `#[inline(always)]` and instantiated inside
//! one `#[target_feature]` function per kernel, so the rounding of A vectorises with the tile's instruction set.

use super::super::tile::Prefetch;
use super::{from_bf16, to_bf16, Bf16Kernel, NR};
use crate::cpu::gemm::Strided;
use crate::cpu::scratch::{with_buffer, BF16_OPERAND, GEMM_A, GEMM_B};

/// Rows of the tallest tile (AMX's).
const MAX_MR: usize = 32;

/// Bytes of rounded A per row block: the block stays in L2 while every panel of B passes it (as for int8).
const A_BLOCK_BYTES: usize = 512 << 10;

/// Depth pairs per depth block: a block of a panel (32 columns × 256 depths × 2 bytes, 16 KiB) stays in L1 while
/// every row tile of the row block passes it; deeper products carry each tile's sums across blocks.
const KC_PAIRS: usize = 128;

/// Depth pairs per step of the AMX tile, each step asking for one part of the tile's share of the next block.
const PREFETCH_STEP_PAIRS: usize = crate::cpu::amx::STEP;

/// The panels a product reads (see [`super::Bf16B`] for their layout): a weight's, packed at load, or an operand's,
/// packed per call ([`run_operands`]).
pub(super) struct Panels<'a> {
    /// Depth.
    pub k: usize,
    /// Depth rounded up to even.
    pub k2: usize,
    pub panels: &'a [u16],
}

/// One product over panels of this precision.
pub(super) type Call<'p> = super::super::PackCall<'p, Panels<'p>>;

/// A tile's `row_block_here`: [`row_block`] for it, compiled with `$features` where given (each x86
/// tile's override), as is otherwise (the trait's default, which the portable tile keeps); `$setup` first where
/// given (the AMX tile's configuration of its tile registers, held until the block is done).
macro_rules! row_block_here_on {
    ($(#[$doc:meta])* $($features:literal $(, $setup:stmt)?)?) => {
        $(#[$doc])*
        $(#[target_feature(enable = $features)])?
        unsafe fn row_block_here(
            call: &Call<'_>,
            rows: (usize, usize),
            bytes: &mut [u8],
            row: &mut [f32],
            all_sums: &mut [[f32; MAX_MR * NR]],
        )
        where
            Self: Sized,
        {
            $($($setup)?)?
            // SAFETY: forwarded, on the tile's instruction set where one is named.
            unsafe { row_block::<Self>(call, rows, bytes, row, all_sums) }
        }
    };
}

// After the macro, which the AMX tile uses too.
#[cfg(target_arch = "x86_64")]
mod amx;

/// A register tile over one depth block: for r < MR and every column of one panel, `Σ_l a[r][l] · b[l][j]` over
/// the block's pairs of depths into `acc[r·NR + j]`, which it overwrites when `!accumulate` (the first depth
/// block) and adds to otherwise. Rows past `rows` read row `rows − 1` again (their sums are discarded), so no
/// row outside the block is read; the AMX tile reads the scratch rows that follow instead (see `amx.rs`).
trait Tile {
    const MR: usize;
    /// Bytes per element of rounded A: 2 (bf16, a pair read as one 4-byte lane), or 4 for a tile that reads A as
    /// f32 holding bf16 values.
    const A_BYTES: usize = 2;
    /// Whether [`Tile::tile`] asks for its `prefetch` (its share of the next block) part by part as it goes;
    /// otherwise the driver asks for all of it before the tile (the AMX tile spreads it).
    const SPREADS_PREFETCH: bool = false;

    /// # Safety
    /// The CPU runs the tile's instruction set; `a` holds `rows` rows of `pairs` pairs (2 elements of `A_BYTES`
    /// bytes each) at stride `a_rs` bytes; `b` holds as many pairs of `NR · 2` bf16 values.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        a: *const u8,
        a_rs: usize,
        rows: usize,
        b: *const u16,
        pairs: usize,
        acc: &mut [f32; MAX_MR * NR],
        accumulate: bool,
        prefetch: Prefetch,
    );

    /// Rounds row `x` into `out` (`out.len() / A_BYTES` elements, those past `x` zero).
    ///
    /// # Safety
    /// The CPU runs the tile's instruction set; `out` is 4-byte aligned when `A_BYTES` is 4.
    unsafe fn round_row(x: &[f32], out: &mut [u8]) {
        round_row_scalar(x, out, Self::A_BYTES)
    }

    row_block_here_on!(
        /// [`row_block`] for this tile. [`drive`] calls it from inside its scratch buffers' closures, and a closure
        /// does not inherit the `#[target_feature]` of the function it is written in: each x86 tile overrides this
        /// with one compiled for its instruction set, so that the stores of C and the loops around the tile use it
        /// too (C's rows were copied by calls to `memcpy` before).
        ///
        /// # Safety
        /// As [`row_block`].
    );
}

/// [`Tile::round_row`] in plain Rust, into cells of `width` bytes (2: bf16, 4: f32 holding a bf16 value).
fn round_row_scalar(x: &[f32], out: &mut [u8], width: usize) {
    for (i, cell) in out.chunks_exact_mut(width).enumerate() {
        let h = x.get(i).map_or(0, |&v| to_bf16(v));
        if width == 2 {
            cell.copy_from_slice(&h.to_ne_bytes());
        } else {
            cell.copy_from_slice(&from_bf16(h).to_ne_bytes());
        }
    }
}

/// Runs `call` on `kernel`.
///
/// # Safety
/// `kernel` runs on this CPU; the operands satisfy `Bf16B::gemm`'s contract.
pub(super) unsafe fn run(kernel: Bf16Kernel, call: &Call<'_>) {
    // SAFETY (each arm): the CPU has the instruction set the function is compiled for (the caller's contract).
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Amx => unsafe { amx::run_amx(call) },
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Avx512 => unsafe { x86::run_avx512(call) },
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Avx512Ymm => unsafe { x86::run_avx512_ymm(call) },
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Avx512Fma => unsafe { x86::run_avx512_fma(call) },
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Avx2 => unsafe { x86::run_avx2(call) },
        _ => unsafe { drive::<Portable>(call) },
    }
}

/// C = A·B (`dims` = (m, k, n)) with B an operand of this call: B is rounded into this thread's scratch in the
/// panel layout, then multiplied as a weight's pack is.
///
/// # Safety
/// `kernel` runs on this CPU; A's m×k and B's k×n elements are readable, C's m×n (unit column stride) writable and
/// overlapping neither.
pub(super) unsafe fn run_operands(
    kernel: Bf16Kernel,
    (m, k, n): (usize, usize, usize),
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    c: Strided<*mut f32>,
) {
    let (k2, width) = (k.next_multiple_of(2), n.next_multiple_of(NR));
    let words = k2 / 2 * width;
    // After the panels: the rounded column (depth-contiguous B) or the two rounded rows and a gathered row.
    let spare = if b.rs == 1 { k2 / 2 } else { width + n };
    with_buffer(&BF16_OPERAND, words + spare, |buf| {
        // SAFETY: u32 has f32's size and alignment; the same memory, within its length.
        let buf =
            unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u32, buf.len()) };
        let (panels, spare) = buf.split_at_mut(words);
        let round: unsafe fn(&[f32], &mut [u8]) = match kernel {
            #[cfg(target_arch = "x86_64")]
            Bf16Kernel::Amx | Bf16Kernel::Avx512 | Bf16Kernel::Avx512Ymm => x86::round_bf16_avx512,
            _ => |x, out| round_row_scalar(x, out, 2),
        };
        // SAFETY: B's elements are readable (the caller's contract); `round` runs on this CPU (as `kernel`).
        unsafe { pack_operand(b, (k, n), panels, spare, round) };
        // SAFETY: the same memory viewed as pairs of bf16 values.
        let panels =
            unsafe { std::slice::from_raw_parts(panels.as_ptr() as *const u16, 2 * panels.len()) };
        let pack = Panels { k, k2, panels };
        let call = Call {
            pack: &pack,
            m,
            n,
            col0: 0,
            a,
            c,
        };
        // SAFETY: forwarded; the panels hold B.
        unsafe { run(kernel, &call) }
    })
}

/// Rounds B (k×n) into `panels` (`k2 / 2 × width` words, each a pair of depths of one column), writing every
/// word, the padding's as zero. A depth-contiguous B (a key matrix read transposed) is rounded a column at a time,
/// any other a pair of rows at a time; `spare` holds the rounded column or rows (and a gathered row).
///
/// # Safety
/// B's k×n elements are readable; `round` rounds a row of f32 into bf16 values (two bytes each) on this CPU.
unsafe fn pack_operand(
    b: Strided<*const f32>,
    (k, n): (usize, usize),
    panels: &mut [u32],
    spare: &mut [u32],
    round: unsafe fn(&[f32], &mut [u8]),
) {
    let pairs = k.div_ceil(2);
    let word = |p: usize, j: usize| (j / NR) * pairs * NR + p * NR + j % NR;
    if b.rs == 1 {
        let column = &mut spare[..pairs];
        for j in 0..n {
            // SAFETY: column j's k elements are contiguous and readable (the caller's contract).
            let x = unsafe { std::slice::from_raw_parts(b.ptr.offset(j as isize * b.cs), k) };
            // SAFETY: `column` holds 2·pairs ≥ k bf16 values, all written (those past k as zero); `round` runs here.
            unsafe { round(x, as_bytes(column)) };
            for (p, &w) in column.iter().enumerate() {
                panels[word(p, j)] = w;
            }
        }
    } else {
        let width = n.next_multiple_of(NR);
        let (rounded, gather) = spare.split_at_mut(width);
        let gather: &mut [f32] = {
            // SAFETY: f32 has u32's size and alignment.
            unsafe { std::slice::from_raw_parts_mut(gather.as_mut_ptr() as *mut f32, n) }
        };
        for p in 0..pairs {
            // Rows 2p and 2p + 1 rounded into the first and second halves of `rounded` (width bf16 values each).
            let (even, odd) = as_bytes(rounded).split_at_mut(2 * width);
            for (half, l) in [(even, 2 * p), (odd, 2 * p + 1)] {
                if l >= k {
                    half.fill(0);
                    continue;
                }
                // SAFETY: row l of B is readable over n elements.
                let x = unsafe { super::super::strided_row(b, l, n, gather) };
                // SAFETY: `half` holds width ≥ n bf16 values; `round` runs here.
                unsafe { round(x, &mut half[..2 * n]) };
            }
            let halves: &[u16] = {
                // SAFETY: the same bytes viewed as bf16 values.
                unsafe { std::slice::from_raw_parts(rounded.as_ptr() as *const u16, 2 * width) }
            };
            let (lo, hi) = halves.split_at(width);
            for j in 0..n {
                // The even depth first in memory, as the panels hold pairs.
                let [a, b] = lo[j].to_ne_bytes();
                let [c, d] = hi[j].to_ne_bytes();
                panels[word(p, j)] = u32::from_ne_bytes([a, b, c, d]);
            }
        }
    }
    for j in n..n.next_multiple_of(NR) {
        for p in 0..pairs {
            panels[word(p, j)] = 0;
        }
    }
}

/// Words viewed as bytes.
fn as_bytes(words: &mut [u32]) -> &mut [u8] {
    // SAFETY: the same memory, alignment 1, four bytes a word.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, 4 * words.len()) }
}

/// The loop nest: row blocks of A rounded into this thread's scratch → panels of B → depth blocks of
/// [`KC_PAIRS`] pairs → row tiles, each carrying its sums across depth blocks, written to C after the last.
///
/// # Safety
/// As [`run`], on `T`'s instruction set.
#[inline(always)]
unsafe fn drive<T: Tile>(call: &Call<'_>) {
    let &Call { pack, m, a, .. } = call;
    let (k, k2) = (pack.k, pack.k2);
    let stride = k2 * T::A_BYTES;
    let mc = (A_BLOCK_BYTES / stride.max(1))
        .clamp(T::MR, 256)
        .div_ceil(T::MR)
        * T::MR;
    let mc = mc.min(m.next_multiple_of(T::MR));
    // The scratch holds mc rounded rows of `stride` bytes and, when A's rows are not contiguous, one row of A
    // gathered before it is rounded.
    let row_floats = if a.cs == 1 { 0 } else { k };
    let cell_floats = (mc * stride).div_ceil(4);
    with_buffer(&GEMM_A, cell_floats + row_floats, |buf| {
        let (cells, row) = buf.split_at_mut(cell_floats);
        // SAFETY: the f32 buffer viewed as bytes (alignment 1, same memory, within its length).
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(cells.as_mut_ptr() as *mut u8, mc * stride) };
        let tiles = mc.div_ceil(T::MR);
        with_buffer(&GEMM_B, tiles * MAX_MR * NR, |sums_buf| {
            let (all_sums, _) = sums_buf.as_chunks_mut::<{ MAX_MR * NR }>();
            for ic in (0..m).step_by(mc) {
                // SAFETY: forwarded; the scratch holds `mc` rows of `stride` bytes and the gathered row.
                unsafe { T::row_block_here(call, (ic, mc.min(m - ic)), bytes, row, all_sums) };
            }
        })
    })
}

/// Rows `ic..ic + rows` of C: those rows of A rounded into `bytes` (through `row` when A's rows are not
/// contiguous), then every panel of B in the call's columns, in depth blocks, through the row tiles' f32 sums in
/// `all_sums` (one per tile), written to C after the last.
///
/// # Safety
/// As [`drive`]; `bytes` holds `rows` rows of the call's stride, `row` k floats when A's columns are strided,
/// `all_sums` a sum block per row tile.
#[inline(always)]
unsafe fn row_block<T: Tile>(
    call: &Call<'_>,
    (ic, rows): (usize, usize),
    bytes: &mut [u8],
    row: &mut [f32],
    all_sums: &mut [[f32; MAX_MR * NR]],
) {
    let &Call {
        pack,
        n,
        col0,
        a,
        c,
        ..
    } = call;
    let (k, k2) = (pack.k, pack.k2);
    let pairs = k2 / 2;
    let stride = k2 * T::A_BYTES;
    let tiles = rows.div_ceil(T::MR);
    for r in 0..rows {
        // SAFETY: row ic + r of A is readable over k elements (the caller's contract).
        let x = unsafe { super::super::strided_row(a, ic + r, k, row) };
        // SAFETY: on T's instruction set; a row starts at a multiple of `stride`, a multiple of 4
        // bytes when A_BYTES is 4.
        unsafe { T::round_row(x, &mut bytes[r * stride..(r + 1) * stride]) };
    }
    for p0 in (0..n).step_by(NR) {
        let cols = NR.min(n - p0);
        let first = col0 + p0;
        let panel = pack.panels[first / NR * k2 * NR..].as_ptr();
        if pairs == 0 {
            all_sums[..tiles].iter_mut().for_each(|s| s.fill(0.0));
        }
        for q0 in (0..pairs).step_by(KC_PAIRS) {
            let count = KC_PAIRS.min(pairs - q0);
            let next = panel.wrapping_add((q0 + count) * NR * 2);
            for (t, ir) in (0..rows).step_by(T::MR).enumerate() {
                // This tile's share of the next block, in a part per step of the AMX tile.
                let prefetch = Prefetch::share(
                    next.cast(),
                    KC_PAIRS * NR * 2 * 2,
                    (t, tiles),
                    count.div_ceil(PREFETCH_STEP_PAIRS),
                );
                if !T::SPREADS_PREFETCH {
                    prefetch.issue_all();
                }
                // SAFETY: rows ir..ir + MR.min(rows − ir) of the block hold `pairs` rounded pairs,
                // pairs q0..q0 + count of which are read; the panel holds `pairs` pairs.
                unsafe {
                    T::tile(
                        bytes[ir * stride + T::A_BYTES * 2 * q0..].as_ptr(),
                        stride,
                        T::MR.min(rows - ir),
                        panel.add(q0 * NR * 2),
                        count,
                        &mut all_sums[t],
                        q0 > 0,
                        prefetch,
                    )
                };
            }
        }
        // SAFETY: rows ic.., columns p0..p0 + cols lie inside C.
        unsafe { super::super::store_tiles(all_sums, (T::MR, NR), c, ic, rows, p0, cols, None) };
    }
}

/// The scalar tile, for every target.
struct Portable;

impl Tile for Portable {
    const MR: usize = 4;

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
        for r in 0..Self::MR {
            // SAFETY: row min(r, rows − 1) holds `pairs` pairs of bf16; b holds as many of NR · 2 (the trait's
            // contract).
            let (a_row, b_all) = unsafe {
                (
                    std::slice::from_raw_parts(
                        a.add(r.min(rows - 1) * a_rs) as *const u16,
                        2 * pairs,
                    ),
                    std::slice::from_raw_parts(b, pairs * NR * 2),
                )
            };
            let out = &mut acc[r * NR..(r + 1) * NR];
            if !accumulate {
                out.fill(0.0);
            }
            for (pair, lanes) in a_row.chunks_exact(2).zip(b_all.chunks_exact(NR * 2)) {
                let (a0, a1) = (from_bf16(pair[0]), from_bf16(pair[1]));
                for (o, lane) in out.iter_mut().zip(lanes.chunks_exact(2)) {
                    // Products of two bf16 values are exact in f32, so this is what an FMA gives.
                    *o = *o + a0 * from_bf16(lane[0]) + a1 * from_bf16(lane[1]);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{drive, round_row_scalar, row_block, Call, Prefetch, Tile, MAX_MR, NR};

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
                let tiny =
                    _mm256_castsi256_ps(_mm256_cmpeq_epi32(exponent, _mm256_setzero_si256()));
                let sign = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN)));
                let rounded = _mm256_blendv_ps(rounded, sign, tiny);
                let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v);
                _mm256_storeu_ps(dst.as_mut_ptr(), _mm256_blendv_ps(rounded, v, nan));
            }
        }
        round_row_scalar(&x[whole..], &mut out[4 * whole..], 4);
    }

    /// `acc (+)= v` over the 8 or 16 floats at `out`.
    macro_rules! store {
        ($load:ident, $add:ident, $store:ident, $out:expr, $v:expr, $accumulate:expr) => {{
            let out = $out;
            let v = if $accumulate {
                $add($load(out), $v)
            } else {
                $v
            };
            $store(out, v);
        }};
    }

    /// The 512-bit `vdpbf16ps` tile over `MR` rows: 12 for a block of rows (24 accumulators, two vectors of B and
    /// A's broadcast in 32 registers); 1, 2, 4 or 8 for a product of that few rows.
    pub struct Avx512<const MR: usize>;

    impl<const MR: usize> Tile for Avx512<MR> {
        const MR: usize = MR;

        row_block_here_on!("avx512f,avx512bf16,avx512vl,avx2,fma");

        unsafe fn round_row(x: &[f32], out: &mut [u8]) {
            // SAFETY: the caller runs on this tile's instruction set.
            unsafe { round_row_avx512(x, out) }
        }

        #[target_feature(enable = "avx512f,avx512bf16,avx512vl,avx2,fma")]
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
            on_shorter_tile!(
                Avx512,
                rows,
                (a, a_rs, rows, b, pairs, acc, accumulate, _prefetch)
            );
            let p = crate::cpu::gemm::tile_rows::<MR>(a, a_rs, rows);
            // SAFETY: the loads stay inside the tile's rows and the panel (the trait's contract); bf16 vectors are
            // reinterpreted bits.
            unsafe {
                let mut c = [[_mm512_setzero_ps(); 2]; MR];
                for q in 0..pairs {
                    let bp = b.add(q * NR * 2);
                    let b0: __m512bh =
                        std::mem::transmute(_mm512_loadu_si512(bp as *const __m512i));
                    let b1: __m512bh =
                        std::mem::transmute(_mm512_loadu_si512(bp.add(32) as *const __m512i));
                    for (r, cr) in c.iter_mut().enumerate() {
                        let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair(&p, r, q)));
                        cr[0] = _mm512_dpbf16_ps(cr[0], av, b0);
                        cr[1] = _mm512_dpbf16_ps(cr[1], av, b1);
                    }
                }
                for (r, cr) in c.iter().enumerate() {
                    for (s, &v) in cr.iter().enumerate() {
                        let out = acc.as_mut_ptr().add(r * NR + 16 * s);
                        store!(
                            _mm512_loadu_ps,
                            _mm512_add_ps,
                            _mm512_storeu_ps,
                            out,
                            v,
                            accumulate
                        );
                    }
                }
            }
        }
    }

    /// The 256-bit `vdpbf16ps` tile over `MR` rows: 6 for a block of rows (24 accumulators); 1, 2 or 4 for a
    /// product of that few rows.
    pub struct Avx512Ymm<const MR: usize>;

    impl<const MR: usize> Tile for Avx512Ymm<MR> {
        const MR: usize = MR;

        row_block_here_on!("avx512f,avx512bf16,avx512vl,avx2,fma");

        unsafe fn round_row(x: &[f32], out: &mut [u8]) {
            // SAFETY: the caller runs on this tile's instruction set.
            unsafe { round_row_avx512(x, out) }
        }

        #[target_feature(enable = "avx512f,avx512bf16,avx512vl,avx2,fma")]
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
            let p = crate::cpu::gemm::tile_rows::<MR>(a, a_rs, rows);
            // SAFETY: as for `Avx512`.
            unsafe {
                let mut c = [[_mm256_setzero_ps(); 4]; MR];
                for q in 0..pairs {
                    let bp = b.add(q * NR * 2);
                    let bv: [__m256bh; 4] = std::array::from_fn(|s| {
                        std::mem::transmute(_mm256_loadu_si256(bp.add(16 * s) as *const __m256i))
                    });
                    for (r, cr) in c.iter_mut().enumerate() {
                        let av: __m256bh = std::mem::transmute(_mm256_set1_epi32(pair(&p, r, q)));
                        for (acc_s, &b_s) in cr.iter_mut().zip(&bv) {
                            *acc_s = _mm256_dpbf16_ps(*acc_s, av, b_s);
                        }
                    }
                }
                for (r, cr) in c.iter().enumerate() {
                    for (s, &v) in cr.iter().enumerate() {
                        let out = acc.as_mut_ptr().add(r * NR + 8 * s);
                        store!(
                            _mm256_loadu_ps,
                            _mm256_add_ps,
                            _mm256_storeu_ps,
                            out,
                            v,
                            accumulate
                        );
                    }
                }
            }
        }
    }

    /// The AVX2 tile over `MR` rows: 4 for a block of rows; 1 or 2 for a product of that few rows. Per strip of
    /// 16 columns and pair of depths: two 32-byte loads of B (8 columns × 2 depths each), whose even depths are
    /// the lanes shifted left by 16 bits and odd depths the lanes with their low 16 bits cleared (both exact
    /// f32s), and FMAs with A's two values broadcast from its f32 cells.
    pub struct Avx2<const MR: usize>;

    impl<const MR: usize> Tile for Avx2<MR> {
        const MR: usize = MR;
        const A_BYTES: usize = 4;

        row_block_here_on!("avx2,fma");

        unsafe fn round_row(x: &[f32], out: &mut [u8]) {
            // SAFETY: the caller runs on this tile's instruction set, `out` 4-byte aligned.
            unsafe { round_row_avx2(x, out) }
        }

        #[target_feature(enable = "avx2,fma")]
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
            let p = crate::cpu::gemm::tile_rows::<MR>(a, a_rs, rows);
            // SAFETY: as for `Avx512`; A's cells are f32s.
            unsafe {
                let high = _mm256_set1_epi32(0xFFFF_0000_u32 as i32);
                for s in 0..NR / 16 {
                    let mut c = [[_mm256_setzero_ps(); 2]; MR];
                    for q in 0..pairs {
                        let bp = b.add(q * NR * 2 + 32 * s);
                        let raw: [__m256i; 2] = std::array::from_fn(|h| {
                            _mm256_loadu_si256(bp.add(16 * h) as *const __m256i)
                        });
                        let even = raw.map(|v| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v)));
                        let odd = raw.map(|v| _mm256_castsi256_ps(_mm256_and_si256(v, high)));
                        for (r, cr) in c.iter_mut().enumerate() {
                            let row = p[r] as *const f32;
                            let a0 = _mm256_broadcast_ss(&*row.add(2 * q));
                            let a1 = _mm256_broadcast_ss(&*row.add(2 * q + 1));
                            for h in 0..2 {
                                cr[h] = _mm256_fmadd_ps(a0, even[h], cr[h]);
                                cr[h] = _mm256_fmadd_ps(a1, odd[h], cr[h]);
                            }
                        }
                    }
                    for (r, cr) in c.iter().enumerate() {
                        for (h, &v) in cr.iter().enumerate() {
                            let out = acc.as_mut_ptr().add(r * NR + 16 * s + 8 * h);
                            store!(
                                _mm256_loadu_ps,
                                _mm256_add_ps,
                                _mm256_storeu_ps,
                                out,
                                v,
                                accumulate
                            );
                        }
                    }
                }
            }
        }
    }

    /// The 512-bit tile without bf16 arithmetic, over `MR` rows: 12 for a block of rows; 1, 2, 4 or 8 for a
    /// product of that few rows. As [`Avx2`], on 512-bit vectors: per pair of depths, two 64-byte loads of B (16
    /// columns × 2 depths each), widened to the even depths (a shift) and the odd ones (a mask), and four FMAs a
    /// row with A's two values broadcast from its f32 cells. For cores whose `vdpbf16ps` runs at half their FMAs'
    /// rate (`Processor::half_rate_dpbf16`), where the 24 `vdpbf16ps` of a pair on the 12-row tile take as long
    /// as the 48 FMAs here, which add only four widening operations.
    pub struct Avx512Fma<const MR: usize>;

    impl<const MR: usize> Tile for Avx512Fma<MR> {
        const MR: usize = MR;
        const A_BYTES: usize = 4;

        row_block_here_on!("avx512f,avx512vl,avx2,fma");

        unsafe fn round_row(x: &[f32], out: &mut [u8]) {
            // SAFETY: the caller runs on this tile's instruction set (AVX2 within it), `out` 4-byte aligned.
            unsafe { round_row_avx2(x, out) }
        }

        #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
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
            on_shorter_tile!(
                Avx512Fma,
                rows,
                (a, a_rs, rows, b, pairs, acc, accumulate, _prefetch)
            );
            let p = crate::cpu::gemm::tile_rows::<MR>(a, a_rs, rows);
            // SAFETY: as for `Avx512`; A's cells are f32s.
            unsafe {
                let high = _mm512_set1_epi32(0xFFFF_0000_u32 as i32);
                let mut c = [[_mm512_setzero_ps(); 2]; MR];
                for q in 0..pairs {
                    let bp = b.add(q * NR * 2);
                    let raw: [__m512i; 2] = std::array::from_fn(|h| {
                        _mm512_loadu_si512(bp.add(32 * h) as *const __m512i)
                    });
                    let even = raw.map(|v| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v)));
                    let odd = raw.map(|v| _mm512_castsi512_ps(_mm512_and_si512(v, high)));
                    for (r, cr) in c.iter_mut().enumerate() {
                        let row = p[r] as *const f32;
                        let a0 = _mm512_set1_ps(*row.add(2 * q));
                        let a1 = _mm512_set1_ps(*row.add(2 * q + 1));
                        for h in 0..2 {
                            cr[h] = _mm512_fmadd_ps(a0, even[h], cr[h]);
                            cr[h] = _mm512_fmadd_ps(a1, odd[h], cr[h]);
                        }
                    }
                }
                for (r, cr) in c.iter().enumerate() {
                    for (h, &v) in cr.iter().enumerate() {
                        let out = acc.as_mut_ptr().add(r * NR + 16 * h);
                        store!(
                            _mm512_loadu_ps,
                            _mm512_add_ps,
                            _mm512_storeu_ps,
                            out,
                            v,
                            accumulate
                        );
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bf16,avx512vl,avx2,fma")]
    pub unsafe fn run_avx512(call: &Call<'_>) {
        // SAFETY (each arm): forwarded.
        match call.m {
            1 => unsafe { drive::<Avx512<1>>(call) },
            2 => unsafe { drive::<Avx512<2>>(call) },
            3 | 4 => unsafe { drive::<Avx512<4>>(call) },
            // Up to 8 rows are one tile of 8 (16 accumulators), one pass over each panel.
            5..=8 => unsafe { drive::<Avx512<8>>(call) },
            _ => unsafe { drive::<Avx512<12>>(call) },
        }
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
        // SAFETY (each arm): forwarded.
        match call.m {
            1 => unsafe { drive::<Avx512Fma<1>>(call) },
            2 => unsafe { drive::<Avx512Fma<2>>(call) },
            3 | 4 => unsafe { drive::<Avx512Fma<4>>(call) },
            5..=8 => unsafe { drive::<Avx512Fma<8>>(call) },
            _ => unsafe { drive::<Avx512Fma<12>>(call) },
        }
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
}
