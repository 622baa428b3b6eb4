//! Piecewise kernels on the GPU: elementwise ops that read through a concat, the concat's input chains computed
//! in the same grid-stride loop (see [`crate::plan::concat`]). Each thread unravels its element, picks the input
//! whose span along the concat axis holds it, computes that input's branch at the index shifted back by the
//! span's start, then the rest of the chain at its own index. The branch taken differs between neighbouring
//! threads only at a span's edge (along the innermost axis) or not at all (along an outer one).

use std::collections::BTreeSet;
use std::fmt::{self, Write};

use super::expr::{self, Section};
use super::gather::loop_head;
use super::Ctx;
use crate::ir::NodeId;
use crate::plan::{concat, Piecewise};

pub fn write(w: &mut String, cx: &Ctx, symbol: &str, pw: &Piecewise) -> fmt::Result {
    loop_head(w, cx, symbol)?;
    let value = emit_piecewise(w, "        ", cx, pw, cx.k.output, "i", "")?;
    writeln!(w, "        out[i] = {}({value});", cx.store())?;
    writeln!(w, "    }}")?;
    writeln!(w, "}}")
}

/// Emits the value of element `linear` of `root`, computed by the elementwise `nodes` of the kernel (through one
/// concat, or none); returns its expression. `tag` prefixes the locals, so that another section can share the
/// scope.
pub fn emit_value(
    w: &mut String,
    ind: &str,
    cx: &Ctx,
    nodes: &[NodeId],
    (root, linear): (NodeId, &str),
    tag: &str,
) -> Result<String, fmt::Error> {
    if let Some(pw) = concat::recognise(cx.g, nodes) {
        return emit_piecewise(w, ind, cx, &pw, root, linear, tag);
    }
    let shape = &cx.g.ty(root).shape.0;
    let needed: BTreeSet<usize> = (0..shape.len()).filter(|&d| !shape[d].is_one()).collect();
    let idx = expr::unravel(w, ind, linear, shape, &needed, &format!("{tag}x"))?;
    let offset = |i: usize| expr::offset(&cx.k.reads[i].access, &idx);
    let known = |_: NodeId| None;
    let section = Section {
        tag,
        offset: &offset,
        known: &known,
    };
    expr::emit_nodes(w, ind, cx, nodes, root, &section)
}

fn emit_piecewise(
    w: &mut String,
    ind: &str,
    cx: &Ctx,
    pw: &Piecewise,
    root: NodeId,
    linear: &str,
    tag: &str,
) -> Result<String, fmt::Error> {
    let (g, k) = (cx.g, cx.k);
    let shape = &g.ty(root).shape.0;
    let needed: BTreeSet<usize> = (0..shape.len())
        .filter(|&d| d == pw.axis || !shape[d].is_one())
        .collect();
    let idx = expr::unravel(w, ind, linear, shape, &needed, &format!("{tag}x"))?;
    let along = idx
        .get(pw.axis)
        .cloned()
        .flatten()
        .unwrap_or_else(|| "0LL".into());
    let vc = format!("{tag}vc");
    writeln!(w, "{ind}float {vc} = 0.0f;")?;
    let pieces: Vec<_> = pw.pieces.iter().filter(|p| p.len > 0).collect();
    for (q, p) in pieces.iter().enumerate() {
        let els = if q == 0 { "" } else { "else " };
        let cond = if q + 1 == pieces.len() {
            String::new()
        } else {
            format!("if ({along} < {}LL) ", p.start + p.len)
        };
        writeln!(w, "{ind}{els}{cond}{{")?;
        let mut at = idx.clone();
        if let Some(slot) = at.get_mut(pw.axis) {
            *slot = Some(format!("({along} - {}LL)", p.start));
        }
        let offset = |i: usize| expr::offset(&k.reads[i].access, &at);
        let known = |_: NodeId| None;
        let piece_tag = format!("{tag}p{q}_");
        let section = Section {
            tag: &piece_tag,
            offset: &offset,
            known: &known,
        };
        let inner = format!("{ind}    ");
        let value = expr::emit_nodes(w, &inner, cx, &p.branch, p.input, &section)?;
        writeln!(w, "{inner}{vc} = {value};")?;
        writeln!(w, "{ind}}}")?;
    }
    let offset = |i: usize| expr::offset(&k.reads[i].access, &idx);
    let known = |id: NodeId| (id == pw.concat).then(|| vc.clone());
    let section = Section {
        tag,
        offset: &offset,
        known: &known,
    };
    expr::emit_nodes(w, ind, cx, &pw.rest, root, &section)
}
