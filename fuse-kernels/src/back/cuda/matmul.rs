//! MatMul kernels. The GEMM belongs to cuBLASLt on the host side; what is generated here is
//! - the epilogue kernel (same symbol as the plan kernel): the elementwise ops after the matmul, rewriting the
//!   GEMM result in `out` in place — skipped by the runtime when [`GemmEpilogue`] names a cuBLASLt built-in;
//! - `<symbol>_gemm`: a shared-memory tiled SGEMM with the epilogue applied on store, batched over `gridDim.z`
//!   with each operand's own batch strides, so a plan runs (slower) without cuBLAS.

use std::collections::BTreeSet;
use std::fmt::{self, Write};

use super::expr::{self, Section};
use super::{elementwise, signature, Ctx};
use crate::ir::{BinaryOp, DType, Dim, Graph, NodeId, Op, UnaryOp};
use crate::plan::{Access, Kernel, KernelKind};

/// Output tile of one fallback GEMM block (rows × cols), its depth step and its thread count.
pub const TILE_M: u32 = 64;
pub const TILE_N: u32 = 64;
const TILE_K: u32 = 16;
pub const GEMM_THREADS: u32 = 256;

/// Whether cuBLASLt can apply a matmul kernel's whole epilogue itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GemmEpilogue {
    /// A plain matmul: nothing after the GEMM.
    None,
    /// `+ bias[N]`, bias the given read (cuBLASLt `EPILOGUE_BIAS`).
    Bias { read: usize },
    /// `relu(· + bias[N])` (`EPILOGUE_RELU_BIAS`).
    BiasRelu { read: usize },
    /// `gelu_tanh(· + bias[N])` (`EPILOGUE_GELU_BIAS`, which is the tanh approximation; the erf GELU is not
    /// the same function, so it gets the generated epilogue kernel).
    BiasGeluTanh { read: usize },
    /// Anything else: launch the generated epilogue kernel after the GEMM.
    Kernel,
}

impl GemmEpilogue {
    /// A stable short name (manifest files, reports).
    pub fn tag(&self) -> &'static str {
        match self {
            GemmEpilogue::None => "none",
            GemmEpilogue::Bias { .. } => "bias",
            GemmEpilogue::BiasRelu { .. } => "bias_relu",
            GemmEpilogue::BiasGeluTanh { .. } => "bias_gelu_tanh",
            GemmEpilogue::Kernel => "kernel",
        }
    }
}

/// The GEMM of a matmul kernel: `out[batch.., m, n] = Σ_k A[batch.., m, k] · B[batch.., k, n]`, A and B being
/// reads of the kernel (their accesses give every stride, including per-batch-dim strides, which may be 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GemmDesc {
    pub a: usize,
    pub b: usize,
    pub m: Dim,
    pub n: Dim,
    pub k: Dim,
    /// The output's batch dims, outermost first (empty for a plain 2-D product).
    pub batch: Vec<Dim>,
    /// The batch folds into `m`: A's batch strides nest its rows (`[Πbatch·m, k]` with A's row stride) and B
    /// is shared by every batch, so one GEMM of `Πbatch·m` rows computes the whole batch (the usual
    /// `x.matmul(&w.t())` of a linear layer).
    pub fold_batch: bool,
    pub epilogue: GemmEpilogue,
}

impl GemmDesc {
    /// Rows and batch count of the GEMM as launched: folded when possible.
    pub fn launch_shape(&self) -> (Dim, Dim) {
        let batch = self.batch.iter().fold(Dim::fixed(1), |acc, d| acc.mul(d));
        if self.fold_batch {
            (batch.mul(&self.m), Dim::fixed(1))
        } else {
            (self.m.clone(), batch)
        }
    }
}

/// The GEMM of kernel `k`, if it is a matmul kernel.
pub fn describe(g: &Graph, k: &Kernel) -> Option<GemmDesc> {
    let KernelKind::MatMul { anchor } = k.kind else {
        return None;
    };
    let Op::MatMul(a, b) = g.node(anchor).op else {
        return None;
    };
    let read = |n: NodeId| k.reads.iter().position(|r| r.node == n);
    let (ra, rb) = (read(a)?, read(b)?);
    let out = &g.ty(anchor).shape.0;
    let rank = out.len();
    let a_shape = &k.reads[ra].access.shape;
    // Both operands are read at the output's batch dims plus their own two matrix dims.
    if a_shape.len() != rank || k.reads[rb].access.shape.len() != rank {
        return None;
    }
    let m = out.get(rank.checked_sub(2)?)?.clone();
    let batch = out[..rank - 2].to_vec();
    Some(GemmDesc {
        a: ra,
        b: rb,
        fold_batch: rows_fold(&k.reads[ra].access, &batch, &m)
            && (0..batch.len()).all(|p| !expr::moves(&k.reads[rb].access, p)),
        m,
        n: out.get(rank - 1)?.clone(),
        k: a_shape.last()?.clone(),
        batch,
        epilogue: epilogue(g, k, anchor),
    })
}

/// Whether an access over `[batch.., m, ..]` reads its batch as more rows: each batch stride is the row
/// stride ([`folded_row_stride`]) times the rows nested inside it. See [`GemmDesc::fold_batch`].
fn rows_fold(a: &Access, batch: &[Dim], m: &Dim) -> bool {
    let q = batch.len();
    let mut expected = folded_row_stride(a, batch, m).mul(m);
    for p in (0..q).rev() {
        if batch[p].is_one() {
            continue;
        }
        if a.strides[p] != expected {
            return false;
        }
        expected = expected.mul(&batch[p]);
    }
    true
}

/// The stride between the rows of an access over `[batch.., m, ..]` once its batch folds into them: the row
/// axis's own, or with one row per batch (a static length-1 axis, which a plan gives stride 0: a decoder's head
/// reading `[batch, 1, hidden]`) the innermost batch axis's that is not 1. The runtime's cuBLAS plan picks the
/// same one at the call's dims.
pub fn folded_row_stride(a: &Access, batch: &[Dim], m: &Dim) -> Dim {
    let q = batch.len();
    let innermost = (0..q).rev().find(|&p| !batch[p].is_one());
    match innermost {
        Some(p) if m.is_one() => a.strides[p].clone(),
        _ => a.strides[q].clone(),
    }
}

fn epilogue(g: &Graph, k: &Kernel, mm: NodeId) -> GemmEpilogue {
    let after: Vec<NodeId> = k.nodes.iter().copied().filter(|&n| n != mm).collect();
    let Some(&add) = after.first() else {
        return GemmEpilogue::None;
    };
    let Op::Binary(BinaryOp::Add, x, y) = g.node(add).op else {
        return GemmEpilogue::Kernel;
    };
    let other = if x == mm {
        y
    } else if y == mm {
        x
    } else {
        return GemmEpilogue::Kernel;
    };
    let Some(read) = k.reads.iter().position(|r| r.node == other) else {
        return GemmEpilogue::Kernel;
    };
    let a = &k.reads[read].access;
    let rank = a.strides.len();
    // A bias is a contiguous [N] vector broadcast over every row (and batch).
    let is_bias = rank >= 1
        && a.offset.iter().all(|t| t.coeff == 0)
        && a.strides[rank - 1].as_static() == Some(1)
        && (0..rank - 1).all(|d| !expr::moves(a, d))
        && g.ty(a.base).dtype == DType::F32;
    if !is_bias {
        return GemmEpilogue::Kernel;
    }
    match after.as_slice() {
        [_] => GemmEpilogue::Bias { read },
        [_, act] => match g.node(*act).op {
            Op::Unary(UnaryOp::Relu, v) if v == add => GemmEpilogue::BiasRelu { read },
            Op::Unary(UnaryOp::GeluTanh, v) if v == add => GemmEpilogue::BiasGeluTanh { read },
            _ => GemmEpilogue::Kernel,
        },
        _ => GemmEpilogue::Kernel,
    }
}

/// The epilogue kernel (when there is an epilogue) and the fallback GEMM.
pub fn write(w: &mut String, cx: &Ctx, symbol: &str, mm: NodeId) -> fmt::Result {
    let Some(desc) = describe(cx.g, cx.k) else {
        return writeln!(w, "#error \"fuse: not a matmul kernel\"");
    };
    if desc.epilogue != GemmEpilogue::None {
        writeln!(
            w,
            "// The epilogue: runs in place on the GEMM result in `out`."
        )?;
        elementwise::write(w, cx, symbol, Some(mm))?;
        writeln!(w)?;
    }
    writeln!(
        w,
        "// The fallback GEMM with its epilogue, for when cuBLAS is unavailable."
    )?;
    write_gemm(w, cx, &format!("{symbol}_gemm"), mm, &desc)
}

fn write_gemm(w: &mut String, cx: &Ctx, symbol: &str, mm: NodeId, d: &GemmDesc) -> fmt::Result {
    let k = cx.k;
    let (a, b) = (&k.reads[d.a].access, &k.reads[d.b].access);
    let q = d.batch.len();
    let (tm, tn, tk, threads) = (TILE_M, TILE_N, TILE_K, GEMM_THREADS);
    let per = tm * tk / threads; // tile elements each thread loads per operand
    signature(w, cx, symbol, threads)?;
    let (rows, batches) = d.launch_shape();
    if d.fold_batch && q > 0 {
        writeln!(
            w,
            "    // The batch folds into the rows: one GEMM of Πbatch·m rows."
        )?;
    }
    // One padding column keeps the transposed stores into shared memory free of bank conflicts.
    writeln!(w, "    __shared__ float as[{tk}][{}];", tm + 1)?;
    writeln!(w, "    __shared__ float bs[{tk}][{}];", tn + 1)?;
    writeln!(
        w,
        "    const long long M = {}, N = {}, K = {};",
        expr::dim(&rows),
        expr::dim(&d.n),
        expr::dim(&d.k)
    )?;
    writeln!(w, "    const long long batches = {};", expr::dim(&batches))?;
    writeln!(
        w,
        "    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;"
    )?;
    writeln!(
        w,
        "    const long long m0 = (long long)blockIdx.x * {tm}, n0 = (long long)blockIdx.y * {tn};"
    )?;
    writeln!(
        w,
        "    for (long long z = blockIdx.z; z < batches; z += gridDim.z) {{"
    )?;
    let ind = "        ";
    // Dims below `upto` that some operand among `reads` moves along.
    let moving = |upto: usize, reads: &[usize]| -> BTreeSet<usize> {
        let mut set = BTreeSet::new();
        for &i in reads {
            let a = &k.reads[i].access;
            set.extend((0..upto).filter(|&p| p < a.shape.len() && expr::moves(a, p)));
        }
        set
    };
    let all: Vec<usize> = (0..k.reads.len()).collect();
    let needed = if d.fold_batch {
        BTreeSet::new()
    } else {
        moving(q, &all)
    };
    let zidx = expr::unravel(w, ind, "z", &d.batch, &needed, "z")?;
    let batch_only = |rank: usize| -> Vec<Option<String>> {
        let mut idx = zidx.clone();
        idx.resize(rank, None);
        idx
    };
    writeln!(
        w,
        "{ind}const long long a0 = {};",
        expr::offset(a, &batch_only(a.shape.len()))
    )?;
    writeln!(
        w,
        "{ind}const long long b0 = {};",
        expr::offset(b, &batch_only(b.shape.len()))
    )?;
    writeln!(w, "{ind}float acc[4][4] = {{}};")?;
    writeln!(w, "{ind}for (long long k0 = 0; k0 < K; k0 += {tk}) {{")?;
    // Load order follows the operand's unit stride, so global reads coalesce whether or not it is transposed.
    let unit = |s: &Dim| s.as_static() == Some(1);
    let sam = if d.fold_batch {
        folded_row_stride(a, &d.batch, &d.m)
    } else {
        a.strides[q].clone()
    };
    let (sam, sak) = (&sam, &a.strides[q + 1]);
    let (a_m, a_k) = if unit(sak) {
        ("e / 16", "e % 16")
    } else {
        ("e % 64", "e / 64")
    };
    let (sbk, sbn) = (&b.strides[q], &b.strides[q + 1]);
    let (b_k, b_n) = if unit(sbk) && !unit(sbn) {
        ("e % 16", "e / 16")
    } else {
        ("e / 64", "e % 64")
    };
    let i2 = format!("{ind}    ");
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "{i2}for (int l = 0; l < {per}; ++l) {{")?;
    writeln!(w, "{i2}    const int e = tid + l * {threads};")?;
    writeln!(
        w,
        "{i2}    const long long gm = m0 + {a_m}, gk = k0 + {a_k};"
    )?;
    let a_at = format!(
        "a0 + {} + {}",
        expr::scaled("gm", sam),
        expr::scaled("gk", sak)
    );
    writeln!(
        w,
        "{i2}    as[{a_k}][{a_m}] = (gm < M && gk < K) ? fuse_to_f32(in{}[{a_at}]) : 0.0f;",
        d.a
    )?;
    writeln!(
        w,
        "{i2}    const long long hk = k0 + {b_k}, hn = n0 + {b_n};"
    )?;
    let b_at = format!(
        "b0 + {} + {}",
        expr::scaled("hk", sbk),
        expr::scaled("hn", sbn)
    );
    writeln!(
        w,
        "{i2}    bs[{b_k}][{b_n}] = (hk < K && hn < N) ? fuse_to_f32(in{}[{b_at}]) : 0.0f;",
        d.b
    )?;
    writeln!(w, "{i2}}}")?;
    writeln!(w, "{i2}__syncthreads();")?;
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "{i2}for (int kk = 0; kk < {tk}; ++kk) {{")?;
    writeln!(w, "{i2}    float ra[4], rb[4];")?;
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "{i2}    for (int r = 0; r < 4; ++r) {{ ra[r] = as[kk][ty + 16 * r]; rb[r] = bs[kk][tx + 16 * r]; }}")?;
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "{i2}    for (int r = 0; r < 4; ++r)")?;
    writeln!(w, "#pragma unroll")?;
    writeln!(
        w,
        "{i2}        for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(ra[r], rb[c], acc[r][c]);"
    )?;
    writeln!(w, "{i2}}}")?;
    writeln!(w, "{i2}__syncthreads();")?;
    writeln!(w, "{ind}}}")?;

    // Store, applying the epilogue; epilogue operands are read at the output's [batch.., m, n].
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "{ind}for (int r = 0; r < 4; ++r) {{")?;
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "{ind}    for (int c = 0; c < 4; ++c) {{")?;
    let i3 = format!("{ind}        ");
    writeln!(
        w,
        "{i3}const long long m = m0 + ty + 16 * r, n = n0 + tx + 16 * c;"
    )?;
    writeln!(w, "{i3}if (m < M && n < N) {{")?;
    let i4 = format!("{i3}    ");
    writeln!(w, "{i4}const float acc_v = acc[r][c];")?;
    let known = |id: NodeId| (id == mm).then(|| "acc_v".to_string());
    let epilogue: Vec<NodeId> = k.nodes.iter().copied().filter(|&n| n != mm).collect();
    // With folded rows, an operand that folds the same way is read at the row number directly; any other
    // needs the batch indices back from it.
    let fold = d.fold_batch && q > 0;
    // Strictly: an operand read at the row number is stepped by its own row stride, so one whose rows fold only
    // through another axis's stride (one row per batch) takes the batch indices instead.
    let folds = |i: usize| {
        let access = &k.reads[i].access;
        fold && rows_fold(access, &d.batch, &d.m)
            && folded_row_stride(access, &d.batch, &d.m) == access.strides[q]
    };
    let mut out_idx = if fold {
        let mut dims = d.batch.clone();
        dims.push(d.m.clone());
        let unfolded: Vec<usize> = expr::used_reads(cx, &epilogue, k.output, &|id| id == mm)
            .into_iter()
            .filter(|&i| !folds(i))
            .collect();
        expr::unravel(w, &i4, "m", &dims, &moving(q + 1, &unfolded), "y")?
    } else {
        let mut idx = zidx.clone();
        idx.push(Some("m".into()));
        idx
    };
    out_idx.push(Some("n".into()));
    let mut row_idx: Vec<Option<String>> = vec![None; q];
    row_idx.push(Some("m".into()));
    row_idx.push(Some("n".into()));
    let offset = |i: usize| {
        let idx = if folds(i) { &row_idx } else { &out_idx };
        expr::offset(&k.reads[i].access, idx)
    };
    let section = Section {
        tag: "e",
        offset: &offset,
        known: &known,
    };
    let v = expr::emit_nodes(w, &i4, cx, &epilogue, k.output, &section)?;
    writeln!(w, "{i4}out[(z * M + m) * N + n] = {}({v});", cx.store())?;
    writeln!(w, "{i3}}}")?;
    writeln!(w, "{ind}    }}")?;
    writeln!(w, "{ind}}}")?;
    writeln!(w, "    }}")?;
    writeln!(w, "}}")
}
