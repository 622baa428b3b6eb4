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
    /// Whether [`Tile::tile`] asks for B's lines ahead of its steps itself where its `prefetch` says so
    /// ([`Prefetch::b_ahead`]); the driver then asks for none of the next block.
    const ASKS_B_AHEAD: bool = false;

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
        // B's values round the same whichever tile multiplies them, so with `vcvtneps2bf16` wherever the CPU has
        // it; the portable kernel, which stands for a CPU without it, keeps the scalar rounding.
        let native = kernel != Bf16Kernel::Portable && Bf16Kernel::Avx512.runs_here();
        // SAFETY (both): B's elements are readable (the caller's contract); the packer and `round` run on this
        // CPU (`native`).
        if !(native && unsafe { pack_natively(b, (k, n), panels) }) {
            let round: unsafe fn(&[f32], &mut [u8]) = match kernel {
                #[cfg(target_arch = "x86_64")]
                _ if native => x86::round_bf16_avx512,
                _ => |x, out| round_row_scalar(x, out, 2),
            };
            unsafe { pack_operand(b, (k, n), panels, spare, round) };
        }
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

/// [`pack_operand`] with `vcvtneps2bf16` sixteen words at a time where B's depths or columns are contiguous;
/// `false` for another B, or off x86-64.
///
/// # Safety
/// The CPU has AVX-512 BF16 ([`Bf16Kernel::Avx512`] runs here); B's k×n elements are readable; `panels` holds
/// `k.div_ceil(2) × n.next_multiple_of(NR)` words.
unsafe fn pack_natively(b: Strided<*const f32>, dims: (usize, usize), panels: &mut [u32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded contract.
    return unsafe { pack_x86::pack_operand_avx512(b, dims, panels) };
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (b, dims, panels);
        false
    }
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
    let b_ahead = super::super::tile::b_ahead(T::ASKS_B_AHEAD, tiles, rows);
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
                // This tile's share of the next block, in a part per step of the AMX tile, unless the tile
                // asks for B as it goes.
                let prefetch = if b_ahead > 0 {
                    Prefetch::ahead(b_ahead)
                } else {
                    Prefetch::share(
                        next.cast(),
                        KC_PAIRS * NR * 2 * 2,
                        (t, tiles),
                        count.div_ceil(PREFETCH_STEP_PAIRS),
                    )
                };
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

#[cfg(all(test, target_arch = "x86_64"))]
mod pack_tests;
#[cfg(target_arch = "x86_64")]
mod pack_x86;
#[cfg(target_arch = "x86_64")]
mod x86;
