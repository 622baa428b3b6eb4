use super::*;

fn sample(temperature: f32, top_k: Option<usize>, top_p: Option<f32>, seed: u64) -> Decoding {
    Decoding::Sample(Sampling {
        temperature,
        top_k,
        top_p,
        seed,
    })
}

/// Random logits with a few exact ties (the tie order matters for top-k and top-p).
fn logits(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0f32..3.0)).collect();
    v[n - 1] = v[0];
    v
}

/// The distribution sampling should draw from, computed independently of `candidates`: softmax over all tokens
/// at the temperature; a token survives top-k if fewer than k tokens rank above it, and top-p if the tokens ranked
/// above it (by logit, then id) hold less than p of the top-k-renormalised probability.
fn expected(
    logits: &[f32],
    temperature: f32,
    top_k: Option<usize>,
    top_p: Option<f32>,
) -> Vec<f64> {
    let n = logits.len();
    let above = |j: usize, i: usize| logits[j] > logits[i] || (logits[j] == logits[i] && j < i);
    let rank = |i: usize| (0..n).filter(|&j| above(j, i)).count();
    let weight = |i: usize| (f64::from(logits[i]) / f64::from(temperature)).exp();
    let in_k: Vec<bool> = (0..n).map(|i| rank(i) < top_k.unwrap_or(n)).collect();
    let k_total: f64 = (0..n).filter(|&i| in_k[i]).map(weight).sum();
    let keep: Vec<bool> = (0..n)
        .map(|i| {
            let before: f64 = (0..n).filter(|&j| in_k[j] && above(j, i)).map(weight).sum();
            in_k[i] && top_p.is_none_or(|p| before / k_total < f64::from(p))
        })
        .collect();
    let total: f64 = (0..n).filter(|&i| keep[i]).map(weight).sum();
    (0..n)
        .map(|i| if keep[i] { weight(i) / total } else { 0.0 })
        .collect()
}

#[test]
fn sampled_frequencies_follow_the_reshaped_distribution() {
    let draws = 40_000;
    let cases = [
        (1.0, None, None),
        (0.7, Some(5), None),
        (1.5, None, Some(0.8)),
        (0.9, Some(8), Some(0.6)),
        (1.0, Some(1), None),
    ];
    for (case, &(t, k, p)) in cases.iter().enumerate() {
        let l = logits(12, case as u64);
        let want = expected(&l, t, k, p);
        let mut sampler = Sampler::new(&sample(t, k, p, 7)).expect("valid options");
        let mut counts = vec![0usize; l.len()];
        for _ in 0..draws {
            counts[sampler.pick(&l).expect("a token") as usize] += 1;
        }
        for (i, (&c, &w)) in counts.iter().zip(&want).enumerate() {
            let freq = c as f64 / draws as f64;
            // Five standard deviations of a binomial frequency: a wrong filter or temperature is far outside.
            let sd = (w * (1.0 - w) / draws as f64).sqrt();
            assert!(
                (freq - w).abs() <= 5.0 * sd + 1e-9,
                "case {case} token {i}: frequency {freq} vs probability {w}"
            );
            if w == 0.0 {
                assert_eq!(c, 0, "case {case}: token {i} is filtered out but was drawn");
            }
        }
    }
}

#[test]
fn greedy_takes_the_first_best_and_top_k_one_agrees() {
    for seed in 0..20 {
        let l = logits(50, seed);
        let greedy = Sampler::new(&Decoding::Greedy).unwrap().pick(&l).unwrap();
        let best = l.iter().cloned().fold(f32::MIN, f32::max);
        assert_eq!(greedy as usize, l.iter().position(|&v| v == best).unwrap());
        let mut top1 = Sampler::new(&sample(2.0, Some(1), None, seed)).unwrap();
        assert_eq!(top1.pick(&l).unwrap(), greedy);
    }
}

#[test]
fn a_seed_repeats_its_tokens() {
    let l = logits(30, 3);
    let run = |seed| {
        let mut s = Sampler::new(&sample(1.0, None, Some(0.95), seed)).unwrap();
        (0..64).map(|_| s.pick(&l).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(run(11), run(11));
    assert_ne!(run(11), run(12));
}

#[test]
fn bad_options_and_bad_logits_are_errors() {
    for bad in [
        sample(0.0, None, None, 0),
        sample(f32::NAN, None, None, 0),
        sample(1.0, Some(0), None, 0),
        sample(1.0, None, Some(0.0), 0),
        sample(1.0, None, Some(1.5), 0),
    ] {
        assert!(
            matches!(Sampler::new(&bad), Err(Error::Generation(_))),
            "{bad:?}"
        );
    }
    let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
    for decoding in [Decoding::Greedy, sample(0.7, Some(3), Some(0.9), 4)] {
        let mut s = Sampler::new(&decoding).unwrap();
        for bad in [
            &[][..],
            &[0.0, f32::NAN],
            &[inf, 1.0],
            &[1.0, inf],
            &[ninf, ninf],
        ] {
            assert!(
                matches!(s.pick(bad), Err(Error::Generation(_))),
                "{decoding:?} picked from {bad:?}"
            );
        }
        // -∞ beside finite logits rules a token out: the finite one is picked.
        for _ in 0..20 {
            assert_eq!(s.pick(&[ninf, 2.0, ninf]).unwrap(), 1, "{decoding:?}");
        }
    }
}

/// A stand-in model whose next-token logits depend only on its own sequence: favours `(last·7 + len) % 16`.
fn toy_logits(seq: &[i64]) -> Vec<f32> {
    let favourite = (seq.last().copied().unwrap_or(0) * 7 + seq.len() as i64) % 16;
    (0..16)
        .map(|t| {
            if t == favourite {
                2.0
            } else {
                (t as f32) * 0.01
            }
        })
        .collect()
}

fn options(decoding: Decoding, max_new_tokens: usize, stop_tokens: Vec<i64>) -> GenerateOptions {
    GenerateOptions {
        decoding,
        max_new_tokens,
        stop_tokens,
    }
}

#[test]
fn generation_stops_on_length_stop_tokens_and_the_caller() {
    let prompt = [3, 1, 4];
    let mut streamed = Vec::new();
    let greedy = options(Decoding::Greedy, 10, vec![]);
    let g = generate(
        &prompt,
        &greedy,
        |s| Ok(toy_logits(s)),
        |t| {
            streamed.push(t);
            ControlFlow::Continue(())
        },
    )
    .unwrap();
    assert_eq!((g.tokens.len(), g.finish), (10, Finish::Length));
    assert_eq!(streamed, g.tokens, "every token is streamed, in order");
    // Each token is the toy model's favourite after the sequence so far.
    let mut seq = prompt.to_vec();
    for &t in &g.tokens {
        assert_eq!(
            t as usize,
            Sampler::new(&Decoding::Greedy)
                .unwrap()
                .pick(&toy_logits(&seq))
                .unwrap() as usize
        );
        seq.push(t);
    }
    // Stopping at the fourth token's value keeps it as the last token.
    let stop = options(Decoding::Greedy, 10, vec![g.tokens[3]]);
    let first = g.tokens.iter().position(|&t| t == g.tokens[3]).unwrap();
    let s = generate(
        &prompt,
        &stop,
        |s| Ok(toy_logits(s)),
        |_| ControlFlow::Continue(()),
    )
    .unwrap();
    assert_eq!(
        (s.tokens.as_slice(), s.finish),
        (&g.tokens[..=first], Finish::StopToken)
    );
    let mut n = 0;
    let c = generate(
        &prompt,
        &greedy,
        |s| Ok(toy_logits(s)),
        |_| {
            n += 1;
            if n == 2 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    )
    .unwrap();
    assert_eq!((c.tokens.len(), c.finish), (2, Finish::Caller));
    let none = generate(
        &prompt,
        &options(Decoding::Greedy, 0, vec![]),
        |_| unreachable!(),
        |_| unreachable!(),
    );
    assert_eq!(none.unwrap().tokens, Vec::<i64>::new());
}

#[test]
fn a_batch_gives_each_prompt_what_it_gives_alone() {
    let prompts = vec![vec![1, 2, 3, 4, 5], vec![9], vec![4, 4, 8]];
    for decoding in [Decoding::Greedy, sample(1.0, Some(6), Some(0.9), 5)] {
        let opts = options(decoding.clone(), 12, vec![13]);
        let mut calls = Vec::new();
        let batch = generate_batch(
            &prompts,
            &opts,
            |seqs| {
                calls.push(seqs.len());
                Ok(seqs.iter().map(|s| toy_logits(s)).collect())
            },
            |_, _| ControlFlow::Continue(()),
        )
        .unwrap();
        assert!(
            calls.windows(2).all(|w| w[1] <= w[0]),
            "finished sequences leave the batch"
        );
        for (i, prompt) in prompts.iter().enumerate() {
            let alone_decoding = match &decoding {
                Decoding::Sample(s) => sample(s.temperature, s.top_k, s.top_p, s.seed + i as u64),
                greedy => greedy.clone(),
            };
            let alone = generate(
                prompt,
                &options(alone_decoding, 12, vec![13]),
                |s| Ok(toy_logits(s)),
                |_| ControlFlow::Continue(()),
            )
            .unwrap();
            assert_eq!(batch[i], alone, "prompt {i}");
        }
    }
}

#[test]
fn a_wrong_number_of_logit_rows_is_an_error() {
    let r = generate_batch(
        &[vec![1], vec![2]],
        &options(Decoding::Greedy, 3, vec![]),
        |_| Ok(vec![vec![0.0; 4]]),
        |_, _| ControlFlow::Continue(()),
    );
    assert!(matches!(r, Err(Error::Generation(_))));
}
