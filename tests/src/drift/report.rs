//! The drift report as text: one table per output, then the kernel verdict.

use std::fmt;

use super::{DriftReport, ErrorStats, KernelDrift};

fn row(f: &mut fmt::Formatter<'_>, label: &str, s: &ErrorStats) -> fmt::Result {
    writeln!(
        f,
        "  {label:<15} {:>9.2e} {:>9.2e} {:>6} {:>10}  {:>5.2}  {:?} ({:.6} vs {:.6})",
        s.max_abs,
        s.max_rel,
        s.ulp_median,
        fmt_ulps(s.ulp_max),
        s.ratio,
        s.worst_at,
        s.worst_got,
        s.worst_want
    )
}

fn fmt_ulps(ulps: u64) -> String {
    if ulps == u64::MAX {
        "NaN".into()
    } else {
        ulps.to_string()
    }
}

fn kernel(f: &mut fmt::Formatter<'_>, k: &KernelDrift) -> fmt::Result {
    writeln!(
        f,
        "  kernel {} of {}, {} [{}] -> {} (eager: {}): max abs {:.2e}, {:.2}× the tolerance, worst at {:?} \
         (fused {:.6}, eager {:.6})",
        k.index,
        k.of,
        k.name,
        k.ops.join(" "),
        k.node,
        k.eager_kernel,
        k.stats.max_abs,
        k.stats.ratio,
        k.stats.worst_at,
        k.stats.worst_got,
        k.stats.worst_want
    )
}

impl fmt::Display for DriftReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self
            .dims
            .iter()
            .map(|(n, v)| format!("{n} = {v}"))
            .collect();
        writeln!(
            f,
            "drift of `{}`{}; tolerance |error| ≤ {:e} + {:e}·|want|",
            self.model,
            if dims.is_empty() {
                String::new()
            } else {
                format!(" at {}", dims.join(", "))
            },
            self.tolerance.atol,
            self.tolerance.rtol
        )?;
        for (i, o) in self.outputs.iter().enumerate() {
            writeln!(f, "output {i} {:?}", o.shape)?;
            writeln!(
                f,
                "  {:<15} {:>9} {:>9} {:>6} {:>10}  {:>5}  worst at (got vs want)",
                "", "max abs", "max rel", "ULP md", "ULP max", "ratio"
            )?;
            row(f, "fused - f64", &o.fused)?;
            row(f, "eager - f64", &o.eager)?;
            row(f, "fused - eager", &o.fused_vs_eager)?;
        }
        match &self.first_divergence {
            Some(k) => {
                writeln!(
                    f,
                    "fused and eager part: the first of {} kernel outputs compared (in plan order) beyond the \
                     tolerance is",
                    self.kernels_compared
                )?;
                kernel(f, k)
            }
            None => match &self.worst_kernel {
                Some(k) if k.stats.max_abs > 0.0 => {
                    writeln!(
                        f,
                        "fused and eager agree within the tolerance at all {} kernel outputs compared; the \
                         largest difference:",
                        self.kernels_compared
                    )?;
                    kernel(f, k)
                }
                _ => writeln!(
                    f,
                    "fused and eager are bit for bit the same at all {} kernel outputs compared",
                    self.kernels_compared
                ),
            },
        }
    }
}
