//! The int8 driver and its register tiles. The driver ([`drive`]) is `#[inline(always)]` and instantiated inside
//! one `#[target_feature]` function per kernel, so the quantisation of A and the dequantisation of C vectorise
//! with the tile's instruction set.

use super::super::tile::{ask_b_ahead, b_ahead, Prefetch};
use super::quantize::quantize_row;
use super::{Int8Kernel, QuantB, MAX_A_GROUP, NR};
use crate::cpu::scratch::{with_buffer, GEMM_A, GEMM_B};

/// Rows of the tallest tile (AMX's).
const MAX_MR: usize = 16;

/// Bytes of quantised A per row block. Each row block streams all of B's panels once, and each panel reads the
/// whole block: a block larger than L2 is read from L3 per panel, a smaller one makes B stream from L3 once per
/// block. With few rows and a deep product the second costs more: W2's 64×4096×1024 column block on a Zen 3
/// core (512 KiB L2, AVX2 tile, u16 A) ran at 74–75 GOP/s in three 24-row blocks (192 KiB) and 75–90 in one
/// (BENCHMARKS.md, thirteenth run); the other measured shapes moved within noise.
const A_BLOCK_BYTES: usize = 576 << 10;

/// Rows per block such that the block's C (f32) stays within a quarter of L2 where the call's B fits in half of
/// it. The panels write a block's C one strip of [`NR`] columns at a time, each strip over all of the block's
/// rows, so a block whose C outgrows L2 writes every strip to lines L2 has already let go: W3's FFN-in block (256
/// rows of 1536 columns, 1.5 MiB of C) ran at 390–403 GOP/s on one Xeon core (2 MiB L2) with its whole C at once,
/// 467–476 with C cut to 256 or 512 KiB (BENCHMARKS.md, forty-first run). A B larger than that is read from L3
/// once per block, which more blocks would cost more than C's misses (W5's `lm_head`, W2's products).
fn rows_for_c(k4: usize, n: usize) -> usize {
    let l2 = crate::cpu::processor::Processor::get().caches.l2;
    if k4 * n > l2 / 2 {
        return usize::MAX;
    }
    l2 / 4 / (4 * n).max(1)
}

/// Quads (groups of 4 depths, one `vpdpbusd` lane) per depth block, which holds whole activation groups (one of
/// the deepest, or several shallower): a 512-deep slice of a panel (16 KiB) stays in L1 while every row tile of
/// the block passes it; deeper products carry each tile's f32 sums across blocks.
const KC_QUADS: usize = MAX_A_GROUP / 4;

/// One product over a pack of this precision.
pub(super) type Call<'p> = super::super::PackCall<'p, QuantB>;

/// What a tile needs to dequantise the activation groups of one call: for its row `r` and the call's group `g`,
/// the scale `scales[r · row_stride + g]` and zero point `zeros[..]` alike (rows past the tile's last reuse the
/// last row's), and the panel's column sums `col_sums[g · sums_stride..][..NR]`; and how far ahead it asks for
/// B's lines.
#[derive(Clone, Copy)]
struct Groups {
    /// Activation groups in the call.
    count: usize,
    /// Quads per activation group (the pack's group over 4).
    group_quads: usize,
    /// Quads of its last group (the depth's end); every other group has `group_quads`.
    last_quads: usize,
    scales: *const f32,
    zeros: *const f32,
    row_stride: usize,
    col_sums: *const f32,
    sums_stride: usize,
    /// Bytes past each step's lines of B at which a tile that can ([`Tile::ASKS_B_AHEAD`]) asks L1 for them
    /// ([`ask_b_ahead`]); 0 where it does not.
    b_ahead: usize,
}

impl Groups {
    /// Quads of the call's group `g`.
    #[inline(always)]
    fn quads(&self, g: usize) -> usize {
        if g + 1 == self.count {
            self.last_quads
        } else {
            self.group_quads
        }
    }

    /// (scale, zero point) of row `r` (clamped to the tile's `rows`) for the call's group `g`.
    ///
    /// # Safety
    /// `rows` rows and `count` groups lie inside the arrays the pointers were taken from.
    #[inline(always)]
    unsafe fn row(&self, r: usize, rows: usize, g: usize) -> (f32, f32) {
        let at = r.min(rows - 1) * self.row_stride + g;
        // SAFETY: the caller's contract.
        unsafe { (*self.scales.add(at), *self.zeros.add(at)) }
    }

    /// The panel's column sums of the call's group `g`, [`NR`] of them.
    #[inline(always)]
    fn col_sums(&self, g: usize) -> *const f32 {
        self.col_sums.wrapping_add(g * self.sums_stride)
    }
}

/// A tile's `panels_here`: [`panels`] for it, compiled with `$features` where given (each x86
/// tile's override), as is otherwise (the trait's default, which the portable tile keeps); `$setup` first where
/// given (the AMX tile's configuration of its tile registers, held until the block is done).
macro_rules! panels_here_on {
    ($(#[$doc:meta])* $($features:literal $(, $setup:stmt)?)?) => {
        $(#[$doc])*
        $(#[target_feature(enable = $features)])?
        unsafe fn panels_here(
            call: &Call<'_>,
            ic: usize,
            rows: usize,
            a: Quantised,
            all_sums: &mut [[f32; MAX_MR * NR]],
        )
        where
            Self: Sized,
        {
            $($($setup)?)?
            // SAFETY: forwarded, on the tile's instruction set where one is named.
            unsafe { panels::<Self>(call, ic, rows, a, all_sums) }
        }
    };
}

/// A tile's `quantize_groups` and `quantize_rows` on `$row` and `$rows`, a row's or several rows' groups
/// quantised on the tile's instruction set.
#[cfg(target_arch = "x86_64")]
macro_rules! quantize_groups_on {
    ($row:path, $rows:path) => {
        unsafe fn quantize_groups(
            x: &[f32],
            group: usize,
            cells: &mut [u8],
            scales: &mut [f32],
            zeros: &mut [f32],
        ) {
            // SAFETY: the caller runs on this tile's instruction set.
            unsafe { $row(x, group, cells, scales, zeros) }
        }

        unsafe fn quantize_rows<'a>(
            rows: usize,
            row: impl Fn(usize) -> &'a [f32],
            group: usize,
            cells: (&mut [u8], usize),
            scales: &mut [f32],
            zeros: &mut [f32],
        ) {
            // SAFETY: the caller runs on this tile's instruction set.
            unsafe { $rows(rows, row, group, cells, scales, zeros) }
        }
    };
}

// After the macros, which the AMX tile uses too.
#[cfg(target_arch = "x86_64")]
mod amx;

/// A register tile over one depth block: for r < MR and every column of one panel, each activation group's i32
/// sums `Σ_l a[r][l] · b[l][j]` are made in registers and dequantised there as the group ends,
/// `(sum − zero · col_sum) · scale`, into the f32 sums `acc[r·NR + j]`, which it overwrites when `!accumulate`
/// (the first depth block) and adds to otherwise. Rows past `rows` read row `rows − 1` again (their sums are
/// discarded), so no row outside the block is read; the AMX tile reads the quantised rows that follow instead
/// (see `amx.rs`).
trait Tile {
    const MR: usize;
    /// Bytes per quantised element of A: 1 (u8), or 2 for a tile that reads A widened to u16.
    const A_BYTES: usize = 1;
    /// Whether the tile asks for B's lines ahead of its steps itself, where [`Groups::b_ahead`] says so; the
    /// driver then does not ask for the next block.
    const ASKS_B_AHEAD: bool = false;
    /// # Safety
    /// The CPU runs the tile's instruction set; `a` holds `rows` rows of the groups' quads (4 elements of
    /// `A_BYTES` bytes each) at stride `a_rs` bytes (2-byte aligned when `A_BYTES` is 2); `b` holds as many quads
    /// of `NR · 4` bytes; `groups` as its documentation says.
    unsafe fn tile(
        groups: &Groups,
        a: *const u8,
        a_rs: usize,
        rows: usize,
        b: *const i8,
        acc: &mut [f32; MAX_MR * NR],
        accumulate: bool,
    );

    /// Row `x` of A quantised as the driver does ([`quantize_each_group`] with [`quantize_row`]), in groups of
    /// `group` depths, compiled for the tile's instruction set.
    ///
    /// # Safety
    /// The CPU runs the tile's instruction set; as [`quantize_each_group`].
    unsafe fn quantize_groups(
        x: &[f32],
        group: usize,
        cells: &mut [u8],
        scales: &mut [f32],
        zeros: &mut [f32],
    ) {
        let a_bytes = Self::A_BYTES;
        // SAFETY: forwarded.
        unsafe { quantize_each_group(x, group, cells, scales, zeros, a_bytes, quantize_row) }
    }

    /// Rows `0..rows` of A (row r's values at `row(r)`) quantised as [`Tile::quantize_groups`] quantises each:
    /// row r's cells at `cells.0[r · cells.1..]`, its groups' scales and zero points from `r · groups` on. The
    /// AVX-512 quantiser reduces the ranges of several short rows' groups together.
    ///
    /// # Safety
    /// As [`Tile::quantize_groups`] for every row; `scales` and `zeros` hold `rows` times a row's groups, and
    /// `cells.0` holds `rows` rows of `cells.1` bytes.
    unsafe fn quantize_rows<'a>(
        rows: usize,
        row: impl Fn(usize) -> &'a [f32],
        group: usize,
        (cells, stride): (&mut [u8], usize),
        scales: &mut [f32],
        zeros: &mut [f32],
    ) {
        let groups = scales.len() / rows.max(1);
        for r in 0..rows {
            let params = r * groups..(r + 1) * groups;
            // SAFETY: forwarded, on row r's cells, scales and zero points.
            unsafe {
                Self::quantize_groups(
                    row(r),
                    group,
                    &mut cells[r * stride..(r + 1) * stride],
                    &mut scales[params.clone()],
                    &mut zeros[params],
                )
            }
        }
    }

    panels_here_on!(
        /// [`panels`] for this tile. [`drive`] calls it from inside its scratch buffers' closures, and a closure
        /// does not inherit the `#[target_feature]` of the function it is written in: each x86 tile overrides this
        /// with one compiled for its instruction set, so that the stores of C and the loops around the tile use it
        /// too (they ran as SSE before).
        ///
        /// # Safety
        /// As [`panels`].
    );
}

/// Runs `call` on `kernel`.
///
/// # Safety
/// `kernel` runs on this CPU; the operands satisfy `QuantB::gemm`'s contract.
pub(super) unsafe fn run(kernel: Int8Kernel, call: &Call<'_>, pre: Option<Quantised>) {
    // SAFETY (each arm): the CPU has the instruction set the function is compiled for (the caller's contract).
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Amx => unsafe { amx::run_amx(call, pre) },
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Vnni512 => unsafe { x86::run_vnni512(call, pre) },
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Vnni256 => unsafe { x86::run_vnni256(call, pre) },
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Avx2 => unsafe { x86::run_avx2(call, pre) },
        _ => unsafe { drive::<Portable>(call, pre) },
    }
}

/// [`quantize_rows_on`] for the one row `x` (for tests comparing the kernels' quantisers), into the first
/// [`row_bytes`] of `out` seen as bytes: u16 cells on the AVX2 tile, bytes in the first half of `out` otherwise.
///
/// # Safety
/// `kernel` runs on this CPU; `scales` and `zeros` hold a value per group of `x`; `out` holds `x`'s cells.
pub(super) unsafe fn quantize_on(
    kernel: Int8Kernel,
    x: &[f32],
    group: usize,
    out: &mut [u16],
    scales: &mut [f32],
    zeros: &mut [f32],
) {
    let len = out.len();
    // SAFETY: `out`'s memory as bytes: 2·len of them, 2-byte aligned.
    let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, 2 * len) };
    let row = super::super::Strided::new(x.as_ptr(), x.len() as isize, 1);
    let cells = &mut bytes[..row_bytes(kernel, x.len())];
    // SAFETY: the caller's contract; the row is `x`, its cells fit in `out` (k rounded to 4 cells of the width).
    unsafe { quantize_rows_on(kernel, row, (0, 1, x.len()), group, cells, scales, zeros) }
}

/// Quantises row `x` of A as the driver does: each group of `group` depths on its own with `quantize` (as
/// [`quantize_row`] defines it), into `cells` (the row's cells of `a_bytes` bytes, the last group's running to
/// their end, past its values), with its scale and zero point into `scales[g]` and `zeros[g]` (one per group).
///
/// # Safety
/// `quantize` may be called on a group and its cells: the CPU runs its instruction set, and the cells start as
/// it needs them to (at an even byte for u16 cells).
#[inline(always)]
unsafe fn quantize_each_group(
    x: &[f32],
    group: usize,
    cells: &mut [u8],
    scales: &mut [f32],
    zeros: &mut [f32],
    a_bytes: usize,
    quantize: unsafe fn(&[f32], &mut [u8]) -> (f32, i32),
) {
    let groups = scales.len();
    for (g, (scale, zero)) in scales.iter_mut().zip(zeros.iter_mut()).enumerate() {
        let (from, to) = (g * group, ((g + 1) * group).min(x.len()));
        let cell_end = if g + 1 == groups {
            cells.len() / a_bytes
        } else {
            to
        };
        // SAFETY: the caller's contract.
        let (s, z) =
            unsafe { quantize(&x[from..to], &mut cells[from * a_bytes..cell_end * a_bytes]) };
        (*scale, *zero) = (s, z as f32);
    }
}

/// Rows of A quantised before the product that reads them, in the cells of one kernel's width: row `r`'s cells at
/// byte `r · stride` of `cells`, its groups' scales and zero points at `r · groups` of `scales` and `zeros`.
/// Several column blocks of one product then share one quantisation of A instead of each making its own.
#[derive(Clone, Copy, Debug)]
pub struct Quantised {
    pub(super) cells: *const u8,
    pub(super) stride: usize,
    pub(super) scales: *const f32,
    pub(super) zeros: *const f32,
    pub(super) groups: usize,
}

// SAFETY: read-only pointers into a buffer its maker keeps alive and unchanged while any product reads it.
unsafe impl Send for Quantised {}
// SAFETY: as above.
unsafe impl Sync for Quantised {}

impl Quantised {
    /// The same rows from row `r` on.
    pub(super) fn skip_rows(self, r: usize) -> Quantised {
        Quantised {
            cells: self.cells.wrapping_add(r * self.stride),
            scales: self.scales.wrapping_add(r * self.groups),
            zeros: self.zeros.wrapping_add(r * self.groups),
            ..self
        }
    }
}

/// Bytes per quantised row of a k-deep A on `kernel`: depth padded to whole quads, cells of the kernel's width.
pub(super) fn row_bytes(kernel: Int8Kernel, k: usize) -> usize {
    let cell = if kernel == Int8Kernel::Avx2 { 2 } else { 1 };
    k.next_multiple_of(4) * cell
}

/// Quantised rows `kernel`'s tiles may read past a product's last (their sums unused): a buffer of rows
/// quantised ahead of the product holds that many more.
pub(super) fn rows_past(kernel: Int8Kernel) -> usize {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Amx => amx::ROWS_PAST,
        _ => 0,
    }
}

/// Quantises `rows` rows of A (k deep) from row `row0` on, as `kernel`'s driver does, in groups of `group` depths,
/// into `cells` (rows of [`row_bytes`]) and each row's group scales and zero points.
///
/// # Safety
/// `kernel` runs on this CPU; A's rows `row0..row0 + rows` are readable over k elements; `cells` starts 2-byte
/// aligned and holds the rows, `scales` and `zeros` a value per row and group.
pub(super) unsafe fn quantize_rows_on(
    kernel: Int8Kernel,
    a: super::super::Strided<*const f32>,
    (row0, rows, k): (usize, usize, usize),
    group: usize,
    cells: &mut [u8],
    scales: &mut [f32],
    zeros: &mut [f32],
) {
    let gather = if a.cs == 1 { 0 } else { k };
    with_buffer(&GEMM_A, gather, |row| {
        let block = (row0, rows, k, group);
        // SAFETY (each arm): the caller's contract; `row` holds a row of A where it is gathered.
        match kernel {
            #[cfg(target_arch = "x86_64")]
            Int8Kernel::Amx | Int8Kernel::Vnni512 | Int8Kernel::Vnni256 => unsafe {
                quantize_block::<x86::Vnni512<12>>(a, block, row, cells, scales, zeros)
            },
            #[cfg(target_arch = "x86_64")]
            Int8Kernel::Avx2 => unsafe {
                quantize_block::<x86::Avx2<6>>(a, block, row, cells, scales, zeros)
            },
            _ => unsafe { quantize_block::<Portable>(a, block, row, cells, scales, zeros) },
        }
    })
}

/// Rows `row0..row0 + rows` of A (k deep) quantised on `T`, in groups of `group` depths, into `cells` (rows of
/// `k4 · T::A_BYTES` bytes) and per row and group `scales` and `zeros`; a row whose elements are not contiguous is
/// gathered into `row` first.
///
/// # Safety
/// As [`quantize_rows_on`], on `T`'s instruction set; `row` holds k floats when A's column stride is not 1.
#[inline(always)]
unsafe fn quantize_block<T: Tile>(
    a: super::super::Strided<*const f32>,
    (row0, rows, k, group): (usize, usize, usize, usize),
    row: &mut [f32],
    cells: &mut [u8],
    scales: &mut [f32],
    zeros: &mut [f32],
) {
    let groups = k.div_ceil(group).max(1);
    let stride = k.next_multiple_of(4) * T::A_BYTES;
    let (cells, scales, zeros) = (
        &mut cells[..rows * stride],
        &mut scales[..rows * groups],
        &mut zeros[..rows * groups],
    );
    if a.cs == 1 {
        // SAFETY: rows row0.. of A are readable over k contiguous elements (the caller's contract), so no row is
        // gathered.
        let row_at = |r: usize| unsafe { super::super::strided_row(a, row0 + r, k, &mut []) };
        // SAFETY: on T's instruction set; each row's cells start at an even byte (stride is a multiple of 4).
        unsafe { T::quantize_rows(rows, row_at, group, (cells, stride), scales, zeros) };
        return;
    }
    for r in 0..rows {
        // SAFETY: row row0 + r of A is readable over k elements (the caller's contract).
        let x = unsafe { super::super::strided_row(a, row0 + r, k, row) };
        let params = r * groups..(r + 1) * groups;
        // SAFETY: as above, on the one row gathered into `row`.
        unsafe {
            T::quantize_groups(
                x,
                group,
                &mut cells[r * stride..(r + 1) * stride],
                &mut scales[params.clone()],
                &mut zeros[params],
            )
        };
    }
}

/// The loop nest: row blocks of A (quantised into this thread's scratch per row and activation group, unless
/// `pre` holds them quantised already) → panels of B → depth blocks of [`KC_QUADS`] quads → row tiles, each
/// tile dequantising its groups' sums into its f32 sums (carried across depth blocks), which are scaled per
/// column into C after the last block.
///
/// # Safety
/// As [`run`], on `T`'s instruction set; `pre`, when given, holds the call's `m` rows quantised for this kernel.
#[inline(always)]
unsafe fn drive<T: Tile>(call: &Call<'_>, pre: Option<Quantised>) {
    let &Call { pack, m, a, .. } = call;
    let (k, k4) = (pack.view.k, pack.k4);
    let groups = pack.groups();
    // Quantised rows of A sit `stride` bytes apart (padding them off multiples of 1 KiB measured no faster).
    let stride = k4 * T::A_BYTES;
    let mc = (A_BLOCK_BYTES / stride.max(1))
        .min(rows_for_c(k4, call.n))
        .clamp(T::MR, 256);
    // As many blocks as that takes, of equal height (whole tiles), so that no block is a sliver.
    let mc = m.div_ceil(m.div_ceil(mc).max(1)).next_multiple_of(T::MR);
    let tiles = mc.div_ceil(T::MR);
    if let Some(pre) = pre {
        debug_assert!(pre.stride == stride && pre.groups == groups);
        with_buffer(&GEMM_B, tiles * MAX_MR * NR, |sums_buf| {
            let (all_sums, _) = sums_buf.as_chunks_mut::<{ MAX_MR * NR }>();
            for ic in (0..m).step_by(mc) {
                // SAFETY: forwarded; `pre` holds rows ic.. (the caller's contract).
                unsafe { T::panels_here(call, ic, mc.min(m - ic), pre.skip_rows(ic), all_sums) };
            }
        });
        return;
    }
    // The scratch holds mc · groups scales, as many zero points (exact in f32), then mc rows of `stride` bytes, and,
    // when A's rows are not contiguous, one row of A gathered before it is quantised.
    let row_floats = if a.cs == 1 { 0 } else { k };
    let cell_floats = (mc * stride).div_ceil(4);
    with_buffer(&GEMM_A, 2 * mc * groups + cell_floats + row_floats, |buf| {
        let (scales, rest) = buf.split_at_mut(mc * groups);
        let (zeros, rest) = rest.split_at_mut(mc * groups);
        let (cells, row) = rest.split_at_mut(cell_floats);
        // SAFETY: the f32 buffer viewed as bytes (alignment 1, same memory, within its length).
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(cells.as_mut_ptr() as *mut u8, mc * stride) };
        // Each row tile's f32 sums for the current panel, across depth blocks.
        with_buffer(&GEMM_B, tiles * MAX_MR * NR, |sums_buf| {
            let (all_sums, _) = sums_buf.as_chunks_mut::<{ MAX_MR * NR }>();
            for ic in (0..m).step_by(mc) {
                let rows = mc.min(m - ic);
                let block = (ic, rows, k, pack.group);
                // SAFETY: rows ic.. of A are readable (the caller's contract); the scratch holds `rows` rows.
                unsafe { quantize_block::<T>(a, block, row, bytes, scales, zeros) };
                let quantised = Quantised {
                    cells: bytes.as_ptr(),
                    stride,
                    scales: scales.as_ptr(),
                    zeros: zeros.as_ptr(),
                    groups,
                };
                // SAFETY: forwarded; the block's rows were quantised just above.
                unsafe { T::panels_here(call, ic, rows, quantised, all_sums) };
            }
        })
    })
}

/// Rows `ic..ic + rows` of C from those rows of A, quantised in `a`: every panel of B in the call's columns, in
/// depth blocks, through the row tiles' f32 sums in `all_sums` (one per tile), scaled per column into C.
///
/// # Safety
/// As [`drive`]; `a` holds the `rows` rows quantised for `T`, `all_sums` a sum block per row tile.
#[inline(always)]
unsafe fn panels<T: Tile>(
    call: &Call<'_>,
    ic: usize,
    rows: usize,
    a: Quantised,
    all_sums: &mut [[f32; MAX_MR * NR]],
) {
    let &Call {
        pack, n, col0, c, ..
    } = call;
    let k4 = pack.k4;
    let (groups, group_quads) = (pack.groups(), pack.group / 4);
    // Groups per depth block.
    let block_groups = KC_QUADS / group_quads;
    let quads = k4 / 4;
    let tiles = rows.div_ceil(T::MR);
    let b_ahead = b_ahead(T::ASKS_B_AHEAD, tiles, rows);
    for p0 in (0..n).step_by(NR) {
        let cols = NR.min(n - p0);
        let first = col0 + p0;
        let panel = pack.panels[first / NR * k4 * NR..].as_ptr();
        for g0 in (0..groups).step_by(block_groups) {
            let count = block_groups.min(groups - g0);
            let q0 = g0 * group_quads;
            let last_quads = (quads - q0) - (count - 1) * group_quads;
            let next = panel.wrapping_add((q0 + count * group_quads).min(quads) * NR * 4);
            for (t, ir) in (0..rows).step_by(T::MR).enumerate() {
                let tr = T::MR.min(rows - ir);
                // This tile's share of the next block, at once (spread over the tile, it measured within the
                // noise), unless the tile asks for B as it goes.
                if b_ahead == 0 {
                    Prefetch::share(next.cast(), KC_QUADS * NR * 4, (t, tiles), 1).issue_all();
                }
                if g0 == 0 {
                    // The tile's lines of C for this panel, into L2 ahead of the store after the last depth
                    // block: C was last written a model call ago and has left L2 since.
                    for r in ir..ir + tr {
                        let at = c
                            .ptr
                            .wrapping_offset((ic + r) as isize * c.rs + p0 as isize);
                        crate::cpu::rows::prefetch_l2(at);
                        crate::cpu::rows::prefetch_l2(at.wrapping_add(cols - 1));
                    }
                }
                let block = Groups {
                    count,
                    group_quads,
                    last_quads: last_quads.min(group_quads),
                    scales: a.scales.wrapping_add(ir * groups + g0),
                    zeros: a.zeros.wrapping_add(ir * groups + g0),
                    row_stride: groups,
                    col_sums: pack.col_sums[g0 * pack.width + first..].as_ptr(),
                    sums_stride: pack.width,
                    b_ahead,
                };
                // SAFETY: rows ir..ir + tr of `a` hold k4 quantised elements each, quads q0.. of groups
                // g0..g0 + count of which are read; the panel holds k4 / 4 quads; the scales, zero points and
                // column sums cover those rows and groups.
                unsafe {
                    T::tile(
                        &block,
                        a.cells.add(ir * a.stride + T::A_BYTES * 4 * q0),
                        a.stride,
                        tr,
                        panel.add(q0 * NR * 4),
                        &mut all_sums[t],
                        g0 > 0,
                    )
                };
            }
        }
        let sb = &pack.scales[first..first + cols];
        // SAFETY: rows ic.., columns p0..p0 + cols lie inside C.
        unsafe {
            super::super::store_tiles(all_sums, (T::MR, NR), c, ic, rows, p0, cols, Some(sb))
        };
    }
}

/// The scalar tile, for every target.
struct Portable;

impl Tile for Portable {
    const MR: usize = 4;

    unsafe fn tile(
        groups: &Groups,
        a: *const u8,
        a_rs: usize,
        rows: usize,
        b: *const i8,
        acc: &mut [f32; MAX_MR * NR],
        accumulate: bool,
    ) {
        for r in 0..Self::MR {
            let out = &mut acc[r * NR..(r + 1) * NR];
            let mut q0 = 0;
            for g in 0..groups.count {
                let quads = groups.quads(g);
                // SAFETY: row min(r, rows − 1) holds the groups' quads; b holds as many of NR · 4 bytes; the
                // group's scale, zero point and NR column sums exist (the trait's contract).
                let (a_row, b_all, col_sums, (scale, zero)) = unsafe {
                    (
                        std::slice::from_raw_parts(
                            a.add(r.min(rows - 1) * a_rs + 4 * q0),
                            4 * quads,
                        ),
                        std::slice::from_raw_parts(b.add(q0 * NR * 4), quads * NR * 4),
                        std::slice::from_raw_parts(groups.col_sums(g), NR),
                        groups.row(r, rows, g),
                    )
                };
                let mut sums = [0i32; NR];
                for (quad, lanes) in a_row.chunks_exact(4).zip(b_all.chunks_exact(NR * 4)) {
                    for (sum, lane) in sums.iter_mut().zip(lanes.chunks_exact(4)) {
                        for t in 0..4 {
                            *sum += i32::from(quad[t]) * i32::from(lane[t]);
                        }
                    }
                }
                for ((o, &s), &q) in out.iter_mut().zip(&sums).zip(col_sums) {
                    let v = (s as f32 - zero * q) * scale;
                    *o = if accumulate || g > 0 { *o + v } else { v };
                }
                q0 += quads;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::super::quantize_x86::{
        quantize_groups_u8_avx512, quantize_rows_u8_avx512, quantize_u16_avx2,
    };
    use super::{ask_b_ahead, drive, panels, Call, Groups, Quantised, Tile, MAX_MR, NR};

    /// 4 bytes of row `r` at group `g`, as one i32 to broadcast.
    #[inline(always)]
    unsafe fn quad(rows: &[*const u8], r: usize, g: usize) -> i32 {
        // SAFETY: the caller's row holds group g.
        unsafe { (rows[r].add(4 * g) as *const i32).read_unaligned() }
    }

    /// Row `r`'s 4 levels of group `g`, widened to u16, as one i64 to broadcast.
    #[inline(always)]
    unsafe fn quad_wide(rows: &[*const u8], r: usize, g: usize) -> i64 {
        // SAFETY: the caller's row holds group g.
        unsafe { (rows[r].add(8 * g) as *const i64).read_unaligned() }
    }

    /// `out (+)= (sums − zero · col_sums) · scale` over 8 columns of one row: one group's i32 sums dequantised
    /// into the tile's f32 sums (the correction is exact in f32: both terms are integers below 2²⁴).
    ///
    /// # Safety
    /// `col_sums` and `out` hold 8 floats.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn dequant8(
        sums: __m256i,
        (scale, zero): (f32, f32),
        col_sums: *const f32,
        out: *mut f32,
        add: bool,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let t = _mm256_fnmadd_ps(
                _mm256_set1_ps(zero),
                _mm256_loadu_ps(col_sums),
                _mm256_cvtepi32_ps(sums),
            );
            let scale = _mm256_set1_ps(scale);
            let v = if add {
                _mm256_fmadd_ps(t, scale, _mm256_loadu_ps(out))
            } else {
                _mm256_mul_ps(t, scale)
            };
            _mm256_storeu_ps(out, v);
        }
    }

    /// [`dequant8`] over 16 columns.
    ///
    /// # Safety
    /// `col_sums` and `out` hold 16 floats.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn dequant16(
        sums: __m512i,
        (scale, zero): (f32, f32),
        col_sums: *const f32,
        out: *mut f32,
        add: bool,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let t = _mm512_fnmadd_ps(
                _mm512_set1_ps(zero),
                _mm512_loadu_ps(col_sums),
                _mm512_cvtepi32_ps(sums),
            );
            let scale = _mm512_set1_ps(scale);
            let v = if add {
                _mm512_fmadd_ps(t, scale, _mm512_loadu_ps(out))
            } else {
                _mm512_mul_ps(t, scale)
            };
            _mm512_storeu_ps(out, v);
        }
    }

    /// The 512-bit VNNI tile over `MR` rows: 12 for a block of rows; 1, 2, 4 or 8 for a product of that few rows
    /// (see [`Avx2`]).
    pub struct Vnni512<const MR: usize>;

    impl<const MR: usize> Tile for Vnni512<MR> {
        const MR: usize = MR;
        const ASKS_B_AHEAD: bool = true;

        panels_here_on!("avx512f,avx512vl,avx512vnni,avx2,fma");

        quantize_groups_on!(quantize_groups_u8_avx512, quantize_rows_u8_avx512);

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
            on_shorter_tile!(Vnni512, rows, (groups, a, a_rs, rows, b, acc, accumulate));
            let p = crate::cpu::gemm::tile_rows::<MR>(a, a_rs, rows);
            // SAFETY: the loads stay inside the tile's rows, the panel and the groups' arrays (the trait's
            // contract); the caller is compiled with AVX-512 VNNI.
            unsafe {
                let mut q0 = 0;
                for g in 0..groups.count {
                    let quads = groups.quads(g);
                    let mut c = [[_mm512_setzero_si512(); 2]; MR];
                    for q in q0..q0 + quads {
                        let bp = b.add(q * NR * 4);
                        ask_b_ahead(bp, groups.b_ahead);
                        let b0 = _mm512_loadu_si512(bp as *const __m512i);
                        let b1 = _mm512_loadu_si512(bp.add(64) as *const __m512i);
                        for (r, cr) in c.iter_mut().enumerate() {
                            let av = _mm512_set1_epi32(quad(&p, r, q));
                            cr[0] = _mm512_dpbusd_epi32(cr[0], av, b0);
                            cr[1] = _mm512_dpbusd_epi32(cr[1], av, b1);
                        }
                    }
                    let col_sums = groups.col_sums(g);
                    each_row!(MR, |r| {
                        let row = groups.row(r, rows, g);
                        for (s, &v) in c[r].iter().enumerate() {
                            let out = acc.as_mut_ptr().add(r * NR + 16 * s);
                            dequant16(v, row, col_sums.add(16 * s), out, accumulate || g > 0);
                        }
                    });
                    q0 += quads;
                }
            }
        }
    }

    /// The 256-bit VNNI tile over `MR` rows: 6 for a block of rows; 1, 2 or 4 for a product of that few rows
    /// (see [`Avx2`]).
    pub struct Vnni256<const MR: usize>;

    impl<const MR: usize> Tile for Vnni256<MR> {
        const MR: usize = MR;

        panels_here_on!("avx512f,avx512vl,avx512vnni,avx2,fma");

        quantize_groups_on!(quantize_groups_u8_avx512, quantize_rows_u8_avx512);

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
            let p = crate::cpu::gemm::tile_rows::<MR>(a, a_rs, rows);
            // SAFETY: as for `Vnni512`, compiled with AVX-512 VNNI and VL.
            unsafe {
                let mut q0 = 0;
                for g in 0..groups.count {
                    let quads = groups.quads(g);
                    let mut c = [[_mm256_setzero_si256(); 4]; MR];
                    for q in q0..q0 + quads {
                        let bp = b.add(q * NR * 4);
                        let bv: [__m256i; 4] = std::array::from_fn(|s| {
                            _mm256_loadu_si256(bp.add(32 * s) as *const __m256i)
                        });
                        for (r, cr) in c.iter_mut().enumerate() {
                            let av = _mm256_set1_epi32(quad(&p, r, q));
                            for (acc_s, &b_s) in cr.iter_mut().zip(&bv) {
                                *acc_s = _mm256_dpbusd_epi32(*acc_s, av, b_s);
                            }
                        }
                    }
                    let col_sums = groups.col_sums(g);
                    each_row!(MR, |r| {
                        let row = groups.row(r, rows, g);
                        for (s, &v) in c[r].iter().enumerate() {
                            let out = acc.as_mut_ptr().add(r * NR + 8 * s);
                            dequant8(v, row, col_sums.add(8 * s), out, accumulate || g > 0);
                        }
                    });
                    q0 += quads;
                }
            }
        }
    }

    /// The AVX2 tile over `MR` rows: 6 for a block of rows (12 accumulators, two strips of B and A's broadcast
    /// fill 15 of the 16 registers); 1, 2 or 4 for a product of that few rows (a decoding step), which would
    /// otherwise compute 6 rows to keep one: the tile's work then follows the rows it has, while B streams once.
    pub struct Avx2<const MR: usize>;

    impl<const MR: usize> Tile for Avx2<MR> {
        const MR: usize = MR;
        const A_BYTES: usize = 2;

        panels_here_on!("avx2,fma");

        /// A's rows are quantised straight into u16, so the inner loop only broadcasts a row's 4 levels (one
        /// 8-byte load) instead of widening them per row, quad and strip.
        unsafe fn quantize_groups(
            x: &[f32],
            depths: usize,
            cells: &mut [u8],
            scales: &mut [f32],
            zeros: &mut [f32],
        ) {
            /// [`quantize_u16_avx2`] into bytes that start 2-byte aligned (the trait's contract).
            unsafe fn group(x: &[f32], out: &mut [u8]) -> (f32, i32) {
                debug_assert!((out.as_ptr() as usize).is_multiple_of(2));
                // SAFETY: `out` is 2-byte aligned, so its bytes are out.len() / 2 u16 cells.
                let words = unsafe {
                    std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u16, out.len() / 2)
                };
                // SAFETY: the caller runs on this tile's instruction set.
                unsafe { quantize_u16_avx2(x, words) }
            }
            // SAFETY: forwarded; the cells are u16.
            unsafe {
                super::quantize_each_group(x, depths, cells, scales, zeros, Self::A_BYTES, group)
            }
        }

        /// Per 8-column strip and group: each 32-byte quad of the panel (8 columns × 4 depths) widened to two i16
        /// vectors of 4 columns, A's 4 levels repeated; `vpmaddwd` sums pairs of depths into i32 without
        /// saturation, and one horizontal add per row joins the pairs as the group ends.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn tile(
            groups: &Groups,
            a: *const u8,
            a_rs: usize,
            rows: usize,
            b: *const i8,
            acc: &mut [f32; MAX_MR * NR],
            accumulate: bool,
        ) {
            let p = crate::cpu::gemm::tile_rows::<MR>(a, a_rs, rows);
            // SAFETY: as for `Vnni512`, compiled with AVX2.
            unsafe {
                for s in 0..NR / 8 {
                    let mut q0 = 0;
                    for g in 0..groups.count {
                        let quads = groups.quads(g);
                        let mut lo = [_mm256_setzero_si256(); MR];
                        let mut hi = [_mm256_setzero_si256(); MR];
                        for q in q0..q0 + quads {
                            let bv =
                                _mm256_loadu_si256(b.add(q * NR * 4 + 32 * s) as *const __m256i);
                            let b_lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(bv));
                            let b_hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(bv));
                            for r in 0..MR {
                                let av = _mm256_set1_epi64x(quad_wide(&p, r, q));
                                lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(av, b_lo));
                                hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(av, b_hi));
                            }
                        }
                        let col_sums = groups.col_sums(g).add(8 * s);
                        each_row!(MR, |r| {
                            // [c0 c1 c4 c5 | c2 c3 c6 c7] → columns in order.
                            let sums =
                                _mm256_permute4x64_epi64::<0xD8>(_mm256_hadd_epi32(lo[r], hi[r]));
                            let out = acc.as_mut_ptr().add(r * NR + 8 * s);
                            let row = groups.row(r, rows, g);
                            dequant8(sums, row, col_sums, out, accumulate || g > 0);
                        });
                        q0 += quads;
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma")]
    pub unsafe fn run_vnni512(call: &Call<'_>, pre: Option<Quantised>) {
        // SAFETY: forwarded.
        unsafe { on_tile_for_rows!(call.m, Vnni512, drive(call, pre)) }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma")]
    pub unsafe fn run_vnni256(call: &Call<'_>, pre: Option<Quantised>) {
        // SAFETY (each arm): forwarded.
        match call.m {
            1 => unsafe { drive::<Vnni256<1>>(call, pre) },
            2 => unsafe { drive::<Vnni256<2>>(call, pre) },
            3 | 4 => unsafe { drive::<Vnni256<4>>(call, pre) },
            // Seven or eight rows (a decoding step of 8) take the 512-bit tile of 8: one pass over each panel
            // where 256-bit tiles of 4 would make two.
            7 | 8 => unsafe { drive::<Vnni512<8>>(call, pre) },
            _ => unsafe { drive::<Vnni256<6>>(call, pre) },
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn run_avx2(call: &Call<'_>, pre: Option<Quantised>) {
        // SAFETY (each arm): forwarded.
        match call.m {
            1 => unsafe { drive::<Avx2<1>>(call, pre) },
            2 => unsafe { drive::<Avx2<2>>(call, pre) },
            // Eight rows (a batch-8 decoding step) are two tiles of 4, where tiles of 6 would compute 12.
            3 | 4 | 7 | 8 => unsafe { drive::<Avx2<4>>(call, pre) },
            _ => unsafe { drive::<Avx2<6>>(call, pre) },
        }
    }
}
