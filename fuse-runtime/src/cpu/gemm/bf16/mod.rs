//! The bf16 GEMM for a weight operand: C = A·B with B rounded to bf16 once, at load, and A rounded per call.
//!
//! - **B** (a weight, k×n): each element rounded to bf16 (to nearest, ties to even; [`to_bf16`]) and packed in
//!   panels of [`NR`] columns where each pair of depths is one 4-byte lane per column: the operand layout of
//!   AVX-512 BF16's `vdpbf16ps` (two bf16 products summed into an f32 lane). The depth is padded to even with
//!   zeros. Half the bytes of the f32 pack, which is what a decoding step (bound by streaming the weights) gains.
//! - **A** (activations, m×k): each row rounded to bf16 as the driver packs its block (no scale: bf16 keeps f32's
//!   exponent range).
//! - **C**: every product of two bf16 values is exact in f32 and is summed in f32 (`vdpbf16ps` adds its two
//!   products one after the other, each rounded to f32; the other kernels use FMAs). The kernel's f32 epilogue
//!   (bias, GELU, residual) then runs on the block while it is in cache, as for the f32 GEMM.
//!
//! Kernels ([`Bf16Kernel`]): AMX's `tdpbf16ps` on tile registers where the CPU has AMX-BF16 and the OS grants
//! it (`crate::cpu::amx`); `vdpbf16ps` on 512-bit or 256-bit vectors where the CPU has AVX-512 BF16 and runs it
//! at least at its FMAs' rate (AMD's cores); elsewhere the bf16 values widened to f32 (a shift or a mask) and FMAs,
//! on 512-bit vectors (Intel's cores, whose `vdpbf16ps` has half the FMAs' rate) or AVX2, and a portable scalar
//! one. All read the same pack and compute the same products of the same rounded values, so they differ only in
//! the order of f32 additions.

mod kernels;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use super::{BView, Strided};
use crate::error::{Error, Result};

/// Columns per panel of a packed B.
pub const NR: usize = 32;

/// Which bf16 kernel runs a product. Each kernel's tile has the rows named below for a block of rows; a product
/// of 1, 2 or 3–4 rows (a decoding step) runs on the same kernel's tile of 1, 2 or 4 rows, so it does not compute
/// rows it throws away; with AVX-512, one of 7–8 rows (5–8 on the 512-bit kernel) runs on the 512-bit tile of 8,
/// which reads each panel of B once where two tiles of 4 read it twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bf16Kernel {
    /// AMX `tdpbf16ps`: 32×32 tile (four 16×16 sum tiles), 16×32 for 9–16 rows; 8 rows or fewer run on the
    /// 512-bit vector tiles ([`Bf16Kernel::for_rows`]).
    Amx,
    /// `vdpbf16ps` on 512-bit vectors: 12×32 tile.
    Avx512,
    /// `vdpbf16ps` on 256-bit vectors (AVX-512 VL encoding, 32 registers): 6×32 tile.
    Avx512Ymm,
    /// AVX-512 without bf16 arithmetic: as [`Bf16Kernel::Avx2`] on 512-bit vectors, 12×32 tile. For cores whose
    /// `vdpbf16ps` runs at half their FMAs' rate, and those with AVX-512 but not its BF16 part.
    Avx512Fma,
    /// AVX2 without bf16 arithmetic: B widened to f32 (a shift for the even depth, a mask for the odd one) and
    /// FMAs, A held as f32 rounded to bf16: 4×32 tile (two strips of 16).
    Avx2,
    /// Plain Rust, every target.
    Portable,
}

impl Bf16Kernel {
    /// The kernel bf16 products run on here: AMX where there is AMX. A core that splits 512-bit operations into
    /// two halves (Zen 4) gets the 256-bit `vdpbf16ps` tile, as for int8, where `vdpbf16ps` has twice the FMAs'
    /// rate; a core whose `vdpbf16ps` has half their rate (Intel's) widens to f32 on 512-bit FMAs (see
    /// BENCHMARKS.md for each measured).
    pub fn best() -> Bf16Kernel {
        static BEST: OnceLock<Bf16Kernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            let processor = crate::cpu::processor::Processor::get();
            Bf16Kernel::choose(
                Bf16Kernel::supported_here(),
                processor.splits_512_bit_fma,
                processor.half_rate_dpbf16,
            )
        })
    }

    /// [`Bf16Kernel::best`] among `all` (widest first) on a core that splits 512-bit FMAs (`splits`) or runs
    /// `vdpbf16ps` at half their rate (`half_rate`).
    fn choose(all: &[Bf16Kernel], splits: bool, half_rate: bool) -> Bf16Kernel {
        let has = |kernel| all.contains(&kernel);
        if has(Bf16Kernel::Amx) {
            Bf16Kernel::Amx
        } else if has(Bf16Kernel::Avx512Ymm) && splits {
            Bf16Kernel::Avx512Ymm
        } else if has(Bf16Kernel::Avx512) && !half_rate {
            Bf16Kernel::Avx512
        } else if has(Bf16Kernel::Avx512Fma) && !splits {
            Bf16Kernel::Avx512Fma
        } else if has(Bf16Kernel::Avx2) {
            Bf16Kernel::Avx2
        } else {
            Bf16Kernel::Portable
        }
    }

    /// The kernel a product of `m` rows runs on where `self` was chosen ([`Bf16Kernel::best`]). The tiles of a
    /// kernel for few rows are not all as fast as its block's: AMX hands 8 rows or fewer to the vector tiles, and
    /// on a core whose `vdpbf16ps` has half the FMAs' rate the widening tile is the faster of them from 3 rows on,
    /// the `vdpbf16ps` tile at 1 and 2. On an Intel core (one thread, `gemm_bench`, W5's decoding shapes;
    /// BENCHMARKS.md, thirty-seventh run), GFLOP/s `vdpbf16ps` against widening: 1 row 47–50 against 42–44, 2
    /// rows 74–77 against 71–74, 3 rows 62 against 90, 4 rows 83 against 122–124, 8 rows 85–87 against 132–147.
    pub fn for_rows(self, m: usize) -> Bf16Kernel {
        let half_rate = crate::cpu::processor::Processor::get().half_rate_dpbf16;
        self.on_rows(m, Bf16Kernel::supported_here(), half_rate)
    }

    /// Whether this CPU runs `self`.
    pub fn runs_here(self) -> bool {
        Bf16Kernel::supported_here().contains(&self)
    }

    /// [`Bf16Kernel::supported`], listed once.
    fn supported_here() -> &'static [Bf16Kernel] {
        static SUPPORTED: OnceLock<Vec<Bf16Kernel>> = OnceLock::new();
        SUPPORTED.get_or_init(Bf16Kernel::supported)
    }

    /// [`Bf16Kernel::for_rows`] among `all` on a core that runs `vdpbf16ps` at half its FMAs' rate (`half_rate`).
    fn on_rows(self, m: usize, all: &[Bf16Kernel], half_rate: bool) -> Bf16Kernel {
        use Bf16Kernel::{Amx, Avx512, Avx512Fma};
        let has = |kernel| all.contains(&kernel);
        let widens = half_rate && has(Avx512Fma);
        match self {
            Amx if m <= 2 || (m <= 8 && !widens) => Avx512,
            Amx if m <= 8 => Avx512Fma,
            Avx512Fma if m <= 2 && has(Avx512) => Avx512,
            kernel => kernel,
        }
    }

    /// Every kernel this CPU runs, widest first.
    pub fn supported() -> Vec<Bf16Kernel> {
        let mut all = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            let bf16 =
                crate::cpu::math::dispatch_avx512() && std::is_x86_feature_detected!("avx512bf16");
            if bf16 && crate::cpu::amx::features().bf16 {
                all.push(Bf16Kernel::Amx);
            }
            if bf16 {
                all.extend([Bf16Kernel::Avx512, Bf16Kernel::Avx512Ymm]);
            }
            if crate::cpu::math::dispatch_avx512() {
                all.push(Bf16Kernel::Avx512Fma);
            }
            if crate::cpu::math::dispatch_avx2() {
                all.push(Bf16Kernel::Avx2);
            }
        }
        all.push(Bf16Kernel::Portable);
        all
    }

    /// How the device report names it.
    pub fn describe(self) -> &'static str {
        match self {
            Bf16Kernel::Amx => "AMX-BF16, 32×32 tile",
            Bf16Kernel::Avx512 => "AVX-512 BF16, 512-bit, 12×32 tile",
            Bf16Kernel::Avx512Ymm => "AVX-512 BF16, 256-bit, 6×32 tile",
            Bf16Kernel::Avx512Fma => "AVX-512 (bf16 widened to f32), 12×32 tile",
            Bf16Kernel::Avx2 => "AVX2 (bf16 widened to f32), 4×32 tile",
            Bf16Kernel::Portable => "portable scalar",
        }
    }
}

/// `x` rounded to bf16 (the upper 16 bits of an f32) as `vcvtneps2bf16` does: to nearest with ties to even, a
/// subnormal to zero of its sign, a NaN to a quiet NaN.
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    if x.is_subnormal() {
        return ((bits >> 16) & 0x8000) as u16;
    }
    let round = 0x7FFF + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// The f32 a bf16 value stands for (exact).
#[inline(always)]
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// A weight operand rounded to bf16 and packed (see the module documentation).
pub struct Bf16B {
    view: BView,
    /// Depth rounded up to even.
    k2: usize,
    /// Panels of `NR` columns, each `k2 / 2` pairs of `NR` lanes of two bf16 values.
    panels: super::LinePack<u16>,
}

impl std::fmt::Debug for Bf16B {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bf16B")
            .field("view", &self.view)
            .finish_non_exhaustive()
    }
}

impl Bf16B {
    /// `view` of `source` rounded to bf16 and packed; `Ok(None)` for a view outside `source` (the product then
    /// stays f32). [`Error::OutOfMemory`] when the pack does not fit.
    pub fn new(source: &[f32], view: BView) -> Result<Option<Bf16B>> {
        if !view.fits(source.len()) {
            return Ok(None);
        }
        let (k, n) = (view.k, view.n);
        let k2 = k.next_multiple_of(2);
        let len = k2
            .checked_mul(n.next_multiple_of(NR))
            .ok_or(Error::OutOfMemory {
                what: "bf16 packed weights",
                bytes: None,
                available: None,
            })?;
        let mut panels = super::zeroed_pack("bf16 packed weights", len)?;
        for j in 0..n {
            let (panel, lane) = (j / NR, j % NR);
            for l in 0..k {
                let v = source[view.offset + l * view.rs + j * view.cs];
                panels[panel * k2 * NR + (l / 2) * NR * 2 + lane * 2 + l % 2] = to_bf16(v);
            }
        }
        Ok(Some(Bf16B { view, k2, panels }))
    }

    /// What it was packed from.
    pub fn view(&self) -> BView {
        self.view
    }

    /// Column `j` of B as packed (each element bf16-rounded), widened into `out` (`k` values); `false` when `j`
    /// is not a column or `out` is not `k` long.
    pub fn column(&self, j: usize, out: &mut [f32]) -> bool {
        if j >= self.view.n || out.len() != self.view.k {
            return false;
        }
        let (panel, lane) = (j / NR, j % NR);
        let base = panel * self.k2 * NR + lane * 2;
        for (l, o) in out.iter_mut().enumerate() {
            *o = from_bf16(self.panels[base + (l / 2) * NR * 2 + l % 2]);
        }
        true
    }

    /// Bytes of the pack.
    pub fn bytes(&self) -> usize {
        2 * self.panels.len()
    }

    /// C = A·B over B's columns `col0..col0 + n` (`dims` = (m, k, n)) on [`Bf16Kernel::best`].
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
        let kernel = Bf16Kernel::best().for_rows(dims.0);
        // SAFETY: forwarded; `best` and the kernels it hands few rows to run on this CPU.
        unsafe { self.gemm_on(kernel, dims, col0, a, c) }
    }

    /// [`Bf16B::gemm`] on a chosen kernel (tests and `gemm_bench` run each).
    ///
    /// # Safety
    /// As [`Bf16B::gemm`]; `kernel` one of [`Bf16Kernel::supported`].
    pub unsafe fn gemm_on(
        &self,
        kernel: Bf16Kernel,
        (m, k, n): (usize, usize, usize),
        col0: usize,
        a: Strided<*const f32>,
        c: Strided<*mut f32>,
    ) {
        debug_assert!(
            k == self.view.k && col0.is_multiple_of(NR) && col0 + n <= self.view.n && c.cs == 1
        );
        if m == 0 || n == 0 {
            return;
        }
        let pack = kernels::Panels {
            k,
            k2: self.k2,
            panels: &self.panels,
        };
        let call = super::PackCall {
            pack: &pack,
            m,
            n,
            col0,
            a,
            c,
        };
        // SAFETY: forwarded contract, on a kernel this CPU runs.
        unsafe { kernels::run(kernel, &call) }
    }
}

/// C = A·B (`dims` = (m, k, n)) for two operands computed per call (attention's queries, keys, probabilities and
/// values): B is rounded to bf16 and packed into this thread's scratch, A rounded per row block, on `kernel`.
///
/// # Safety
/// `kernel` is one of [`Bf16Kernel::supported`]; for every i < m, j < n and l < k, A's (i, l) and B's (l, j) are
/// readable and C's (i, j) writable; C has a unit column stride and overlaps neither.
pub unsafe fn gemm_operands_on(
    kernel: Bf16Kernel,
    dims: (usize, usize, usize),
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    c: Strided<*mut f32>,
) {
    debug_assert!(c.cs == 1);
    if dims.0 == 0 || dims.2 == 0 {
        return;
    }
    // SAFETY: forwarded.
    unsafe { kernels::run_operands(kernel, dims, a, b, c) }
}
