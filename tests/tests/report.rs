//! The plan report and the DOT export: what `plan()` promises a user can read off a model.

use fuse_examples::models::encoder::encoder::EncoderLayer;

#[test]
fn report_counts_kernels_bytes_and_refusals() {
    let model = EncoderLayer::random(0);
    let (fused, eager) = (model.plan().at(&[8, 128]), model.eager_plan().at(&[8, 128]));
    assert!(fused.kernel_count() < eager.kernel_count());
    assert!(
        fused.bytes_moved() < eager.bytes_moved(),
        "fusion must cut modelled traffic"
    );
    // Bytes scale with the dynamic dims: twice the batch moves more than at batch 8.
    assert!(model.plan().at(&[16, 128]).bytes_moved() > fused.bytes_moved());
    assert!(fused.arena_bytes() > 0 && fused.arena_bytes() < fused.bytes_moved());
    let text = fused.to_string();
    assert!(
        text.contains("matmul → add → gelu"),
        "the FFN epilogue is listed as fused:\n{text}"
    );
    assert!(
        text.contains("not fused:") && text.contains("matmul reads its operands from memory"),
        "{text}"
    );
    assert_eq!(fused.plan_hash(), EncoderLayer::PLAN_HASH);
}

#[test]
fn dot_has_a_cluster_per_kernel_and_every_edge() {
    let report = EncoderLayer::random(0).plan();
    let dot = report.dot();
    assert!(dot.starts_with("digraph fuse {") && dot.trim_end().ends_with('}'));
    assert_eq!(
        dot.matches("subgraph cluster_").count(),
        report.kernel_count()
    );
    let graph = fuse_tests::harness::graph_of(EncoderLayer::spec());
    let edges: usize = graph.nodes.iter().map(|n| n.op.operands().len()).sum();
    // Every operand edge, plus one edge per model output.
    assert_eq!(
        dot.matches(" -> n").count() + dot.matches(" -> out").count(),
        edges + graph.outputs.len()
    );
}
