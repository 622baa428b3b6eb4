//! The one error type of the runtime.
//!
//! Every variant names the input, dimension, weight or file involved, because these errors reach people who
//! called a generated model with the wrong data or pointed it at the wrong checkpoint, and "shape mismatch" alone
//! does not tell them what to fix.

use std::path::PathBuf;

use crate::memory::Headroom;
use crate::tensor::DType;

/// Everything that can go wrong when running a compiled model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("expected {expected} input tensor(s), got {found}")]
    InputCount { expected: usize, found: usize },

    #[error("input `{input}` must have rank {expected}, got a tensor of shape {found:?}")]
    InputRank {
        input: String,
        expected: usize,
        found: Vec<usize>,
    },

    #[error("input `{input}` must have shape {expected}, got {found:?}")]
    InputShape {
        input: String,
        expected: String,
        found: Vec<usize>,
    },

    #[error("input `{input}` must be {expected}, got {found}")]
    InputDType {
        input: String,
        expected: DType,
        found: DType,
    },

    #[error(
        "dimension `{dim}` is {first} {} but {found} in input `{input}`; every use of a named dimension must agree",
        if first_input == input { "earlier in the same input".to_string() } else { format!("in input `{first_input}`") }
    )]
    InconsistentDim {
        dim: String,
        first: usize,
        /// The input where the dimension was first bound (may be `input` itself: `#[shape(n, n)]`).
        first_input: String,
        found: usize,
        input: String,
    },

    #[error("dimension `{dim}` is 0, but {}", zero_dim_reason(.unless))]
    ZeroDim {
        dim: String,
        /// Where the dim may be 0 in another call: for each set, one of its dims 0 too (`[["batch"]]` for a mean
        /// over `seq`: an empty batch may have `seq` 0). Empty where it may be 0 in no call.
        unless: Vec<Vec<String>>,
    },

    #[error(
        "dimension argument `{dim}` is {value}; a dim argument must be a non-negative integer"
    )]
    NegativeDim { dim: String, value: i64 },

    #[error("the dim `{dim}` is {value} for this call's sizes; a difference of dims must not be negative")]
    DimOutOfRange { dim: String, value: i64 },

    #[error(
        "a dimension argument of {value} is past i64::MAX, the largest the untyped API carries"
    )]
    DimArgTooLarge { value: usize },

    /// A `narrow` (or `slice`) whose bounds depend on the dims reaches past its axis at these dims; checked
    /// before any kernel runs.
    #[error("narrow of axis {axis} of {what}: start {start} + length {len} > {size}")]
    NarrowOutOfRange {
        /// A parameter's name and shape (`embeddings.position_embeddings.weight [512, 384]`), else the shape it
        /// slices and the slice's node (`[128, 64] (%7)`).
        what: String,
        axis: usize,
        start: usize,
        len: usize,
        size: usize,
    },

    /// A state write (`self.cache.write(axis, start, value)`) whose positions reach past the state's axis at the
    /// dims of this call (a KV cache full: `past + seq` above its maximum length); checked before any kernel
    /// runs, so the state is unchanged.
    #[error(
        "write of {len} positions at {start} along axis {axis} of the state {what}: past its size {size}"
    )]
    StateWriteOutOfRange {
        /// The state's shape and the write's node, e.g. `[1, 3, 256, 64] (%12)`.
        what: String,
        axis: usize,
        start: usize,
        len: usize,
        size: usize,
    },

    #[error("the model has no dynamic dimension `{dim}`; its dynamic dimensions are {known:?}")]
    UnknownDim { dim: String, known: Vec<String> },

    #[error(
        "dimension `{dim}` is given as {first} but is {second} (given twice, or a sum of dims whose terms add up \
         to {second})"
    )]
    DimSizeConflict {
        dim: String,
        first: usize,
        second: usize,
    },

    #[error("no size given for dynamic dimension `{dim}`")]
    MissingDim { dim: String },

    #[error(
        "model `{model}` keeps state between calls (#[state] fields): make a session with `model.session(&[(\"batch\", n)])` \
         and pass it to `forward`"
    )]
    NeedsSession { model: String },

    #[error(
        "the f32 copies of {count} weight(s) of model `{model}` (`{first}`, ...) were released when its CPU GEMMs \
         were packed in {precision}; {needed_for} needs them: load the model again"
    )]
    WeightsReleased {
        model: String,
        precision: String,
        count: usize,
        first: String,
        needed_for: &'static str,
    },

    #[error("this session belongs to model `{session_model}`, not `{model}`")]
    SessionMismatch {
        model: String,
        session_model: String,
    },

    #[error(
        "state `{state}` of this session has shape {found:?}, but this call needs {expected:?}: a session serves the \
         dims it was made for"
    )]
    StateShape {
        state: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },

    #[error(
        "cannot allocate {what} ({}): not enough memory{}",
        .bytes.map_or_else(|| "a size past the address space".to_string(), |b| format!("{b} bytes")),
        .available.map_or_else(String::new, |a| format!("; the process may use {} more bytes ({})", a.bytes, a.limit))
    )]
    OutOfMemory {
        what: &'static str,
        /// `None` when the size itself overflows.
        bytes: Option<usize>,
        /// What the process could still use, when a memory limit (cgroup or `MemAvailable`) refused the request
        /// before anything was allocated; `None` when the allocator refused it or the size overflows.
        available: Option<Headroom>,
    },

    #[error("input `{input}` holds id {id}, outside 0..{vocab}: embedding table `{table}` has {vocab} rows")]
    IdOutOfRange {
        input: String,
        id: i64,
        /// The row count of the smallest table the input indexes.
        vocab: usize,
        /// That table's checkpoint name.
        table: String,
    },

    #[error("cannot read `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("`{}` is not a valid safetensors file: {message}", path.display())]
    Safetensors { path: PathBuf, message: String },

    #[error("`{}` names tensor `{name}` twice; every tensor of a file needs its own name", path.display())]
    DuplicateTensor { path: PathBuf, name: String },

    #[error(
        "`{}` looks truncated: tensor `{tensor}` ends at byte {needed} of the data, but the file holds only \
         {available} data bytes",
        path.display()
    )]
    TruncatedFile {
        path: PathBuf,
        tensor: String,
        /// Data bytes the header promises, up to the end of `tensor`.
        needed: usize,
        /// Data bytes the file has.
        available: usize,
    },

    #[error(
        "`{}` has {actual} data bytes but its tensors end at byte {end}{}: the file is longer than its header \
         says (damaged, or written by a tool that appended to it)",
        path.display(),
        last.as_ref().map_or(String::new(), |t| format!(" (after `{t}`)"))
    )]
    TrailingBytes {
        path: PathBuf,
        /// The tensor whose data comes last, if any.
        last: Option<String>,
        end: usize,
        actual: usize,
    },

    #[error(
        "tensor `{tensor}` in `{}` is {dtype} of shape {shape:?}, which is {} bytes, but its data offsets span \
         {actual} bytes",
        path.display(),
        expected.map_or_else(|| "more than fit in memory".to_string(), |b| b.to_string())
    )]
    TensorSize {
        path: PathBuf,
        tensor: String,
        dtype: String,
        shape: Vec<usize>,
        /// `None` when the size overflows `usize`.
        expected: Option<usize>,
        actual: usize,
    },

    #[error("tensor `{name}` is not in `{}`", path.display())]
    MissingTensor { name: String, path: PathBuf },

    #[error(
        "tensor `{name}` in `{}` is stored as {found}; fuse reads F32, F16 and BF16 (as f32) and I64, I32 (as i64)",
        path.display()
    )]
    UnsupportedStoredDType {
        name: String,
        path: PathBuf,
        found: String,
    },

    #[error(
        "{} missing from `{}`{}",
        crate::weights::list_missing(missing, closest),
        path.display(),
        if closest.iter().any(Option::is_some) { "; a wrong #[rename] is the usual cause" } else { "" }
    )]
    MissingWeight {
        /// Every parameter the file lacks, in declaration order.
        missing: Vec<String>,
        path: PathBuf,
        /// For each missing name, the closest name in the file that no parameter uses, if one is close.
        closest: Vec<Option<String>>,
    },

    #[error("weight `{name}` must have shape {expected:?}, the file has {found:?}")]
    WeightShape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },

    #[error(
        "weight `{name}` must be {expected} (or f16/bf16, which are widened), the file has {found}"
    )]
    WeightDType {
        name: String,
        expected: DType,
        found: String,
    },

    #[error(
        "expected {expected} weight tensor(s), one per parameter in declaration order, got {found}"
    )]
    WeightCount { expected: usize, found: usize },

    #[error("weight `{name}` must have shape {expected:?}, got a tensor of shape {found:?}")]
    WeightTensorShape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },

    #[error("weight `{name}` must be an {expected} tensor, got {found}")]
    WeightTensorDType {
        name: String,
        expected: DType,
        found: DType,
    },

    #[error("tensor data has {found} element(s) but its shape needs {expected}")]
    TensorData { expected: usize, found: usize },

    #[error("a tensor of shape {shape:?} has more elements than a usize can count")]
    ShapeOverflow { shape: Vec<usize> },

    #[error("the tensor holds {found} values, not {expected}")]
    TensorDType { expected: DType, found: DType },

    #[error("axis {axis} is out of range for a tensor of shape {shape:?}")]
    AxisOutOfRange { axis: usize, shape: Vec<usize> },

    #[error("slice {start}..{end} of axis {axis} is out of range for a tensor of shape {shape:?}")]
    SliceOutOfRange {
        axis: usize,
        start: usize,
        end: usize,
        shape: Vec<usize>,
    },

    #[error("random ids need a vocabulary of at least one id, got {vocab}")]
    EmptyVocab { vocab: i64 },

    #[error("no CUDA device available: {reason}")]
    NoCudaDevice { reason: String },

    #[error("CUDA error: {message}")]
    Cuda { message: String },

    /// A finite value that the GPU's half-precision storage would hold as ±∞ (f16 ends at 65504).
    #[error(
        "{value}, in a weight, state or input copied to the GPU, is past the largest finite {storage}, so it would \
         be stored as infinity; move the model with a wider Precision (Bf16 or F32)"
    )]
    OutsideStorageRange { value: f32, storage: &'static str },

    #[error(
        "the {plan} plan of `{model}` does not decode ({why}): the crate was built by a fuse-macros of another \
         version than this fuse-runtime"
    )]
    PlanTables {
        model: String,
        plan: &'static str,
        why: String,
    },

    #[error(
        "stale GPU kernels for `{model}` ({plan} plan): {what} is for plan {found:016x}, the model's plan is \
         {expected:016x}; rebuild the crate so its build script and #[fused_model] see the same source"
    )]
    StaleKernels {
        model: String,
        plan: String,
        what: String,
        expected: u64,
        found: u64,
    },

    /// Generation options out of range, or logits that are not a distribution (`generate`).
    #[error("generation: {0}")]
    Generation(String),
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a dim may not be 0 in a call ([`Error::ZeroDim`]).
fn zero_dim_reason(unless: &[Vec<String>]) -> String {
    if unless.is_empty() {
        return "this model reads what it sizes into a value no dim can empty (a reduction, a product or attention \
                over it), or it sizes a state: here it must be at least 1 (a dim whose empty values only make \
                other empty values, or that a concat extends, may be 0)"
            .into();
    }
    let sets: Vec<String> = unless
        .iter()
        .map(|set| {
            let dims: Vec<String> = set.iter().map(|d| format!("`{d}`")).collect();
            dims.join(" or ")
        })
        .collect();
    format!(
        "this model reads what it sizes into a value it does not size (a reduction, a product or attention over \
         it), which this call leaves non-empty: it may be 0 only where {} is 0 too",
        sets.join(", and ")
    )
}
