//! Parameter loading: safetensors checkpoints, or seeded random weights when no checkpoint is given.
//!
//! A compiled model knows every parameter's name and shape at build time (its [`ParamSpec`] table), so loading
//! checks the file against that table up front and names the first tensor that does not fit, instead of failing
//! later inside a kernel with an index error.

use std::collections::HashSet;
use std::path::Path;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::tensor::{try_normal_samples, DType, Tensor};
use crate::tensor_file::{widen_to_f32, TensorFile};

/// One f32 parameter a compiled model expects.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    /// The tensor's name in the checkpoint (e.g. `encoder.layer.0.attention.self.query.weight`).
    pub name: &'static str,
    pub shape: &'static [usize],
    /// How [`random_weights`] fills it when there is no checkpoint.
    pub init: Init,
}

impl ParamSpec {
    /// The form the macro writes, one per parameter: positional, because a deep model has hundreds of them and
    /// field names would be most of their tokens.
    pub const fn new(name: &'static str, shape: &'static [usize], mean: f32, std: f32) -> Self {
        ParamSpec {
            name,
            shape,
            init: Init { mean, std },
        }
    }
}

/// A normal distribution `mean + std * N(0, 1)` for random initialisation.
#[derive(Clone, Copy, Debug)]
pub struct Init {
    pub mean: f32,
    pub std: f32,
}

/// Loads every parameter of `specs`, in order, from the safetensors file at `path`.
///
/// F16 and BF16 tensors are widened to f32, so half-precision checkpoints work unchanged. Tensors in the file
/// that no spec names (e.g. BERT's i64 `position_ids` buffer) are ignored. When parameters are missing, the
/// error names all of them, each with the closest unused name in the file.
pub fn load_safetensors(path: &Path, specs: &[ParamSpec]) -> Result<Vec<Tensor>> {
    let checkpoint = Checkpoint::open(path, specs)?;
    specs.iter().map(|spec| checkpoint.read(spec)).collect()
}

/// A safetensors file checked against a model's parameters (each present), read from the file one parameter at a
/// time: a model made in its precision (`load_in`) widens, packs and drops each before reading the next, so
/// neither the file's bytes nor the f32 copies of all the weights are ever in memory at once.
pub(crate) struct Checkpoint {
    file: TensorFile,
}

impl Checkpoint {
    pub(crate) fn open(path: &Path, specs: &[ParamSpec]) -> Result<Checkpoint> {
        let file = TensorFile::open_streaming(path)?;
        let missing: Vec<&ParamSpec> = specs
            .iter()
            .filter(|s| file.info(s.name).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(missing_weights(&file, specs, &missing));
        }
        Ok(Checkpoint { file })
    }

    /// The parameter `spec` as an f32 tensor of its declared shape.
    pub(crate) fn read(&self, spec: &ParamSpec) -> Result<Tensor> {
        let info = self
            .file
            .info(spec.name)
            .ok_or_else(|| Error::MissingTensor {
                name: spec.name.into(),
                path: self.file.path().to_path_buf(),
            })?;
        if info.shape != spec.shape {
            return Err(Error::WeightShape {
                name: spec.name.to_string(),
                expected: spec.shape.to_vec(),
                found: info.shape.clone(),
            });
        }
        let values = widen_to_f32(info.dtype, &self.file.data(info)?).ok_or_else(|| {
            Error::WeightDType {
                name: spec.name.to_string(),
                expected: DType::F32,
                found: info.dtype.to_string(),
            }
        })??;
        Tensor::from_f32(spec.shape, values)
    }
}

/// The error for parameters the file lacks: each with the closest name in the file that no parameter claims
/// (the name a wrong `#[rename]` or a prefix left the checkpoint with).
fn missing_weights(file: &TensorFile, specs: &[ParamSpec], missing: &[&ParamSpec]) -> Error {
    let claimed: HashSet<&str> = specs.iter().map(|s| s.name).collect();
    let unclaimed: Vec<_> = file
        .tensors()
        .iter()
        .filter(|t| !claimed.contains(t.name.as_str()))
        .collect();
    let closest = missing
        .iter()
        .map(|spec| {
            unclaimed
                .iter()
                .map(|t| {
                    let distance = edit_distance(spec.name, &t.name);
                    let same_shape = t.shape == spec.shape;
                    (!same_shape, distance, t)
                })
                // A name is offered when its shape fits or it is at most half rewritten.
                .filter(|(other_shape, distance, t)| {
                    !other_shape || 2 * distance <= spec.name.len().max(t.name.len())
                })
                .min_by_key(|(other_shape, distance, _)| (*other_shape, *distance))
                .map(|(_, _, t)| t.name.clone())
        })
        .collect();
    Error::MissingWeight {
        missing: missing.iter().map(|s| s.name.to_string()).collect(),
        path: file.path().to_path_buf(),
        closest,
    }
}

/// Levenshtein distance over chars (one row at a time).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// "weight `a` (closest unused name in the file: `x`)", "weights `a`, `b`", ... for [`Error::MissingWeight`].
pub(crate) fn list_missing(missing: &[String], closest: &[Option<String>]) -> String {
    let names: Vec<String> = missing
        .iter()
        .enumerate()
        .map(|(i, name)| match closest.get(i).and_then(Option::as_ref) {
            Some(near) => format!("`{name}` (closest unused name in the file: `{near}`)"),
            None => format!("`{name}`"),
        })
        .collect();
    let noun = if missing.len() == 1 {
        "weight"
    } else {
        "weights"
    };
    let verb = if missing.len() == 1 { "is" } else { "are" };
    format!("{} {noun} {} {verb}", missing.len(), names.join(", "))
}

/// Random parameters `mean + std * N(0, 1)` for each spec; the same for the same seed on every platform.
/// Panics where [`try_random_weights`] returns an error (see it for the fallible form).
pub fn random_weights(specs: &[ParamSpec], seed: u64) -> Vec<Tensor> {
    try_random_weights(specs, seed)
        .unwrap_or_else(|e| panic!("{e}; use the try_random form to handle it"))
}

/// Random parameters `mean + std * N(0, 1)` for each spec, or [`Error::OutOfMemory`] before anything is
/// allocated when all of them together do not fit.
///
/// Parameter `i` draws from ChaCha8 stream `i` of the seed, so two parameters of the same shape differ and
/// adding a parameter does not change the values of the ones before it.
pub fn try_random_weights(specs: &[ParamSpec], seed: u64) -> Result<Vec<Tensor>> {
    check_random_weights_fit(specs)?;
    (0..specs.len())
        .map(|i| random_weight(specs, i, seed))
        .collect()
}

/// [`Error::OutOfMemory`] unless the f32 weights of `specs` fit in what the process may still use.
pub(crate) fn check_random_weights_fit(specs: &[ParamSpec]) -> Result<()> {
    let total = specs.iter().try_fold(0usize, |total, spec| {
        let numel = spec
            .shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))?;
        total.checked_add(numel.checked_mul(std::mem::size_of::<f32>())?)
    });
    let total = total.ok_or(Error::OutOfMemory {
        what: "the weights",
        bytes: None,
        available: None,
    })?;
    crate::memory::check_fits("the weights", total)
}

/// Parameter `i` of `specs`, seeded: the same values whichever other parameters are made, and in any order.
pub(crate) fn random_weight(specs: &[ParamSpec], i: usize, seed: u64) -> Result<Tensor> {
    let spec = specs.get(i).ok_or(Error::WeightCount {
        expected: specs.len(),
        found: i + 1,
    })?;
    let numel = spec.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(i as u64);
    let mut values = try_normal_samples(&mut rng, numel.unwrap_or(usize::MAX), "a weight")?;
    for v in &mut values {
        *v = spec.init.mean + spec.init.std * *v;
    }
    Tensor::from_f32(spec.shape, values)
}

/// Writes named tensors to a safetensors file (f32 as F32, ids as I64); see [`crate::tensor_file::save_tensors`].
pub fn save_safetensors(path: &Path, names_and_tensors: &[(&str, &Tensor)]) -> Result<()> {
    crate::tensor_file::save_tensors(path, names_and_tensors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::{Dtype, TensorView};
    use std::path::PathBuf;

    const INIT: Init = Init {
        mean: 0.0,
        std: 0.02,
    };
    const SPECS: &[ParamSpec] = &[
        ParamSpec {
            name: "w",
            shape: &[3, 4],
            init: INIT,
        },
        ParamSpec {
            name: "b",
            shape: &[4],
            init: Init {
                mean: 1.0,
                std: 0.0,
            },
        },
    ];

    /// A fresh file path under the target's temp dir, unique per test.
    fn temp_path(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fuse-runtime-weights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(format!("{tag}.safetensors"))
    }

    #[test]
    fn round_trip() {
        let path = temp_path("round_trip");
        let params = random_weights(SPECS, 7);
        let ids = Tensor::from_i64(&[2], vec![0, 1]).unwrap();
        save_safetensors(
            &path,
            &[("b", &params[1]), ("w", &params[0]), ("position_ids", &ids)],
        )
        .unwrap();
        let loaded = load_safetensors(&path, SPECS).unwrap();
        assert_eq!(loaded, params);
        assert_eq!(params[1].as_f32().unwrap(), &[1.0; 4]);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn random_weights_deterministic_and_distinct() {
        let specs = [
            SPECS[0],
            ParamSpec {
                name: "w2",
                ..SPECS[0]
            },
        ];
        let a = random_weights(&specs, 1);
        assert_eq!(a, random_weights(&specs, 1));
        assert_ne!(a[0], a[1]);
        assert_ne!(a, random_weights(&specs, 2));
        assert!(a[0].as_f32().unwrap().iter().all(|x| x.abs() < 0.2));
    }

    #[test]
    fn missing_file_names_the_path() {
        let path = temp_path("does_not_exist");
        let err = load_safetensors(&path, SPECS).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        assert!(
            err.to_string().contains("does_not_exist.safetensors"),
            "{err}"
        );
    }

    #[test]
    fn corrupt_file_is_an_error_not_a_panic() {
        let path = temp_path("corrupt");
        let params = random_weights(SPECS, 7);
        save_safetensors(&path, &[("w", &params[0]), ("b", &params[1])]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        for cut in [0, 5, 8, 20, bytes.len() - 1] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let err = load_safetensors(&path, SPECS).unwrap_err();
            assert!(
                matches!(err, Error::Safetensors { .. } | Error::TruncatedFile { .. }),
                "{err:?}"
            );
            assert!(err.to_string().contains("corrupt.safetensors"), "{err}");
        }
        std::fs::write(&path, b"\xff\xff\xff\xff\xff\xff\xff\xffgarbage").unwrap();
        assert!(matches!(
            load_safetensors(&path, SPECS),
            Err(Error::Safetensors { .. })
        ));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn wrong_shape_and_missing_name() {
        let path = temp_path("wrong_shape");
        let w = Tensor::zeros(&[4, 3]);
        let b = Tensor::zeros(&[4]);
        save_safetensors(&path, &[("w", &w), ("b", &b)]).unwrap();
        match load_safetensors(&path, SPECS).unwrap_err() {
            Error::WeightShape {
                name,
                expected,
                found,
            } => {
                assert_eq!(name, "w");
                assert_eq!(expected, vec![3, 4]);
                assert_eq!(found, vec![4, 3]);
            }
            other => panic!("unexpected {other:?}"),
        }
        save_safetensors(&path, &[("w", &Tensor::zeros(&[3, 4]))]).unwrap();
        match load_safetensors(&path, SPECS).unwrap_err() {
            Error::MissingWeight { missing, .. } => assert_eq!(missing, ["b"]),
            other => panic!("unexpected {other:?}"),
        }
        let ids = Tensor::from_i64(&[4], vec![0; 4]).unwrap();
        save_safetensors(&path, &[("w", &Tensor::zeros(&[3, 4])), ("b", &ids)]).unwrap();
        match load_safetensors(&path, SPECS).unwrap_err() {
            Error::WeightDType { name, found, .. } => {
                assert_eq!(name, "b");
                assert_eq!(found, "I64");
            }
            other => panic!("unexpected {other:?}"),
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn half_precision_is_widened() {
        let path = temp_path("half");
        let w: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
        let b = [0.5f32, -2.0, 3.0, 1e-3];
        let w16: Vec<u8> = w
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        let b16: Vec<u8> = b
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        let views = vec![
            ("w", TensorView::new(Dtype::F16, vec![3, 4], &w16).unwrap()),
            ("b", TensorView::new(Dtype::BF16, vec![4], &b16).unwrap()),
        ];
        std::fs::write(&path, safetensors::serialize(views, &None).unwrap()).unwrap();
        let loaded = load_safetensors(&path, SPECS).unwrap();
        assert_eq!(loaded[0].as_f32().unwrap(), &w[..]);
        let lb = loaded[1].as_f32().unwrap();
        for (x, y) in lb.iter().zip(&b) {
            assert!((x - y).abs() <= y.abs() / 128.0, "{x} vs {y}");
        }
        std::fs::remove_file(&path).unwrap();
    }
}
