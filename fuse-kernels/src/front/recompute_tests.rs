//! Shared values of the dims copied for their readers: the plans of small models, with and without the pass's
//! conditions met.

use crate::plan::{dump, plan, Mode, Plan};

/// The fused plan of `forward` over `x` `[b, s, t]` and `w` `[t, t]`, with `t` the length of `arange(0, t)`.
fn fused(body: &str) -> Plan {
    let source = format!(
        "#[fused_model] mod m {{ pub const T: usize = 8; pub struct M {{ #[shape(T, T)] w: Tensor }} impl M {{ \
         pub fn forward(&self, #[shape(b, s, T)] x: Tensor) -> Tensor {{ {body} }} }} }}"
    );
    let capture = crate::front::capture_str(&source).unwrap_or_else(|e| panic!("{e}"));
    assert!(capture.errors.is_none(), "test model does not capture");
    plan(&capture.models[0].graph, Mode::Fused)
}

#[test]
fn positions_read_twice_are_computed_in_each_reader() {
    // `cols` and `rows` are each read by both comparisons: one kernel, as if written out twice.
    let body = "let cols = arange(0, T).reshape([1, 1, T]).to_f32(); \
                let rows = arange(0, x.dim(1)).reshape([1, x.dim(1), 1]).to_f32(); \
                x + where_(cols.eq(&rows), 1.0, where_(cols.lt(&rows), 2.0, 3.0))";
    let p = fused(body);
    assert_eq!(p.kernels.len(), 1, "{}", dump(&p));
    // Written out at each use, the same ops in one kernel (with an `arange` per use rather than one per value).
    let written_out = "x + where_(arange(0, T).reshape([1, 1, T]).to_f32().eq(\
                           &arange(0, x.dim(1)).reshape([1, x.dim(1), 1]).to_f32()), 1.0, \
                       where_(arange(0, T).reshape([1, 1, T]).to_f32().lt(\
                           &arange(0, x.dim(1)).reshape([1, x.dim(1), 1]).to_f32()), 2.0, 3.0))";
    let other = fused(written_out);
    let ops = |p: &Plan| -> Vec<String> {
        p.kernels[0]
            .nodes
            .iter()
            .map(|&n| p.graph.node(n).op.name())
            .collect()
    };
    assert_eq!((other.kernels.len(), ops(&other)), (1, ops(&p)));
}

#[test]
fn a_shared_value_read_by_a_matmul_stays_in_memory_for_it() {
    // The matmul reads `p` from memory, so the original stays; the elementwise reader gets a copy of its own.
    let body =
        "let p = arange(0, T).reshape([T, 1]).to_f32() - arange(0, T).reshape([1, T]).to_f32(); \
                x.matmul(&p) + p.relu().narrow(0, 0, 1).reshape([1, 1, T])";
    let p = fused(body);
    let subs = |p: &Plan| {
        p.graph
            .nodes
            .iter()
            .filter(|n| matches!(n.op, crate::ir::Op::Binary(crate::ir::BinaryOp::Sub, ..)))
            .count()
    };
    assert_eq!(subs(&p), 2, "{}", dump(&p));
}

#[test]
fn values_that_read_a_tensor_are_not_copied() {
    // `y` reads the input: read twice, it is computed once, as written.
    let p = fused("let y = x + 1.0; y.matmul(&self.w) + y.exp()");
    let adds_of_one = p
        .graph
        .nodes
        .iter()
        .filter(|n| matches!(n.op, crate::ir::Op::Binary(crate::ir::BinaryOp::Add, ..)))
        .count();
    // `x + 1.0` and the final sum.
    assert_eq!(adds_of_one, 2, "{}", dump(&p));
}
