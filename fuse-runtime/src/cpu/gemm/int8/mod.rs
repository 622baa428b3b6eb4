//! The int8 GEMM for a weight operand: C = A·B with B quantised once, at load, and A quantised per call.
//!
//! - **B** (a weight, k×n): symmetric per output channel, `s_j = max_l |B[l][j]| / 127`,
//!   `q[l][j] = round(B[l][j] / s_j)` in [-127, 127] (ties to even), packed in panels of [`NR`] columns where each
//!   group of 4 depths is one 4-byte lane per column: the operand layout of VNNI's `vpdpbusd` (u8 × s8, four
//!   products summed into an i32 lane). The depth is padded to a multiple of 4 with zeros.
//! - **A** (activations, m×k): per row and per group of [`activation_group`] depths, dynamically and
//!   asymmetrically into u8 (`vpdpbusd` multiplies unsigned by signed bytes): `s = (max − min) / 255` over the
//!   group's range with 0 in it, a zero point `z`, and `u = round(x / s) + z` ([`quantize_row`]). The zero point
//!   adds `z · Σ q[l][j]` (over the group's depths) to every column; those sums are precomputed at load, so a
//!   group's i32 sum minus `z · Σq` is exactly `Σ (u − z) · q`. An asymmetric range spends all 256 steps on the
//!   values a group has: a GELU output (nearly all ≥ −0.17) gets twice the resolution of a symmetric scale
//!   (MiniLM's mean cosine to f32 went from 0.99689 with a symmetric scale to 0.99872,
//!   `tests/tests/minilm_precisions.rs`); groups rather than whole rows took it to 0.9992 (see [`A_GROUP`]).
//! - **C**: `Σ_groups (acc_g − z_g·Σq_g) · s_g`, in f32, times `s_j`. The register tile makes each group's i32
//!   sums and dequantises them in registers as the group ends (a conversion and two FMAs per vector) into f32
//!   sums, which it carries across depth blocks of 512 in this thread's scratch; C is written after the
//!   last block. The kernel's f32 epilogue (bias, GELU, residual) then runs on the block while it is in cache, as
//!   for the f32 GEMM. Groups cost the VNNI tiles 8–29 % and the AVX2 tile 8–10 % of their rate against one
//!   scale per row (BENCHMARKS.md, twelfth run): the price of the accuracy above, partly won back by quantising
//!   with intrinsics (`quantize_x86.rs`).
//!
//! Rows of A are quantised while they are packed inside this driver (one extra read of a row being packed anyway).
//! A group that holds a NaN or an infinity gets a NaN scale, so its row's outputs are NaN as the f32 product's would
//! be, never finite numbers made from a clipped row.
//!
//! Kernels ([`Int8Kernel`]): AVX-512 VNNI on 512-bit or 256-bit vectors, AVX2 through a widening path
//! (`vpmaddwd` on i16, so no i16 saturation as with `vpmaddubsw`, whose exact use would need 7-bit activations:
//! BENCHMARKS.md, eleventh run), and a portable scalar one.
//! All read the same pack, so one pack serves every kernel a test forces.

mod kernels;
mod quantize;
#[cfg(target_arch = "x86_64")]
mod quantize_x86;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use rayon::prelude::*;

use super::{BView, Strided};
use crate::error::{Error, Result};

pub use kernels::Quantised;
pub use quantize::{quantize_column_scale, quantize_row};

/// Columns per panel of a packed B (the widest tile's).
pub const NR: usize = 32;

/// The deepest product the int8 path takes (the packs' offsets and column sums stay small).
pub const MAX_DEPTH: usize = 65_536;

/// Depths per activation scale, at the least: each row of A is quantised in groups of [`activation_group`] depths
/// (this many, or a deeper product's more), each with its own scale and zero point, and each group's i32 sums are
/// dequantised before the next group's are added (in f32). One scale per whole row let a few large activations
/// coarsen every other value of the row: on MiniLM, groups of 128 took the mean cosine to f32 from 0.9987 to
/// 0.9992 and the worst sentence from 0.9947 to 0.9960. A multiple of 4 (the `vpdpbusd` group).
pub const A_GROUP: usize = 128;

/// The deepest activation group: one depth block of the driver, so a group never spans two.
pub const MAX_A_GROUP: usize = 512;

/// Groups a row keeps at least when [`activation_group`] makes them deeper than [`A_GROUP`].
const MIN_GROUPS_PER_ROW: usize = 4;

/// Depths per activation group of a k-deep product: the deepest of 128, 256 and 512 that still cuts a row into at
/// least four groups, so one large activation coarsens at most a quarter of its row (MiniLM's rows of 384, in
/// groups of 128, give it a third). Each group ends in a pass that dequantises its sums, which cost the AMX loop a
/// third of its rate at 128 depths (BENCHMARKS.md, thirtieth run): products 2048 deep or more (W2's middle and
/// last, a decoder's FFN) take groups of 512 and pay it a quarter as often, 1024 to 2047 deep (W2's first,
/// MiniLM's FFN output) 256. At eight groups a row (the rule until the thirty-fifth run) those last kept 128:
/// MiniLM's int8 embeddings moved from a mean cosine to f32 of 0.999227 to 0.999223 and its worst sentence from
/// 0.996031 to 0.995951, and W2's first product gained 9 %.
pub fn activation_group(k: usize) -> usize {
    let mut group = A_GROUP;
    while 2 * group <= MAX_A_GROUP && k >= MIN_GROUPS_PER_ROW * 2 * group {
        group *= 2;
    }
    group
}

/// Elements of A below which [`QuantB::quantise_rows`] quantises on the calling thread alone: about 15 µs of
/// quantising, the order of a fork and join of the pool.
const QUANTISE_PARALLEL_MIN: usize = 1 << 16;

/// Which int8 kernel runs a product. Each kernel's tile has the rows named below for a block of rows; a product
/// of 1, 2 or 3–4 rows (a decoding step) runs on the same kernel's tile of 1, 2 or 4 rows instead, and one of 7–8
/// rows on two tiles of 4, so it does not compute rows it throws away (on the AVX2 tile, the kernels of a W5 step
/// went from 16.2 to 11.6–11.9 ms at batch 1 and from 29.5–32.1 to 21.9–24.8 ms at batch 8: BENCHMARKS.md,
/// fourteenth run). With VNNI, 7–8 rows (5–8 on the 512-bit kernel) run on the 512-bit tile of 8 instead, which
/// reads each panel of B once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Int8Kernel {
    /// AMX `tdpbusd`: 16×32 tile (two pairs of 16×16 sum tiles, one per alternate activation group); 8 rows or
    /// fewer run on the 512-bit `vpdpbusd` tiles.
    Amx,
    /// `vpdpbusd` on 512-bit vectors: 12×32 tile.
    Vnni512,
    /// `vpdpbusd` on 256-bit vectors (AVX-512 VL encoding, 32 registers): 6×32 tile.
    Vnni256,
    /// AVX2 without VNNI: bytes widened to i16, `vpmaddwd`: 6×8 tile, four strips per panel.
    Avx2,
    /// Plain Rust, every target.
    Portable,
}

impl Int8Kernel {
    /// The kernel int8 products run on here: AMX where there is AMX. A core that splits 512-bit operations into
    /// two halves (Zen 4) gets the 256-bit VNNI tile (see BENCHMARKS.md for both measured there).
    pub fn best() -> Int8Kernel {
        static BEST: OnceLock<Int8Kernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            let all = Int8Kernel::supported();
            let splits = crate::cpu::processor::Processor::get().splits_512_bit_fma;
            if all[0] == Int8Kernel::Amx {
                Int8Kernel::Amx
            } else if all.contains(&Int8Kernel::Vnni512) && !splits {
                Int8Kernel::Vnni512
            } else {
                all[usize::from(all[0] == Int8Kernel::Vnni512)]
            }
        })
    }

    /// Every kernel this CPU runs, widest first.
    pub fn supported() -> Vec<Int8Kernel> {
        let mut all = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            let vnni =
                crate::cpu::math::dispatch_avx512() && std::is_x86_feature_detected!("avx512vnni");
            if vnni && crate::cpu::amx::features().int8 {
                all.push(Int8Kernel::Amx);
            }
            if vnni {
                all.extend([Int8Kernel::Vnni512, Int8Kernel::Vnni256]);
            }
            if crate::cpu::math::dispatch_avx2() {
                all.push(Int8Kernel::Avx2);
            }
        }
        all.push(Int8Kernel::Portable);
        all
    }

    /// Quantises one row of A as this kernel's driver does (per group of [`activation_group`]`(x.len())` depths,
    /// compiled for its instruction set) into `out`, cells of the width the kernel reads (bytes in the first half
    /// of `out`, or u16), and each group's scale and zero point into `scales` and `zeros`; for comparing the
    /// kernels' quantisers (`gemm_bench` times [`QuantB::quantise_rows`], as a product runs it). `None` when this
    /// CPU cannot run the kernel, or `out` holds fewer than `x.len()` rounded up to 4 cells, or `scales` or
    /// `zeros` do not hold one value per group.
    pub fn quantize_row(
        self,
        x: &[f32],
        out: &mut [u16],
        scales: &mut [f32],
        zeros: &mut [f32],
    ) -> Option<()> {
        static SUPPORTED: OnceLock<Vec<Int8Kernel>> = OnceLock::new();
        let group = activation_group(x.len());
        let groups = x.len().div_ceil(group).max(1);
        let fits = out.len() >= x.len().next_multiple_of(4)
            && scales.len() == groups
            && zeros.len() == groups;
        let runs = SUPPORTED.get_or_init(Int8Kernel::supported).contains(&self);
        // SAFETY: the kernel runs on this CPU and the buffers fit (both checked).
        (runs && fits).then(|| unsafe { kernels::quantize_on(self, x, group, out, scales, zeros) })
    }

    /// How the device report names it.
    pub fn describe(self) -> &'static str {
        match self {
            Int8Kernel::Amx => "AMX-INT8, 16×32 tile",
            Int8Kernel::Vnni512 => "AVX-512 VNNI, 512-bit, 12×32 tile",
            Int8Kernel::Vnni256 => "AVX-512 VNNI, 256-bit, 6×32 tile",
            Int8Kernel::Avx2 => "AVX2 (i16 pairs), 6×8 tile",
            Int8Kernel::Portable => "portable scalar",
        }
    }
}

/// A weight operand quantised to int8 and packed (see the module documentation).
pub struct QuantB {
    view: BView,
    /// Depth rounded up to a multiple of 4.
    k4: usize,
    /// Panels of `NR` columns, each `k4 / 4` groups of `NR` lanes of 4 bytes.
    panels: super::LinePack<i8>,
    /// Per column (padded to whole panels): the dequantisation scale `s_j`.
    scales: Vec<f32>,
    /// Depths per activation group: [`activation_group`] of the depth.
    group: usize,
    /// Per activation group `g` (depths `g·group..`), per column (padded): `Σ_l q[l][j]` over the group's
    /// depths, which the row's zero point for that group multiplies; `g · width + j`. Held in f32, where they are
    /// exact (|Σ| ≤ MAX_A_GROUP · 127 < 2²⁴), so the tiles correct a group's sums with one FMA.
    col_sums: Vec<f32>,
    /// Columns of the padded pack (a multiple of [`NR`]): the row length of `col_sums`.
    width: usize,
}

impl std::fmt::Debug for QuantB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantB")
            .field("view", &self.view)
            .finish_non_exhaustive()
    }
}

impl QuantB {
    /// `view` of `source` quantised per column and packed; `Ok(None)` where it cannot be (a view outside
    /// `source`, or deeper than [`MAX_DEPTH`]): the product then stays f32. [`Error::OutOfMemory`] when the pack
    /// does not fit.
    pub fn new(source: &[f32], view: BView) -> Result<Option<QuantB>> {
        if !view.fits(source.len()) || view.k > MAX_DEPTH {
            return Ok(None);
        }
        let (k, n) = (view.k, view.n);
        let k4 = k.next_multiple_of(4);
        let width = n.next_multiple_of(NR);
        let bytes = k4.checked_mul(width).ok_or(Error::OutOfMemory {
            what: "int8 packed weights",
            bytes: None,
            available: None,
        })?;
        let mut panels = super::zeroed_pack("int8 packed weights", bytes)?;
        let mut scales = vec![0.0f32; width];
        let group = activation_group(k);
        let mut col_sums = vec![0.0f32; k.div_ceil(group).max(1) * width];
        let at = |l: usize, j: usize| source[view.offset + l * view.rs + j * view.cs];
        let mut column = vec![0.0f32; k];
        for j in 0..n {
            for (l, v) in column.iter_mut().enumerate() {
                *v = at(l, j);
            }
            let (scale, inv) = quantize_column_scale(&column);
            scales[j] = scale;
            let (panel, lane) = (j / NR, j % NR);
            for (l, &v) in column.iter().enumerate() {
                let q = quantize::to_i8(v, inv);
                col_sums[l / group * width + j] += f32::from(q);
                panels[panel * k4 * NR + (l / 4) * NR * 4 + lane * 4 + l % 4] = q;
            }
        }
        Ok(Some(QuantB {
            view,
            k4,
            panels,
            scales,
            group,
            col_sums,
            width,
        }))
    }

    /// What it was packed from.
    pub fn view(&self) -> BView {
        self.view
    }

    /// Depths per activation group of its products ([`activation_group`] of its depth).
    pub fn group(&self) -> usize {
        self.group
    }

    /// Column `j` of B as packed, dequantised (its values times its scale) into `out` (`k` values); `false` when
    /// `j` is not a column or `out` is not `k` long.
    pub fn column(&self, j: usize, out: &mut [f32]) -> bool {
        if j >= self.view.n || out.len() != self.view.k {
            return false;
        }
        let (panel, lane, scale) = (j / NR, j % NR, self.scales[j]);
        let base = panel * self.k4 * NR + lane * 4;
        for (l, o) in out.iter_mut().enumerate() {
            *o = f32::from(self.panels[base + (l / 4) * NR * 4 + l % 4]) * scale;
        }
        true
    }

    /// Bytes of the pack (panels, scales, column sums).
    pub fn bytes(&self) -> usize {
        self.panels.len() + 4 * (self.scales.len() + self.col_sums.len())
    }

    /// C = A·B over B's columns `col0..col0 + n` (`dims` = (m, k, n)) on [`Int8Kernel::best`].
    ///
    /// # Safety
    /// A's m×k elements are readable, C's m×n (unit column stride) writable and not overlapping A; k is the packed
    /// depth, `col0` a multiple of [`NR`] and `col0 + n` at most the packed width (debug assertions).
    pub unsafe fn gemm(
        &self,
        dims: (usize, usize, usize),
        col0: usize,
        a: Strided<*const f32>,
        c: Strided<*mut f32>,
    ) {
        // SAFETY: forwarded; `best` is a kernel this CPU runs.
        unsafe { self.gemm_on(Int8Kernel::best(), dims, col0, a, c) }
    }

    /// [`QuantB::gemm`] on a chosen kernel (tests and `gemm_bench` run each).
    ///
    /// # Safety
    /// As [`QuantB::gemm`]; `kernel` one of [`Int8Kernel::supported`].
    pub unsafe fn gemm_on(
        &self,
        kernel: Int8Kernel,
        (m, k, n): (usize, usize, usize),
        col0: usize,
        a: Strided<*const f32>,
        c: Strided<*mut f32>,
    ) {
        // SAFETY: forwarded contract, on a kernel this CPU runs.
        unsafe { self.run_on(kernel, (m, k, n), col0, a, c, None) }
    }

    /// The product on `kernel`, A read from `a` or, when `pre` is given, already quantised there.
    ///
    /// # Safety
    /// As [`QuantB::gemm_on`]; `pre`, when given, holds the m rows quantised on `kernel`.
    unsafe fn run_on(
        &self,
        kernel: Int8Kernel,
        (m, k, n): (usize, usize, usize),
        col0: usize,
        a: Strided<*const f32>,
        c: Strided<*mut f32>,
        pre: Option<Quantised>,
    ) {
        debug_assert!(
            k == self.view.k && col0.is_multiple_of(NR) && col0 + n <= self.view.n && c.cs == 1
        );
        if m == 0 || n == 0 {
            return;
        }
        let call = super::PackCall {
            pack: self,
            m,
            n,
            col0,
            a,
            c,
        };
        // SAFETY: forwarded contract.
        unsafe { kernels::run(kernel, &call, pre) }
    }

    /// Floats of scratch that [`QuantB::quantise_rows`] needs for `m` rows of A: their cells (from a cache line
    /// on), scales and zero points, and the rows past the last that the kernel's tiles may read.
    pub fn quantised_len(&self, m: usize) -> usize {
        let kernel = Int8Kernel::best();
        let cells = (m + kernels::rows_past(kernel)) * kernels::row_bytes(kernel, self.view.k);
        // And room to start the cells on a cache line (as the drivers' own scratch does).
        2 * m * self.groups() + cells.div_ceil(4) + super::LINE / 4
    }

    /// A's `m` rows (row `i` at `a[offset + i·rs + l·cs]`) quantised once, on the pool's threads, into `buf` (at
    /// least [`QuantB::quantised_len`] floats), for [`QuantB::gemm_quantised`]: the column blocks of one product
    /// then share one quantisation of A. W2's last layer spent 16 % of each of its four column blocks
    /// quantising the same 64 rows (`gemm_bench`). `None` when A's rows are not all inside `a` or `buf` is short.
    pub fn quantise_rows(
        &self,
        a: &[f32],
        (offset, rs, cs): (usize, usize, usize),
        m: usize,
        buf: &mut [f32],
    ) -> Option<Quantised> {
        let (k, groups, kernel) = (self.view.k, self.groups(), Int8Kernel::best());
        let stride = kernels::row_bytes(kernel, k);
        let last = offset + (m.max(1) - 1) * rs + (k.max(1) - 1) * cs;
        if m == 0 || last >= a.len() || buf.len() < self.quantised_len(m) {
            return None;
        }
        let (params, cells) = buf.split_at_mut(2 * m * groups);
        let (scales, zeros) = params.split_at_mut(m * groups);
        // The rows' cells from the first cache line on, and the rows past them that the tiles may read (their
        // pointer keeps the whole buffer).
        let line = cells
            .as_ptr()
            .align_offset(super::LINE)
            .min(super::LINE / 4);
        let all_cells = cells[line..].as_mut_ptr() as *mut u8;
        // SAFETY: the f32 buffer viewed as bytes (alignment 1, same memory, within its length).
        let bytes = unsafe { std::slice::from_raw_parts_mut(all_cells, m * stride) };
        let quantise = |row0: usize, scales: &mut [f32], zeros: &mut [f32], cells: &mut [u8]| {
            let a0 = super::Strided::new(a[offset..].as_ptr(), rs as isize, cs as isize);
            // SAFETY: `best` runs here; rows row0.. of A lie inside `a` (checked above); the chunk holds its
            // rows' cells (from a multiple of `stride`, itself a multiple of 4 bytes), scales and zeros.
            unsafe {
                kernels::quantize_rows_on(
                    kernel,
                    a0,
                    (row0, scales.len() / groups, k),
                    self.group,
                    cells,
                    scales,
                    zeros,
                )
            }
        };
        if m * k < QUANTISE_PARALLEL_MIN {
            // A decoding step's few rows: a fork and join would cost more than the rows.
            quantise(0, scales, zeros, bytes);
        } else {
            let chunk = m.div_ceil(rayon::current_num_threads());
            scales
                .par_chunks_mut(chunk * groups)
                .zip(zeros.par_chunks_mut(chunk * groups))
                .zip(bytes.par_chunks_mut(chunk * stride))
                .enumerate()
                .for_each(|(i, ((scales, zeros), cells))| {
                    quantise(i * chunk, scales, zeros, cells)
                });
        }
        Some(Quantised {
            cells: all_cells,
            stride,
            scales: scales.as_ptr(),
            zeros: zeros.as_ptr(),
            groups,
        })
    }

    /// [`QuantB::gemm`] reading A's rows `row0..row0 + m` from `a`, quantised by [`QuantB::quantise_rows`].
    ///
    /// # Safety
    /// As [`QuantB::gemm`], with `a` made by this pack's `quantise_rows` over at least `row0 + m` rows, its
    /// buffer alive and unchanged.
    pub unsafe fn gemm_quantised(
        &self,
        a: Quantised,
        row0: usize,
        (m, k, n): (usize, usize, usize),
        col0: usize,
        c: Strided<*mut f32>,
    ) {
        // A's pointer is never read: the rows come quantised.
        let unread = Strided::new(std::ptr::null(), 0, 0);
        // SAFETY: forwarded contract, on the kernel that quantised `a` (`best`).
        unsafe {
            self.run_on(
                Int8Kernel::best(),
                (m, k, n),
                col0,
                unread,
                c,
                Some(a.skip_rows(row0)),
            )
        }
    }

    /// Activation groups over the depth.
    fn groups(&self) -> usize {
        self.view.k.div_ceil(self.group).max(1)
    }
}
