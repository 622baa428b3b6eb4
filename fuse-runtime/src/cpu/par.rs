//! Drivers the generated kernels call: row-parallel loops run under the best SIMD level of this CPU, a batched
//! strided GEMM with a per-block epilogue, a gather and a strided copy.

use rayon::prelude::*;

use super::gemm::int8::QuantB;
use super::gemm::{sgemm, BView, Backend, Strided, WeightPack, GEMV_MAX_ROWS};
use super::math::{dispatch_avx2, dispatch_avx512, Arith, Plain};
use super::scratch;

/// Below this many elements a kernel runs on the calling thread: rayon's hand-off costs more than it saves.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// A kernel's per-row work: `run(first_row, rows)` fills whole output rows, its transcendentals' multiply-adds as
/// `A` computes them (`math::Arith`). Generated kernels implement it with an `#[inline(always)]` `run`, so each
/// `#[target_feature]` copy below gets its own vectorised instance of the body.
pub trait RowTask {
    fn run<A: Arith>(&self, first_row: usize, rows: &mut [f32]);
}

/// Adapts a closure (for drivers whose per-row work is a plain copy, not worth a vectorised copy of its own).
pub struct FnTask<F>(pub F);

impl<F: Fn(usize, &mut [f32])> RowTask for FnTask<F> {
    #[inline(always)]
    fn run<A: Arith>(&self, first_row: usize, rows: &mut [f32]) {
        (self.0)(first_row, rows)
    }
}

/// A [`RowTask`] run under the widest vector unit of this CPU ([`simd_run`]): the object-safe form the drivers
/// take. The drivers (rayon's job machinery, the GEMM loop nest, attention's blocks) are generic over nothing, so
/// they are compiled once, in this crate; a generated kernel adds only its own task body, once per instruction
/// set, through the blanket impl. Before, every kernel instantiated its driver and rayon's plumbing in the model's
/// crate: a third of the LLVM IR of the examples' models.
pub trait SimdTask: Sync {
    fn run_simd(&self, first_row: usize, rows: &mut [f32]);
}

impl<T: RowTask + Sync> SimdTask for T {
    fn run_simd(&self, first_row: usize, rows: &mut [f32]) {
        simd_run(self, first_row, rows)
    }
}

/// Runs `task` compiled for the widest vector unit this CPU has, with fused multiply-adds where that unit has them.
#[inline(always)]
pub fn simd_run<T: RowTask>(task: &T, first_row: usize, rows: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
        unsafe fn avx512<T: RowTask>(task: &T, first_row: usize, rows: &mut [f32]) {
            task.run::<crate::cpu::math::Fused>(first_row, rows)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<T: RowTask>(task: &T, first_row: usize, rows: &mut [f32]) {
            task.run::<crate::cpu::math::Fused>(first_row, rows)
        }
        if dispatch_avx512() {
            // SAFETY: the CPU supports every feature `avx512` is compiled for.
            return unsafe { avx512(task, first_row, rows) };
        }
        if dispatch_avx2() {
            // SAFETY: the CPU supports AVX2 and FMA.
            return unsafe { avx2(task, first_row, rows) };
        }
    }
    task.run::<Plain>(first_row, rows)
}

/// Runs `f` on a worker of the pool, the calling thread waiting for it once, when the caller is not a worker
/// itself. A model call runs its kernels this way: each parallel kernel then shares its work through the worker's
/// own queue, instead of the caller handing every kernel to the pool and sleeping until it is done — on a virtual
/// machine each such sleep costs a wake-up of tens of microseconds, and a decoding step has hundreds of kernels.
pub fn on_pool<F: FnOnce()>(f: F) {
    if rayon::current_thread_index().is_some() || rayon::current_num_threads() == 1 {
        return f();
    }
    /// `f` and what it borrows, moved to the worker: the caller blocks until the worker has run it, so nothing
    /// it borrows is touched by two threads at once.
    struct Job<F>(F);
    // SAFETY: see above; the job runs on exactly one thread while its caller waits.
    unsafe impl<F> Send for Job<F> {}
    let job = Job(f);
    rayon::scope(move |_| {
        let job = job;
        (job.0)()
    });
}

/// Splits `out` into chunks of whole rows of `row_len` and runs `task` on each, in parallel when the output is
/// large enough.
pub fn for_rows(out: &mut [f32], row_len: usize, task: &dyn SimdTask) {
    if row_len == 0 || out.is_empty() {
        return;
    }
    let rows = out.len() / row_len;
    let threads = rayon::current_num_threads().max(1);
    if out.len() < PARALLEL_MIN_ELEMENTS || threads == 1 {
        task.run_simd(0, out);
        return;
    }
    let rows_per_chunk = rows.div_ceil(threads * 4).max(1);
    out.par_chunks_mut(rows_per_chunk * row_len)
        .enumerate()
        .for_each(|(c, chunk)| task.run_simd(c * rows_per_chunk, chunk));
}

/// A batched matmul `out[b] = A[b] · B[b]` with broadcast batch dims (`batch`, and each operand's stride per batch
/// dim, 0 where it broadcasts); strides are in elements.
#[derive(Clone, Copy, Debug)]
pub struct GemmSpec<'s> {
    pub batch: &'s [usize],
    pub a_batch: &'s [usize],
    pub b_batch: &'s [usize],
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a_offset: usize,
    pub a_rs: usize,
    pub a_cs: usize,
    pub b_offset: usize,
    pub b_rs: usize,
    pub b_cs: usize,
}

/// Output rows per GEMM task: large enough to keep the packed B panel busy, small enough to share the work and
/// keep the block in cache for the epilogue.
const ROW_BLOCK: usize = 256;

/// `out` (contiguous `[batch.., m, n]`) = A · B, then `epilogue` per block.
/// The epilogue runs on each block of whole output rows right after the block is computed.
pub fn gemm(
    spec: &GemmSpec<'_>,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    epilogue: Option<&dyn SimdTask>,
) {
    gemm_with(spec, a, b, None, out, epilogue)
}

/// [`gemm`] reading B from `packed` (prepared once, at load) when it was made from this very view of B (an f32
/// pack also for the backend this CPU runs); otherwise B is packed per call, as by [`gemm`]. An int8 pack runs
/// the product in int8 (`super::gemm::int8`), A quantised per row as it is read.
pub fn gemm_with(
    spec: &GemmSpec<'_>,
    a: &[f32],
    b: &[f32],
    packed: Option<&WeightPack>,
    out: &mut [f32],
    epilogue: Option<&dyn SimdTask>,
) {
    let batches: usize = spec.batch.iter().product();
    let (m, n, k) = (spec.m, spec.n, spec.k);
    if m == 0 || n == 0 || batches == 0 {
        return;
    }
    let b_shared = spec
        .b_batch
        .iter()
        .zip(spec.batch)
        .all(|(&s, &d)| s == 0 || d == 1);
    let Rows {
        groups,
        rows_per_group,
        a_rs,
    } = Rows::of(spec, b_shared);
    let blocks_per_group = rows_per_group.div_ceil(ROW_BLOCK);
    // The pack stands for B only when it was made from the view this call reads, shared by every group.
    let packed = packed.filter(|p| {
        let runs_here = match p {
            WeightPack::F32(f) | WeightPack::F16(f) => f.backend() == Backend::best(),
            WeightPack::Int8(_) | WeightPack::Bf16(_) => true,
        };
        runs_here
            && b_shared
            && p.view()
                == BView {
                    offset: spec.b_offset,
                    rs: spec.b_rs,
                    cs: spec.b_cs,
                    k,
                    n,
                }
    });
    let threads = rayon::current_num_threads();
    let row_tasks = groups * blocks_per_group;
    // Too few row blocks to keep every thread busy (a small batch): the columns are split too, in blocks of at
    // least this many.
    let col_block_min = column_split(threads, (groups, rows_per_group), (k, n), packed.is_some());
    let split_columns = col_block_min.is_some();
    // Column blocks of an int8 product share one quantisation of A's rows (one matrix of them: a single group),
    // held in the calling thread's scratch until every block is done.
    let mut quantised_rows = None;
    let quantised = match packed {
        Some(WeightPack::Int8(q)) if split_columns && groups == 1 => {
            let mut buf = scratch::take(&scratch::INT8_ROWS, q.quantised_len(rows_per_group));
            let rows = q.quantise_rows(
                a,
                (spec.a_offset, a_rs, spec.a_cs),
                rows_per_group,
                &mut buf,
            );
            quantised_rows = Some(buf);
            rows
        }
        _ => None,
    };
    // C[rows × cols] at `dst` (row stride n) = A[group, row0.., :] · B[group, :, col0..].
    let product =
        |group: usize, row0: usize, rows: usize, col0: usize, cols: usize, dst: *mut f32| {
            let (mut a_off, mut b_off) = (spec.a_offset, spec.b_offset);
            if groups > 1 {
                let [a_batch, b_batch] =
                    batch_offsets(spec.batch, [spec.a_batch, spec.b_batch], group);
                a_off += a_batch;
                b_off += b_batch;
            }
            a_off += row0 * a_rs;
            b_off += col0 * spec.b_cs;
            let a_end = a_off + (rows - 1) * a_rs + (k.max(1) - 1) * spec.a_cs;
            let b_end = b_off + (k.max(1) - 1) * spec.b_rs + (cols - 1) * spec.b_cs;
            // A packed B is read from its pack alone (its dense weight may have been released).
            assert!(
                a_end < a.len().max(1) && (packed.is_some() || b_end < b.len().max(1)),
                "GEMM operand out of bounds: planner bug"
            );
            let c = Strided::new(dst, n as isize, 1);
            if let Some(packed) = packed {
                let a_ptr = Strided::new(
                    a.as_ptr().wrapping_add(a_off),
                    a_rs as isize,
                    spec.a_cs as isize,
                );
                // SAFETY: A's block is in bounds (checked above); the pack holds this B (checked when `packed`
                // was kept) and `col0` is a multiple of its panel width (the column split rounds to it); `dst`
                // as below.
                unsafe {
                    match packed {
                        WeightPack::F32(p) | WeightPack::F16(p) => {
                            p.sgemm((rows, k, cols), col0, 1.0, a_ptr, 0.0, c)
                        }
                        WeightPack::Int8(q) => match quantised {
                            // Group 0 is the only one (a condition of `quantised`).
                            Some(pre) => q.gemm_quantised(pre, row0, (rows, k, cols), col0, c),
                            None => q.gemm((rows, k, cols), col0, a_ptr, c),
                        },
                        WeightPack::Bf16(h) => h.gemm((rows, k, cols), col0, a_ptr, c),
                    }
                }
                return;
            }
            // SAFETY: the last elements read from A and B are in bounds (checked above); callers pass a `dst` with
            // `rows` rows of stride n and at least `cols` columns that no other task writes.
            unsafe {
                sgemm(
                    (rows, k, cols),
                    1.0,
                    Strided::new(a.as_ptr().add(a_off), a_rs as isize, spec.a_cs as isize),
                    Strided::new(
                        b.as_ptr().add(b_off),
                        spec.b_rs as isize,
                        spec.b_cs as isize,
                    ),
                    0.0,
                    c,
                );
            }
        };
    if let Some(col_block_min) = col_block_min {
        // The epilogue then runs as a second, row-parallel pass over the just-written (cache-warm) output.
        let splits = (2 * threads).div_ceil(row_tasks).min(n / col_block_min);
        // Column blocks start at whole panels of a packed B.
        let unit = packed.map_or(16, |p| p.nr().max(16));
        let cols_per = n.div_ceil(splits).div_ceil(unit) * unit;
        let col_blocks = n.div_ceil(cols_per);
        let dst = SharedOut(out.as_mut_ptr());
        (0..row_tasks * col_blocks).into_par_iter().for_each(|t| {
            let (rt, cb) = (t / col_blocks, t % col_blocks);
            let (group, row0) = (rt / blocks_per_group, (rt % blocks_per_group) * ROW_BLOCK);
            let rows = ROW_BLOCK.min(rows_per_group - row0);
            let col0 = cb * cols_per;
            let cols = cols_per.min(n - col0);
            let first = (group * rows_per_group + row0) * n + col0;
            // SAFETY: `first` and the `rows × cols` block it starts lie inside `out`; blocks are disjoint.
            product(group, row0, rows, col0, cols, unsafe { dst.at(first) });
        });
        if let Some(buf) = quantised_rows {
            scratch::put(&scratch::INT8_ROWS, buf);
        }
        if let Some(epi) = epilogue {
            for_rows(out, n, epi);
        }
        return;
    }
    let task = |t: usize, block: &mut [f32]| {
        let group = t / blocks_per_group;
        let row0 = (t % blocks_per_group) * ROW_BLOCK;
        product(group, row0, block.len() / n, 0, n, block.as_mut_ptr());
        if let Some(epi) = epilogue {
            epi.run_simd(group * rows_per_group + row0, block);
        }
    };
    // Blocks never straddle groups: split each group's rows, then blocks.
    let mut blocks: Vec<&mut [f32]> = Vec::with_capacity(row_tasks);
    for group in out.chunks_mut(rows_per_group * n) {
        blocks.extend(group.chunks_mut(ROW_BLOCK * n));
    }
    if batches * m * n * k < PARALLEL_MIN_FLOPS || threads == 1 {
        for (t, block) in blocks.into_iter().enumerate() {
            task(t, block);
        }
    } else {
        blocks
            .into_par_iter()
            .enumerate()
            .for_each(|(t, block)| task(t, block));
    }
}

/// How a product's rows are grouped: `groups` matrices of `rows_per_group` rows, A's rows `a_rs` apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rows {
    groups: usize,
    rows_per_group: usize,
    a_rs: usize,
}

impl Rows {
    /// When B is shared by every batch (`b_shared`) and A's batches are stacked rows, the batch folds into M: one
    /// tall GEMM. Otherwise each batch is a group of its own.
    ///
    /// A's rows are spaced as [`crate::strides::folded_row_stride`] says. Before it, each row of a batch-8
    /// decoding step (a head reading `[batch, 1, hidden]`, whose length-1 axis has stride 0) was a product of its
    /// own that streamed W5's 113 MB tied head once per row (18 of the step's 54 ms).
    fn of(spec: &GemmSpec<'_>, b_shared: bool) -> Rows {
        let batches: usize = spec.batch.iter().product();
        let m = spec.m;
        let a_rs = crate::strides::folded_row_stride(spec.batch, spec.a_batch, m, spec.a_rs);
        let mut expect = a_rs * m;
        let mut stacked = true;
        for (&d, &stride) in spec.batch.iter().zip(spec.a_batch).rev() {
            stacked &= d == 1 || stride == expect;
            expect *= d;
        }
        let (groups, rows_per_group) = if b_shared && stacked {
            (1, batches * m)
        } else {
            (batches, m)
        };
        Rows {
            groups,
            rows_per_group,
            a_rs,
        }
    }
}

/// Multiply-adds below which a product's row blocks run on the calling thread alone.
const PARALLEL_MIN_FLOPS: usize = 1 << 20;

/// Whether [`gemm_with`] splits the columns of a product of `groups` matrices of `rows` rows between `threads`
/// threads (too few row blocks to keep every thread busy: a small batch), and if so its narrowest column block.
fn column_split(
    threads: usize,
    (groups, rows): (usize, usize),
    (k, n): (usize, usize),
    packed: bool,
) -> Option<usize> {
    let flops = groups * rows * n * k;
    let row_tasks = groups * rows.div_ceil(ROW_BLOCK);
    // A product of a few rows over a packed B (a decoding step) streams B at memory speed, so what decides whether
    // to share it between threads is B's size, not its FLOPs: each thread then reads its own columns of B.
    let streams_b = packed && streams_b_in_parallel(groups * rows, k, n);
    let col_block_min = if streams_b {
        GEMV_COL_BLOCK_MIN
    } else {
        COL_BLOCK_MIN
    };
    let split = threads > 1
        && (flops >= PARALLEL_MIN_FLOPS || streams_b)
        && row_tasks < 2 * threads
        && n >= 2 * col_block_min;
    split.then_some(col_block_min)
}

/// Floats of the scratch ([`scratch::INT8_ROWS`]) in which [`gemm_with`] quantises A's rows once for all the
/// column blocks of an int8 product of `rows` rows over `pack`, when it splits that product's columns between
/// threads; `None` when it does not split them. The rows are counted over the product's batches, as `gemm_with`
/// folds them: at least what it quantises.
pub fn int8_rows_len(pack: &QuantB, rows: usize) -> Option<usize> {
    let (threads, view) = (rayon::current_num_threads(), pack.view());
    column_split(threads, (1, rows), (view.k, view.n), true).map(|_| pack.quantised_len(rows))
}

/// Whether a product of `rows` rows over a packed k×n B is bound by reading B, and B is large enough to share
/// between threads: then its columns are split whatever its FLOPs (a decoding step's projections have too few
/// FLOPs for the usual threshold, and ran on one thread at half the machine's read bandwidth).
fn streams_b_in_parallel(rows: usize, k: usize, n: usize) -> bool {
    rows <= GEMV_MAX_ROWS && k.saturating_mul(n) >= GEMV_PARALLEL_MIN_FLOATS
}

/// The offset of batch `index` (counted row-major over `batch`) in each of `N` operands, given each operand's
/// stride per batch dim (0 where it broadcasts).
pub(super) fn batch_offsets<const N: usize>(
    batch: &[usize],
    strides: [&[usize]; N],
    index: usize,
) -> [usize; N] {
    let mut offsets = [0; N];
    let mut rem = index;
    for i in (0..batch.len()).rev() {
        let idx = rem % batch[i];
        rem /= batch[i];
        for (offset, stride) in offsets.iter_mut().zip(strides) {
            *offset += idx * stride[i];
        }
    }
    offsets
}

/// Narrowest column block worth a GEMM task of its own.
const COL_BLOCK_MIN: usize = 128;

/// Narrowest column block of a few-row product over a packed B: two panels of the AVX2 tile, so a 576 × 192
/// projection still splits between threads.
const GEMV_COL_BLOCK_MIN: usize = 32;

/// Smallest packed B (floats: 256 KiB) whose few-row product is split between threads: below it one thread
/// streams B in less time than handing half of it to another takes.
const GEMV_PARALLEL_MIN_FLOATS: usize = 1 << 16;

/// An output pointer shared by parallel tasks, each writing its own disjoint elements: column-split GEMM blocks,
/// attention blocks whose rows are placed apart.
pub(super) struct SharedOut(pub(super) *mut f32);

// SAFETY: tasks write disjoint elements through it, and their caller does not touch the output otherwise until
// they finish.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// # Safety
    /// `offset` must be inside the output slice this pointer came from.
    pub(super) unsafe fn at(&self, offset: usize) -> *mut f32 {
        unsafe { self.0.add(offset) }
    }
}

/// An embedding: row `r` of `out` (rows of `dim`) is row `id(r)` of the `vocab × dim` table at `offset` of
/// `table`, or zeros for an id outside it (the executor refuses those before any kernel runs). When `packed` is a
/// reduced pack of the table's transpose (a tied output layer's B, or a bf16 model's table: the table's rows are its
/// columns), rows are read from it, as a product reads them; the table's f32 copy may then have been released.
#[allow(clippy::too_many_arguments)]
pub fn gather_rows(
    table: &[f32],
    offset: usize,
    packed: Option<&WeightPack>,
    vocab: usize,
    dim: usize,
    out: &mut [f32],
    id: &(dyn Fn(usize) -> i64 + Sync),
) {
    let transposed = BView {
        offset,
        rs: 1,
        cs: dim,
        k: dim,
        n: vocab,
    };
    let packed = packed.filter(|p| p.is_reduced() && p.view() == transposed);
    for_rows(
        out,
        dim,
        &FnTask(|row0: usize, chunk: &mut [f32]| {
            for (r, dst) in chunk.chunks_exact_mut(dim).enumerate() {
                let i = id(row0 + r);
                let row = usize::try_from(i).ok().filter(|&i| i < vocab);
                match (row, packed) {
                    (Some(i), Some(p)) if p.column(i, dst) => {}
                    (Some(i), _) => dst.copy_from_slice(&table[offset + i * dim..][..dim]),
                    (None, _) => dst.fill(0.0),
                }
            }
        }),
    );
}

/// Copies a strided `shape` region of `src` into a strided region of `dst` (concat and copy kernels).
///
/// Dims that are contiguous in both regions merge, so the innermost run is as long as the layouts allow and is
/// copied with `copy_from_slice`; the outer runs are split across threads like [`for_rows`] when the copy is
/// large and the destination region never writes one element twice (always so for the planner's copies).
///
/// # Panics
/// If either region reaches past its slice: the planner sized both, so that is a planner bug.
pub fn strided_copy(
    src: &[f32],
    src_offset: usize,
    src_strides: &[usize],
    shape: &[usize],
    dst: &mut [f32],
    dst_offset: usize,
    dst_strides: &[usize],
) {
    if shape.contains(&0) {
        return;
    }
    let dims = merged_dims(shape, src_strides, dst_strides);
    let src_end = src_offset + last_offset(&dims, |d| d.src);
    let dst_end = dst_offset + last_offset(&dims, |d| d.dst);
    assert!(
        src_end < src.len() && dst_end < dst.len(),
        "strided copy out of bounds: planner bug"
    );
    let copy = RunCopy::new(&dims, src_offset, dst_offset);
    let total = copy.runs * copy.run_len;
    let threads = rayon::current_num_threads().max(1);
    if total < PARALLEL_MIN_ELEMENTS || threads == 1 || copy.runs == 1 || !injective(&dims) {
        // SAFETY: every offset `copy` forms is at most `src_end`/`dst_end` (checked above); one thread writes.
        unsafe { copy.runs_in(0..copy.runs, src.as_ptr(), dst.as_mut_ptr()) };
        return;
    }
    let per_task = copy.runs.div_ceil(threads * 4).max(1);
    let out = SharedOut(dst.as_mut_ptr());
    let from = SharedIn(src.as_ptr());
    (0..copy.runs.div_ceil(per_task))
        .into_par_iter()
        .for_each(|t| {
            let runs = t * per_task..((t + 1) * per_task).min(copy.runs);
            // SAFETY: offsets are in bounds (checked above); the destination map is injective, so tasks, which
            // own disjoint ranges of runs, write disjoint elements; `src` and `dst` are distinct borrows.
            unsafe { copy.runs_in(runs, from.get(), out.at(0)) };
        });
}

/// One dim of a strided copy: its extent and its stride in the source and in the destination.
#[derive(Clone, Copy, Debug)]
struct CopyDim {
    len: usize,
    src: usize,
    dst: usize,
}

/// The dims of a copy with extent-1 dims dropped and neighbours merged where both layouts are contiguous across
/// them (outer stride = inner stride × inner extent), outermost first; at least one dim.
fn merged_dims(shape: &[usize], src_strides: &[usize], dst_strides: &[usize]) -> Vec<CopyDim> {
    let mut dims: Vec<CopyDim> = Vec::with_capacity(shape.len());
    for ((&len, &src), &dst) in shape.iter().zip(src_strides).zip(dst_strides) {
        if len == 1 {
            continue;
        }
        let next = CopyDim { len, src, dst };
        match dims.last_mut() {
            Some(outer) if outer.src == src * len && outer.dst == dst * len => {
                *outer = CopyDim {
                    len: outer.len * len,
                    src,
                    dst,
                };
            }
            _ => dims.push(next),
        }
    }
    if dims.is_empty() {
        dims.push(CopyDim {
            len: 1,
            src: 1,
            dst: 1,
        });
    }
    dims
}

/// The largest offset a region reaches from its start.
fn last_offset(dims: &[CopyDim], stride: impl Fn(&CopyDim) -> usize) -> usize {
    dims.iter().map(|d| (d.len - 1) * stride(d)).sum()
}

/// Whether no two indices of the region map to one destination offset: with the dims sorted by stride, each
/// stride must step past everything the smaller dims reach (a sufficient condition, true of any sub-box of a
/// row-major tensor).
fn injective(dims: &[CopyDim]) -> bool {
    let mut by_stride: Vec<&CopyDim> = dims.iter().filter(|d| d.len > 1).collect();
    by_stride.sort_by_key(|d| d.dst);
    let mut reach = 0usize;
    for d in by_stride {
        if d.dst <= reach {
            return false;
        }
        reach += (d.len - 1) * d.dst;
    }
    true
}

/// A copy as `runs` runs of `run_len` elements: the innermost dim, unit-stride on both sides (a slice copy) or
/// not (an element loop), under the outer dims.
struct RunCopy<'d> {
    outer: &'d [CopyDim],
    inner: CopyDim,
    runs: usize,
    run_len: usize,
    src_offset: usize,
    dst_offset: usize,
}

impl<'d> RunCopy<'d> {
    fn new(dims: &'d [CopyDim], src_offset: usize, dst_offset: usize) -> Self {
        let (inner, outer) = match dims.split_last() {
            Some((inner, outer)) => (*inner, outer),
            None => (
                CopyDim {
                    len: 1,
                    src: 1,
                    dst: 1,
                },
                dims,
            ),
        };
        RunCopy {
            outer,
            inner,
            runs: outer.iter().map(|d| d.len).product(),
            run_len: inner.len,
            src_offset,
            dst_offset,
        }
    }

    /// Copies the runs numbered `runs` (row-major over the outer dims).
    ///
    /// # Safety
    /// Every element of the region must lie inside the allocations behind `src` and `dst`, which must not overlap,
    /// and no other thread may access the destination elements of these runs meanwhile.
    unsafe fn runs_in(&self, runs: std::ops::Range<usize>, src: *const f32, dst: *mut f32) {
        let contiguous = self.inner.src == 1 && self.inner.dst == 1;
        for run in runs {
            let (mut s, mut d) = (self.src_offset, self.dst_offset);
            let mut rem = run;
            for dim in self.outer.iter().rev() {
                let i = rem % dim.len;
                rem /= dim.len;
                s += i * dim.src;
                d += i * dim.dst;
            }
            // SAFETY: the caller guarantees the run lies inside both allocations and is ours alone.
            unsafe {
                if contiguous {
                    let from = std::slice::from_raw_parts(src.add(s), self.run_len);
                    std::slice::from_raw_parts_mut(dst.add(d), self.run_len).copy_from_slice(from);
                } else {
                    for j in 0..self.run_len {
                        *dst.add(d + j * self.inner.dst) = *src.add(s + j * self.inner.src);
                    }
                }
            }
        }
    }
}

/// The source pointer shared by copy tasks, which only read through it.
struct SharedIn(*const f32);

// SAFETY: only read, and the slice it came from outlives the parallel loop.
unsafe impl Sync for SharedIn {}

impl SharedIn {
    fn get(&self) -> *const f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::gemm::int8::QuantB;
    use crate::cpu::gemm::PackedB;
    use crate::tensor::Tensor;

    /// Adds [`mark`] of each element's place in rows of `.0` columns: every element must get its epilogue once,
    /// told its own row.
    struct AddMark(usize);

    impl RowTask for AddMark {
        fn run<A: Arith>(&self, first_row: usize, rows: &mut [f32]) {
            for (i, v) in rows.iter_mut().enumerate() {
                *v += mark(first_row + i / self.0, i % self.0);
            }
        }
    }

    /// A small value that differs between neighbouring rows and between columns a panel apart.
    fn mark(row: usize, col: usize) -> f32 {
        ((row % 7) * 16 + col % 13) as f32
    }

    /// The element loop `strided_copy` replaced: the reference for the merged, threaded copy.
    fn copy_by_element(
        src: &[f32],
        src_offset: usize,
        src_strides: &[usize],
        shape: &[usize],
        dst: &mut [f32],
        dst_offset: usize,
        dst_strides: &[usize],
    ) {
        let total: usize = shape.iter().product();
        let mut index = vec![0usize; shape.len()];
        for _ in 0..total {
            let at = |strides: &[usize]| -> usize {
                index.iter().zip(strides).map(|(i, s)| i * s).sum()
            };
            dst[dst_offset + at(dst_strides)] = src[src_offset + at(src_strides)];
            for axis in (0..shape.len()).rev() {
                index[axis] += 1;
                if index[axis] < shape[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
    }

    /// Random shapes, read through a permuted, sliced or broadcast view of a larger tensor and written into a
    /// slab of a larger row-major output along a random axis (a concat's layout): the copy must equal the element
    /// loop, untouched elements included. Large cases take the threaded path.
    #[test]
    fn strided_copy_matches_the_element_loop_on_random_views() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for case in 0..300 {
            let rank = rng.gen_range(0..=5);
            let big = case % 10 == 0;
            let shape: Vec<usize> = (0..rank)
                .map(|_| {
                    if big {
                        rng.gen_range(1..=24)
                    } else {
                        rng.gen_range(1..=6)
                    }
                })
                .collect();
            // Source: a row-major tensor at least as large, permuted, with a random start and broadcast dims.
            let padded: Vec<usize> = shape.iter().map(|&n| n + rng.gen_range(0..=2)).collect();
            let mut perm: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                perm.swap(i, rng.gen_range(0..=i));
            }
            let mut stored = vec![0usize; rank];
            let mut stride = 1;
            for &axis in perm.iter().rev() {
                stored[axis] = stride;
                stride *= padded[axis];
            }
            let src_strides: Vec<usize> = stored
                .iter()
                .map(|&s| if rng.gen_bool(0.15) { 0 } else { s })
                .collect();
            let src_offset = rng.gen_range(0..=3);
            let src: Vec<f32> = (0..src_offset + stride).map(|i| i as f32).collect();
            // Destination: the shape widened along one axis, written at an offset along it.
            let (axis, extra) = if rank == 0 {
                (0, 0)
            } else {
                (rng.gen_range(0..rank), rng.gen_range(0..=5))
            };
            let mut full = shape.clone();
            if rank > 0 {
                full[axis] += extra;
            }
            let mut dst_strides = vec![0usize; rank];
            let mut size = 1;
            for i in (0..rank).rev() {
                dst_strides[i] = size;
                size *= full[i];
            }
            let dst_offset = if rank > 0 {
                rng.gen_range(0..=extra) * dst_strides[axis]
            } else {
                0
            };
            let mut want = vec![-1.0f32; size];
            let mut got = want.clone();
            copy_by_element(
                &src,
                src_offset,
                &src_strides,
                &shape,
                &mut want,
                dst_offset,
                &dst_strides,
            );
            strided_copy(
                &src,
                src_offset,
                &src_strides,
                &shape,
                &mut got,
                dst_offset,
                &dst_strides,
            );
            assert_eq!(
                got, want,
                "case {case}: shape {shape:?} src {src_strides:?} dst {dst_strides:?}"
            );
        }
    }

    /// A destination that writes one element twice is copied in order, on one thread, like the element loop.
    #[test]
    fn strided_copy_into_an_overlapping_destination_keeps_the_last_write() {
        let shape = [64, 1024];
        let src: Vec<f32> = (0..64 * 1024).map(|i| i as f32).collect();
        let mut want = vec![0.0f32; 1024];
        let mut got = want.clone();
        copy_by_element(&src, 0, &[1024, 1], &shape, &mut want, 0, &[0, 1]);
        strided_copy(&src, 0, &[1024, 1], &shape, &mut got, 0, &[0, 1]);
        assert_eq!(got, want);
    }

    /// A decoding step's projections (SmolLM-135M: hidden 576, KV width 192, FFN 1536, vocabulary 49152) share
    /// their weights between threads; a tall product or a small B does not take that path.
    #[test]
    fn decode_step_products_split_b_between_threads() {
        for (k, n) in [
            (576, 576),
            (576, 192),
            (576, 1536),
            (1536, 576),
            (576, 49152),
        ] {
            assert!(streams_b_in_parallel(1, k, n), "1x{k}x{n}");
            assert!(streams_b_in_parallel(GEMV_MAX_ROWS, k, n), "4x{k}x{n}");
        }
        assert!(!streams_b_in_parallel(GEMV_MAX_ROWS + 1, 576, 576));
        assert!(!streams_b_in_parallel(1, 64, 160));
    }

    /// A (m×k, contiguous) times `quant` as one int8 product on this thread.
    /// A random row-major k×n B and its int8 pack.
    fn random_int8_b(k: usize, n: usize, seed: u64) -> (Vec<f32>, QuantB) {
        let b = Tensor::randn(&[k, n], seed).to_f32_vec();
        let view = BView {
            offset: 0,
            rs: n,
            cs: 1,
            k,
            n,
        };
        let quant = QuantB::new(&b, view).unwrap().unwrap();
        (b, quant)
    }

    fn whole_int8_product(quant: &QuantB, a: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f32> {
        assert_eq!(a.len(), m * k);
        let mut whole = vec![f32::NAN; m * n];
        // SAFETY: A is m×k (checked), `whole` m×n; the pack's k×n is the caller's.
        unsafe {
            quant.gemm(
                (m, k, n),
                0,
                Strided::new(a.as_ptr(), k as isize, 1),
                Strided::new(whole.as_mut_ptr(), n as isize, 1),
            )
        };
        whole
    }

    /// An int8 product whose column blocks share one quantisation of A, where A is a transposed view (its rows
    /// gathered before they are quantised): the same numbers as one whole int8 product of the contiguous rows.
    #[test]
    fn int8_column_blocks_of_a_transposed_a_match_the_whole_product() {
        // Enough elements that the rows are quantised on both threads, in chunks of 36 and 35 rows.
        let (m, k, n) = (71, 1000, 512);
        let at = Tensor::randn(&[k, m], 3).to_f32_vec();
        let a: Vec<f32> = (0..m * k).map(|x| at[(x % k) * m + x / k]).collect();
        let (b, quant) = random_int8_b(k, n, 4);
        let whole = whole_int8_product(&quant, &a, (m, k, n));
        let spec = GemmSpec {
            batch: &[],
            a_batch: &[],
            b_batch: &[],
            m,
            k,
            n,
            a_offset: 0,
            a_rs: 1,
            a_cs: m,
            b_offset: 0,
            b_rs: n,
            b_cs: 1,
        };
        let mut out = vec![f32::NAN; m * n];
        let quant = Some(WeightPack::Int8(quant));
        gemm_with(&spec, &at, &b, quant.as_ref(), &mut out, None);
        assert_eq!(out, whole);
        // Rows that are not all inside A are refused rather than read.
        let Some(WeightPack::Int8(q)) = &quant else {
            unreachable!()
        };
        let mut buf = vec![0.0; q.quantised_len(m)];
        assert!(q.quantise_rows(&at, (1, 1, m), m, &mut buf).is_none());
        assert!(q.quantise_rows(&at, (0, 1, m), m, &mut buf[1..]).is_none());
    }

    /// A buffer of `int8_rows_len` floats is the one an int8 product whose columns are split between two threads
    /// quantises its rows into: the product takes it and puts it back, and allocates nothing.
    #[test]
    fn reserved_int8_rows_are_what_a_split_product_quantises_into() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            // Few rows and many columns, so the columns are split; 3 batches of 16 rows fold into 48.
            let (batches, m, k, n) = (3, 16, 640, 1024);
            let a = Tensor::randn(&[batches * m * k], 5).to_f32_vec();
            let (b, quant) = random_int8_b(k, n, 6);
            let rows = batches * m;
            let whole = whole_int8_product(&quant, &a, (rows, k, n));
            let len = int8_rows_len(&quant, rows).expect("the columns are split");
            scratch::reserve(&[(&scratch::INT8_ROWS, len)]);
            let held = || scratch::INT8_ROWS.with(|c| (c.borrow().as_ptr(), c.borrow().len()));
            let reserved = held();
            assert!(reserved.1 >= quant.quantised_len(rows), "{reserved:?}");
            let spec = GemmSpec {
                batch: &[batches],
                a_batch: &[m * k],
                b_batch: &[0],
                m,
                k,
                n,
                a_offset: 0,
                a_rs: k,
                a_cs: 1,
                b_offset: 0,
                b_rs: n,
                b_cs: 1,
            };
            let mut out = vec![f32::NAN; rows * n];
            gemm_with(
                &spec,
                &a,
                &b,
                Some(&WeightPack::Int8(quant)),
                &mut out,
                None,
            );
            assert_eq!(out, whole);
            assert_eq!(held(), reserved);
        });
    }

    /// Row blocks only (large M), and rows × column blocks (small M, wide N): both against a plain f64 product.
    /// The few-row cases over a packed B (a decoding step) split B's columns by its size, down to two panels a
    /// thread (576 × 192), or stay on one thread below the threshold (2 × 100 × 333).
    #[test]
    fn gemm_with_epilogue_matches_naive_on_both_split_paths() {
        let cases = [
            (600, 64, 48),
            (4, 256, 1024),
            (3, 300, 700),
            (1, 576, 192),
            (1, 1537, 577),
            (2, 333, 100),
            (4, 640, 200),
            // Two row blocks, each split into column blocks (an int8 product's second reads its rows from 256 on).
            (300, 200, 512),
            // A quantised on both threads before its column blocks run.
            (64, 1100, 256),
        ];
        for (m, k, n) in cases {
            let a = Tensor::randn(&[m, k], 1).to_f32_vec();
            let b = Tensor::randn(&[k, n], 2).to_f32_vec();
            let spec = GemmSpec {
                batch: &[],
                a_batch: &[],
                b_batch: &[],
                m,
                k,
                n,
                a_offset: 0,
                a_rs: k,
                a_cs: 1,
                b_offset: 0,
                b_rs: n,
                b_cs: 1,
            };
            let check = |out: &[f32]| {
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k)
                            .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                            .sum::<f64>()
                            + f64::from(mark(i, j));
                        let got = f64::from(out[i * n + j]);
                        assert!(
                            (got - want).abs() <= 1e-3 * (1.0 + want.abs()),
                            "{m}x{k}x{n} at ({i}, {j}): {got} vs {want}"
                        );
                    }
                }
            };
            let mut out = vec![f32::NAN; m * n];
            gemm(&spec, &a, &b, &mut out, Some(&AddMark(n)));
            check(&out);
            // B packed once, as a model packs its weights at load: the same product on both split paths.
            let view = BView {
                offset: 0,
                rs: n,
                cs: 1,
                k,
                n,
            };
            let packed = PackedB::new(Backend::best(), &b, view)
                .unwrap()
                .map(WeightPack::F32);
            let mut out = vec![f32::NAN; m * n];
            gemm_with(&spec, &a, &b, packed.as_ref(), &mut out, Some(&AddMark(n)));
            check(&out);
            // A pack of another view of B (here: one column narrower) is not used.
            let other = BView { n: n - 1, ..view };
            let stale = PackedB::new(Backend::best(), &b, other)
                .unwrap()
                .map(WeightPack::F32);
            let mut out = vec![f32::NAN; m * n];
            gemm_with(&spec, &a, &b, stale.as_ref(), &mut out, Some(&AddMark(n)));
            check(&out);
            let stale = QuantB::new(&b, other).unwrap().map(WeightPack::Int8);
            let mut out = vec![f32::NAN; m * n];
            gemm_with(&spec, &a, &b, stale.as_ref(), &mut out, Some(&AddMark(n)));
            check(&out);
            // An int8 pack: every block and column split computes what one whole int8 product does, plus the
            // epilogue.
            let quant = QuantB::new(&b, view).unwrap().unwrap();
            let whole = whole_int8_product(&quant, &a, (m, k, n));
            let mut out = vec![f32::NAN; m * n];
            let quant = Some(WeightPack::Int8(quant));
            gemm_with(&spec, &a, &b, quant.as_ref(), &mut out, Some(&AddMark(n)));
            for (i, (&got, &want)) in out.iter().zip(&whole).enumerate() {
                assert_eq!(got, want + mark(i / n, i % n), "int8 {m}x{k}x{n} at {i}");
            }
        }
    }

    /// A spec of `batch` batches of A (batch strides `a_batch`, row stride `a_rs`) times one shared B.
    fn batched_spec<'s>(batch: &'s [usize], a_batch: &'s [usize], a_rs: usize) -> GemmSpec<'s> {
        GemmSpec {
            batch,
            a_batch,
            b_batch: &[0, 0][..batch.len()],
            m: 1,
            k: 576,
            n: 96,
            a_offset: 0,
            a_rs,
            a_cs: 1,
            b_offset: 0,
            b_rs: 96,
            b_cs: 1,
        }
    }

    /// One row per batch with the row axis's stride 0 (a static length-1 axis, as a decoder's head reads
    /// `[batch, 1, hidden]`) still folds the batch into rows, which the innermost longer batch axis spaces;
    /// batches that are not stacked stay groups.
    #[test]
    fn one_row_per_batch_folds_into_rows_whatever_the_row_stride() {
        let rows = |spec: &GemmSpec<'_>| Rows::of(spec, true);
        let folded = |count, a_rs| Rows {
            groups: 1,
            rows_per_group: count,
            a_rs,
        };
        assert_eq!(rows(&batched_spec(&[8], &[576], 0)), folded(8, 576));
        assert_eq!(
            rows(&batched_spec(&[4, 2], &[1152, 576], 0)),
            folded(8, 576)
        );
        // A length-1 batch axis is skipped whatever its stride.
        assert_eq!(rows(&batched_spec(&[4, 1], &[576, 0], 0)), folded(4, 576));
        // Batch axes in the other order are not stacked rows.
        let swapped = batched_spec(&[4, 2], &[576, 2304], 0);
        assert_eq!(rows(&swapped).groups, 8);
        // Nor is any batch whose B is not shared.
        assert_eq!(Rows::of(&batched_spec(&[8], &[576], 0), false).groups, 8);
    }

    /// The folded product reads each batch's row where it is: against f64 per row, with B packed as at load and
    /// in int8, so a product that read row 0 for every batch (the stride 0) would fail.
    #[test]
    fn one_row_per_batch_with_a_zero_row_stride_matches_per_row_products() {
        let (batches, k, n) = (8, 576, 96);
        let batch = [batches];
        // Rows 700 floats apart, so the batch stride is not the row length.
        let a = Tensor::randn(&[batches * 700], 5).to_f32_vec();
        let b = Tensor::randn(&[k, n], 6).to_f32_vec();
        let spec = GemmSpec {
            k,
            n,
            ..batched_spec(&batch, &[700], 0)
        };
        let view = BView {
            offset: 0,
            rs: n,
            cs: 1,
            k,
            n,
        };
        let packs = [
            PackedB::new(Backend::best(), &b, view)
                .unwrap()
                .map(WeightPack::F32),
            QuantB::new(&b, view).unwrap().map(WeightPack::Int8),
        ];
        // Errors relative to the terms' root sum of squares, the scale rounding errors add up to: int8 rounds
        // each term by about 1 %.
        for (pack, tolerance) in packs.iter().zip([1e-5, 5e-2]) {
            let mut out = vec![f32::NAN; batches * n];
            gemm_with(&spec, &a, &b, pack.as_ref(), &mut out, None);
            for r in 0..batches {
                for j in 0..n {
                    let terms = (0..k).map(|p| f64::from(a[r * 700 + p]) * f64::from(b[p * n + j]));
                    let want: f64 = terms.clone().sum();
                    let scale = terms.map(|t| t * t).sum::<f64>().sqrt();
                    let got = f64::from(out[r * n + j]);
                    assert!(
                        (got - want).abs() <= tolerance * scale,
                        "row {r}, column {j}: {got} vs {want} (scale {scale})"
                    );
                }
            }
        }
    }
}
