//! Elementwise kernels (and copies, and the in-place epilogue after a GEMM): a grid-stride loop over the output,
//! each read's offset from its access. When every read is contiguous, a row broadcast or a scalar, a float4 path
//! moves 16 bytes per load and store; it is taken at run time only if the pointers are 16-byte aligned and the
//! row length is a multiple of 4, so a user tensor at an odd offset still gets the scalar loop.

use std::collections::BTreeSet;
use std::fmt::{self, Write};

use super::expr::{self, Section};
use super::{signature, Ctx, StorageType};
use crate::ir::{DType, Dim, NodeId};
use crate::plan::Access;

pub const THREADS: u32 = 256;

/// How a read's offset follows the output's linear index `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    /// `offset + i`: same layout as the output.
    Linear,
    /// `offset`: one value broadcast everywhere.
    Scalar,
    /// `offset + i % inner`: a vector along the last axis broadcast over the others (a bias).
    Row,
    /// Anything else: unravel `i` and apply the strides.
    General,
}

fn pattern(a: &Access) -> Pattern {
    let rank = a.shape.len();
    let moving: Vec<usize> = (0..rank).filter(|&k| expr::moves(a, k)).collect();
    if moving.is_empty() {
        Pattern::Scalar
    } else if a.is_contiguous() {
        Pattern::Linear
    } else if moving == [rank - 1] && a.strides[rank - 1].as_static() == Some(1) {
        Pattern::Row
    } else {
        Pattern::General
    }
}

/// Writes the kernel `symbol`. With `inplace`, that node's value is the GEMM result already in `out`.
pub fn write(w: &mut String, cx: &Ctx, symbol: &str, inplace: Option<NodeId>) -> fmt::Result {
    let (g, k) = (cx.g, cx.k);
    let shape: &[Dim] = &g.ty(k.output).shape.0;
    let nodes: Vec<NodeId> = k
        .nodes
        .iter()
        .copied()
        .filter(|&n| Some(n) != inplace)
        .collect();
    let reads = expr::used_reads(cx, &nodes, k.output, &|id| Some(id) == inplace);
    let patterns: Vec<Pattern> = k.reads.iter().map(|r| pattern(&r.access)).collect();
    let inner = shape.last().cloned();

    signature(w, cx, symbol, THREADS)?;
    writeln!(
        w,
        "    const long long n = {};",
        expr::dim(&g.ty(k.output).shape.numel())
    )?;
    writeln!(
        w,
        "    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;"
    )?;
    writeln!(
        w,
        "    const long long step = (long long)gridDim.x * blockDim.x;"
    )?;
    if let Some(inner) = &inner {
        let vectorizable = cx.storage == StorageType::F32
            && inner.as_static().is_none_or(|n| n.is_multiple_of(4))
            && reads.iter().all(|&i| {
                g.ty(k.reads[i].access.base).dtype != DType::I64 && patterns[i] != Pattern::General
            });
        if vectorizable {
            write_vector_loop(w, cx, &nodes, &reads, &patterns, inner, inplace)?;
        }
    }

    // The scalar loop: unravel `i` only as far as the general reads need.
    let needed: BTreeSet<usize> = reads
        .iter()
        .filter(|&&i| patterns[i] == Pattern::General)
        .flat_map(|&i| (0..shape.len()).filter(move |&d| expr::moves(&k.reads[i].access, d)))
        .collect();
    writeln!(w, "    for (long long i = first; i < n; i += step) {{")?;
    let idx = expr::unravel(w, "        ", "i", shape, &needed, "x")?;
    let inner_expr = inner
        .as_ref()
        .map(expr::dim)
        .unwrap_or_else(|| "1LL".into());
    let offset = |i: usize| -> String {
        let a = &k.reads[i].access;
        let base = expr::sum(&a.offset);
        match patterns[i] {
            Pattern::Linear => expr::plus(&base, "i"),
            Pattern::Scalar => base,
            Pattern::Row => expr::plus(&base, &format!("i % {inner_expr}")),
            Pattern::General => expr::offset(a, &idx),
        }
    };
    if inplace.is_some() {
        writeln!(w, "        const float acc = fuse_to_f32(out[i]);")?;
    }
    let known = |id: NodeId| (Some(id) == inplace).then(|| "acc".to_string());
    let section = Section {
        tag: "",
        offset: &offset,
        known: &known,
    };
    let result = expr::emit_nodes(w, "        ", cx, &nodes, k.output, &section)?;
    writeln!(w, "        out[i] = {}({result});", cx.store())?;
    writeln!(w, "    }}")?;
    writeln!(w, "}}")
}

/// The float4 path: four consecutive outputs per iteration; returns from the kernel when taken.
fn write_vector_loop(
    w: &mut String,
    cx: &Ctx,
    nodes: &[NodeId],
    reads: &[usize],
    patterns: &[Pattern],
    inner: &Dim,
    inplace: Option<NodeId>,
) -> fmt::Result {
    let k = cx.k;
    let inner_expr = expr::dim(inner);
    let mut checks: Vec<String> = Vec::new();
    if inner.as_static().is_none() {
        checks.push(format!("{inner_expr} % 4 == 0"));
    }
    checks.push("fuse_aligned16(out)".into());
    for &i in reads {
        if patterns[i] != Pattern::Scalar {
            checks.push(format!(
                "fuse_aligned16(&in{i}[{}])",
                expr::sum(&k.reads[i].access.offset)
            ));
        }
    }
    writeln!(w, "    if ({}) {{", checks.join(" && "))?;
    writeln!(
        w,
        "        for (long long i4 = first; i4 < n / 4; i4 += step) {{"
    )?;
    writeln!(w, "            const long long i = i4 * 4;")?;
    let ind = "            ";
    let mut vector_reads = Vec::new();
    for &i in reads {
        let base = expr::sum(&k.reads[i].access.offset);
        let at = match patterns[i] {
            Pattern::Linear => expr::plus(&base, "i"),
            Pattern::Row => expr::plus(&base, &format!("i % {inner_expr}")),
            Pattern::Scalar | Pattern::General => continue,
        };
        writeln!(
            w,
            "{ind}const float4 q{i} = *reinterpret_cast<const float4*>(&in{i}[{at}]);"
        )?;
        writeln!(
            w,
            "{ind}const float a{i}[4] = {{q{i}.x, q{i}.y, q{i}.z, q{i}.w}};"
        )?;
        vector_reads.push(i);
    }
    if inplace.is_some() {
        writeln!(
            w,
            "{ind}const float4 qo = *reinterpret_cast<const float4*>(&out[i]);"
        )?;
        writeln!(w, "{ind}const float ao[4] = {{qo.x, qo.y, qo.z, qo.w}};")?;
    }
    writeln!(w, "{ind}float o[4];")?;
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "{ind}for (int lane = 0; lane < 4; ++lane) {{")?;
    let known = |id: NodeId| -> Option<String> {
        if Some(id) == inplace {
            return Some("ao[lane]".into());
        }
        let i = k.reads.iter().position(|r| r.node == id)?;
        vector_reads.contains(&i).then(|| format!("a{i}[lane]"))
    };
    let offset = |i: usize| expr::sum(&k.reads[i].access.offset);
    let section = Section {
        tag: "",
        offset: &offset,
        known: &known,
    };
    let result = expr::emit_nodes(w, "                ", cx, nodes, k.output, &section)?;
    writeln!(w, "                o[lane] = {result};")?;
    writeln!(w, "{ind}}}")?;
    writeln!(
        w,
        "{ind}*reinterpret_cast<float4*>(&out[i]) = make_float4(o[0], o[1], o[2], o[3]);"
    )?;
    writeln!(w, "        }}")?;
    writeln!(w, "        return;")?;
    writeln!(w, "    }}")
}
