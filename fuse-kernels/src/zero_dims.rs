//! When a dynamic dim may be 0 in a call, as in PyTorch: where every value that reads what it sizes is empty too.
//!
//! A dim at 0 empties every value it sizes (an axis whose length has it as a factor), and so every value made of
//! them; every other value is computed as at any size. The one thing that cannot be computed is a non-empty value
//! read from an empty one (a reduction, a product or attention over the dim: a mean over no positions), so a dim
//! may be 0 in a call where each such reader is itself empty: where another of its dims is 0 too (`seq` 0 with
//! `batch` 0: an empty batch padded to its longest sentence). A concat may extend an empty piece (a cache passed
//! in, empty at a decoder's first step), and a state, made once for many calls, keeps every dim it has at least 1.

use std::collections::BTreeSet;

use crate::ir::{Graph, NodeId, Op};

/// When a dim may be 0 in a call (see [`Graph::zero_rule`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZeroRule {
    /// In every call: nothing but a concat reads what it sizes into a value it does not size.
    Always,
    /// Only in a call where each of these sets holds a dim that is 0 too: the dims of a value that reads what it
    /// sizes into a value it does not size, which must then be empty itself. Sets are sorted, none holds another.
    EmptyWith(Vec<Vec<u16>>),
    /// In no call: it sizes a state, or a value that no other dim can empty reads what it sizes.
    Never,
}

impl ZeroRule {
    /// Whether some call may bind the dim to 0.
    pub fn allows_zero(&self) -> bool {
        !matches!(self, ZeroRule::Never)
    }
}

impl Graph {
    /// When the dim `sym` may be 0 in a call. The runtimes skip a kernel whose output has no elements, so in a
    /// call the rule allows, every kernel either has nothing to do or reads no empty value but a concat's piece.
    pub fn zero_rule(&self, sym: u16) -> ZeroRule {
        let mut rules: Vec<Option<Vec<BTreeSet<u16>>>> = (0..self.dyn_dims.len() as u16)
            .map(|s| self.readers_to_empty(s))
            .collect();
        // A set that only a dim which is never 0 could empty can never be satisfied: drop such dims until nothing
        // changes (a set left with none makes its dim never 0 as well).
        loop {
            let never: BTreeSet<u16> = (0..rules.len() as u16)
                .filter(|&s| rules[s as usize].is_none())
                .collect();
            let mut changed = false;
            for rule in &mut rules {
                let Some(sets) = rule else { continue };
                for set in sets.iter_mut() {
                    let before = set.len();
                    set.retain(|s| !never.contains(s));
                    changed |= set.len() != before;
                }
                if sets.iter().any(|set| set.is_empty()) {
                    *rule = None;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        match rules.into_iter().nth(sym as usize).flatten() {
            None => ZeroRule::Never,
            Some(sets) if sets.is_empty() => ZeroRule::Always,
            Some(sets) => ZeroRule::EmptyWith(minimal(sets)),
        }
    }

    /// Whether some call may bind `sym` to 0 (see [`Graph::zero_rule`]).
    pub fn may_be_zero(&self, sym: u16) -> bool {
        self.zero_rule(sym).allows_zero()
    }

    /// The dims of each value that reads what `sym` sizes into a value `sym` does not size (a concat's aside), or
    /// `None` where `sym` sizes a state.
    fn readers_to_empty(&self, sym: u16) -> Option<Vec<BTreeSet<u16>>> {
        let dims = |id: NodeId| -> BTreeSet<u16> {
            let shape = &self.ty(id).shape.0;
            shape.iter().flat_map(|d| d.syms.iter().copied()).collect()
        };
        let holds = |id: NodeId| dims(id).contains(&sym);
        let mut sets = Vec::new();
        for id in self.ids() {
            let op = &self.node(id).op;
            if holds(id) {
                // A write into a state has the state's shape: the state's node already says it.
                if matches!(op, Op::State(_)) {
                    return None;
                }
                continue;
            }
            if !matches!(op, Op::Concat { .. }) && op.operands().into_iter().any(holds) {
                sets.push(dims(id));
            }
        }
        Some(sets)
    }
}

/// The sets sorted and deduplicated, without one that holds another (which the smaller one already asks).
fn minimal(mut sets: Vec<BTreeSet<u16>>) -> Vec<Vec<u16>> {
    sets.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    let mut kept: Vec<BTreeSet<u16>> = Vec::new();
    for set in sets {
        if !kept.iter().any(|k| k.is_subset(&set)) {
            kept.push(set);
        }
    }
    kept.into_iter().map(|s| s.into_iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule for `past` in the graph of a one-struct model with this `forward`, with the sets by dim name.
    fn past_rule(forward: &str) -> Result<Vec<Vec<String>>, &'static str> {
        rule_of("past", forward)
    }

    /// The rule for the dim `name` in the graph of a one-struct model with this `forward`.
    fn rule_of(name: &str, forward: &str) -> Result<Vec<Vec<String>>, &'static str> {
        let source = format!(
            "#[fused_model] mod m {{ pub struct M {{}} impl M {{ pub fn forward{forward} }} }}"
        );
        let capture = crate::front::capture_str(&source).unwrap_or_else(|e| panic!("{e}"));
        assert!(capture.errors.is_none(), "test model does not capture");
        let g = &capture.models[0].graph;
        let sym = g.dyn_dims.iter().position(|d| d == name).expect("dim");
        match g.zero_rule(sym as u16) {
            ZeroRule::Always => Ok(Vec::new()),
            ZeroRule::EmptyWith(sets) => Ok(sets
                .iter()
                .map(|s| s.iter().map(|&d| g.dyn_dims[d as usize].clone()).collect())
                .collect()),
            ZeroRule::Never => Err("never"),
        }
    }

    fn names(sets: &[&[&str]]) -> Result<Vec<Vec<String>>, &'static str> {
        Ok(sets
            .iter()
            .map(|s| s.iter().map(|d| d.to_string()).collect())
            .collect())
    }

    /// A dim may be 0 where nothing reads what it sizes into a value it does not size, but a concat (a cache passed
    /// in); where something does, only with a dim of that value 0 too; never where no dim can empty that value.
    #[test]
    fn a_dim_may_be_zero_where_what_reads_it_into_other_values_is_empty_too() {
        let sig =
            "(&self, #[shape(b, past, 8)] old: Tensor, #[shape(b, s, 8)] new: Tensor) -> Tensor";
        let always = names(&[]);
        assert_eq!(
            past_rule(&format!("{sig} {{ concat([old, new], 1) * 2.0 }}")),
            always
        );
        assert_eq!(
            past_rule(&format!(
                "{sig} {{ concat([old.t().t(), new], 1).softmax(-1) }}"
            )),
            always
        );
        // Read into a value it does not size (a reduction over it), that value must be empty too.
        assert_eq!(
            past_rule(&format!("{sig} {{ old.sum(1, false) }}")),
            names(&[&["b"]])
        );
        assert_eq!(
            past_rule(&format!("{sig} {{ old.t().matmul(&old) }}")),
            names(&[&["b"]])
        );
        // Attention over `past + s` keys: `past` is only extended by the concat, and the keys' sum may be 0
        // where the product with the probabilities is empty too (`b` or `s` 0: only `s` can be, with `past`).
        let attention = format!(
            "{sig} {{ let kv = concat([old, new], 1); new.matmul(&kv.t()).softmax(-1).matmul(&kv) }}"
        );
        assert_eq!(past_rule(&attention), always);
        assert_eq!(rule_of("past + s", &attention), names(&[&["b", "s"]]));
        // Values it sizes are empty, and so are whatever is made of them, returned or not.
        assert_eq!(past_rule(&format!("{sig} {{ old * 2.0 }}")), always);
        assert_eq!(
            past_rule(&format!(
                "{sig} {{ (old.sum(2, true).exp() + 1.0).softmax(1) }}"
            )),
            always
        );
        assert_eq!(
            past_rule(
                "(&self, #[shape(b, past, 8)] old: Tensor, #[shape(b, s, 8)] new: Tensor) -> (Tensor, Tensor) \
                 { (concat([old, new], 1), old) }"
            ),
            always
        );
        // A `#[dim]` that only offsets a view sizes nothing.
        assert_eq!(
            past_rule(
                "(&self, #[shape(b, 16, 8)] x: Tensor, #[dim] past: usize) -> Tensor { x.narrow(1, past, 2) }"
            ),
            always
        );
        // No dim can empty a value of constant shape.
        assert_eq!(
            past_rule("(&self, #[shape(2, past, 8)] x: Tensor) -> Tensor { x.sum(1, false) }"),
            Err("never")
        );
    }

    /// A set that only a dim which is never 0 could satisfy is no way out: the dim is never 0 either.
    #[test]
    fn a_dim_that_only_a_dim_never_zero_could_empty_is_never_zero() {
        let sig = "(&self, #[shape(b, past, 8)] old: Tensor, #[shape(b, 8)] w: Tensor) -> Tensor";
        // A value of constant shape reads what `b` sizes (`w.sum(0)`), so `b` is never 0, and `past` needs it.
        assert_eq!(
            past_rule(&format!(
                "{sig} {{ old.sum(1, false) + w.sum(0, false).sum(0, true) }}"
            )),
            Err("never")
        );
    }

    #[test]
    fn minimal_sets_drop_the_ones_that_hold_another() {
        let set = |s: &[u16]| s.iter().copied().collect::<BTreeSet<u16>>();
        let sets = vec![
            set(&[1, 2]),
            set(&[2]),
            set(&[0, 3]),
            set(&[2]),
            set(&[3, 0, 4]),
        ];
        assert_eq!(minimal(sets), vec![vec![2], vec![0, 3]]);
    }
}
