//! Matrix multiplication: fuse's own driver ([`driver`]) with an AVX-512 or AVX2 register tile on x86-64,
//! `matrixmultiply` elsewhere.
//!
//! `matrixmultiply` measured ≈ 190–200 GFLOP/s f32 on one core here, ahead of the `gemm` crate (≈ 120), and it
//! picks its kernel at run time, so it suits binaries built for baseline x86-64 and other targets. fuse's driver
//! exists for the first call and for speed: its packing buffers live per thread and are reserved at load (see
//! `super::scratch`), where `matrixmultiply` allocates them on every call, and on the workloads' task shapes it
//! runs 1.10–1.81× faster with AVX-512 and 1.07–1.31× faster than `matrixmultiply`'s own AVX2 kernel with AVX2
//! (BENCHMARKS.md, `gemm_bench`). Both take arbitrary row and column strides, so generated code folds transposes
//! and sub-matrix views into the call instead of copying.

/// Runs `$body` once for each row index `$r` below `$n` (a constant, at most 16), written out rather than looped:
/// a register tile whose accumulators are indexed by a loop LLVM keeps rolled stays in memory. The int8 tiles'
/// dequantisation loop did so: every group's accumulators went to the stack, zeroed by a `memset` call (1.9–2.6 %
/// of W3's int8 samples) and read back from there. Unrolled, they stay in registers; the tiles' rate did not move
/// (BENCHMARKS.md, forty-first run), but nothing of that detour is left to hide.
macro_rules! each_row {
    ($n:expr, |$r:ident| $body:block) => {
        // A taller tile would leave its last rows out: refused when the tile is compiled.
        const { assert!($n <= 16, "each_row! covers at most 16 rows") };
        each_row!(@ $n, $r, $body, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $n:expr, $r:ident, $body:block, $($i:literal)*) => {
        $(if $i < $n {
            let $r: usize = $i;
            $body
        })*
    };
}

/// In a reduced-precision tile of `MR` rows (12) generic over its height, returns after running a row block's last
/// 8 or fewer rows (`rows`) on the same `$tile` of 4 or 8 with `$args`, as the f32 tile does: a 64-row product
/// (W2's) is then five tiles of 12 and one of 4, not six of 12, which ran the bf16 tiles 8–12 % and the VNNI tile
/// 4–7 % slower on W2's blocks (`gemm_bench`, BENCHMARKS.md).
macro_rules! on_shorter_tile {
    ($tile:ident, $rows:expr, ($($args:expr),*)) => {
        if MR > 8 && $rows <= 8 {
            let shorter = if $rows <= 4 {
                $tile::<4>::tile
            } else {
                $tile::<8>::tile
            };
            // SAFETY: forwarded; a shorter tile reads and writes fewer rows.
            return unsafe { shorter($($args),*) };
        }
    };
}

/// `$drive::<$tile<H>>($args)` on the tile of `$tile` whose height `H` suits a product of `$rows` rows: 1, 2, 4 or
/// 8 rows on the tile of that height (up to 8 rows are one tile of 4 or 8, one pass over each panel, where the tile
/// of 12 would compute 12), more on the tile of 12. For the 12-row tiles of 512-bit vectors.
#[cfg(target_arch = "x86_64")]
macro_rules! on_tile_for_rows {
    ($rows:expr, $tile:ident, $drive:ident($($args:expr),*)) => {
        match $rows {
            1 => $drive::<$tile<1>>($($args),*),
            2 => $drive::<$tile<2>>($($args),*),
            3 | 4 => $drive::<$tile<4>>($($args),*),
            5..=8 => $drive::<$tile<8>>($($args),*),
            _ => $drive::<$tile<12>>($($args),*),
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod bf16;
#[cfg(target_arch = "x86_64")]
mod driver;
#[cfg(all(test, target_arch = "x86_64"))]
mod f16_tests;
#[cfg(target_arch = "x86_64")]
mod gemv;
pub mod half;
pub mod int8;
mod packed;
#[cfg(test)]
mod test_cases;
#[cfg(target_arch = "x86_64")]
mod tile;

#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::Ymm;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx512::Zmm;
#[cfg(target_arch = "x86_64")]
pub use gemv::{GemvKernel, GEMV_MAX_ROWS};
#[cfg(target_arch = "x86_64")]
pub(crate) use tile::Lanes;
/// Most rows a product over a packed B takes the few-rows path with (none where there is no such path).
#[cfg(not(target_arch = "x86_64"))]
pub const GEMV_MAX_ROWS: usize = 0;
pub use packed::{BView, PackedB};

/// A GEMM's weight operand prepared once, at load, in the precision its products are computed in.
#[derive(Debug)]
pub enum WeightPack {
    /// f32 panels for the f32 tile.
    F32(PackedB),
    /// int8, quantised per column (`int8`).
    Int8(int8::QuantB),
    /// bf16, rounded per element (`bf16`).
    Bf16(bf16::Bf16B),
    /// The f32 tile's panels held in f16 ([`PackedB::new_f16`]).
    F16(PackedB),
}

impl WeightPack {
    /// What it was packed from.
    pub fn view(&self) -> BView {
        match self {
            WeightPack::F32(p) | WeightPack::F16(p) => p.view(),
            WeightPack::Int8(q) => q.view(),
            WeightPack::Bf16(h) => h.view(),
        }
    }

    /// Columns per panel: a product may start at any multiple of it.
    pub fn nr(&self) -> usize {
        match self {
            WeightPack::F32(p) | WeightPack::F16(p) => p.nr(),
            WeightPack::Int8(_) => int8::NR,
            WeightPack::Bf16(_) => bf16::NR,
        }
    }

    pub fn bytes(&self) -> usize {
        match self {
            WeightPack::F32(p) | WeightPack::F16(p) => p.bytes(),
            WeightPack::Int8(q) => q.bytes(),
            WeightPack::Bf16(h) => h.bytes(),
        }
    }

    /// Whether it is in a reduced precision (int8, bf16 or f16): what a gather may read rows of a tied table from.
    pub fn is_reduced(&self) -> bool {
        !matches!(self, WeightPack::F32(_))
    }

    /// Column `j` of B in f32 as the product sees it (dequantised or widened) into `out` (`k` values); `false`
    /// for an f32 pack (its panels belong to the f32 tile; the dense weight is kept beside it), or when `j` is
    /// not a column or `out` is not `k` long.
    pub fn column(&self, j: usize, out: &mut [f32]) -> bool {
        match self {
            WeightPack::F32(_) => false,
            WeightPack::Int8(q) => q.column(j, out),
            WeightPack::Bf16(h) => h.column(j, out),
            WeightPack::F16(p) => p.column(j, out),
        }
    }
}

use super::math::{dispatch_avx2, dispatch_avx512};
use super::processor::Processor;

/// Which implementation runs a GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// fuse's driver with the 12×32 AVX-512 tile.
    Avx512,
    /// fuse's driver with the 6×16 AVX2 tile.
    Avx2,
    /// `matrixmultiply`, for CPUs with neither.
    Portable,
}

impl Backend {
    /// The backend GEMMs run on: the widest tile this CPU runs whose vectors its FMA units execute at full
    /// rate. A core that splits each 512-bit FMA into two 256-bit halves (AMD Zen 3 and Zen 4) gets the AVX2
    /// tile: its peak is the same (`gemm_bench` measured 116.5 and 117.2 GFLOP/s on a Zen 4 core), and the
    /// 6×16 tile keeps a B panel of twice the depth in L1 (kc 384 against 192 for 12×32), which measured 80–88 %
    /// of peak on W3's shapes against 54–58 % for the AVX-512 tile.
    ///
    /// Called on every GEMM, so it allocates nothing: the dispatch flags and the processor are detected once.
    pub fn best() -> Backend {
        let x86 = cfg!(target_arch = "x86_64");
        if x86 && dispatch_avx512() && !Processor::get().splits_512_bit_fma {
            Backend::Avx512
        } else if x86 && dispatch_avx2() {
            Backend::Avx2
        } else {
            Backend::Portable
        }
    }

    /// Every backend this CPU runs, [`Backend::best`] first.
    pub fn available() -> Vec<Backend> {
        let best = Backend::best();
        let mut all = Backend::supported();
        all.retain(|&b| b != best);
        all.insert(0, best);
        all
    }

    /// Every backend this CPU's instruction sets allow, widest first.
    fn supported() -> Vec<Backend> {
        let x86 = cfg!(target_arch = "x86_64");
        [
            (Backend::Avx512, x86 && dispatch_avx512()),
            (Backend::Avx2, x86 && dispatch_avx2()),
            (Backend::Portable, true),
        ]
        .into_iter()
        .filter_map(|(b, runs)| runs.then_some(b))
        .collect()
    }
}

/// The per-thread scratch the GEMM packs into, for `super::reserve_scratch`: none where `matrixmultiply` runs,
/// since it allocates its own.
pub fn scratch_needs() -> Vec<(&'static super::scratch::Buffer, usize)> {
    #[cfg(target_arch = "x86_64")]
    match Backend::best() {
        Backend::Avx512 => return driver::scratch_needs::<avx512::Avx512>(),
        Backend::Avx2 => return driver::scratch_needs::<avx2::Avx2>(),
        Backend::Portable => {}
    }
    Vec::new()
}

/// One product of a reduced-precision GEMM (int8, bf16): C[m×n] = A[m×k] · B[:, col0..col0 + n] with B in `pack`.
struct PackCall<'p, P> {
    pack: &'p P,
    m: usize,
    n: usize,
    col0: usize,
    a: Strided<*const f32>,
    c: Strided<*mut f32>,
}

/// Bytes of a cache line, the boundary packs and scratch buffers start on.
pub(crate) const LINE: usize = 64;

/// A pack of weights: `len` elements whose first sits on a cache-line boundary, so that every 64-byte row of a
/// panel is one line. AMX loads a tile register as 16 such rows, and from panels 16 bytes off the boundary (where
/// the allocator puts a large block) it ran at half the rate (BENCHMARKS.md, twenty-seventh run); the f32 tile's
/// 512-bit loads of a panel row likewise each read one line instead of two.
pub(crate) struct LinePack<T> {
    buf: Vec<T>,
    start: usize,
    len: usize,
}

impl<T> std::ops::Deref for LinePack<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl<T> std::ops::DerefMut for LinePack<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// A zeroed [`LinePack`] of `len` elements, or [`crate::error::Error::OutOfMemory`] naming `what`.
fn zeroed_pack<T: Clone + Default>(
    what: &'static str,
    len: usize,
) -> crate::error::Result<LinePack<T>> {
    let out_of_memory = || crate::error::Error::OutOfMemory {
        what,
        bytes: len.checked_mul(std::mem::size_of::<T>()),
        available: None,
    };
    // Room to move the start onto a line.
    let total = len
        .checked_add(LINE / std::mem::size_of::<T>().max(1))
        .ok_or_else(out_of_memory)?;
    // Checked against the memory left first: with overcommit the reservation below succeeds and the zeroing
    // would be killed instead.
    if let Some(bytes) = total.checked_mul(std::mem::size_of::<T>()) {
        crate::memory::check_fits(what, bytes)?;
    }
    let mut buf: Vec<T> = Vec::new();
    buf.try_reserve_exact(total).map_err(|_| out_of_memory())?;
    // Before anything touches it, so that zeroing it faults in huge pages.
    crate::arena::advise_huge_pages_inside(
        buf.as_mut_ptr().cast(),
        total * std::mem::size_of::<T>(),
    );
    buf.resize(total, T::default());
    let start = buf.as_ptr().align_offset(LINE).min(total - len);
    Ok(LinePack { buf, start, len })
}

/// Row pointers of a register tile of `MR` rows from `a` at stride `a_rs` bytes, rows past `rows` repeating the
/// last (a partial tile computes them and discards their sums, reading no row outside the block).
#[inline(always)]
fn tile_rows<const MR: usize>(a: *const u8, a_rs: usize, rows: usize) -> [*const u8; MR] {
    std::array::from_fn(|r| a.wrapping_add(r.min(rows - 1) * a_rs))
}

/// Row `i` of A as a slice of `k` floats: in place when its elements are contiguous, else gathered into
/// `gather` (at least `k` floats). The drivers of the reduced-precision GEMMs round or quantise A row by row.
///
/// # Safety
/// Row `i` of `a` is readable over `k` elements.
#[inline(always)]
unsafe fn strided_row(a: Strided<*const f32>, i: usize, k: usize, gather: &mut [f32]) -> &[f32] {
    let src = a.ptr.wrapping_offset(i as isize * a.rs);
    if a.cs == 1 {
        // SAFETY: the caller's contract; the row lives as long as the call that reads it.
        return unsafe { std::slice::from_raw_parts(src, k) };
    }
    for (l, v) in gather[..k].iter_mut().enumerate() {
        // SAFETY: element (i, l) of A is readable.
        *v = unsafe { *src.offset(l as isize * a.cs) };
    }
    &gather[..k]
}

/// Writes a row block's register tiles into C's rows `row0..row0 + rows` and columns `col0..col0 + cols`: tile `t`
/// holds the block's rows `t·mr..`, each `nr` sums long; each column times `scales[j]` when given (int8's
/// per-column scale).
///
/// # Safety
/// Those elements of C are writable (unit column stride); `scales` holds `cols` values.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn store_tiles<const S: usize>(
    tiles: &[[f32; S]],
    (mr, nr): (usize, usize),
    c: Strided<*mut f32>,
    row0: usize,
    rows: usize,
    col0: usize,
    cols: usize,
    scales: Option<&[f32]>,
) {
    for r in 0..rows {
        // SAFETY: the caller's contract.
        let out = unsafe {
            std::slice::from_raw_parts_mut(
                c.ptr.offset((row0 + r) as isize * c.rs + col0 as isize),
                cols,
            )
        };
        let row = &tiles[r / mr][r % mr * nr..][..cols];
        match scales {
            Some(scales) => {
                for ((o, &s), &b) in out.iter_mut().zip(row).zip(scales) {
                    *o = s * b;
                }
            }
            None => out.copy_from_slice(row),
        }
    }
}

/// A strided matrix operand: element (i, j) is at `ptr + i·rs + j·cs`, strides in elements.
#[derive(Clone, Copy, Debug)]
pub struct Strided<P> {
    pub ptr: P,
    pub rs: isize,
    pub cs: isize,
}

impl<P> Strided<P> {
    pub fn new(ptr: P, rs: isize, cs: isize) -> Self {
        Strided { ptr, rs, cs }
    }
}

/// C ← α·A·B + β·C for an m×k A, a k×n B and an m×n C (`dims` = (m, k, n)), on the best backend of this CPU.
///
/// With β = 0, C is only written, never read, so it may hold garbage (even NaN) on entry.
///
/// # Safety
/// For every i < m, j < n and l < k, A's (i, l) and B's (l, j) must be valid for reads and C's (i, j) valid for
/// reads and writes, all computed without overflow. C must not overlap A or B, and distinct (i, j) must address
/// distinct elements of C (no zero or aliasing C strides unless m or n is 1). No particular alignment is needed.
#[inline]
pub unsafe fn sgemm(
    dims: (usize, usize, usize),
    alpha: f32,
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    beta: f32,
    c: Strided<*mut f32>,
) {
    // SAFETY: forwarded contract.
    unsafe { sgemm_on(Backend::best(), dims, alpha, a, b, beta, c) }
}

/// [`sgemm`] on a chosen backend (tests and `gemm_bench` run both).
///
/// # Safety
/// [`sgemm`]'s contract; only a backend of [`Backend::available`].
#[inline]
pub unsafe fn sgemm_on(
    backend: Backend,
    (m, k, n): (usize, usize, usize),
    alpha: f32,
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    beta: f32,
    c: Strided<*mut f32>,
) {
    // SAFETY (both own backends): the CPU has the tile's instruction set (the caller's contract) and the
    // operands satisfy `sgemm`'s.
    #[cfg(target_arch = "x86_64")]
    match backend {
        Backend::Avx512 => {
            return unsafe { driver::sgemm::<avx512::Avx512>((m, k, n), alpha, a, b, beta, c) }
        }
        Backend::Avx2 => {
            return unsafe { driver::sgemm::<avx2::Avx2>((m, k, n), alpha, a, b, beta, c) }
        }
        Backend::Portable => {}
    }
    let _ = backend;
    // SAFETY: the caller upholds matrixmultiply's contract, which is the one stated on `sgemm`.
    unsafe {
        matrixmultiply::sgemm(
            m, k, n, alpha, a.ptr, a.rs, a.cs, b.ptr, b.rs, b.cs, beta, c.ptr, c.rs, c.cs,
        );
    }
}

/// `out = op(A) · op(B)` for row-major stored matrices, where `op` transposes when the flag is set; `a_shape`
/// and `b_shape` are the stored shapes. `out` is row-major with the shape of the product.
///
/// A safe entry point for tests and reference paths; the kernel drivers call [`sgemm`] with their own strides.
///
/// # Panics
/// If the inner dimensions disagree or a slice length does not match its shape.
pub fn matmul(
    a: &[f32],
    a_shape: [usize; 2],
    a_trans: bool,
    b: &[f32],
    b_shape: [usize; 2],
    b_trans: bool,
    out: &mut [f32],
) {
    let [ar, ac] = a_shape;
    let [br, bc] = b_shape;
    assert_eq!(
        a.len(),
        ar * ac,
        "A has {} elements, shape {a_shape:?}",
        a.len()
    );
    assert_eq!(
        b.len(),
        br * bc,
        "B has {} elements, shape {b_shape:?}",
        b.len()
    );
    // A stored row-major as ar×ac has strides (ac, 1); its transpose swaps them.
    let (m, k, rsa, csa) = if a_trans {
        (ac, ar, 1, ac)
    } else {
        (ar, ac, ac, 1)
    };
    let (k2, n, rsb, csb) = if b_trans {
        (bc, br, 1, bc)
    } else {
        (br, bc, bc, 1)
    };
    assert_eq!(
        k, k2,
        "inner dimensions differ: op(A) is {m}×{k}, op(B) is {k2}×{n}"
    );
    assert_eq!(
        out.len(),
        m * n,
        "out has {} elements, need {m}×{n}",
        out.len()
    );
    // SAFETY: the lengths were checked against the shapes, so every index the strides produce is in bounds,
    // `out` is a distinct &mut slice, and its row-major strides (n, 1) address each element once.
    unsafe {
        sgemm(
            (m, k, n),
            1.0,
            Strided::new(a.as_ptr(), rsa as isize, csa as isize),
            Strided::new(b.as_ptr(), rsb as isize, csb as isize),
            0.0,
            Strided::new(out.as_mut_ptr(), n as isize, 1),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    /// The int8 and bf16 tiles ask for B's lines ahead only where the processor says its L2 hints do not keep B
    /// streaming, only a tile that can, and never in a block of one tile of fewer than four rows; and asking is a
    /// hint: past a buffer's end, or from a null pointer, it reads nothing and cannot fault.
    #[test]
    fn b_is_asked_ahead_only_where_the_processor_says_and_never_faults() {
        let into_l1 = crate::cpu::processor::Processor::get().prefetch_b_into_l1;
        for (tiles, rows) in [(2, 24), (1, 4), (1, 8)] {
            let ahead = tile::b_ahead(true, tiles, rows);
            assert_eq!(
                ahead > 0,
                into_l1,
                "{ahead} bytes ahead, {tiles} tiles of {rows} rows"
            );
        }
        for rows in 1..4 {
            assert_eq!(
                tile::b_ahead(true, 1, rows),
                0,
                "a lone tile of {rows} rows asks for nothing"
            );
        }
        assert_eq!(
            tile::b_ahead(false, 6, 72),
            0,
            "a tile that cannot ask is given nothing"
        );
        let b = [0u8; 128];
        for at in [
            b.as_ptr(),
            b.as_ptr().wrapping_add(b.len()),
            std::ptr::null(),
        ] {
            tile::ask_b_ahead(at, tile::b_ahead(true, 2, 24).max(16 << 10));
            tile::ask_b_ahead(at, usize::MAX - 64);
            tile::ask_b_ahead(at, 0);
        }
    }

    /// Packs start on a cache line whatever their element size and length (AMX reads their 64-byte rows whole).
    #[test]
    fn packs_start_on_a_cache_line() {
        for len in [1, 7, 64, 1000, 1 << 20] {
            let bytes = zeroed_pack::<i8>("test", len).unwrap();
            let halves = zeroed_pack::<u16>("test", len).unwrap();
            let floats = zeroed_pack::<f32>("test", len).unwrap();
            assert_eq!(bytes.as_ptr() as usize % LINE, 0, "{len} bytes");
            assert_eq!(halves.as_ptr() as usize % LINE, 0, "{len} halves");
            assert_eq!(floats.as_ptr() as usize % LINE, 0, "{len} floats");
            assert_eq!((bytes.len(), halves.len(), floats.len()), (len, len, len));
            assert!(bytes.iter().all(|&b| b == 0) && floats.iter().all(|&f| f == 0.0));
        }
    }

    fn randv(n: usize, seed: u64) -> Vec<f32> {
        Tensor::randn(&[n], seed).as_f32().unwrap().to_vec()
    }

    /// Element (i, j) of op(M) for a row-major stored `rows`×`cols` matrix.
    fn at(v: &[f32], cols: usize, trans: bool, i: usize, j: usize) -> f64 {
        f64::from(if trans {
            v[j * cols + i]
        } else {
            v[i * cols + j]
        })
    }

    #[test]
    fn matches_naive_f64() {
        let sizes = [
            (1, 1, 1),
            (3, 5, 7),
            (17, 1, 9),
            (33, 64, 5),
            (64, 48, 80),
            (1, 100, 31),
            (0, 4, 3),
        ];
        let mut seed = 0;
        for &(m, k, n) in &sizes {
            for (a_trans, b_trans) in [(false, false), (true, false), (false, true), (true, true)] {
                seed += 2;
                let a = randv(m * k, seed);
                let b = randv(k * n, seed + 1);
                let a_shape = if a_trans { [k, m] } else { [m, k] };
                let b_shape = if b_trans { [n, k] } else { [k, n] };
                let mut out = vec![f32::NAN; m * n];
                matmul(&a, a_shape, a_trans, &b, b_shape, b_trans, &mut out);
                for i in 0..m {
                    for j in 0..n {
                        let (mut want, mut scale) = (0.0f64, 0.0f64);
                        for l in 0..k {
                            let p = at(&a, a_shape[1], a_trans, i, l)
                                * at(&b, b_shape[1], b_trans, l, j);
                            want += p;
                            scale += p.abs();
                        }
                        let got = f64::from(out[i * n + j]);
                        assert!(
                            (got - want).abs() <= 1e-5 * scale + 1e-30,
                            "{m}x{k}x{n} trans ({a_trans}, {b_trans}) at ({i}, {j}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// The backends this CPU runs; the ones it cannot are skipped with a message.
    fn backends() -> Vec<Backend> {
        let available = Backend::available();
        if available.len() < 3 {
            eprintln!("GEMM backends this CPU cannot run are skipped; testing {available:?}");
        }
        available
    }

    /// One product on `backend` against f64: `layout` bit 0 transposes A, bit 1 transposes B, bit 2 makes C
    /// column-major; every operand's leading dimension is padded by `pad` (a view into a wider buffer); β = 0
    /// runs over a NaN-filled C, which must not be read.
    fn check_product(
        backend: Backend,
        (m, k, n): (usize, usize, usize),
        layout: usize,
        pad: usize,
        (alpha, beta): (f32, f32),
        seed: u64,
    ) {
        let (a_trans, b_trans, c_cols) = (layout & 1 != 0, layout & 2 != 0, layout & 4 != 0);
        // (row stride, column stride, elements) of a rows×cols operand, stored transposed or not.
        let strided = |rows: usize, cols: usize, trans: bool| {
            if trans {
                (1, rows + pad, cols * (rows + pad))
            } else {
                (cols + pad, 1, rows * (cols + pad))
            }
        };
        let (rsa, csa, a_len) = strided(m, k, a_trans);
        let (rsb, csb, b_len) = strided(k, n, b_trans);
        let (rsc, csc, c_len) = strided(m, n, c_cols);
        let a = randv(a_len, seed);
        let b = randv(b_len, seed + 1);
        let c0 = randv(c_len, seed + 2);
        let mut c = if beta == 0.0 {
            vec![f32::NAN; c_len]
        } else {
            c0.clone()
        };
        // SAFETY: every (i, l), (l, j), (i, j) the strides produce is inside its vector.
        unsafe {
            sgemm_on(
                backend,
                (m, k, n),
                alpha,
                Strided::new(a.as_ptr(), rsa as isize, csa as isize),
                Strided::new(b.as_ptr(), rsb as isize, csb as isize),
                beta,
                Strided::new(c.as_mut_ptr(), rsc as isize, csc as isize),
            );
        }
        for i in 0..m {
            for j in 0..n {
                let (mut dot, mut scale) = (0.0f64, 0.0f64);
                for l in 0..k {
                    let p = f64::from(a[i * rsa + l * csa]) * f64::from(b[l * rsb + j * csb]);
                    dot += p;
                    scale += p.abs();
                }
                let at = i * rsc + j * csc;
                let want = f64::from(alpha) * dot + f64::from(beta) * f64::from(c0[at]);
                let got = f64::from(c[at]);
                assert!(
                    (got - want).abs() <= 1e-5 * (scale + f64::from(c0[at]).abs()) + 1e-30,
                    "{backend:?} {m}x{k}x{n} layout {layout} pad {pad} at ({i}, {j}): {got} vs {want}"
                );
            }
        }
    }

    /// Shapes that cover partial register tiles and every blocking loop (k > kc, m > mc, n > nc for the block
    /// sizes this CPU's caches give, at most 512, 1024 and 2048), in every layout, with and without α/β.
    #[test]
    fn backends_match_f64_with_strides_alpha_beta() {
        let sizes = [
            (1, 1, 1),
            (13, 300, 45),
            (100, 7, 1030),
            (12, 256, 32),
            (25, 513, 70),
            (1030, 9, 20),
            (3, 4, 2100),
            (5, 0, 9),
        ];
        let mut seed = 100;
        for backend in backends() {
            for &dims in &sizes {
                for layout in 0..8 {
                    seed += 3;
                    let scalars = if layout % 3 == 0 {
                        (1.0, 0.0)
                    } else {
                        (-0.75, 0.5)
                    };
                    check_product(backend, dims, layout, 0, scalars, seed);
                }
            }
        }
    }

    /// Random shapes, layouts, padded leading dimensions and α/β (seeded, so a failure reproduces).
    #[test]
    fn backends_match_f64_on_random_products() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        for backend in backends() {
            for case in 0..40 {
                let dims = (1 + next(64), 1 + next(300), 1 + next(100));
                let (layout, pad) = (next(8), next(3) * 5);
                let scalars = [(1.0, 0.0), (0.5, 1.0), (-2.0, -0.25)][next(3)];
                check_product(backend, dims, layout, pad, scalars, 1000 + case);
            }
        }
    }

    /// B packed once ([`PackedB`]) against the driver packing B itself and against f64: random shapes with
    /// ragged tiles, depths past kc and widths past nc, B stored either way (a Linear layer's Wᵀ is
    /// column-contiguous) inside a wider buffer, α/β, and column ranges that start at a later panel.
    #[test]
    fn packed_b_matches_per_call_packing_and_f64() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        let fixed = [(7, 1100, 37), (100, 385, 129), (3, 40, 2100), (130, 9, 17)];
        for backend in backends() {
            let mut cases: Vec<(usize, usize, usize)> = fixed.to_vec();
            cases.extend((0..24).map(|_| (1 + next(140), 1 + next(500), 1 + next(150))));
            for (case, &(m, k, n)) in cases.iter().enumerate() {
                let seed = 5000 + 10 * case as u64;
                let b_trans = case % 2 == 0;
                let pad = next(3) * 3;
                // B is k×n at offset `pad` of its buffer: row-major (rs n + pad) or stored transposed.
                let (rs, cs) = if b_trans { (1, k + pad) } else { (n + pad, 1) };
                let len = pad + (k - 1) * rs + (n - 1) * cs + 1;
                let buf = randv(len, seed);
                let a = randv(m * k, seed + 1);
                let view = BView {
                    offset: pad,
                    rs,
                    cs,
                    k,
                    n,
                };
                let Some(packed) = PackedB::new(backend, &buf, view).unwrap() else {
                    assert_eq!(backend, Backend::Portable);
                    continue;
                };
                // Columns col0.. of B, col0 at a whole panel.
                let col0 = packed.nr() * next(n.div_ceil(packed.nr()));
                let cols = 1 + next(n - col0);
                let (alpha, beta) = [(1.0, 0.0), (0.5, -1.5)][case % 2];
                let c0 = randv(m * cols, seed + 2);
                let mut by_pack = if beta == 0.0 {
                    vec![f32::NAN; m * cols]
                } else {
                    c0.clone()
                };
                let mut by_call = by_pack.clone();
                let a_view = Strided::new(a.as_ptr(), k as isize, 1);
                // SAFETY: A is m×k row-major; B's columns col0..col0 + cols lie in `buf`; C is m×cols.
                unsafe {
                    packed.sgemm(
                        (m, k, cols),
                        col0,
                        alpha,
                        a_view,
                        beta,
                        Strided::new(by_pack.as_mut_ptr(), cols as isize, 1),
                    );
                    sgemm_on(
                        backend,
                        (m, k, cols),
                        alpha,
                        a_view,
                        Strided::new(buf.as_ptr().add(pad + col0 * cs), rs as isize, cs as isize),
                        beta,
                        Strided::new(by_call.as_mut_ptr(), cols as isize, 1),
                    );
                }
                for i in 0..m {
                    for j in 0..cols {
                        let (mut dot, mut scale) = (0.0f64, 0.0f64);
                        for l in 0..k {
                            let p = f64::from(a[i * k + l])
                                * f64::from(buf[pad + l * rs + (col0 + j) * cs]);
                            dot += p;
                            scale += p.abs();
                        }
                        let c = f64::from(c0[i * cols + j]);
                        let want = f64::from(alpha) * dot + f64::from(beta) * c;
                        let (got, call) = (by_pack[i * cols + j], by_call[i * cols + j]);
                        let what =
                            format!("{backend:?} {m}x{k}x{n} cols {col0}+{cols} at ({i}, {j})");
                        assert!(
                            (f64::from(got) - want).abs() <= 1e-5 * (scale + c.abs()) + 1e-30,
                            "{what}: {got} vs {want}"
                        );
                        // Few rows sum the depth in another order than the tile (see `gemv`): the two agree
                        // to within the rounding of the terms' magnitudes, not of the result's.
                        assert!(
                            f64::from((got - call).abs()) <= 1e-5 * (scale + c.abs()) + 1e-30,
                            "{what}: packed {got}, per call {call}"
                        );
                    }
                }
            }
        }
    }

    /// Products of one to a few rows over a packed B take the streaming path (`gemv`), on each of its kernels
    /// this CPU runs: every row count it takes and the first the tile takes, odd and even depths, partial last
    /// panels, a transposed A and a C with a row stride of its own, β = 0 (C holds NaN) and β ≠ 0, against an f64
    /// product.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn few_row_products_over_a_packed_b_match_f64() {
        let mut seed = 9000;
        for backend in backends() {
            for m in 1..=GEMV_MAX_ROWS + 1 {
                for &(k, n) in &[(1, 1), (2, 17), (7, 33), (576, 192), (301, 70), (64, 500)] {
                    seed += 4;
                    let b = randv(k * n, seed);
                    let view = BView {
                        offset: 0,
                        rs: n,
                        cs: 1,
                        k,
                        n,
                    };
                    let Some(packed) = PackedB::new(backend, &b, view).unwrap() else {
                        assert_eq!(backend, Backend::Portable);
                        continue;
                    };
                    // A stored transposed (k×m), C with 3 spare columns per row.
                    let a = randv(k * m, seed + 1);
                    let c_rs = n + 3;
                    let c0 = randv(m * c_rs, seed + 2);
                    for ((alpha, beta), gemv) in [(1.0f32, 0.0f32), (0.5, -1.5)]
                        .into_iter()
                        .flat_map(|ab| GemvKernel::supported().into_iter().map(move |g| (ab, g)))
                    {
                        let mut c = if beta == 0.0 {
                            vec![f32::NAN; m * c_rs]
                        } else {
                            c0.clone()
                        };
                        // SAFETY: A is k×m row-major read as m×k; C holds m rows of stride c_rs ≥ n; the
                        // kernel runs here.
                        unsafe {
                            packed.sgemm_on(
                                gemv,
                                (m, k, n),
                                0,
                                alpha,
                                Strided::new(a.as_ptr(), 1, m as isize),
                                beta,
                                Strided::new(c.as_mut_ptr(), c_rs as isize, 1),
                            );
                        }
                        for i in 0..m {
                            for j in 0..n {
                                let (mut dot, mut scale) = (0.0f64, 0.0f64);
                                for l in 0..k {
                                    let p = f64::from(a[l * m + i]) * f64::from(b[l * n + j]);
                                    dot += p;
                                    scale += p.abs();
                                }
                                let old = f64::from(c0[i * c_rs + j]);
                                let want = f64::from(alpha) * dot + f64::from(beta) * old;
                                let got = f64::from(c[i * c_rs + j]);
                                assert!(
                                    (got - want).abs() <= 1e-5 * (scale + old.abs()) + 1e-30,
                                    "{backend:?} {gemv:?} {m}x{k}x{n} α {alpha} β {beta} at ({i}, {j}): {got} vs {want}"
                                );
                            }
                            // The spare columns are not C's: untouched.
                            for j in n..c_rs {
                                let (got, was) = (c[i * c_rs + j], c0[i * c_rs + j]);
                                assert!(
                                    got.to_bits() == was.to_bits() || (beta == 0.0 && got.is_nan())
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// A view that does not fit its buffer is not packed (the call packs B itself and its bounds check speaks).
    #[test]
    fn a_view_outside_its_buffer_is_not_packed() {
        let buf = randv(12, 1);
        let view = BView {
            offset: 1,
            rs: 4,
            cs: 1,
            k: 3,
            n: 4,
        };
        for backend in backends() {
            assert!(PackedB::new(backend, &buf, view).unwrap().is_none());
        }
    }

    #[test]
    fn raw_strides_alpha_beta() {
        // C is a 2×3 block inside a column-major 4×5 buffer; C ← 2·A·B + 0.5·C.
        let a = [1.0f32, 2.0, 3.0, 4.0]; // 2×2 row-major
        let b = [1.0f32, 0.0, -1.0, 2.0, 1.0, 0.5]; // 2×3 row-major
        let mut buf = vec![10.0f32; 4 * 5];
        let offset = 1 + 4; // row 1, column 1
        unsafe {
            sgemm(
                (2, 2, 3),
                2.0,
                Strided::new(a.as_ptr(), 2, 1),
                Strided::new(b.as_ptr(), 3, 1),
                0.5,
                Strided::new(buf.as_mut_ptr().add(offset), 1, 4),
            );
        }
        let ab = [[5.0f32, 2.0, 0.0], [11.0, 4.0, -1.0]];
        for (i, row) in ab.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                assert_eq!(buf[offset + i + 4 * j], 2.0 * v + 5.0);
            }
        }
        let untouched = buf.iter().filter(|&&x| x == 10.0).count();
        assert_eq!(untouched, 20 - 6);
    }

    #[test]
    #[should_panic(expected = "inner dimensions differ")]
    fn mismatched_inner_dims_panic() {
        let mut out = vec![0.0; 4];
        matmul(&[0.0; 6], [2, 3], false, &[0.0; 4], [2, 2], false, &mut out);
    }
}
