//! Pieces shared by the CPU kernel writers: symbolic dims as Rust expressions, strided reads, and the scalar
//! expression of each elementwise op.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};

use crate::ir::{BinaryOp, DType, Dim, Graph, NodeId, Op, UnaryOp};
use crate::plan::{Kernel, Plan, Read};

/// `coeff × d[s0] × d[s1]` as a `usize` expression over the run-time dim values `d`.
pub fn dim_expr(dim: &Dim) -> TokenStream {
    let coeff = dim.coeff;
    if dim.syms.is_empty() {
        return quote!(#coeff);
    }
    let syms = dim.syms.iter().map(|&s| {
        let s = s as usize;
        quote!(d[#s])
    });
    if coeff == 1 {
        quote!((1usize #(* #syms)*))
    } else {
        quote!((#coeff #(* #syms)*))
    }
}

pub fn sum_expr(terms: &[Dim]) -> TokenStream {
    if terms.is_empty() {
        return quote!(0usize);
    }
    let terms = terms.iter().map(dim_expr);
    quote!((0usize #(+ #terms)*))
}

/// The prefixes [`var`] names values with. The names carry node ids, which differ between otherwise identical
/// kernels (the layers of a transformer); `super::dedup` renumbers exactly these before comparing kernels.
pub const VAR_PREFIXES: [&str; 8] = ["buf", "off", "st", "base", "x", "v", "a", "side"];

/// The local variable `prefix` of node `id`; `prefix` is one of [`VAR_PREFIXES`].
pub fn var(prefix: &str, id: NodeId) -> Ident {
    debug_assert!(
        VAR_PREFIXES.contains(&prefix),
        "unregistered prefix {prefix}"
    );
    format_ident!("{}{}", prefix, id.0)
}

/// The index in a launch's buffer table (`bufs`) of the kernel's output: always first.
pub const OUT_SLOT: usize = 0;

/// The index in a launch's buffer table (`bufs`) of the buffer behind `read`: after the output, in read order.
pub fn read_slot(kernel: &Kernel, read: &Read) -> usize {
    let position = kernel.reads.iter().position(|r| r.node == read.node);
    1 + position.unwrap_or(kernel.reads.len())
}

/// How a read is indexed along the innermost iterated dim.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Inner {
    /// Stride 1: a sub-slice indexed by `j`.
    Contiguous,
    /// Stride 0: one value per row, hoisted out of the loop.
    Broadcast,
    /// Any other stride, known at run time.
    Strided,
}

pub fn inner_kind(read: &Read, rank: usize) -> Inner {
    if read.access.strides.len() < rank || rank == 0 {
        return Inner::Broadcast;
    }
    let s = &read.access.strides[rank - 1];
    if s.coeff == 0 {
        Inner::Broadcast
    } else if *s == Dim::fixed(1) {
        Inner::Contiguous
    } else {
        Inner::Strided
    }
}

/// Declarations before the row loop: the buffer slice, its offset and its strides. The buffer comes from the
/// launch's table (`bufs`, see [`super::launch_buffers`]), so kernels that differ only in their buffers share code.
pub fn read_setup(plan: &Plan, kernel: &Kernel, read: &Read) -> TokenStream {
    let buf = var("buf", read.node);
    let off = var("off", read.node);
    let st = var("st", read.node);
    let index = read_slot(kernel, read);
    let getter = match plan.graph.ty(read.access.base).dtype {
        DType::I64 => quote!(i64),
        DType::F32 | DType::Bool => quote!(f32),
    };
    let offset = sum_expr(&read.access.offset);
    let strides = read.access.strides.iter().map(dim_expr);
    quote! {
        let #buf = ctx.#getter(bufs[#index]);
        let #off: usize = #offset;
        let #st = [#(#strides),*];
    }
}

/// The base index of a read for the current row, from the row's outer indices `i0..` (over `outer` dims).
pub fn row_base(read: &Read, outer: usize) -> TokenStream {
    let off = var("off", read.node);
    let st = var("st", read.node);
    let base = var("base", read.node);
    let terms = (0..outer.min(read.access.strides.len())).map(|k| {
        let i = format_ident!("i{}", k);
        quote!(+ #i * #st[#k])
    });
    quote!(let #base = #off #(#terms)*;)
}

/// Per-row binding of a read along the inner dim (`len` elements), by its inner kind.
pub fn row_bind(read: &Read, rank: usize) -> TokenStream {
    let buf = var("buf", read.node);
    let base = var("base", read.node);
    let x = var("x", read.node);
    match inner_kind(read, rank) {
        Inner::Contiguous => quote!(let #x = &#buf[#base..#base + len];),
        Inner::Broadcast => quote!(let #x = #buf[#base];),
        Inner::Strided => quote!(let #x = &#buf[#base..];),
    }
}

/// The value of a read at inner index `j`, as f32.
pub fn row_load(read: &Read, rank: usize, dtype: DType) -> TokenStream {
    let x = var("x", read.node);
    let load = match inner_kind(read, rank) {
        Inner::Contiguous => quote!(#x[j]),
        Inner::Broadcast => quote!(#x),
        // Each read's own stride: two strided reads of one kernel may step by different strides.
        Inner::Strided => {
            let st = var("st", read.node);
            let last = rank - 1;
            quote!(#x[j * #st[#last]])
        }
    };
    match dtype {
        DType::I64 => quote!((#load as f32)),
        DType::F32 | DType::Bool => load,
    }
}

/// Splits the flat row index `row` into `i0..i{outer-1}` over `shape` (the dims outside the inner one).
pub fn decompose_row(outer: usize) -> TokenStream {
    let mut stmts = vec![quote!(let mut rem = row;)];
    for k in (0..outer).rev() {
        let i = format_ident!("i{}", k);
        if k == 0 {
            stmts.push(quote!(let #i = rem;));
        } else {
            stmts.push(quote!(let #i = rem % shape[#k]; rem /= shape[#k];));
        }
    }
    stmts.push(quote!(let _ = rem;));
    quote!(#(#stmts)*)
}

/// The f32 expression of one elementwise node, given how to name its operands.
pub fn op_expr(g: &Graph, id: NodeId, operand: &dyn Fn(NodeId) -> TokenStream) -> TokenStream {
    let m = quote!(::fuse_runtime::__private::math);
    match &g.node(id).op {
        Op::Scalar(v) => {
            let v = *v as f32;
            quote!(#v)
        }
        Op::Unary(u, a) => {
            let a = operand(*a);
            match u {
                UnaryOp::Neg => quote!(-#a),
                UnaryOp::Abs => quote!(#a.abs()),
                UnaryOp::Exp => quote!(#m::exp_in::<A>(#a)),
                UnaryOp::Log => quote!(#m::log(#a)),
                UnaryOp::Sqrt => quote!(#a.sqrt()),
                UnaryOp::Rsqrt => quote!(#m::rsqrt(#a)),
                UnaryOp::Tanh => quote!(#m::tanh_in::<A>(#a)),
                UnaryOp::Sigmoid => quote!(#m::sigmoid_in::<A>(#a)),
                UnaryOp::Relu => quote!(#m::relu(#a)),
                UnaryOp::Gelu => quote!(#m::gelu_in::<A>(#a)),
                UnaryOp::GeluTanh => quote!(#m::gelu_tanh_in::<A>(#a)),
                UnaryOp::Silu => quote!(#m::silu_in::<A>(#a)),
                UnaryOp::Erf => quote!(#m::erf_in::<A>(#a)),
                UnaryOp::Sin => quote!(#m::sin(#a)),
                UnaryOp::Cos => quote!(#m::cos(#a)),
                UnaryOp::Floor => quote!(#a.floor()),
                UnaryOp::Ceil => quote!(#a.ceil()),
                UnaryOp::Round => quote!(#a.round_ties_even()),
                UnaryOp::Trunc => quote!(#a.trunc()),
            }
        }
        Op::Binary(b, x, y) => {
            let (x, y) = (operand(*x), operand(*y));
            let mask = |cmp: TokenStream| quote!(((#cmp) as u8 as f32));
            match b {
                BinaryOp::Add => quote!(#x + #y),
                BinaryOp::Sub => quote!(#x - #y),
                BinaryOp::Mul => quote!(#x * #y),
                BinaryOp::Div => quote!(#x / #y),
                BinaryOp::Max => quote!(#m::maximum(#x, #y)),
                BinaryOp::Min => quote!(#m::minimum(#x, #y)),
                BinaryOp::Pow => quote!(#x.powf(#y)),
                BinaryOp::Lt => mask(quote!(#x < #y)),
                BinaryOp::Le => mask(quote!(#x <= #y)),
                BinaryOp::Gt => mask(quote!(#x > #y)),
                BinaryOp::Ge => mask(quote!(#x >= #y)),
                BinaryOp::Eq => mask(quote!(#x == #y)),
                BinaryOp::Ne => mask(quote!(#x != #y)),
            }
        }
        Op::Where(c, a, b) => {
            let (c, a, b) = (operand(*c), operand(*a), operand(*b));
            quote!(if #c != 0.0f32 { #a } else { #b })
        }
        Op::Cast(a, _) => operand(*a),
        _ => quote!(0.0f32),
    }
}

/// Straight-line code computing `nodes` (elementwise, in order) for element `j`; reads and already-computed
/// values are named by `value`.
pub fn elementwise_body(
    plan: &Plan,
    kernel: &Kernel,
    nodes: &[NodeId],
    rank: usize,
    anchor_value: Option<(NodeId, TokenStream)>,
) -> TokenStream {
    let g = &plan.graph;
    let value = |id: NodeId| -> TokenStream {
        if let Some((a, v)) = &anchor_value {
            if *a == id {
                return v.clone();
            }
        }
        if let Op::Scalar(v) = g.node(id).op {
            let v = v as f32;
            return quote!(#v);
        }
        if nodes.contains(&id) {
            let v = var("v", id);
            return quote!(#v);
        }
        match kernel.read(id) {
            Some(read) => row_load(read, rank, g.ty(read.access.base).dtype),
            None => quote!(0.0f32),
        }
    };
    let stmts = nodes.iter().map(|&id| {
        let v = var("v", id);
        let e = op_expr(g, id, &value);
        quote!(let #v: f32 = #e;)
    });
    quote!(#(#stmts)*)
}
