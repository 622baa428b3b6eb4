//! Row-major multi-index iteration and NumPy broadcasting, for any rank.

/// Row-major (C order) strides of a dense tensor of `shape`, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Calls `f` with every multi-index of `shape` in row-major order: once with `[]` for a scalar, never when a dim is 0.
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The flat offset of `idx` under `strides`.
pub fn offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// NumPy broadcast of two shapes: right-aligned, equal dims stay, a 1 stretches. `None` if they are incompatible.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| (i + s.len()).checked_sub(rank).map_or(1, |j| s[j]);
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Strides that read a dense tensor of `shape` as if broadcast to `out` (which must be a broadcast of `shape`):
/// missing leading dims and stretched size-1 dims get stride 0.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len())
        .map(|i| {
            if i < lead || shape[i - lead] != out[i] {
                0
            } else {
                own[i - lead]
            }
        })
        .collect()
}

/// Calls `f(base, stride, len)` for every 1-D lane of a dense tensor of `shape` along `axis`, in the row-major order
/// of the other axes: the lane's elements are at `base + k * stride` for `k < len`.
pub fn for_each_lane(shape: &[usize], axis: usize, mut f: impl FnMut(usize, usize, usize)) {
    let st = strides(shape);
    let mut outer = shape.to_vec();
    outer[axis] = 1;
    for_each_index(&outer, |idx| f(offset(idx, &st), st[axis], shape[axis]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_iteration() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(strides(&[]), Vec::<usize>::new());
        let mut seen = Vec::new();
        for_each_index(&[2, 3], |i| seen.push(i.to_vec()));
        assert_eq!(
            seen,
            vec![
                vec![0, 0],
                vec![0, 1],
                vec![0, 2],
                vec![1, 0],
                vec![1, 1],
                vec![1, 2]
            ]
        );
        let mut n = 0;
        for_each_index(&[], |i| {
            assert!(i.is_empty());
            n += 1
        });
        assert_eq!(n, 1);
        for_each_index(&[3, 0], |_| panic!("no elements"));
    }

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shape(&[3], &[2, 3]), Some(vec![2, 3]));
        assert_eq!(broadcast_shape(&[2, 1], &[1, 3]), Some(vec![2, 3]));
        assert_eq!(broadcast_shape(&[], &[4]), Some(vec![4]));
        assert_eq!(broadcast_shape(&[2], &[3]), None);
        assert_eq!(broadcast_strides(&[3], &[2, 3]), vec![0, 1]);
        assert_eq!(broadcast_strides(&[2, 1], &[2, 3]), vec![1, 0]);
    }

    #[test]
    fn lanes() {
        let mut got = Vec::new();
        for_each_lane(&[2, 3, 4], 1, |b, s, n| got.push((b, s, n)));
        assert_eq!(got.len(), 8);
        assert_eq!(got[0], (0, 4, 3));
        assert_eq!(got[5], (13, 4, 3));
    }
}
