//! The tables of a compiled plan: which buffers it has, which kernel runs on which buffers, what the report shows,
//! and for the GPU the launch geometry and GEMM descriptions. `fuse-kernels` writes them at build time and the
//! macro embeds them as one JSON string literal per plan; `fuse-runtime` decodes that string once, when a model is
//! first loaded.
//!
//! Why a string and not Rust struct literals: the tables grow with model depth (a 30-layer decoder has hundreds of
//! kernels, each with buffers, sizes and a report line) while the kernels' code does not (identical layers share
//! one function). As struct literals they were most of what rustc had to parse for a deep model; as a literal
//! they are one token. Both sides use the types below, so they cannot disagree on the format.

mod cpu;
mod cuda;

pub use cpu::{
    BufferKind, BufferSpec, KernelCall, KernelInfo, OutputSpec, PackedB, ProgramTables, SliceBound,
    StateSpec, SumDim, SumDimOutOfRange, ZeroWith,
};
pub use cuda::{CudaAccess, CudaGemm, CudaKernel, CudaLaunch, CudaTables, GridSpec, LaunchRole};

use std::fmt;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// Element type of a tensor or plan buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F32,
    I64,
}

impl DType {
    /// The lower-case name used in error messages and generated code (`"f32"`, `"i64"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I64 => "i64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::I64 => 8,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `coeff × Π dims[syms]`: a size that depends on the dynamic dims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mono {
    pub coeff: usize,
    pub syms: Vec<usize>,
}

impl Mono {
    /// The size at `dims`, saturated at `usize::MAX`: sizes that matter for memory are checked first with
    /// [`Mono::checked_eval`], so a saturated value only ever fails a comparison or an allocation, never wraps
    /// into a small wrong size.
    pub fn eval(&self, dims: &[usize]) -> usize {
        self.syms
            .iter()
            .fold(self.coeff, |acc, &s| acc.saturating_mul(dims[s]))
    }

    /// [`Mono::eval`], or `None` when the product overflows (sizes a user asked for, not yet backed by memory).
    pub fn checked_eval(&self, dims: &[usize]) -> Option<usize> {
        self.syms
            .iter()
            .try_fold(self.coeff, |acc, &s| acc.checked_mul(dims[s]))
    }
}

/// The string the macro embeds for `tables`. Serialising these types cannot fail (no maps with non-string keys,
/// no floats), so an error here is a bug in this crate; it is reported in the string, which then fails to decode
/// with that message at load time rather than aborting the build.
pub fn encode<T: Serialize>(tables: &T) -> String {
    serde_json::to_string(tables).unwrap_or_else(|e| format!("unencodable plan tables: {e}"))
}

/// The tables back from [`encode`]'s string; an error names what did not match (a macro and runtime of different
/// fuse versions, in practice).
pub fn decode<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mono_evaluates_and_reports_overflow() {
        let m = Mono {
            coeff: 3,
            syms: vec![0, 1],
        };
        assert_eq!(m.eval(&[2, 5]), 30);
        assert_eq!(m.checked_eval(&[usize::MAX, 2]), None);
        assert_eq!(m.eval(&[usize::MAX, 2]), usize::MAX);
    }

    #[test]
    fn tables_round_trip() {
        let mut tables = ProgramTables {
            buffers: vec![BufferSpec {
                kind: BufferKind::Arena(0),
                dtype: DType::F32,
                numel: Mono {
                    coeff: 8,
                    syms: vec![0],
                },
            }],
            slots: vec![Mono {
                coeff: 32,
                syms: vec![0],
            }],
            kernels: vec![KernelCall {
                function: 0,
                buffers: vec![0],
            }],
            kernel_info: vec![KernelInfo {
                name: "k0 \"quoted\"".into(),
                kind: "pointwise".into(),
                ops: vec!["add".into()],
                bytes: vec![],
            }],
            outputs: vec![OutputSpec {
                buffer: 0,
                dims: vec![],
            }],
            refusals: vec![],
            packed_b: vec![PackedB {
                kernel: 0,
                buffer: 0,
                offset: 4,
                rs: 1,
                cs: 3,
                k: 3,
                n: 2,
                exclusive: true,
                gather: false,
            }],
            slice_bounds: vec![SliceBound {
                what: "[128, past] (%3)".into(),
                text: "past + seq <= 128".into(),
                axis: 0,
                start: Mono {
                    coeff: 1,
                    syms: vec![1],
                },
                len: Mono {
                    coeff: 1,
                    syms: vec![0],
                },
                size: Mono {
                    coeff: 128,
                    syms: vec![],
                },
                write: false,
                ids: false,
            }],
            sum_dims: vec![SumDim {
                sym: 2,
                terms: vec![
                    Mono {
                        coeff: 1,
                        syms: vec![0],
                    },
                    Mono {
                        coeff: 1,
                        syms: vec![1],
                    },
                ],
                less: 0,
                may_be_zero: false,
            }],
            states: vec![],
            aranges: vec![Mono {
                coeff: 1,
                syms: vec![1],
            }],
            zero_dims: vec![1],
            zero_with: vec![],
        };
        tables.states = vec![StateSpec {
            name: "k_cache".into(),
            dims: vec![Mono {
                coeff: 1,
                syms: vec![0],
            }],
        }];
        let mut dims = [3, 4, 1];
        tables.derive_dims(&mut dims).unwrap();
        assert_eq!(dims, [3, 4, 7]);
        let back: ProgramTables = decode(&encode(&tables)).unwrap();
        assert_eq!(back, tables);
        // A difference (`dims[2] = dims[0] + dims[1] - 8`): negative, or 0 where it may not be, is refused.
        tables.sum_dims[0].less = 8;
        let back: ProgramTables = decode(&encode(&tables)).unwrap();
        assert_eq!(back, tables);
        let refused = |dims: &mut [usize; 3]| tables.derive_dims(dims).unwrap_err().value;
        assert_eq!(refused(&mut [3, 4, 1]), -1);
        assert_eq!(refused(&mut [3, 5, 1]), 0);
        tables.sum_dims[0].may_be_zero = true;
        let mut dims = [3, 5, 1];
        tables.derive_dims(&mut dims).unwrap();
        assert_eq!(dims, [3, 5, 0]);
        // That 0 only where dim 0 or dim 1 is 0 too, and dim 1 only where dim 0 is (a mean over it).
        tables.zero_with = vec![
            ZeroWith {
                sym: 2,
                any_of: vec![vec![0, 1]],
            },
            ZeroWith {
                sym: 1,
                any_of: vec![vec![0]],
            },
        ];
        let back: ProgramTables = decode(&encode(&tables)).unwrap();
        assert_eq!(back, tables);
        let refused = |dims: &[usize]| tables.zero_refused(dims).map(|z| z.sym);
        assert_eq!(refused(&[3, 5, 0]), Some(2));
        assert_eq!(refused(&[0, 5, 0]), None);
        assert_eq!(refused(&[3, 0, 0]), Some(1));
        assert_eq!(refused(&[0, 0, 0]), None);
        assert_eq!(refused(&[3, 4, 1]), None);
    }

    #[test]
    fn a_foreign_string_is_an_error_not_a_panic() {
        let err = decode::<ProgramTables>("{\"buffers\": 3}").unwrap_err();
        assert!(
            err.contains("buffers") || err.contains("invalid type"),
            "{err}"
        );
    }
}
