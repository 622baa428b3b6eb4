//! The plan report and the DOT export: what `plan()` promises a user can read off a model.

use fuse_examples::models::encoder::encoder::EncoderLayer;
use fuse_runtime::{fused_model, Tensor};

#[fused_model]
pub mod sized {
    /// Nine dynamic dims across three inputs: more than any fixed-size dims array of 8 would hold.
    pub struct NineDims {}
    impl NineDims {
        pub fn forward(
            &self,
            #[shape(a, b, c)] x: Tensor,
            #[shape(d, e, f)] y: Tensor,
            #[shape(g, h, i)] z: Tensor,
        ) -> (Tensor, Tensor, Tensor) {
            (x * 2.0, y + 1.0, z.exp())
        }
    }

    /// One kernel that reads `[n, 4]` f32 and writes `[n, 4]` f32: 32·n bytes moved.
    pub struct Scale {}
    impl Scale {
        pub fn forward(&self, #[shape(n, 4)] x: Tensor) -> Tensor {
            x * 2.0
        }
    }
}

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

/// The report says which dims a call may bind to 0: the encoder layer's empty batch and empty sequence make only
/// empty values; MiniLM's mean pooling sums over `seq`, so `seq` may be 0 there only where the batch is empty too.
#[test]
fn report_says_which_dims_may_be_zero() {
    use fuse_examples::models::minilm::minilm::MiniLm;
    let encoder = EncoderLayer::random(0).plan().to_string();
    assert!(encoder.contains("\n  may be 0: batch, seq\n"), "{encoder}");
    let minilm = MiniLm::random(0).plan().to_string();
    assert!(
        minilm.contains("\n  may be 0: batch; seq only with batch 0\n"),
        "{minilm}"
    );
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

#[test]
fn a_report_takes_any_number_of_dynamic_dims() {
    let model = sized::NineDims::random(0);
    let sizes: Vec<usize> = (2..11).collect();
    let report = model.plan().at(&sizes);
    assert_eq!(report.dyn_dims().len(), 9);
    let text = report.to_string();
    assert!(text.contains("g=8, h=9, i=10"), "{text}");
    // x, y, z are 2·3·4, 5·6·7 and 8·9·10 f32 elements, each read once and written once.
    let elements = 2 * 3 * 4 + 5 * 6 * 7 + 8 * 9 * 10;
    assert_eq!(report.checked_bytes_moved(), Some(elements * 4 * 2));
    // The default report (every dim 1) prints too.
    assert!(model.plan().to_string().contains("i=1"));
    let (x, y, z) = (
        Tensor::randn(&[2, 3, 4], 1),
        Tensor::randn(&[5, 6, 7], 2),
        Tensor::randn(&[8, 9, 10], 3),
    );
    let (_, _, ez) = model.forward(&x, &y, &z).unwrap();
    for (got, v) in ez.as_f32().unwrap().iter().zip(z.as_f32().unwrap()) {
        let want = (*v as f64).exp() as f32;
        assert!((got - want).abs() <= 1e-5 * want.abs(), "{got} vs {want}");
    }
}

#[test]
fn sizes_that_overflow_say_so_instead_of_wrapping() {
    let model = sized::Scale::random(0);
    let largest = usize::MAX / 32;
    assert_eq!(model.plan().kernel_count(), 1);
    assert_eq!(model.plan().at(&[1000]).checked_bytes_moved(), Some(32_000));
    assert_eq!(
        model.plan().at(&[largest]).checked_bytes_moved(),
        Some(largest * 32)
    );
    for n in [largest + 1, usize::MAX] {
        let report = model.plan().at(&[n]);
        assert_eq!(report.checked_bytes_moved(), None, "n = {n}");
        assert_eq!(report.bytes_moved(), usize::MAX, "saturated, not wrapped");
        assert_eq!(
            report.checked_arena_bytes().is_none(),
            report.arena_bytes() == usize::MAX
        );
        let text = report.to_string();
        assert!(text.contains("bytes moved overflows"), "{text}");
        assert!(!text.contains("bytes moved 0"), "{text}");
    }
}
