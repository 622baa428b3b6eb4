//! The plan report: kernels (fused or eager), the ops in each, modelled bytes moved, arena size, and why
//! producers were not fused. Sizes depend on the dynamic dims, so the report is evaluated at given dims.

use std::fmt;

use crate::exec::Program;
use crate::model::ModelSpec;

#[derive(Clone, Copy)]
pub struct PlanReport {
    spec: &'static ModelSpec,
    program: &'static Program,
    dims: Option<[usize; 8]>,
}

impl PlanReport {
    pub(crate) fn new(spec: &'static ModelSpec, program: &'static Program) -> Self {
        PlanReport {
            spec,
            program,
            dims: None,
        }
    }

    /// Evaluates sizes at these dynamic dims, in the order of [`PlanReport::dyn_dims`] (at most 8).
    pub fn at(mut self, dims: &[usize]) -> Self {
        let mut all = [1usize; 8];
        for (slot, &d) in all.iter_mut().zip(dims) {
            *slot = d;
        }
        self.dims = Some(all);
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

    fn dims(&self) -> [usize; 8] {
        self.dims.unwrap_or([1; 8])
    }

    /// Arena bytes at the report's dims (`usize::MAX` if that size overflows).
    pub fn arena_bytes(&self) -> usize {
        self.program
            .layout(&self.dims())
            .map_or(usize::MAX, |(_, bytes)| bytes)
    }

    /// Modelled bytes moved by all kernels at the report's dims.
    pub fn bytes_moved(&self) -> usize {
        let d = self.dims();
        self.program
            .kernel_info
            .iter()
            .map(|k| k.bytes.iter().map(|m| m.eval(&d)).sum::<usize>())
            .sum()
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

impl fmt::Display for PlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.program;
        let d = self.dims();
        let at: Vec<String> = self
            .spec
            .dyn_dims
            .iter()
            .zip(d)
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
        for k in p.kernel_info {
            let bytes: usize = k.bytes.iter().map(|m| m.eval(&d)).sum();
            writeln!(
                f,
                "  {:<22} {:>10.2} MB  {}",
                k.name,
                bytes as f64 / 1e6,
                k.ops.join(" → ")
            )?;
        }
        writeln!(
            f,
            "  bytes moved {:.2} MB, arena {:.2} MB",
            self.bytes_moved() as f64 / 1e6,
            self.arena_bytes() as f64 / 1e6
        )?;
        if !p.refusals.is_empty() {
            writeln!(f, "  not fused:")?;
            for r in p.refusals {
                writeln!(f, "    {r}")?;
            }
        }
        Ok(())
    }
}
