//! Errors point at the right thing: weights handed over in memory are not "the file", a checkpoint's own defects
//! (a name twice, a cut or padded file, offsets that disagree with a shape) are named as such, a dimension
//! repeated within one input is not blamed on "an earlier input", and missing weights are all listed with the
//! names the file has instead.

use std::path::PathBuf;

use fuse_runtime::weights::save_safetensors;
use fuse_runtime::{fused_model, Error, Tensor};

#[fused_model]
pub mod net {
    pub struct Proj {
        #[shape(3, 4)]
        weight: Tensor,
        #[shape(3)]
        bias: Tensor,
    }
    impl Proj {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.matmul(&self.weight.t()) + &self.bias
        }
    }

    pub struct Net {
        #[shape(4, 4)]
        w: Tensor,
        #[rename("classifier")]
        fc: Proj,
    }
    impl Net {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            self.fc.forward(&x.matmul(&self.w))
        }
    }

    pub struct Square {}
    impl Square {
        pub fn forward(&self, #[shape(n, n)] x: Tensor, #[shape(n, 2)] y: Tensor) -> Tensor {
            x.sum(1, true) + y
        }
    }
}

use net::{Net, Square};

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fuse-messages-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A safetensors file written byte by byte: 8-byte little-endian header length, the JSON header, the data.
fn raw_file(name: &str, header: &str, data: &[u8]) -> PathBuf {
    let path = temp_path(name);
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn good_weights() -> Vec<Tensor> {
    vec![
        Tensor::randn(&[4, 4], 1),
        Tensor::randn(&[3, 4], 2),
        Tensor::randn(&[3], 3),
    ]
}

#[test]
fn weights_in_memory_are_checked_for_count_dtype_and_shape() {
    let mut weights = good_weights();
    weights[2] = Tensor::from_i64(&[3], vec![0, 1, 2]).unwrap();
    let err = Net::from_weights(weights)
        .err()
        .expect("an i64 weight is refused");
    match &err {
        Error::WeightTensorDType {
            name,
            expected,
            found,
        } => {
            assert_eq!(name, "classifier.bias");
            assert_eq!((expected.name(), found.name()), ("f32", "i64"));
        }
        other => panic!("expected WeightTensorDType, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("i64") && !message.contains("file"),
        "{message}"
    );

    let err = Net::from_weights(good_weights()[..2].to_vec())
        .err()
        .expect("too few");
    assert!(
        matches!(
            err,
            Error::WeightCount {
                expected: 3,
                found: 2
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("weight") && !message.contains("input"),
        "{message}"
    );

    let mut weights = good_weights();
    weights[1] = Tensor::randn(&[4, 3], 2);
    let err = Net::from_weights(weights).err().expect("wrong shape");
    assert!(matches!(err, Error::WeightTensorShape { .. }), "{err:?}");
    assert!(!err.to_string().contains("file"), "{err}");
    assert!(Net::from_weights(good_weights()).is_ok());
}

#[test]
fn a_name_twice_in_a_checkpoint_is_reported_as_a_duplicate() {
    let header = r#"{"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},"classifier.weight":{"dtype":"F32","shape":[3,4],"data_offsets":[64,112]},"w":{"dtype":"F32","shape":[3],"data_offsets":[112,124]}}"#;
    let path = raw_file("duplicate.safetensors", header, &[0u8; 124]);
    match Net::load(&path).err().expect("refused") {
        Error::DuplicateTensor { name, .. } => assert_eq!(name, "w"),
        other => panic!("expected DuplicateTensor, got {other:?}"),
    }
}

#[test]
fn a_cut_or_padded_checkpoint_names_the_tensor_and_the_byte_counts() {
    let path = temp_path("whole.safetensors");
    let weights = good_weights();
    save_safetensors(
        &path,
        &[
            ("w", &weights[0]),
            ("classifier.weight", &weights[1]),
            ("classifier.bias", &weights[2]),
        ],
    )
    .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let data_len = (16 + 12 + 3) * 4;

    std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
    let err = Net::load(&path).err().expect("truncated");
    match &err {
        Error::TruncatedFile {
            tensor,
            needed,
            available,
            ..
        } => {
            // The tensor whose data comes last (safetensors orders data by name).
            assert_eq!(tensor, "w");
            assert_eq!((*needed, *available), (data_len, data_len - 5));
        }
        other => panic!("expected TruncatedFile, got {other:?}"),
    }
    assert!(err.to_string().contains("looks truncated"), "{err}");

    let mut padded = bytes.clone();
    padded.extend_from_slice(&[0; 7]);
    std::fs::write(&path, &padded).unwrap();
    match Net::load(&path).err().expect("padded") {
        Error::TrailingBytes {
            last, end, actual, ..
        } => {
            assert_eq!(last.as_deref(), Some("w"));
            assert_eq!((end, actual), (data_len, data_len + 7));
        }
        other => panic!("expected TrailingBytes, got {other:?}"),
    }

    // Offsets that disagree with dtype × shape: [4, 4] F32 is 64 bytes, the offsets span 60.
    let header = r#"{"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,60]}}"#;
    let path = raw_file("short_tensor.safetensors", header, &[0u8; 60]);
    let err = Net::load(&path).err().expect("short tensor");
    match &err {
        Error::TensorSize {
            tensor,
            expected,
            actual,
            ..
        } => {
            assert_eq!(tensor, "w");
            assert_eq!((*expected, *actual), (Some(64), 60));
        }
        other => panic!("expected TensorSize, got {other:?}"),
    }
    assert!(err.to_string().contains("64 bytes"), "{err}");
}

#[test]
fn missing_weights_are_all_named_with_the_closest_unused_names() {
    let path = temp_path("renamed.safetensors");
    let weights = good_weights();
    let position_ids = Tensor::from_i64(&[8], (0..8).collect()).unwrap();
    // The file calls the projection `fc`, the model (through #[rename]) `classifier`.
    save_safetensors(
        &path,
        &[
            ("w", &weights[0]),
            ("fc.weight", &weights[1]),
            ("fc.bias", &weights[2]),
            ("position_ids", &position_ids),
        ],
    )
    .unwrap();
    let err = Net::load(&path).err().expect("missing");
    match &err {
        Error::MissingWeight {
            missing, closest, ..
        } => {
            assert_eq!(missing, &["classifier.weight", "classifier.bias"]);
            assert_eq!(
                closest,
                &[Some("fc.weight".to_string()), Some("fc.bias".to_string())]
            );
        }
        other => panic!("expected MissingWeight, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("`classifier.bias` (closest unused name in the file: `fc.bias`)")
            && message.contains("#[rename]"),
        "{message}"
    );
}

#[test]
fn a_dimension_repeated_in_one_input_blames_that_input() {
    let model = Square::random(0);
    let y = Tensor::randn(&[3, 2], 1);
    let err = model.forward(&Tensor::randn(&[3, 4], 2), &y).unwrap_err();
    match &err {
        Error::InconsistentDim {
            dim,
            first,
            first_input,
            found,
            input,
        } => {
            assert_eq!((dim.as_str(), *first, *found), ("n", 3, 4));
            assert_eq!((first_input.as_str(), input.as_str()), ("x", "x"));
        }
        other => panic!("expected InconsistentDim, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("same input") && !message.contains("an earlier input"),
        "{message}"
    );
    // Across two inputs, the first one is named.
    let err = model
        .forward(&Tensor::randn(&[3, 3], 2), &Tensor::randn(&[4, 2], 1))
        .unwrap_err();
    assert!(
        err.to_string().contains("in input `x` but 4 in input `y`"),
        "{err}"
    );
}
