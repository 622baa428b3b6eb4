//! Cheap producers broadcast into their readers: recomputed per element where that is cheap and the kernel can
//! hold them, kept in a kernel of their own otherwise, with the reason in the report.

use crate::plan::{dump, plan, KernelKind, Mode, Plan, WhyNot};

/// The fused plan of `forward` over `x` `[b, s, 8]` and `m` `[s, 8]` (broadcast over the batch).
fn fused(body: &str) -> Plan {
    let source = format!(
        "#[fused_model] mod m {{ pub struct M {{ #[shape(8, 8)] w: Tensor }} impl M {{ \
         pub fn forward(&self, #[shape(b, s, 8)] x: Tensor, #[shape(s, 8)] m: Tensor) -> Tensor {{ {body} }} }} }}"
    );
    let capture = crate::front::capture_str(&source).unwrap_or_else(|e| panic!("{e}"));
    assert!(capture.errors.is_none(), "test model does not capture");
    plan(&capture.models[0].graph, Mode::Fused)
}

fn refusals(p: &Plan) -> Vec<WhyNot> {
    p.refusals.iter().map(|r| r.why.clone()).collect()
}

/// One kernel of `kind`, which reads `m` broadcast over the batch: at the kernel's rank, batch stride 0.
fn assert_one_kernel_reading_m_broadcast(body: &str, kind: &str) {
    let p = fused(body);
    assert_eq!(p.kernels.len(), 1, "{body}\n{}", dump(&p));
    let k = &p.kernels[0];
    assert_eq!(k.kind.name(), kind, "{body}");
    assert!(refusals(&p).is_empty(), "{body}: {:?}", refusals(&p));
    let m = k
        .reads
        .iter()
        .find(|r| p.graph.ty(r.node).shape.rank() == 2)
        .unwrap_or_else(|| panic!("{body}: m is not read\n{}", dump(&p)));
    assert_eq!(m.access.strides.len(), 3, "{body}: {:?}", m.access);
    assert_eq!(m.access.strides[0].coeff, 0, "{body}: {:?}", m.access);
}

#[test]
fn cheap_broadcast_values_are_recomputed_in_their_reader() {
    assert_one_kernel_reading_m_broadcast("x * where_(m.gt(0.0), m * 2.0, m.neg())", "elementwise");
    assert_one_kernel_reading_m_broadcast("(x + (m - 0.5).relu()).softmax(-1)", "row");
    assert_one_kernel_reading_m_broadcast("x.matmul(&self.w) + m.abs() * 0.5", "matmul");
}

#[test]
fn costly_or_long_broadcast_values_keep_a_kernel_of_their_own() {
    let long = "x + (m + 1.0 - 2.0 + 3.0 - 4.0 + 5.0 - 6.0 + 7.0 - 8.0 + 9.0)";
    for body in ["x + m.exp()", "x * (m / 3.0)", long] {
        let p = fused(body);
        assert_eq!(p.kernels.len(), 2, "{body}\n{}", dump(&p));
        assert_eq!(refusals(&p), [WhyNot::Broadcast], "{body}");
    }
}

#[test]
fn no_value_is_recomputed_among_a_concats_pieces() {
    let p = fused("concat([x.slice(2, 4, 8).neg(), x.slice(2, 0, 4)], 2) + m.neg()");
    assert!(
        refusals(&p).contains(&WhyNot::Recomputed),
        "{:?}\n{}",
        refusals(&p),
        dump(&p)
    );
    assert!(p
        .kernels
        .iter()
        .any(|k| matches!(k.kind, KernelKind::Piecewise(_))));
}
