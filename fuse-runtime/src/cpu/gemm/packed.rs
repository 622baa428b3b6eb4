//! A GEMM's B operand packed once, when a model's weights are in place, into the panels fuse's driver streams:
//! a Linear layer's weight never changes, yet packing it per call was ~28 % of an MLP layer's time at batch 64.
//!
//! The layout is the driver's B panel over the whole depth (`driver::pack_whole_b`): panels of NR columns, each
//! k rows of NR floats, so it serves every blocking (kc, nc) and every column range starting at a panel.
//!
//! A pack may hold its panels in f16 ([`PackedB::new_f16`]): the same layout at half the bytes, widened at call
//! time (`vcvtph2ps`): as the few-row kernel loads them, or a depth block at a time into this thread's scratch,
//! where the f32 tile reads them. The product is then exactly the f32 product over the f16-rounded weight: a
//! decoding step streams half the bytes, and a product of many rows widens each block once for all its rows.

use super::half::{f16, to_f16};
use super::{Backend, Strided};
use crate::error::Result;

/// Where a B operand sits in its source buffer: the k×n matrix with element (l, j) at `offset + l·rs + j·cs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BView {
    pub offset: usize,
    pub rs: usize,
    pub cs: usize,
    pub k: usize,
    pub n: usize,
}

impl BView {
    /// Whether every element lies inside a buffer of `len` elements (no overflow either).
    pub(crate) fn fits(&self, len: usize) -> bool {
        if self.k == 0 || self.n == 0 {
            return true;
        }
        let last = (self.k - 1)
            .checked_mul(self.rs)
            .and_then(|r| (self.n - 1).checked_mul(self.cs)?.checked_add(r))
            .and_then(|e| e.checked_add(self.offset));
        last.is_some_and(|last| last < len)
    }
}

/// A B operand packed for one backend's tile (see the module documentation).
pub struct PackedB {
    backend: Backend,
    /// The tile's columns per panel.
    nr: usize,
    view: BView,
    panels: Panels,
}

/// The panels' elements.
enum Panels {
    F32(super::LinePack<f32>),
    F16(super::LinePack<f16>),
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedB")
            .field("backend", &self.backend)
            .field("nr", &self.nr)
            .field("view", &self.view)
            .field("f16", &self.is_f16())
            .finish_non_exhaustive()
    }
}

impl PackedB {
    /// `view` of `source` packed for `backend`; `Ok(None)` where nothing is packed: the portable backend (which
    /// packs inside `matrixmultiply`), a backend this CPU cannot run, or a view outside `source` (the call then
    /// packs B itself, and its own bounds check reports the view). [`crate::Error::OutOfMemory`] when the
    /// panels do not fit.
    pub fn new(backend: Backend, source: &[f32], view: BView) -> Result<Option<PackedB>> {
        let Some((nr, floats)) = Self::panel_shape(backend, source, view) else {
            return Ok(None);
        };
        let mut panels: super::LinePack<f32> = super::zeroed_pack("packed weights", floats)?;
        let b = Strided::new(
            source.as_ptr().wrapping_add(view.offset),
            view.rs as isize,
            view.cs as isize,
        );
        // SAFETY: the CPU runs `backend` (checked above); every element of the view is inside `source` (checked
        // above); `panels` holds the panels `pack_whole_b` fills.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            match backend {
                Backend::Avx512 => super::driver::pack_whole_b::<super::avx512::Avx512>(
                    view.k,
                    view.n,
                    b,
                    &mut panels,
                ),
                Backend::Avx2 => {
                    super::driver::pack_whole_b::<super::avx2::Avx2>(view.k, view.n, b, &mut panels)
                }
                Backend::Portable => {}
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = b;
        Ok(Some(PackedB {
            backend,
            nr,
            view,
            panels: Panels::F32(panels),
        }))
    }

    /// The panel width for `backend` and the elements of the panels, when `view` of `source` can be packed for it.
    fn panel_shape(backend: Backend, source: &[f32], view: BView) -> Option<(usize, usize)> {
        let nr = match backend {
            Backend::Avx512 => 32,
            Backend::Avx2 => 16,
            Backend::Portable => return None,
        };
        if !Backend::available().contains(&backend) || !view.fits(source.len()) {
            return None;
        }
        let len = view
            .n
            .div_ceil(nr)
            .saturating_mul(nr)
            .saturating_mul(view.k);
        Some((nr, len))
    }

    /// [`PackedB::new`] with each element rounded to f16 (see the module documentation); `Ok(None)` also when an
    /// element is beyond f16's range (±65504), so that weight stays f32 rather than becoming an infinity.
    pub fn new_f16(backend: Backend, source: &[f32], view: BView) -> Result<Option<PackedB>> {
        let Some((nr, len)) = Self::panel_shape(backend, source, view) else {
            return Ok(None);
        };
        if !super::half::has_f16c() {
            return Ok(None);
        }
        let mut panels: super::LinePack<f16> = super::zeroed_pack("f16 packed weights", len)?;
        let k = view.k;
        for j in 0..view.n {
            let (panel, lane) = (j / nr, j % nr);
            for l in 0..k {
                let v = source[view.offset + l * view.rs + j * view.cs];
                let Some(h) = to_f16(v) else {
                    return Ok(None);
                };
                panels[panel * k * nr + l * nr + lane] = h;
            }
        }
        Ok(Some(PackedB {
            backend,
            nr,
            view,
            panels: Panels::F16(panels),
        }))
    }

    /// Whether the panels are f16.
    pub fn is_f16(&self) -> bool {
        matches!(self.panels, Panels::F16(_))
    }

    /// Column `j` of an f16 pack, widened into `out` (`k` values); `false` for an f32 pack (whose dense weight is
    /// kept beside it), or when `j` is not a column or `out` is not `k` long.
    pub fn column(&self, j: usize, out: &mut [f32]) -> bool {
        let Panels::F16(panels) = &self.panels else {
            return false;
        };
        if j >= self.view.n || out.len() != self.view.k {
            return false;
        }
        let (base, nr) = ((j / self.nr) * self.view.k * self.nr + j % self.nr, self.nr);
        for (l, o) in out.iter_mut().enumerate() {
            *o = panels[base + l * nr].to_f32();
        }
        true
    }

    /// What it was packed from.
    pub fn view(&self) -> BView {
        self.view
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Columns per panel: a product may start at any multiple of it.
    pub fn nr(&self) -> usize {
        self.nr
    }

    /// Bytes the panels take.
    pub fn bytes(&self) -> usize {
        match &self.panels {
            Panels::F32(p) => std::mem::size_of_val(&**p),
            Panels::F16(p) => std::mem::size_of_val(&**p),
        }
    }

    /// C ← α·A·B + β·C over B's columns `col0..col0 + n` (`dims` = (m, k, n)).
    ///
    /// # Safety
    /// A and C satisfy `super::sgemm`'s contract for `dims`; k is the packed depth, `col0` a multiple of
    /// [`PackedB::nr`] and `col0 + n` at most the packed width (all checked by assertions in debug builds).
    pub unsafe fn sgemm(
        &self,
        dims: (usize, usize, usize),
        col0: usize,
        alpha: f32,
        a: Strided<*const f32>,
        beta: f32,
        c: Strided<*mut f32>,
    ) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: forwarded; `best` runs on this CPU.
        unsafe {
            self.sgemm_on(super::GemvKernel::best(), dims, col0, alpha, a, beta, c)
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (dims, col0, alpha, a, beta, c);
    }

    /// [`PackedB::sgemm`] with a product of few rows on `gemv` (tests run each kernel).
    ///
    /// # Safety
    /// As [`PackedB::sgemm`]; `gemv` is one of [`super::GemvKernel::supported`].
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn sgemm_on(
        &self,
        gemv: super::GemvKernel,
        (m, k, n): (usize, usize, usize),
        col0: usize,
        alpha: f32,
        a: Strided<*const f32>,
        beta: f32,
        c: Strided<*mut f32>,
    ) {
        debug_assert!(k == self.view.k && col0.is_multiple_of(self.nr) && col0 + n <= self.view.n);
        let panels = match &self.panels {
            Panels::F32(p) => p.as_ptr().wrapping_add(col0 * self.view.k),
            Panels::F16(p) => {
                let halves = &p[(col0 * k).min(p.len())..];
                // SAFETY: forwarded contract.
                return unsafe { self.sgemm_f16(gemv, (m, k, n), halves, alpha, a, beta, c) };
            }
        };
        // SAFETY: `new` only builds packs for a backend this CPU runs; the panels from `col0` hold the product's
        // columns over the whole depth; A and C are the caller's; `gemv` runs here (the caller's contract).
        unsafe {
            if m <= super::GEMV_MAX_ROWS && k > 0 {
                // Few rows (a decoding step): stream each panel once instead of running the MR-row tile. Both
                // backends that pack run AVX2.
                return super::gemv::gemv_packed_on(
                    gemv,
                    (m, k, n),
                    self.nr,
                    alpha,
                    a,
                    super::gemv::Panels::F32(panels),
                    beta,
                    c,
                );
            }
            match self.backend {
                Backend::Avx512 => super::driver::sgemm_prepacked::<super::avx512::Avx512>(
                    (m, k, n),
                    alpha,
                    a,
                    super::driver::Prepacked::F32(panels),
                    beta,
                    c,
                ),
                Backend::Avx2 => super::driver::sgemm_prepacked::<super::avx2::Avx2>(
                    (m, k, n),
                    alpha,
                    a,
                    super::driver::Prepacked::F32(panels),
                    beta,
                    c,
                ),
                Backend::Portable => {}
            }
        }
    }

    /// [`PackedB::sgemm_on`] over f16 panels (`halves` from the product's first panel on). Few rows: `gemv`
    /// streams the panels, widening each load. Many rows: the driver widens each depth block of a column block once
    /// into this thread's scratch, where it would have packed a strided B.
    ///
    /// # Safety
    /// As [`PackedB::sgemm_on`].
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn sgemm_f16(
        &self,
        gemv: super::GemvKernel,
        (m, k, n): (usize, usize, usize),
        halves: &[f16],
        alpha: f32,
        a: Strided<*const f32>,
        beta: f32,
        c: Strided<*mut f32>,
    ) {
        if m <= super::GEMV_MAX_ROWS && k > 0 {
            let panels = super::gemv::Panels::F16(halves.as_ptr());
            // SAFETY: forwarded; f16 packs are only made where the CPU has F16C.
            return unsafe {
                super::gemv::gemv_packed_on(gemv, (m, k, n), self.nr, alpha, a, panels, beta, c)
            };
        }
        let b = super::driver::Prepacked::F16(halves.as_ptr());
        // SAFETY: forwarded; the halves hold the product's panels over the whole depth.
        unsafe {
            match self.backend {
                Backend::Avx512 => super::driver::sgemm_prepacked::<super::avx512::Avx512>(
                    (m, k, n),
                    alpha,
                    a,
                    b,
                    beta,
                    c,
                ),
                Backend::Avx2 => super::driver::sgemm_prepacked::<super::avx2::Avx2>(
                    (m, k, n),
                    alpha,
                    a,
                    b,
                    beta,
                    c,
                ),
                Backend::Portable => {}
            }
        }
    }
}
