use super::*;

fn fixed(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::fixed(d)).collect()
}

fn values(dims: &[Dim]) -> Vec<usize> {
    dims.iter().map(|d| d.eval(&[])).collect()
}

/// Row-major multi-index of flat index `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

fn address(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// Every way to write `n` as an ordered product of factors > 1, with unit dims sprinkled in, up to `limit` shapes.
fn reshapes(n: usize, limit: usize) -> Vec<Vec<usize>> {
    fn go(n: usize, prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>, limit: usize) {
        if out.len() >= limit {
            return;
        }
        if n == 1 {
            out.push(prefix.clone());
            let mut with_unit = prefix.clone();
            with_unit.insert(prefix.len() / 2, 1);
            out.push(with_unit);
            return;
        }
        for f in 2..=n {
            if n.is_multiple_of(f) {
                prefix.push(f);
                go(n / f, prefix, out, limit);
                prefix.pop();
            }
        }
    }
    let mut out = Vec::new();
    go(n, &mut Vec::new(), &mut out, limit);
    out
}

/// Against brute force: a permuted (and sometimes broadcast) view of a contiguous tensor, reshaped every possible
/// way. Whenever strides are returned they must address, for every element, what the reshape of the
/// materialised view holds there; and a reshape that keeps the view's chunks (here: any reshape of a contiguous
/// access, or one that only adds unit dims) must get strides.
#[test]
fn reshaped_strides_address_the_same_elements() {
    let shapes: [&[usize]; 4] = [&[2, 3, 4], &[6, 1, 4, 2], &[2, 2, 3, 2], &[3, 5]];
    let mut viewed = 0;
    for shape in shapes {
        let rank = shape.len();
        let contiguous: Vec<usize> = values(&contiguous_strides(&fixed(shape)));
        for rotate in 0..rank {
            // A permutation (a rotation, and its reverse), and a broadcast of the first permuted dim.
            for variant in 0..3 {
                let mut perm: Vec<usize> = (0..rank).map(|i| (i + rotate) % rank).collect();
                if variant == 1 {
                    perm.reverse();
                }
                let view_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
                let mut view_strides: Vec<usize> = perm.iter().map(|&p| contiguous[p]).collect();
                if variant == 2 {
                    view_strides[0] = 0;
                }
                let numel: usize = view_shape.iter().product();
                for new_shape in reshapes(numel, 200) {
                    let got = reshape_strides(
                        &fixed(&view_shape),
                        &fixed(&view_strides),
                        &fixed(&new_shape),
                    );
                    let only_units = {
                        let a: Vec<usize> =
                            view_shape.iter().copied().filter(|&d| d != 1).collect();
                        let b: Vec<usize> = new_shape.iter().copied().filter(|&d| d != 1).collect();
                        a == b
                    };
                    if only_units {
                        assert!(
                            got.is_some(),
                            "{view_shape:?}/{view_strides:?} → {new_shape:?}"
                        );
                    }
                    let Some(new_strides) = got else { continue };
                    viewed += 1;
                    let new_strides = values(&new_strides);
                    for i in 0..numel {
                        assert_eq!(
                            address(&unravel(i, &new_shape), &new_strides),
                            address(&unravel(i, &view_shape), &view_strides),
                            "{view_shape:?}/{view_strides:?} → {new_shape:?}/{new_strides:?} at {i}"
                        );
                    }
                }
            }
        }
    }
    assert!(viewed > 100, "only {viewed} reshapes were views");
}

/// The cases decoders meet, with dynamic dims: a grouped-query head split is a view; merging permuted heads back
/// (`[b, s, h, d] → [b, s, h·d]` over `[b, h, s, d]` memory) is not.
#[test]
fn head_split_is_a_view_and_head_merge_is_not() {
    let (b, s) = (Dim::symbol(0), Dim::symbol(1));
    let (kv, d) = (Dim::fixed(2), Dim::fixed(16));
    // v = x.reshape([b, s, kv, d]).permute([0, 2, 1, 3]): strides (s·kv·d, d, kv·d, 1).
    let shape = vec![b.clone(), kv.clone(), s.clone(), d.clone()];
    let strides = vec![
        s.mul(&Dim::fixed(32)),
        d.clone(),
        Dim::fixed(32),
        Dim::fixed(1),
    ];
    let split = vec![b.clone(), kv.clone(), Dim::fixed(1), s.clone(), d.clone()];
    let got = reshape_strides(&shape, &strides, &split).expect("a unit dim inserted is a view");
    assert_eq!(got[0], strides[0]);
    assert_eq!(
        (&got[1], &got[3], &got[4]),
        (&strides[1], &strides[2], &strides[3])
    );
    // out.permute([0, 2, 1, 3]) of a contiguous [b, h, s, d], merged to [b, s, h·d].
    let h = Dim::fixed(4);
    let permuted = vec![b.clone(), s.clone(), h.clone(), d.clone()];
    let permuted_strides = vec![h.mul(&s).mul(&d), d.clone(), s.mul(&d), Dim::fixed(1)];
    let merged = vec![b, s, h.mul(&d)];
    assert_eq!(reshape_strides(&permuted, &permuted_strides, &merged), None);
}
