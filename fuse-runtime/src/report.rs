//! The plan report: kernels (fused or eager), the ops in each, modelled bytes moved, arena size, and why
//! producers were not fused. Sizes depend on the dynamic dims, so the report is evaluated at given dims.

use std::fmt;

use crate::exec::{KernelInfo, Program};
use crate::model::ModelSpec;

#[derive(Clone)]
pub struct PlanReport {
    spec: &'static ModelSpec,
    program: &'static Program,
    /// One size per dynamic dim of the model, in order.
    dims: Vec<usize>,
}

impl PlanReport {
    pub(crate) fn new(spec: &'static ModelSpec, program: &'static Program) -> Self {
        let mut dims = vec![1; spec.dyn_dims.len()];
        // A report only evaluates sizes: a difference of dims out of range at these dims counts as 0.
        let _ = program.derive_dims(&mut dims);
        PlanReport {
            spec,
            program,
            dims,
        }
    }

    /// Evaluates sizes at these dynamic dims, in the order of [`PlanReport::dyn_dims`]; dims not given stay 1,
    /// extra values are ignored, and a sum of dims (`past + seq`) is computed from its terms whatever is given.
    pub fn at(mut self, dims: &[usize]) -> Self {
        for (slot, &d) in self.dims.iter_mut().zip(dims) {
            *slot = d;
        }
        let _ = self.program.derive_dims(&mut self.dims);
        self
    }

    pub fn dyn_dims(&self) -> &'static [&'static str] {
        self.spec.dyn_dims
    }

    pub fn plan_hash(&self) -> u64 {
        self.program.plan_hash
    }

    pub fn kernel_count(&self) -> usize {
        self.program.kernels.len()
    }

    /// Arena bytes at the report's dims, or `None` when that size overflows `usize`.
    pub fn checked_arena_bytes(&self) -> Option<usize> {
        self.program.layout(&self.dims).ok().map(|(_, bytes)| bytes)
    }

    /// Arena bytes at the report's dims, saturated at `usize::MAX` when the size overflows.
    pub fn arena_bytes(&self) -> usize {
        self.checked_arena_bytes().unwrap_or(usize::MAX)
    }

    /// Modelled bytes moved by all kernels at the report's dims, or `None` when the sum overflows `usize`.
    pub fn checked_bytes_moved(&self) -> Option<usize> {
        self.program.kernel_info.iter().try_fold(0usize, |sum, k| {
            sum.checked_add(kernel_bytes(k, &self.dims)?)
        })
    }

    /// Modelled bytes moved by all kernels at the report's dims, saturated at `usize::MAX` when the sum
    /// overflows.
    pub fn bytes_moved(&self) -> usize {
        self.checked_bytes_moved().unwrap_or(usize::MAX)
    }

    /// Bytes of the `#[state]` buffers (a session's, outside the arena) at the report's dims, or `None` when that
    /// overflows `usize`; 0 for a model without state.
    pub fn checked_state_bytes(&self) -> Option<usize> {
        self.program.states.iter().try_fold(0usize, |sum, s| {
            let numel = s
                .dims
                .iter()
                .try_fold(1usize, |n, m| n.checked_mul(m.checked_eval(&self.dims)?))?;
            sum.checked_add(numel.checked_mul(4)?)
        })
    }

    /// The full plan text (the compiler's dump).
    pub fn dump(&self) -> &'static str {
        self.program.dump
    }

    /// Graphviz DOT of the graph, one cluster per kernel.
    pub fn dot(&self) -> &'static str {
        self.program.dot
    }
}

/// Bytes one kernel reads and writes at `dims`, or `None` when that overflows `usize`.
fn kernel_bytes(k: &KernelInfo, dims: &[usize]) -> Option<usize> {
    k.bytes
        .iter()
        .try_fold(0usize, |sum, m| sum.checked_add(m.checked_eval(dims)?))
}

/// `bytes` in MB with a width, or "overflows" when the size does not fit in `usize`: never a wrapped number.
struct Megabytes(Option<usize>);

impl fmt::Display for Megabytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(bytes) => format!("{:.2} MB", bytes as f64 / 1e6).fmt(f),
            None => "overflows".fmt(f),
        }
    }
}

impl fmt::Display for PlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.program;
        let at: Vec<String> = self
            .spec
            .dyn_dims
            .iter()
            .zip(&self.dims)
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        writeln!(
            f,
            "{} plan of {} (hash {:016x}), {} kernels, at {}:",
            p.mode,
            p.model,
            p.plan_hash,
            p.kernels.len(),
            at.join(", ")
        )?;
        for k in &p.kernel_info {
            writeln!(
                f,
                "  {:<22} {:>13}  {}",
                k.name,
                Megabytes(kernel_bytes(k, &self.dims)),
                k.ops.join(" → ")
            )?;
        }
        writeln!(
            f,
            "  bytes moved {}, arena {}",
            Megabytes(self.checked_bytes_moved()),
            Megabytes(self.checked_arena_bytes())
        )?;
        if !p.states.is_empty() {
            // The session holds these between calls; the write kernels update them in place.
            writeln!(
                f,
                "  state {} in {} buffer(s), the session's (outside the arena)",
                Megabytes(self.checked_state_bytes()),
                p.states.len()
            )?;
        }
        if !p.refusals.is_empty() {
            writeln!(f, "  not fused:")?;
            for r in &p.refusals {
                writeln!(f, "    {r}")?;
            }
        }
        // Which free dims a call may bind to 0 (`ProgramTables::zero_dims`), which only where others are 0 too
        // (`zero_with`, sums of dims among them), and which it may not.
        let name = |s: usize| self.spec.dyn_dims.get(s).copied().unwrap_or("?");
        let free = (0..self.spec.dyn_dims.len()).filter(|&s| !p.is_sum_dim(s));
        let (zero, not): (Vec<usize>, Vec<usize>) = free.partition(|&s| p.may_be_zero(s));
        let always: Vec<usize> = zero
            .into_iter()
            .filter(|&s| p.zero_with(s).is_none())
            .collect();
        let list = |what: &str, dims: &[usize]| {
            let names: Vec<&str> = dims.iter().map(|&s| name(s)).collect();
            (!dims.is_empty()).then(|| format!("{what}: {}", names.join(", ")))
        };
        let only_with = p.zero_with.iter().map(|rule| {
            let sets: Vec<String> = rule
                .any_of
                .iter()
                .map(|set| {
                    set.iter()
                        .map(|&s| name(s))
                        .collect::<Vec<_>>()
                        .join(" or ")
                })
                .collect();
            format!("{} only with {} 0", name(rule.sym), sets.join(" and "))
        });
        let parts: Vec<String> = list("may be 0", &always)
            .into_iter()
            .chain(only_with)
            .chain(list("at least 1", &not))
            .collect();
        if !parts.is_empty() {
            writeln!(f, "  {}", parts.join("; "))?;
        }
        if !p.slice_bounds.is_empty() {
            writeln!(f, "  checked per call:")?;
            for b in &p.slice_bounds {
                let kind = match (b.write, b.ids) {
                    (true, _) => "write",
                    (_, true) => "rows read at arange ids",
                    _ => "narrow",
                };
                writeln!(f, "    {kind} of axis {} of {}: {}", b.axis, b.what, b.text)?;
            }
        }
        Ok(())
    }
}
