//! Unit tests: per kernel kind, the generated source defines the kernels the launch table names, has the shape
//! of code that kind needs, and is deterministic. (nvcc and ptxas run on real models in
//! `tests/cuda_compiles.rs`.)

use super::*;
use crate::plan::{plan, Mode};

/// Plans `forward` of a one-struct model and returns (fused plan source, eager plan source, fused plan).
fn generate(fields: &str, forward: &str) -> (String, String, Plan) {
    let source = format!(
        "#[fused_model] mod m {{ pub struct M {{ {fields} }} impl M {{ pub fn forward{forward} }} }}"
    );
    let capture = crate::front::capture_str(&source).unwrap_or_else(|e| panic!("{e}"));
    if let Some(e) = capture.errors {
        panic!("test model does not capture: {e}");
    }
    let graph = &capture.models[0].graph;
    let fused = plan(graph, Mode::Fused);
    let eager = plan(graph, Mode::Eager);
    let a = write_cuda(&fused, "M");
    // Determinism: a second run (and a second plan) gives the same bytes.
    assert_eq!(
        a,
        write_cuda(&plan(graph, Mode::Fused), "M"),
        "generated CUDA is not deterministic"
    );
    let b = write_cuda(&eager, "M");
    assert_eq!(b, write_cuda(&eager, "M"));
    (a, b, fused)
}

/// Every launch-table symbol is defined exactly once in the source.
fn assert_defines_launches(source: &str, plan: &Plan) {
    let mut defined = std::collections::BTreeSet::new();
    for l in launches(plan, "M") {
        let definition = format!(" {}(", l.symbol);
        assert!(
            defined.contains(&l.symbol) || source.matches(&definition).count() == 1,
            "{} missing",
            l.symbol
        );
        defined.insert(l.symbol);
    }
}

fn symbol(p: &Plan, kernel: &str) -> String {
    format!("fuse_m_{:016x}_{kernel}", p.hash)
}

#[test]
fn elementwise_kernels_have_a_scalar_loop_and_a_float4_path() {
    let (fused, eager, p) = generate(
        "#[shape(64)] b: Tensor,",
        "(&self, #[shape(rows, 64)] x: Tensor) -> Tensor { (x * 2.0 + &self.b).gelu() }",
    );
    assert!(fused.contains(&format!(
        "void __launch_bounds__(256) {}(",
        symbol(&p, "k0_elementwise")
    )));
    assert!(fused.contains("for (long long i = first; i < n; i += step)"));
    // x is contiguous and b a row broadcast: the vector path applies, behind a run-time alignment check.
    assert!(fused
        .contains("fuse_aligned16(out) && fuse_aligned16(&in0[0LL]) && fuse_aligned16(&in1[0LL])"));
    assert!(fused.contains("reinterpret_cast<const float4*>(&in1[i % 64LL])"));
    assert!(fused.contains("fuse_gelu("));
    assert_defines_launches(&fused, &p);
    assert!(
        eager.contains("_k2_elementwise("),
        "eager plan has one kernel per op"
    );
}

#[test]
fn strided_reads_unravel_the_index_and_skip_float4() {
    let (fused, _, p) = generate(
        "",
        "(&self, #[shape(rows, 8, 16)] x: Tensor) -> Tensor { x.permute([0, 2, 1]).exp() }",
    );
    assert!(fused.contains("xrem % 8LL"), "{fused}");
    assert!(
        !fused.contains("reinterpret_cast<const float4*>"),
        "a permuted read is not contiguous"
    );
    assert_defines_launches(&fused, &p);
}

#[test]
fn row_kernels_reduce_with_warp_shuffles_and_fuse_prologue_and_epilogue() {
    let (fused, _, p) = generate(
        "#[shape(384)] g: Tensor, #[shape(384)] b: Tensor,",
        "(&self, #[shape(rows, 384)] x: Tensor) -> Tensor { ((x * 2.0).layer_norm(&self.g, &self.b, 1e-5) + 1.0).softmax(-1) }",
    );
    // Two row kernels (norm, then softmax): a row op cannot absorb another.
    assert!(fused.contains(&format!("{}(", symbol(&p, "k0_row"))));
    assert!(fused.contains("fuse_warp_sum(mean)"));
    assert!(fused.contains("fuse_warp_max(mx)"));
    assert!(
        fused.contains("float x[12];"),
        "384 elements over one warp: 12 in registers per thread"
    );
    assert!(
        fused.contains("= (pr0 * 2.0f);"),
        "prologue computed on load"
    );
    assert!(fused.contains("rsqrtf("));
    assert_defines_launches(&fused, &p);

    let (long, _, p) = generate(
        "",
        "(&self, #[shape(rows, 6000)] x: Tensor) -> Tensor { x.sum(1, false) + x.max(1, false) }",
    );
    assert!(
        long.contains("fuse_block_sum(red, smem)"),
        "a long row takes a whole block"
    );
    assert!(long.contains("if (tid == 0) {"));
    assert_defines_launches(&long, &p);
}

#[test]
fn dynamic_rows_have_a_register_path_and_a_multipass_fallback() {
    let (fused, _, p) = generate(
        "",
        "(&self, #[shape(rows, seq)] x: Tensor) -> Tensor { x.softmax(-1) }",
    );
    assert!(fused.contains("if (len <= 512LL) {"));
    assert!(fused.contains("for (long long j = tid; j < len; j += 32)"));
    assert_defines_launches(&fused, &p);
}

#[test]
fn matmul_kernels_emit_an_epilogue_and_a_fallback_gemm_and_classify_cublaslt_epilogues() {
    let (fused, _, p) = generate(
        "#[shape(32, 64)] w: Tensor, #[shape(32)] b: Tensor,",
        "(&self, #[shape(batch, 64)] x: Tensor) -> Tensor { (x.matmul(&self.w.t()) + &self.b).relu() }",
    );
    let mm = symbol(&p, "k0_matmul");
    assert!(fused.contains(&format!(" {mm}(")));
    assert!(fused.contains(&format!(" {mm}_gemm(")));
    assert!(fused.contains("__shared__ float as[16][65];"));
    let desc = gemm(&p, &p.kernels[0]).expect("a matmul kernel");
    assert!(
        matches!(desc.epilogue, GemmEpilogue::BiasRelu { .. }),
        "{:?}",
        desc.epilogue
    );
    assert_defines_launches(&fused, &p);

    // erf GELU is not cuBLASLt's (tanh) GELU; a residual is not a bias.
    let (_, _, p) = generate(
        "#[shape(32, 32)] w: Tensor, #[shape(32)] b: Tensor,",
        "(&self, #[shape(batch, 32)] x: Tensor) -> Tensor { (x.matmul(&self.w.t()) + &self.b).gelu() + &x }",
    );
    let desc = gemm(&p, &p.kernels[0]).expect("a matmul kernel");
    assert_eq!(desc.epilogue, GemmEpilogue::Kernel);

    // A batched product of two activations does not fold its batch; a plain one has no epilogue kernel.
    let (fused, _, p) = generate(
        "",
        "(&self, #[shape(b, 4, 8)] x: Tensor, #[shape(b, 8, 4)] y: Tensor) -> Tensor { x.matmul(&y) }",
    );
    let desc = gemm(&p, &p.kernels[0]).expect("a matmul kernel");
    assert!(!desc.fold_batch);
    assert_eq!(desc.epilogue, GemmEpilogue::None);
    assert!(!fused.contains(&format!(" {}(", symbol(&p, "k0_matmul"))));
    assert!(fused.contains("for (long long z = blockIdx.z; z < batches; z += gridDim.z)"));
    assert_defines_launches(&fused, &p);
}

#[test]
fn gather_and_concat_kernels() {
    let (fused, _, p) = generate(
        "#[shape(100, 16)] table: Tensor,",
        "(&self, #[shape(b, s)] ids: Tensor<i64>, #[shape(b, s, 8)] y: Tensor) -> Tensor { concat([embedding(&self.table, &ids), y], 2) }",
    );
    assert!(
        fused.contains("const long long* __restrict__ in1"),
        "ids stay integers"
    );
    assert!(fused.contains("if (id >= 0 && id < 100LL)"));
    assert!(fused.contains("_k1_concat("));
    assert!(fused.contains("if (x2 < 16LL) v = "));
    assert_defines_launches(&fused, &p);
}

#[test]
fn repeated_layers_share_one_function() {
    let (fused, _, p) = generate(
        "#[shape(64)] g1: Tensor, #[shape(64)] b1: Tensor, #[shape(64)] g2: Tensor, #[shape(64)] b2: Tensor,",
        "(&self, #[shape(rows, 64)] x: Tensor) -> Tensor { x.layer_norm(&self.g1, &self.b1, 1e-5).layer_norm(&self.g2, &self.b2, 1e-5) }",
    );
    let symbols: Vec<String> = launches(&p, "M").into_iter().map(|l| l.symbol).collect();
    assert_eq!(symbols.len(), 2);
    assert_eq!(
        symbols[0], symbols[1],
        "the second layer launches the first's code"
    );
    assert!(fused.contains("// Same code as k0_row"));
    assert_defines_launches(&fused, &p);
}

#[test]
fn half_storage_converts_on_load_and_store() {
    let (_, _, p) = generate(
        "",
        "(&self, #[shape(rows, 64)] x: Tensor) -> Tensor { x.softmax(-1) }",
    );
    let bf16 = write_cuda_with(
        &p,
        "M",
        &Options {
            storage: StorageType::Bf16,
        },
    );
    assert!(bf16.starts_with("// @generated"));
    assert!(bf16.contains("#define FUSE_STORAGE_BF16 1"));
    assert!(bf16.contains("typedef fuse_bf16 fuse_t;"));
    assert!(
        !bf16.contains("#include"),
        "the source needs no CUDA headers (NVRTC on a deploy host has none)"
    );
    assert!(
        !bf16.contains("reinterpret_cast<const float4*>"),
        "the vector path is for f32 storage only"
    );
}

/// Ids the model computes are kept in f32 in half storage: the scan that makes them stores `float`s and the gather
/// reads them as such, so a table of 514 rows is read at exact ids in bf16, where a half type would round them.
/// So are ids that are also a model output; a product that multiplies them, which reads the storage type alone,
/// refuses them in half storage.
#[test]
fn computed_ids_are_kept_in_f32_in_half_storage() {
    let bf16 = |p: &Plan| {
        write_cuda_with(
            p,
            "M",
            &Options {
                storage: StorageType::Bf16,
            },
        )
    };
    let positions = "let tokens = ids.to_f32().ne(1.0).to_f32(); \
                     let p = (tokens.cumsum(1) * tokens + 1.0).to_i64();";
    let (_, _, p) = generate(
        "#[shape(514, 8)] table: Tensor,",
        &format!(
            "(&self, #[shape(batch, seq)] ids: Tensor<i64>) -> Tensor {{ {positions} \
             embedding(&self.table, &p) }}"
        ),
    );
    let kept = bf16(&p);
    assert!(!kept.contains("#error"), "{kept}");
    let kernel = |kind: &str| {
        kept.split("extern \"C\"")
            .find(|k| k.contains(kind))
            .unwrap_or_else(|| panic!("no {kind} kernel"))
    };
    let scan = kernel("_row(");
    assert!(scan.contains("float* __restrict__ out"), "{scan}");
    assert!(!scan.contains("fuse_from_f32("), "{scan}");
    let gather = kernel("_gather(");
    assert!(gather.contains("fuse_t* __restrict__ out, const fuse_t* __restrict__ in0, const float* __restrict__ in1"), "{gather}");
    // In f32 storage nothing changes: every buffer is `fuse_t`.
    assert!(!write_cuda(&p, "M").contains("const float* __restrict__"));

    // Ids that are also a model output are kept so too: the runtime gives that output a buffer of f32.
    let (_, _, returned) = generate(
        "#[shape(514, 8)] table: Tensor,",
        &format!(
            "(&self, #[shape(batch, seq)] ids: Tensor<i64>) -> (Tensor, Tensor) {{ {positions} \
             (embedding(&self.table, &p), p) }}"
        ),
    );
    assert!(!bf16(&returned).contains("#error"), "{}", bf16(&returned));
    assert_eq!(f32_outputs(&returned).len(), 1);
    assert!(f32_outputs(&p).is_empty());
    // Ids a product multiplies too are refused in half storage: cuBLAS reads the storage type alone, which would
    // round them. f32 storage runs them.
    let (_, _, multiplied) = generate(
        "#[shape(514, 8)] table: Tensor, #[shape(1, 8)] w: Tensor,",
        &format!(
            "(&self, #[shape(batch, seq)] ids: Tensor<i64>) -> (Tensor, Tensor) {{ {positions} \
             (embedding(&self.table, &p), p.reshape([ids.dim(0), ids.dim(1), 1]).matmul(&self.w)) }}"
        ),
    );
    let refused = bf16(&multiplied);
    assert!(refused.contains("#error \"fuse: matmul reads"), "{refused}");
    assert!(
        refused.contains("run this model with f32 storage"),
        "{refused}"
    );
    assert!(!write_cuda(&multiplied, "M").contains("#error"));
    assert!(f32_outputs(&multiplied).is_empty());
}

#[test]
fn float_literals_round_trip() {
    assert_eq!(expr::float_lit(1.0), "1.0f");
    assert_eq!(expr::float_lit(-10000.0), "(-10000.0f)");
    assert_eq!(expr::float_lit(1e-12), "1e-12f");
    assert_eq!(
        expr::float_lit(f64::NEG_INFINITY),
        "__int_as_float(0xff800000)"
    );
}

#[test]
fn attention_streams_keys_with_an_online_softmax_one_warp_per_row() {
    let (fused, eager, p) = generate(
        "",
        "(&self, #[shape(b, 2, s, 40)] q: Tensor, #[shape(b, 2, t, 40)] k: Tensor, \
         #[shape(b, 2, t, 72)] v: Tensor) -> Tensor { (q.matmul(&k.t()) * 0.5).softmax(-1).matmul(&v) }",
    );
    let k = symbol(&p, "k0_attention");
    assert!(fused.contains(&format!(" {k}(")), "{fused}");
    // Head dims 40 and 72: two and three registers per lane, the tails masked.
    assert!(fused.contains("float qr[2], acc[3];"), "{fused}");
    assert!(fused.contains("if (c < 40) part += qr[t] *"));
    assert!(fused.contains("const float score = fuse_warp_sum(part);"));
    assert!(fused.contains("running_sum = running_sum * rescale + p;"));
    assert!(fused.contains("const float top = fuse_max(running_max, s);"));
    assert!(fused.contains(
        "out[row * 72 + c] = fuse_from_f32(running_sum == 0.0f ? 0.0f : acc[t] / running_sum);"
    ));
    // Only the fused plan has it; the eager plan keeps the scores in memory.
    assert!(!eager.contains("_attention("));
    let launch = launches(&p, "M").into_iter().find(|l| l.symbol == k);
    let launch = launch.expect("the attention kernel is launched");
    assert_eq!(launch.block, [32, 4, 1]);
    assert_eq!(
        launch.grid.dims(&[3, 5, 9]),
        [(3 * 2 * 5u32).div_ceil(4), 1, 1]
    );
    assert_defines_launches(&fused, &p);
}
