//! Mutants of the random-view models (`gen/mutants.rs`): the compiler must take every mutant as a user's mistake
//! or a valid model: an error on a place in the source, never a panic nor an error without a place (the macro
//! would then fail the user's build with no line to look at); or, where the mutant is still a model, its plans and
//! both writers' code made without a panic. `tests/random_views.rs` runs some of those that compile.

#[path = "../gen/mutants.rs"]
mod mutants;

use fuse_tests::random_views::CASES;
use mutants::{compile, module_of, Mutable, Outcome};
use quote::ToTokens;
use rand::SeedableRng;

/// How many mutants each model gets, and with how many changes: most of one, some of two (a wrong size and a
/// wrong axis together reach checks that one alone does not).
const MUTANTS: [(usize, usize); 2] = [(100, 1), (50, 2)];

#[test]
fn mutated_models_fail_on_a_line_or_compile() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(23);
    let (mut refused, mut compiled) = (0, 0);
    let mut failures = Vec::new();
    for case in CASES {
        let spec = (case.spec)();
        let mutable = Mutable::new(&module_of(spec.source), spec.name);
        for changes in MUTANTS
            .iter()
            .flat_map(|&(count, changes)| std::iter::repeat_n(changes, count))
        {
            let Some((what, mutant)) = mutable.mutant(changes, &mut rng) else {
                continue;
            };
            let source = mutant.to_token_stream().to_string();
            let label = format!("{} with {what}", spec.name);
            match std::panic::catch_unwind(|| compile(&source)) {
                Ok(Ok(Outcome::Refused)) => refused += 1,
                Ok(Ok(Outcome::Compiled)) => compiled += 1,
                Ok(Err(why)) => failures.push(format!("{label}: {why}")),
                Err(_) => failures.push(format!("{label}: the compiler panicked\n{source}")),
            }
        }
    }
    eprintln!("{refused} mutants refused with a spanned error, {compiled} compiled");
    assert!(
        refused > 0 && compiled > 0,
        "the mutants are all of one kind"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
