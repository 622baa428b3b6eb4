//! Where build time goes: the phases of compiling one model and the size of what they produced, printed to stderr
//! when `FUSE_BUILD_TIMINGS` is set (by the macro and by `fuse-build`, which each read the variable themselves).
//! Off by default, so a normal build prints nothing.

use std::fmt;
use std::time::{Duration, Instant};

/// The environment variable that turns the report on (any value but empty or `0`).
pub const ENV_VAR: &str = "FUSE_BUILD_TIMINGS";

/// Whether `value` (the variable's value, if set) asks for timings.
pub fn requested(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// Timed phases of one model's compilation, in the order they ran, and named sizes of the result.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    phases: Vec<(&'static str, Duration)>,
    sizes: Vec<(&'static str, usize)>,
}

impl Timings {
    /// Runs `f`, adding its wall time to `phase` (phases run more than once accumulate).
    pub fn time<T>(&mut self, phase: &'static str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let value = f();
        self.add(phase, start.elapsed());
        value
    }

    /// Adds `elapsed`, measured elsewhere (on another thread), to `phase`.
    pub fn add(&mut self, phase: &'static str, elapsed: Duration) {
        match self.phases.iter_mut().find(|(p, _)| *p == phase) {
            Some((_, total)) => *total += elapsed,
            None => self.phases.push((phase, elapsed)),
        }
    }

    pub fn size(&mut self, what: &'static str, n: usize) {
        self.sizes.push((what, n));
    }
}

/// `capture 1.2 ms, plan 3.4 ms; fused kernels 12, ...`: one line, for stderr.
impl fmt::Display for Timings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(p, d)| format!("{p} {:.1} ms", d.as_secs_f64() * 1e3))
            .collect();
        let sizes: Vec<String> = self.sizes.iter().map(|(w, n)| format!("{w} {n}")).collect();
        write!(f, "{}; {}", phases.join(", "), sizes.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_non_empty_non_zero_value_asks() {
        assert!(!requested(None));
        assert!(!requested(Some("")));
        assert!(!requested(Some("0")));
        assert!(requested(Some("1")));
    }

    #[test]
    fn phases_accumulate_and_print_in_order() {
        let mut t = Timings::default();
        let x = t.time("plan", || 2);
        t.time("write", || ());
        t.time("plan", || ());
        t.size("kernels", 3);
        assert_eq!(x, 2);
        let line = t.to_string();
        let (plan, write) = (line.find("plan ").unwrap(), line.find("write ").unwrap());
        assert!(plan < write, "{line}");
        assert_eq!(line.matches("plan ").count(), 1, "{line}");
        assert!(line.ends_with("; kernels 3"), "{line}");
    }
}
