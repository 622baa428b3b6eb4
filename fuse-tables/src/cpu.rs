//! The CPU side of a plan's tables: what `fuse_runtime::exec` needs besides the kernel functions themselves.

use serde::{Deserialize, Serialize};

use crate::{DType, Mono};

/// Where a plan buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BufferKind {
    Input(usize),
    Param(usize),
    /// A state's buffer, owned by the caller's session (`#[state]` fields): read, and written in place by the
    /// state's `write` kernel.
    State(usize),
    /// The values `start, start + 1, ..` of an `arange` (i64, `numel` of them), by index into
    /// [`ProgramTables::aranges`] (its start): written by the runtime once the dims are bound.
    Arange(usize),
    /// An arena slot, by index into [`ProgramTables::slots`].
    Arena(usize),
    Output(usize),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferSpec {
    pub kind: BufferKind,
    pub dtype: DType,
    pub numel: Mono,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputSpec {
    pub buffer: usize,
    pub dims: Vec<Mono>,
}

/// What the report shows of one kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelInfo {
    pub name: String,
    pub kind: String,
    pub ops: Vec<String>,
    /// Bytes read and written, one term per distinct buffer.
    pub bytes: Vec<Mono>,
}

/// One kernel of a plan: which generated function runs it, on which buffers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCall {
    /// Index into the plan's distinct kernel functions (kernels that differ only in their buffers share one).
    pub function: usize,
    /// Indices into [`ProgramTables::buffers`]: the output, then one per read.
    pub buffers: Vec<usize>,
}

/// Everything of one compiled plan (fused or eager) that is data rather than code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramTables {
    pub buffers: Vec<BufferSpec>,
    /// Arena slot sizes in bytes, in layout order.
    pub slots: Vec<Mono>,
    /// One call per plan kernel, in order.
    pub kernels: Vec<KernelCall>,
    pub kernel_info: Vec<KernelInfo>,
    pub outputs: Vec<OutputSpec>,
    /// Fusions the planner refused, one line each, for the report.
    pub refusals: Vec<String>,
    /// The GEMM kernels whose B operand is a fixed view of a parameter: the runtime packs each such B once, when
    /// the weights are in place, instead of on every call. Empty (and absent from the encoding) when none is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packed_b: Vec<PackedB>,
    /// The slices whose bounds depend on the dynamic dims (`narrow(0, past, seq)`): the runtime checks each when
    /// it binds the dims, before any kernel runs. Empty (and absent from the encoding) when every bound was
    /// proved at build time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slice_bounds: Vec<SliceBound>,
    /// The dims that are sums of others (`past + seq`), in the order to compute them once the free dims are
    /// bound. Empty (and absent from the encoding) when the model has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sum_dims: Vec<SumDim>,
    /// The model's `#[state]` buffers, in [`BufferKind::State`] order: a session allocates them, and each call
    /// checks them against these shapes. Empty (and absent from the encoding) for a model without state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<StateSpec>,
    /// The start of each [`BufferKind::Arange`] buffer. Empty (and absent from the encoding) when the model has no
    /// `arange`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aranges: Vec<Mono>,
    /// The free dims some call may bind to 0: those whose empty values only make other empty values or are
    /// extended by a concat (an empty batch; a cache passed in, empty at a decoder's first step), those that size
    /// no value (a `#[dim]` that only offsets views), and those that may be 0 where other dims are ([`ZeroWith`]).
    /// Empty (and absent from the encoding) when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zero_dims: Vec<usize>,
    /// The dims (free or sums) that may be 0 only in a call where other dims are 0 too. Empty (and absent from the
    /// encoding) when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zero_with: Vec<ZeroWith>,
}

/// A dim a reduction, a product or attention reads over into a value it does not size (a mean over `seq`): it may
/// be 0 only in a call where each such value is empty too, through another of its dims (`seq` 0 with `batch` 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZeroWith {
    pub sym: usize,
    /// One set per value that reads it: a call must bind some dim of each set to 0 (sorted, none holding another).
    pub any_of: Vec<Vec<usize>>,
}

impl ZeroWith {
    /// Whether a call with these dims (sums filled in) leaves every value that reads `sym` empty.
    pub fn holds(&self, dims: &[usize]) -> bool {
        self.any_of
            .iter()
            .all(|set| set.iter().any(|&s| dims.get(s) == Some(&0)))
    }
}

/// A `#[state]` buffer (f32): its checkpoint-style name and its dims, which may name dynamic dims (`batch`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSpec {
    pub name: String,
    pub dims: Vec<Mono>,
}

/// A dynamic dim defined as a sum: `dims[sym] = Σ terms − less`, each term over free dims only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SumDim {
    pub sym: usize,
    pub terms: Vec<Mono>,
    /// The constant subtracted (`seq - 1`: 1).
    #[serde(default)]
    pub less: usize,
    /// Whether 0 is a valid value in some call: when the dim only offsets views (a `narrow` start), its empty
    /// values make only empty values (see [`ProgramTables::zero_dims`]), or other dims are 0 too ([`ZeroWith`]).
    #[serde(default)]
    pub may_be_zero: bool,
}

/// A call whose free dims make a sum dim negative, or 0 where it may not be ([`SumDim::may_be_zero`]: a mean over
/// `x.narrow(1, 0, seq - 1)` at `seq` 1): the call is refused before any kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SumDimOutOfRange {
    pub sym: usize,
    pub value: i64,
}

impl ProgramTables {
    /// Fills in the sum dims from the free ones (the sum saturating: an absurd one fails a bound check, never
    /// wraps). One out of range is set to 0 and the first such is the error.
    pub fn derive_dims(&self, dims: &mut [usize]) -> Result<(), SumDimOutOfRange> {
        let mut first = Ok(());
        for d in &self.sum_dims {
            let sum = d
                .terms
                .iter()
                .fold(0usize, |acc, t| acc.saturating_add(t.eval(dims)));
            let value = i64::try_from(sum as i128 - d.less as i128).unwrap_or(i64::MAX);
            if first.is_ok() && (value < 0 || (value == 0 && !d.may_be_zero)) {
                first = Err(SumDimOutOfRange { sym: d.sym, value });
            }
            if let Some(slot) = dims.get_mut(d.sym) {
                *slot = usize::try_from(value).unwrap_or(0);
            }
        }
        first
    }

    /// Whether dim `sym` is a sum of others (computed, never bound by an input).
    pub fn is_sum_dim(&self, sym: usize) -> bool {
        self.sum_dims.iter().any(|d| d.sym == sym)
    }

    /// Whether some call may bind the dim `sym` to 0 (see [`ProgramTables::zero_dims`], [`SumDim::may_be_zero`]).
    pub fn may_be_zero(&self, sym: usize) -> bool {
        self.zero_dims.contains(&sym) || self.sum_dims.iter().any(|d| d.sym == sym && d.may_be_zero)
    }

    /// The condition under which `sym` may be 0, where it has one (see [`ZeroWith`]).
    pub fn zero_with(&self, sym: usize) -> Option<&ZeroWith> {
        self.zero_with.iter().find(|z| z.sym == sym)
    }

    /// The first dim a call with these dims (sums filled in) binds to 0 though a value that reads it is not
    /// empty ([`ZeroWith`]); `None` when every dim at 0 may be.
    pub fn zero_refused(&self, dims: &[usize]) -> Option<&ZeroWith> {
        self.zero_with
            .iter()
            .find(|z| dims.get(z.sym) == Some(&0) && !z.holds(dims))
    }
}

/// `start + len <= size` for one slice of an axis, each side symbolic in the dynamic dims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceBound {
    /// The slice for the error: the shape it slices and its node (`[128, 64] (%7)`).
    pub what: String,
    /// The bound in the dims' names, for the report: `past + seq <= 128`.
    pub text: String,
    pub axis: usize,
    pub start: Mono,
    pub len: Mono,
    pub size: Mono,
    /// A write into a state at `start` (the error then names the state), not a slice that reads.
    #[serde(default)]
    pub write: bool,
    /// The rows an embedding reads at ids made by an `arange` (`what` then names the table).
    #[serde(default)]
    pub ids: bool,
}

/// A GEMM's B operand that is a parameter read through a view whose every size is static: the k×n matrix with
/// element (l, j) at `offset + l·rs + j·cs` of the parameter's buffer, the same for every batch of the product.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PackedB {
    /// The plan kernel (index into [`ProgramTables::kernels`]) whose GEMM reads it.
    pub kernel: usize,
    /// The parameter's buffer (index into [`ProgramTables::buffers`], of kind [`BufferKind::Param`]).
    pub buffer: usize,
    pub offset: usize,
    pub rs: usize,
    pub cs: usize,
    pub k: usize,
    pub n: usize,
    /// The kernel reads the parameter only as this B (no other operand or epilogue read of its buffer), so the
    /// pack stands for every read of the buffer there: a parameter whose every reader is such a kernel need not
    /// be kept beside its packs.
    #[serde(default)]
    pub exclusive: bool,
    /// The kernel is a gather (an embedding) whose table is this B transposed: it reads rows of the table, which
    /// are B's columns, from the reduced pack a product with the same view made (a tied output layer), or in bf16
    /// from one made for it; in int8 and f32 a table only gathered stays f32.
    #[serde(default)]
    pub gather: bool,
}
