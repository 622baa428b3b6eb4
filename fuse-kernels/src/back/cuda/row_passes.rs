//! The passes of a row kernel over its row: the register-cached or multi-pass loops, the statistics of each
//! anchor (max and sum for softmax, mean and variance for layer norm, ...), and the write with the epilogue.

use std::fmt::{self, Write};

use super::expr::{self, Section};
use super::row::RowConfig;
use super::Ctx;
use crate::ir::{NodeId, Op, ReduceOp};

/// What the anchor-specific code needs to emit loops over the row.
pub struct Body<'a> {
    pub cx: &'a Ctx<'a>,
    pub cfg: RowConfig,
    pub x: NodeId,
    pub anchor: NodeId,
    pub prologue: &'a [NodeId],
    pub epilogue: &'a [NodeId],
    /// Element offset of read `i` at row position `j`.
    pub offset: &'a dyn Fn(usize) -> String,
    /// Output element offset at row position `j` (row ops that keep the row's shape).
    pub out_at: String,
    /// The row length when it is static: a row the threads cover exactly needs no bounds checks.
    pub static_len: Option<usize>,
}

impl Body<'_> {
    fn sum(&self, v: &str) -> String {
        if self.cfg.threads == 32 {
            format!("fuse_warp_sum({v})")
        } else {
            format!("fuse_block_sum({v}, smem)")
        }
    }

    /// The inclusive scan of `v` over the row's threads, the chunk's total into `total`.
    fn scan(&self, v: &str, total: &str) -> String {
        if self.cfg.threads == 32 {
            format!("fuse_warp_scan({v}, &{total})")
        } else {
            format!("fuse_block_scan({v}, &{total}, smem)")
        }
    }

    fn max(&self, v: &str) -> String {
        if self.cfg.threads == 32 {
            format!("fuse_warp_max({v})")
        } else {
            format!("fuse_block_max({v}, smem)")
        }
    }

    /// `const float xv = <row input at j>;`, computing the prologue.
    fn row_value(&self, w: &mut String, ind: &str) -> fmt::Result {
        let none = |_: NodeId| None;
        let section = Section {
            tag: "p",
            offset: self.offset,
            known: &none,
        };
        let v = expr::emit_nodes(w, ind, self.cx, self.prologue, self.x, &section)?;
        writeln!(w, "{ind}const float xv = {v};")
    }

    /// A loop over this thread's row elements with `xv` (and `j` where `uses_j`) in scope.
    fn for_each(
        &self,
        w: &mut String,
        ind: &str,
        cached: bool,
        uses_j: bool,
        body: &dyn Fn(&mut String, &str) -> fmt::Result,
    ) -> fmt::Result {
        let t = self.cfg.threads;
        if cached {
            // A static row that the threads cover exactly needs no bounds check.
            let full = self
                .static_len
                .is_some_and(|l| l.is_multiple_of(t as usize));
            writeln!(w, "#pragma unroll")?;
            writeln!(w, "{ind}for (int t = 0; t < {}; ++t) {{", self.cfg.items)?;
            if !full || uses_j {
                writeln!(w, "{ind}    const long long j = tid + (long long)t * {t};")?;
            }
            let inner = if full {
                format!("{ind}    ")
            } else {
                writeln!(w, "{ind}    if (j < len) {{")?;
                format!("{ind}        ")
            };
            writeln!(w, "{inner}const float xv = x[t];")?;
            body(w, &inner)?;
            if !full {
                writeln!(w, "{ind}    }}")?;
            }
        } else {
            writeln!(w, "{ind}for (long long j = tid; j < len; j += {t}) {{")?;
            self.row_value(w, &format!("{ind}    "))?;
            body(w, &format!("{ind}    "))?;
        }
        writeln!(w, "{ind}}}")
    }

    /// Applies the epilogue to the anchor's value `y` and stores it at `at`.
    fn store(&self, w: &mut String, ind: &str, y: &str, at: &str) -> fmt::Result {
        let anchor = self.anchor;
        let known = |id: NodeId| (id == anchor).then(|| y.to_string());
        let section = Section {
            tag: "e",
            offset: self.offset,
            known: &known,
        };
        let v = expr::emit_nodes(w, ind, self.cx, self.epilogue, self.cx.k.output, &section)?;
        writeln!(w, "{ind}out[{at}] = {}({v});", self.cx.store())
    }

    pub fn anchor_code(&self, w: &mut String, ind: &str, cached: bool) -> fmt::Result {
        if cached {
            writeln!(w, "{ind}float x[{}];", self.cfg.items)?;
            writeln!(w, "#pragma unroll")?;
            writeln!(w, "{ind}for (int t = 0; t < {}; ++t) {{", self.cfg.items)?;
            writeln!(
                w,
                "{ind}    const long long j = tid + (long long)t * {};",
                self.cfg.threads
            )?;
            writeln!(w, "{ind}    x[t] = 0.0f;")?;
            writeln!(w, "{ind}    if (j < len) {{")?;
            self.row_value(w, &format!("{ind}        "))?;
            writeln!(w, "{ind}        x[t] = xv;")?;
            writeln!(w, "{ind}    }}")?;
            writeln!(w, "{ind}}}")?;
        }
        let g = self.cx.g;
        let pass = |w: &mut String, init: &str, step: &str, post: String| -> fmt::Result {
            writeln!(w, "{ind}{init}")?;
            self.for_each(w, ind, cached, false, &|w, i| writeln!(w, "{i}{step}"))?;
            writeln!(w, "{ind}{post}")
        };
        let write_rows = |w: &mut String, value: &str| -> fmt::Result {
            let out_at = self.out_at.clone();
            self.for_each(w, ind, cached, true, &|w, i| {
                writeln!(w, "{i}const float y = {value};")?;
                self.store(w, i, "y", &out_at)
            })
        };
        match &g.node(self.anchor).op {
            Op::Softmax { .. } => {
                pass(
                    w,
                    "float mx = FUSE_NEG_INF;",
                    "mx = fmaxf(mx, xv);",
                    // A row of -∞ alone (every position masked) is shifted by 0 and becomes zeros, as on the
                    // CPU and in the attention kernels, rather than exp(-∞ + ∞) = NaN.
                    format!(
                        "mx = {}; if (mx == FUSE_NEG_INF) mx = 0.0f;",
                        self.max("mx")
                    ),
                )?;
                pass(
                    w,
                    "float sm = 0.0f;",
                    "sm += expf(xv - mx);",
                    format!(
                        "const float total = {}; const float inv = total == 0.0f ? 0.0f : 1.0f / total;",
                        self.sum("sm")
                    ),
                )?;
                write_rows(w, "expf(xv - mx) * inv")
            }
            Op::LayerNorm {
                gamma, beta, eps, ..
            } => {
                pass(
                    w,
                    "float mean = 0.0f;",
                    "mean += xv;",
                    format!("mean = {} / (float)len;", self.sum("mean")),
                )?;
                let post = format!(
                    "const float rstd = rsqrtf({} / (float)len + {});",
                    self.sum("var"),
                    expr::float_lit(*eps)
                );
                pass(
                    w,
                    "float var = 0.0f;",
                    "var += (xv - mean) * (xv - mean);",
                    post,
                )?;
                write_rows(
                    w,
                    &format!(
                        "(xv - mean) * rstd * {} + {}",
                        self.vector(*gamma),
                        self.vector(*beta)
                    ),
                )
            }
            Op::RmsNorm { gamma, eps, .. } => {
                let post = format!(
                    "const float rstd = rsqrtf({} / (float)len + {});",
                    self.sum("ss"),
                    expr::float_lit(*eps)
                );
                pass(w, "float ss = 0.0f;", "ss += xv * xv;", post)?;
                write_rows(w, &format!("xv * rstd * {}", self.vector(*gamma)))
            }
            Op::Cumsum { .. } => self.cumsum(w, ind, cached),
            Op::Reduce { op, .. } => {
                let (init, step, post) = match op {
                    ReduceOp::Sum => (
                        "float red = 0.0f;",
                        "red += xv;",
                        format!("red = {};", self.sum("red")),
                    ),
                    ReduceOp::Mean => (
                        "float red = 0.0f;",
                        "red += xv;",
                        format!("red = {} / (float)len;", self.sum("red")),
                    ),
                    ReduceOp::Max => (
                        "float red = FUSE_NEG_INF;",
                        "red = fuse_max(red, xv);",
                        format!("red = {};", self.max("red")),
                    ),
                };
                pass(w, init, step, post)?;
                writeln!(w, "{ind}if (tid == 0) {{")?;
                self.store(w, &format!("{ind}    "), "red", "row")?;
                writeln!(w, "{ind}}}")
            }
            other => writeln!(w, "#error \"fuse: {} is not a row op\"", other.name()),
        }
    }

    /// The running sum along the row, a chunk of one element per thread at a time (every thread of the row takes
    /// part in each chunk's scan, past the row's end with a 0): the chunk's scan plus the totals of the chunks
    /// before it, summed in f32 as PyTorch's CUDA `cumsum` does.
    fn cumsum(&self, w: &mut String, ind: &str, cached: bool) -> fmt::Result {
        let t = self.cfg.threads;
        writeln!(w, "{ind}float carry = 0.0f;")?;
        let inner = format!("{ind}    ");
        if cached {
            writeln!(w, "#pragma unroll")?;
            writeln!(w, "{ind}for (int t = 0; t < {}; ++t) {{", self.cfg.items)?;
            writeln!(w, "{inner}const long long j = tid + (long long)t * {t};")?;
            // The cache holds 0 past the row's end.
            writeln!(w, "{inner}const float v = x[t];")?;
        } else {
            writeln!(w, "{ind}for (long long j0 = 0; j0 < len; j0 += {t}) {{")?;
            writeln!(w, "{inner}const long long j = j0 + tid;")?;
            writeln!(w, "{inner}float v = 0.0f;")?;
            writeln!(w, "{inner}if (j < len) {{")?;
            self.row_value(w, &format!("{inner}    "))?;
            writeln!(w, "{inner}    v = xv;")?;
            writeln!(w, "{inner}}}")?;
        }
        writeln!(w, "{inner}float chunk;")?;
        writeln!(
            w,
            "{inner}const float y = carry + {};",
            self.scan("v", "chunk")
        )?;
        writeln!(w, "{inner}carry += chunk;")?;
        writeln!(w, "{inner}if (j < len) {{")?;
        self.store(w, &format!("{inner}    "), "y", &self.out_at)?;
        writeln!(w, "{inner}}}")?;
        writeln!(w, "{ind}}}")
    }

    /// gamma / beta at row position `j`.
    fn vector(&self, node: NodeId) -> String {
        match self.cx.k.reads.iter().position(|r| r.node == node) {
            Some(i) => format!("fuse_to_f32(in{i}[{}])", (self.offset)(i)),
            None => format!("/* {node} unavailable */ 0.0f"),
        }
    }
}
