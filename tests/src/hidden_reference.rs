//! The reference files of the tests that hold an example model's last hidden state to transformers'
//! (`tests/data/{mpnet,roberta,gpt2,t5}_hidden.json`, made by `scripts/{mpnet,roberta,gpt2,t5}_reference.py`, which
//! share `scripts/hidden_reference.py`): the inputs of a right-padded batch, and hidden rows of each sequence, at the
//! positions the file lists (`positions`) or at every real one.

use std::path::Path;

use fuse_runtime::{CompiledModel, PlanMode, Tensor};
use serde_json::Value;

/// One file, read.
pub struct HiddenReference {
    pub doc: Value,
    pub batch: usize,
    pub seq: usize,
}

/// One hidden row: what to call it, where it starts in the output, and its values.
pub struct RefRow {
    pub label: String,
    pub start: usize,
    pub values: Vec<f64>,
}

impl HiddenReference {
    /// `tests/data/<file>`, its batch and sequence length from `input_ids`.
    pub fn read(file: &str) -> HiddenReference {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("data")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let ids = doc["input_ids"].as_array().expect("input_ids");
        let (batch, seq) = (ids.len(), ids[0].as_array().expect("a row").len());
        HiddenReference { doc, batch, seq }
    }

    /// The `[batch, seq]` integers under `key` (`input_ids`).
    pub fn ids(&self, key: &str) -> Tensor {
        let values = self.flat(key, |v| v.as_i64().expect("an integer"));
        Tensor::from_i64(&[self.batch, self.seq], values).expect("[batch, seq] ids")
    }

    /// `attention_mask` as floats, 1.0 for real tokens.
    pub fn mask(&self) -> Tensor {
        let values = self.flat("attention_mask", |v| v.as_f64().expect("0 or 1") as f32);
        Tensor::from_f32(&[self.batch, self.seq], values).expect("a [batch, seq] mask")
    }

    /// The hidden rows of an output `[batch, seq, width]`.
    pub fn rows(&self, width: usize) -> Vec<RefRow> {
        let listed: Option<Vec<usize>> = self.doc["positions"].as_array().map(|ps| {
            ps.iter()
                .map(|p| p.as_u64().expect("a position") as usize)
                .collect()
        });
        let sequences = self.doc["hidden"].as_array().expect("hidden");
        let mut rows = Vec::new();
        for (b, sequence) in sequences.iter().enumerate() {
            for (i, values) in sequence.as_array().expect("hidden rows").iter().enumerate() {
                let p = listed.as_ref().map_or(i, |ps| ps[i]);
                let values = values.as_array().expect("a hidden row");
                rows.push(RefRow {
                    label: format!("sequence {b}, position {p}"),
                    start: (b * self.seq + p) * width,
                    values: values
                        .iter()
                        .map(|v| v.as_f64().expect("a value"))
                        .collect(),
                });
            }
        }
        rows
    }

    fn flat<T>(&self, key: &str, each: impl Fn(&Value) -> T) -> Vec<T> {
        let rows = self.doc[key].as_array().unwrap_or_else(|| panic!("{key}"));
        rows.iter()
            .flat_map(|row| row.as_array().expect("a row").iter().map(&each))
            .collect()
    }
}

/// Both plans of `model` on `inputs` against `rows` (of its first output), each element within `atol + rtol·|want|`;
/// panics naming the plan and the first row that is off, else prints each plan's largest difference.
pub fn assert_plans_match_rows(
    model: &CompiledModel,
    inputs: &[&Tensor],
    rows: &[RefRow],
    atol: f64,
    rtol: f64,
) {
    assert_plans_match_output_rows(model, inputs, 0, rows, atol, rtol);
}

/// [`assert_plans_match_rows`] for output `output` of `model`.
pub fn assert_plans_match_output_rows(
    model: &CompiledModel,
    inputs: &[&Tensor],
    output: usize,
    rows: &[RefRow],
    atol: f64,
    rtol: f64,
) {
    for mode in [PlanMode::Fused, PlanMode::Eager] {
        let outputs = model.run(mode, inputs).expect("the model runs");
        let got = outputs
            .get(output)
            .unwrap_or_else(|| panic!("the model has no output {output}"))
            .to_f32_vec();
        let mut worst = 0.0f64;
        for row in rows {
            for (j, &want) in row.values.iter().enumerate() {
                let g = got[row.start + j];
                let err = (f64::from(g) - want).abs();
                worst = worst.max(err);
                assert!(
                    err <= atol + rtol * want.abs(),
                    "{mode:?} plan: {}, element {j}: {g} against {want}",
                    row.label
                );
            }
        }
        eprintln!("{mode:?} plan: largest difference from the reference {worst:.2e}");
    }
}
