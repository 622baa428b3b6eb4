//! The CPU side of a plan's tables: what `fuse_runtime::exec` needs besides the kernel functions themselves.

use serde::{Deserialize, Serialize};

use crate::{DType, Mono};

/// Where a plan buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BufferKind {
    Input(usize),
    Param(usize),
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
}
