//! Holding a fused plan to a [`Contract`] and to the `.fused()` promises of its graph. Every broken limit or
//! promise becomes a `syn::Error` on the user's tokens: the op that cost a kernel (with the planner's reason and
//! what to write instead), the value that made the arena too large, or the attribute itself when no line of
//! `forward` is to blame.

use proc_macro2::{Span, TokenStream, TokenTree};

use super::{format_bytes, Contract};
use crate::ir::{FusedPromise, Graph, NodeId};
use crate::plan::fusion::{class, Class};
use crate::plan::{Kernel, KernelKind, Plan, Refusal, WhyNot};

/// Every way `plan` (a fused plan of the model named `model`) breaks `contract` or a `.fused()` promise of its
/// graph, combined into one error; `None` when all hold.
pub fn check(plan: &Plan, model: &str, contract: &Contract) -> Option<syn::Error> {
    let mut errors: Vec<syn::Error> = Vec::new();
    let dims = bind_dims(&plan.graph, model, contract, &mut errors);
    if let Some(limit) = &contract.max_kernels {
        errors.extend(kernel_limit(plan, model, limit.value, &limit.tokens));
    }
    if let Some(limit) = &contract.max_arena {
        errors.extend(arena_limit(
            plan,
            model,
            contract,
            &dims,
            limit.value,
            &limit.tokens,
        ));
    }
    for promise in &plan.graph.promises {
        errors.extend(broken_promise(plan, promise));
    }
    dedup(&mut errors);
    let mut all = errors.into_iter();
    let mut first = all.next()?;
    for e in all {
        first.combine(e);
    }
    Some(first)
}

/// A sub-model inlined at several call sites repeats its ops (and promises) once per site; its line gets one
/// error, the first.
fn dedup(errors: &mut Vec<syn::Error>) {
    let mut seen: Vec<String> = Vec::new();
    errors.retain(|e| {
        let key = format!("{:?}", e.span());
        let fresh = !seen.contains(&key);
        seen.push(key);
        fresh
    });
}

/// The value of each dynamic dim of `g` at `at(..)`, `None` for a dim it does not give. Names that are not
/// dims of the model are errors.
fn bind_dims(
    g: &Graph,
    model: &str,
    contract: &Contract,
    errors: &mut Vec<syn::Error>,
) -> Vec<Option<usize>> {
    for d in &contract.at {
        if !g.dyn_dims.iter().any(|name| d.name == name) {
            let known = if g.dyn_dims.is_empty() {
                "it has none".to_string()
            } else {
                format!("they are {}", g.dyn_dims.join(", "))
            };
            errors.push(syn::Error::new_spanned(
                &d.name,
                format!("`{}` is not a dynamic dim of `{model}` ({known})", d.name),
            ));
        }
    }
    g.dyn_dims
        .iter()
        .map(|name| contract.size_of(name))
        .collect()
}

/// The spans of `at` as tokens that `new_spanned` underlines from the first to the last.
fn spanned(start: Span, end: Span) -> TokenStream {
    let mut open = proc_macro2::Punct::new('<', proc_macro2::Spacing::Alone);
    open.set_span(start);
    let mut close = proc_macro2::Punct::new('>', proc_macro2::Spacing::Alone);
    close.set_span(end);
    [TokenTree::Punct(open), TokenTree::Punct(close)]
        .into_iter()
        .collect()
}

fn op_name(g: &Graph, node: NodeId) -> String {
    g.node(node).op.name()
}

/// What to write instead of the code that made the planner refuse a fusion.
fn advice(why: &WhyNot) -> &'static str {
    match why {
        WhyNot::MultipleUses(_) => {
            "a value read by several ops is kept in memory; to fuse it, write the expression again at each use \
             (each reader then computes it in its own kernel) instead of reading one binding several times"
        }
        WhyNot::Broadcast => {
            "the value is smaller than the op that reads it and too costly (a transcendental, division or long \
             chain) to compute once per element of the larger shape; compute it at the reader's shape, or apply \
             it after the op that broadcasts it"
        }
        WhyNot::Recomputed => {
            "a cheap value broadcast into its reader is recomputed there only in elementwise kernels; apply the \
             broadcast after the matmul, reduction or concat has been computed, or keep the value in memory"
        }
        WhyNot::MatMulOperand => {
            "a matmul reads its operands from memory; apply this op to the matmul's result instead, where it runs \
             in the matmul's epilogue: `a.matmul(&b) * s` rather than `(a * s).matmul(&b)`"
        }
        WhyNot::TwoAnchors => {
            "a kernel holds at most one matmul or reduction; only elementwise ops fuse around one"
        }
        WhyNot::NotRowInput => {
            "a norm fuses only its row input as a prologue; its weight and bias must be parameters or values \
             already in memory"
        }
        WhyNot::ReadAtTwoShapes => {
            "a kernel reads each value at one shape; read this value at one shape in the expression (e.g. \
             broadcast it once, then reuse the broadcast value)"
        }
        WhyNot::Standalone => "an embedding gather or a state write runs as a kernel of its own",
        WhyNot::ConcatReader => {
            "a concat fuses only into elementwise ops; apply the elementwise ops to the concat first, then the \
             reduction or matmul to their result"
        }
        WhyNot::ConcatInput => {
            "a concat fuses only the elementwise chains of its inputs; a reduction or matmul input is read from \
             memory"
        }
        WhyNot::TwoConcats => {
            "a kernel reads through one concat; concatenate once (e.g. the values the concats combine) or accept \
             a kernel per concat"
        }
        WhyNot::DynamicConcat => {
            "a concat along a dynamic axis copies its inputs in a kernel of its own; concatenate along a static \
             axis to fuse it"
        }
        WhyNot::ConsumerKind | WhyNot::EagerPlan => "this op cannot share the reader's kernel",
    }
}

/// `max_kernels`: a kernel that holds no matmul, reduction, gather or concat exists only because a fusion was
/// refused (or a view had to be copied), so those are the lines to blame; with none, the attribute is.
fn kernel_limit(plan: &Plan, model: &str, max: usize, tokens: &TokenStream) -> Vec<syn::Error> {
    let count = plan.kernels.len();
    if count <= max {
        return Vec::new();
    }
    let g = &plan.graph;
    let head =
        format!("contract `{tokens}` broken: the fused plan of `{model}` has {count} kernels");
    let mut errors = Vec::new();
    for k in plan
        .kernels
        .iter()
        .filter(|k| matches!(k.kind, KernelKind::Elementwise | KernelKind::Piecewise(_)))
    {
        if k.nodes.is_empty() {
            errors.push(syn::Error::new(
                g.span(k.output),
                format!(
                    "{head}; this `{}` costs a copy kernel ({}): a reshape of a permuted or sliced view, or a \
                     model output that is a view, must be made contiguous\nhelp: where the layout allows, reshape \
                     before permuting or slicing (or return a computed value); else raise the limit",
                    op_name(g, k.output),
                    k.name
                ),
            ));
            continue;
        }
        if let Some(r) = plan.refusals.iter().find(|r| r.producer == k.output) {
            errors.push(refused_here(g, &head, k, r));
        }
    }
    if errors.is_empty() {
        errors.push(syn::Error::new_spanned(
            tokens,
            format!(
                "{head} ({}); each holds a matmul, a reduction, a gather or a concat, so no fusion can remove \
                 one: raise the limit or remove an op",
                kinds(&plan.kernels)
            ),
        ));
    }
    errors
}

fn refused_here(g: &Graph, head: &str, k: &Kernel, r: &Refusal) -> syn::Error {
    syn::Error::new(
        g.span(r.producer),
        format!(
            "{head}; this `{}` ends a kernel of its own ({}), not fused into the `{}` that reads it: {}\nhelp: {}",
            op_name(g, r.producer),
            k.name,
            op_name(g, r.consumer),
            r.why,
            advice(&r.why)
        ),
    )
}

/// `6 matmul, 4 row, 1 elementwise`, in order of first appearance.
fn kinds(kernels: &[Kernel]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for k in kernels {
        match counts.iter_mut().find(|(name, _)| *name == k.kind.name()) {
            Some((_, n)) => *n += 1,
            None => counts.push((k.kind.name(), 1)),
        }
    }
    counts
        .iter()
        .map(|(name, n)| format!("{n} {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `max_arena`: the arena at the contract's dims, blamed on the largest value in it.
fn arena_limit(
    plan: &Plan,
    model: &str,
    contract: &Contract,
    dims: &[Option<usize>],
    max: usize,
    tokens: &TokenStream,
) -> Vec<syn::Error> {
    let g = &plan.graph;
    let slots = &plan.memory.slots;
    let missing: Vec<&str> = slots
        .iter()
        .flat_map(|s| s.syms.iter())
        .filter(|&&s| dims[s as usize].is_none())
        .map(|&s| g.dyn_dims[s as usize].as_str())
        .fold(Vec::new(), |mut acc, name| {
            if !acc.contains(&name) {
                acc.push(name);
            }
            acc
        });
    if !missing.is_empty() {
        let example: Vec<String> = missing.iter().map(|n| format!("{n} = ..")).collect();
        return vec![syn::Error::new_spanned(
            tokens,
            format!(
                "the arena of `{model}` depends on {}: give the sizes to check it at with `at({})`",
                missing.join(", "),
                example.join(", ")
            ),
        )];
    }
    let values: Vec<usize> = dims.iter().map(|d| d.unwrap_or(1)).collect();
    let size = |bytes: &crate::ir::Dim| -> Option<usize> {
        bytes
            .syms
            .iter()
            .try_fold(bytes.coeff, |acc, &s| acc.checked_mul(values[s as usize]))
    };
    let mut end: Option<usize> = Some(0);
    for slot in slots {
        end = end.and_then(|e| {
            let start = e.checked_next_multiple_of(crate::plan::memory::ALIGN)?;
            start.checked_add(size(&slot.bytes())?)
        });
    }
    let at_text: Vec<String> = contract
        .at
        .iter()
        .map(|d| format!("{} = {}", d.name, d.size))
        .collect();
    let at_text = if at_text.is_empty() {
        String::new()
    } else {
        format!(" at {}", at_text.join(", "))
    };
    let arena = match end {
        Some(bytes) if bytes <= max => return Vec::new(),
        Some(bytes) => format_bytes(bytes),
        None => "more than this machine can address".to_string(),
    };
    let head = format!(
        "contract `{tokens}` broken: the fused plan of `{model}` needs an arena of {arena}{at_text}"
    );
    let value_bytes = |node: NodeId| {
        let ty = g.ty(node);
        size(&ty.shape.numel()).and_then(|n| n.checked_mul(ty.dtype.size()))
    };
    let largest = plan
        .memory
        .assignment
        .iter()
        .map(|&(node, slot)| (node, slot, value_bytes(node)))
        .max_by_key(|&(_, _, bytes)| bytes.unwrap_or(usize::MAX));
    let Some((node, slot, bytes)) = largest else {
        return vec![syn::Error::new_spanned(tokens, head)];
    };
    let sharing = plan
        .memory
        .assignment
        .iter()
        .filter(|&&(_, s)| s == slot)
        .count();
    vec![syn::Error::new(
        g.span(node),
        format!(
            "{head}; the largest value in it is this `{}`, {} {} = {} (in arena slot {} of {}, which {} \
             value(s) take in turn)\nhelp: a value lives from the kernel that writes it to the last that reads it; fuse it \
             into its reader or make it smaller, or raise the limit",
            op_name(g, node),
            g.ty(node).dtype.name(),
            g.fmt_shape(&g.ty(node).shape),
            bytes.map_or_else(|| "too large".to_string(), format_bytes),
            slot + 1,
            slots.len(),
            sharing
        ),
    )]
}

/// A `.fused()` whose ops landed in more than one kernel: blamed on the first refused fusion between two of its
/// ops, else on the promise itself.
fn broken_promise(plan: &Plan, promise: &FusedPromise) -> Option<syn::Error> {
    let g = &plan.graph;
    let inside = |n: NodeId| n >= promise.first && n < promise.end;
    let computing: Vec<NodeId> = (promise.first.0..promise.end.0)
        .map(NodeId)
        .filter(|&n| {
            !matches!(
                class(&g.node(n).op),
                Class::Leaf | Class::Constant | Class::View
            )
        })
        .collect();
    let mut kernels: Vec<&Kernel> = Vec::new();
    for &n in &computing {
        if let Some(k) = plan.kernels.iter().find(|k| k.computes(n)) {
            if !kernels.iter().any(|seen| seen.name == k.name) {
                kernels.push(k);
            }
        }
    }
    if kernels.len() <= 1 {
        return None;
    }
    let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
    let head = format!(
        "`.fused()` promises one kernel for this expression, but its ops run in {} kernels ({})",
        kernels.len(),
        names.join(", ")
    );
    match plan
        .refusals
        .iter()
        .find(|r| inside(r.producer) && inside(r.consumer))
    {
        Some(r) => Some(syn::Error::new(
            g.span(r.producer),
            format!(
                "{head}: this `{}` is not fused into the `{}` that reads it: {}\nhelp: {}",
                op_name(g, r.producer),
                op_name(g, r.consumer),
                r.why,
                advice(&r.why)
            ),
        )),
        None => Some(syn::Error::new_spanned(
            spanned(promise.start_span, promise.end_span),
            head,
        )),
    }
}
