//! The runtime's promises: clear errors for bad inputs and bad weight files, loading by checkpoint name, and
//! bit-identical results when many threads call `forward` at once.

use std::path::PathBuf;

use fuse_examples::models::encoder::encoder::EncoderLayer;
use fuse_runtime::weights::save_safetensors;
use fuse_runtime::{Error, Tensor};

fn inputs(batch: usize, seq: usize) -> (Tensor, Tensor) {
    let x = Tensor::randn(&[batch, seq, 384], 5);
    let mask = Tensor::from_f32(&[batch, seq], vec![1.0; batch * seq]).unwrap();
    (x, mask)
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fuse-runtime-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn model_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<EncoderLayer>();
}

#[test]
fn concurrent_forward_is_bit_identical() {
    let model = EncoderLayer::random(1);
    let (x, mask) = inputs(2, 9);
    let single = model.forward(&x, &mask).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..3)
                        .map(|_| model.forward(&x, &mask).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for out in h.join().unwrap() {
                assert_eq!(
                    out, single,
                    "a concurrent call differs from the single-threaded one"
                );
            }
        }
    });
}

#[test]
fn wrong_inputs_are_typed_errors() {
    let model = EncoderLayer::random(1);
    let (x, mask) = inputs(2, 4);
    let bad_hidden = Tensor::randn(&[2, 4, 100], 1);
    match model.forward(&bad_hidden, &mask) {
        Err(Error::InputShape {
            input,
            expected,
            found,
        }) => {
            assert_eq!(input, "x");
            assert_eq!(expected, "[batch, seq, 384]");
            assert_eq!(found, vec![2, 4, 100]);
        }
        other => panic!("expected InputShape, got {other:?}"),
    }
    let short_mask = Tensor::from_f32(&[2, 3], vec![1.0; 6]).unwrap();
    match model.forward(&x, &short_mask) {
        Err(Error::InconsistentDim {
            dim, first, found, ..
        }) => {
            assert_eq!((dim.as_str(), first, found), ("seq", 4, 3));
        }
        other => panic!("expected InconsistentDim, got {other:?}"),
    }
    let ids = Tensor::from_i64(&[2, 4], vec![0; 8]).unwrap();
    assert!(matches!(
        model.forward(&x, &ids),
        Err(Error::InputDType { .. })
    ));
    let flat = Tensor::randn(&[8, 384], 1);
    assert!(matches!(
        model.forward(&flat, &mask),
        Err(Error::InputRank { .. })
    ));
    let message = model.forward(&bad_hidden, &mask).unwrap_err().to_string();
    assert!(
        message.contains("x") && message.contains("384"),
        "{message}"
    );
}

#[test]
fn reserve_checks_its_sizes_and_leaves_results_unchanged() {
    let model = EncoderLayer::random(1);
    let (x, mask) = inputs(2, 9);
    let before = model.forward(&x, &mask).unwrap();
    let compiled = model.compiled();
    // A larger arena than the call needs, then calls at the reserved size and at the smaller one.
    compiled.reserve(&[("seq", 16), ("batch", 4)]).unwrap();
    let (x4, mask4) = inputs(4, 16);
    model.forward(&x4, &mask4).unwrap();
    assert_eq!(model.forward(&x, &mask).unwrap(), before);
    match compiled.reserve(&[("batch", 4), ("tokens", 16)]) {
        Err(Error::UnknownDim { dim, known }) => {
            assert_eq!(dim, "tokens");
            assert_eq!(known, ["batch", "seq"]);
        }
        other => panic!("expected UnknownDim, got {other:?}"),
    }
    match compiled.reserve(&[("batch", 4)]) {
        Err(Error::MissingDim { dim }) => assert_eq!(dim, "seq"),
        other => panic!("expected MissingDim, got {other:?}"),
    }
    // An empty batch is a call as any other (its outputs are empty).
    compiled.reserve(&[("batch", 0), ("seq", 3)]).unwrap();
    let (x0, mask0) = inputs(0, 3);
    assert_eq!(model.forward(&x0, &mask0).unwrap().shape(), [0, 3, 384]);
    // Sizes no machine backs are a typed error, not an abort: one whose byte count overflows, one the allocator
    // refuses.
    match compiled.reserve(&[("batch", 1 << 40), ("seq", 1 << 20)]) {
        Err(Error::OutOfMemory { bytes: None, .. }) => {}
        other => panic!("expected OutOfMemory without a size, got {other:?}"),
    }
    match compiled.reserve(&[("batch", 1 << 24), ("seq", 1 << 16)]) {
        Err(e @ Error::OutOfMemory { bytes: Some(_), .. }) => {
            assert!(e.to_string().contains("the arena"), "{e}");
        }
        other => panic!("expected OutOfMemory with a size, got {other:?}"),
    }
    // The model still runs afterwards.
    assert_eq!(model.forward(&x, &mask).unwrap(), before);
}

#[test]
fn weights_round_trip_through_safetensors_by_checkpoint_name() {
    let model = EncoderLayer::random(3);
    let spec = EncoderLayer::spec();
    let named: Vec<(&str, &Tensor)> = spec
        .params
        .iter()
        .map(|p| p.name)
        .zip(model.weights().expect("f32 weights"))
        .collect();
    assert!(named.iter().any(|(n, _)| *n == "attention.query.weight"));
    let path = temp_path("encoder.safetensors");
    save_safetensors(&path, &named).unwrap();
    let loaded = EncoderLayer::load(&path).unwrap();
    let (x, mask) = inputs(1, 6);
    assert_eq!(
        loaded.forward(&x, &mask).unwrap(),
        model.forward(&x, &mask).unwrap()
    );
}

#[test]
fn bad_weight_files_are_clear_errors() {
    let missing = temp_path("does-not-exist.safetensors");
    let err = EncoderLayer::load(&missing)
        .err()
        .expect("missing file fails");
    assert!(
        err.to_string().contains("does-not-exist.safetensors"),
        "{err}"
    );

    let corrupt = temp_path("corrupt.safetensors");
    std::fs::write(&corrupt, b"\x10\x00\x00\x00\x00\x00\x00\x00{not json").unwrap();
    assert!(matches!(
        EncoderLayer::load(&corrupt),
        Err(Error::Safetensors { .. })
    ));

    let model = EncoderLayer::random(3);
    let spec = EncoderLayer::spec();
    let wrong = Tensor::zeros(&[3, 3]);
    let mut named: Vec<(&str, &Tensor)> = spec
        .params
        .iter()
        .map(|p| p.name)
        .zip(model.weights().expect("f32 weights"))
        .collect();
    named[0].1 = &wrong;
    let path = temp_path("wrong-shape.safetensors");
    save_safetensors(&path, &named).unwrap();
    match EncoderLayer::load(&path) {
        Err(Error::WeightShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, spec.params[0].name);
            assert_eq!((expected, found), (vec![384, 384], vec![3, 3]));
        }
        other => panic!("expected WeightShape, got {:?}", other.err()),
    }
    named.remove(0);
    let path = temp_path("missing-tensor.safetensors");
    save_safetensors(&path, &named).unwrap();
    assert!(matches!(
        EncoderLayer::load(&path),
        Err(Error::MissingWeight { .. })
    ));
}

#[fuse_runtime::fused_model]
mod twice {
    pub struct Twice {}
    impl Twice {
        pub fn forward(&self, #[shape(n, 4)] x: Tensor) -> (Tensor, Tensor, Tensor) {
            let y = x.exp();
            (y, x, y)
        }
    }
}

#[test]
fn a_value_returned_twice_fills_both_outputs() {
    let m = twice::Twice::random(0);
    let x = Tensor::randn(&[3, 4], 1);
    for (a, same_x, b) in [m.forward(&x).unwrap(), m.forward_eager(&x).unwrap()] {
        assert_eq!(a, b);
        assert_eq!(same_x, x);
        let want: Vec<f32> = x.to_f32_vec().iter().map(|v| v.exp()).collect();
        assert!(a
            .to_f32_vec()
            .iter()
            .zip(&want)
            .all(|(g, w)| (g - w).abs() <= 1e-6 * (1.0 + w.abs())));
    }
}

#[test]
fn device_report_on_the_cpu_says_what_runs_and_why() {
    use fuse_runtime::cpu::gemm::Backend;

    let model = EncoderLayer::random(1);
    let report = model.compiled().device_report();
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"CPU: the model was never moved to a GPU (to_device or to_best_device moves it)"),
        "{report}"
    );
    let spec = EncoderLayer::spec();
    let (fused, eager) = (spec.fused.decode().unwrap(), spec.eager.decode().unwrap());
    let kernels = fused.kernels.len();
    let count = |kind: &str| fused.kernel_info.iter().filter(|k| k.kind == kind).count();
    let (gemms, attention) = (count("matmul"), count("attention"));
    assert!(gemms > 0 && attention > 0);
    let what = lines.get(1).copied().unwrap_or_default();
    let head = format!(
        "CPU: fused plan of {kernels} kernel(s) (the eager plan has {}), {gemms} of them GEMMs, \
         {attention} fused attention; ",
        eager.kernels.len()
    );
    assert!(what.starts_with(&head), "{what}\nwanted {head}");
    let isa = match Backend::best() {
        Backend::Avx512 => "AVX-512 kernels with fuse's 12×32 GEMM tile",
        Backend::Avx2 => "AVX2 kernels with fuse's 6×16 GEMM tile",
        Backend::Portable => "portable kernels",
    };
    assert!(what.contains(isa), "{what}");
    assert!(what.ends_with("worker thread(s)"), "{what}");
}
