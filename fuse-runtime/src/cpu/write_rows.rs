//! A state write whose value the kernel computes (RoPE of the new keys, written into the KV cache): the rows a
//! task computes go straight to their places in the state's buffer, with no copy of the value in the arena.

use rayon::prelude::*;

use super::par::SimdTask;

/// Below this many elements the rows are computed on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// Writes the value `rows` computes (`run(first_row, rows)`: rows of `shape`'s last dim, counted over its outer
/// dims) into `dst`: element `index` goes to `dst_offset + Σ index_k · dst_strides[k]`. A row is contiguous in
/// `dst` (its last stride is 1, as in a state, which is a contiguous buffer), and so are the rows along the
/// innermost outer dim when their stride is the row's length (positions of one head of a KV cache), which one
/// call of the task then writes. Large values are split across threads by such runs of rows.
///
/// # Panics
/// If the region reaches past `dst`, its rows are not contiguous, or they overlap: the planner sized the state
/// and the write, so each is a planner bug.
pub fn write_rows(
    rows: &dyn SimdTask,
    shape: &[usize],
    dst: &mut [f32],
    dst_offset: usize,
    dst_strides: &[usize],
) {
    let rank = shape.len();
    // A write's value has the axis it is written along, so a rank of at least 1.
    if rank == 0 || shape.contains(&0) {
        return;
    }
    let len = shape[rank - 1];
    assert!(
        len == 1 || dst_strides[rank - 1] == 1,
        "state write rows not contiguous: planner bug"
    );
    // Rows along the innermost outer dim that follow each other in `dst` are one run.
    let (outer, run) = match rank {
        1 => (0, 1),
        _ if dst_strides[rank - 2] == len || shape[rank - 2] == 1 => (rank - 2, shape[rank - 2]),
        _ => (rank - 1, 1),
    };
    let runs: usize = shape[..outer].iter().product();
    let run_len = run * len;
    let write = |(first_row, out): (usize, &mut [f32])| rows.run_simd(first_row, out);
    // A small value (a decode step's keys) is written as its runs are found, without collecting them.
    let serial =
        runs * run_len < PARALLEL_MIN_ELEMENTS || runs == 1 || rayon::current_num_threads() == 1;
    // Each run's first row and its start in `dst`, in order; carved out of `dst` as disjoint slices.
    let mut pieces: Vec<(usize, &mut [f32])> = Vec::new();
    let mut rest = dst;
    let mut consumed = 0usize;
    for i in 0..runs {
        let (mut index, mut start) = (i, dst_offset);
        for k in (0..outer).rev() {
            start += (index % shape[k]) * dst_strides[k];
            index /= shape[k];
        }
        assert!(
            start >= consumed && start - consumed + run_len <= rest.len(),
            "state write out of bounds or overlapping: planner bug"
        );
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - consumed);
        let (mine, tail) = tail.split_at_mut(run_len);
        if serial {
            write((i * run, mine));
        } else {
            pieces.push((i * run, mine));
        }
        rest = tail;
        consumed = start + run_len;
    }
    if !pieces.is_empty() {
        pieces.into_par_iter().for_each(write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::par::FnTask;

    /// Rows numbered by their element (`first_row · len + offset` as a value), written into a state at positions
    /// `[start, start + n)` of axis 2, or along the last axis; everything else untouched. The last case is large
    /// enough to be split across threads.
    #[test]
    fn rows_land_where_a_strided_copy_would_put_them() {
        for (state, shape, axis, start) in [
            ([2, 3, 10, 4], [2, 3, 5, 4], 2, 4),
            ([2, 3, 10, 4], [2, 3, 1, 4], 2, 9),
            ([2, 3, 10, 4], [2, 3, 10, 2], 3, 1),
            ([2, 3, 10, 4], [2, 3, 10, 4], 2, 0),
            ([4, 8, 512, 64], [4, 8, 300, 64], 2, 100),
        ] {
            let strides = [
                state[1] * state[2] * state[3],
                state[2] * state[3],
                state[3],
                1,
            ];
            let len = shape[3];
            let task = FnTask(|first: usize, out: &mut [f32]| {
                for (i, x) in out.iter_mut().enumerate() {
                    *x = (first * len + i) as f32;
                }
            });
            let mut dst = vec![-1.0f32; state.iter().product()];
            write_rows(&task, &shape, &mut dst, start * strides[axis], &strides);
            let mut want = vec![-1.0f32; dst.len()];
            let mut n = 0;
            for a in 0..shape[0] {
                for b in 0..shape[1] {
                    for c in 0..shape[2] {
                        for d in 0..shape[3] {
                            let mut at = [a, b, c, d];
                            at[axis] += start;
                            let offset: usize = at.iter().zip(&strides).map(|(i, s)| i * s).sum();
                            want[offset] = n as f32;
                            n += 1;
                        }
                    }
                }
            }
            assert!(dst == want, "{shape:?} along {axis} at {start}");
        }
    }

    #[test]
    #[should_panic(expected = "planner bug")]
    fn a_write_past_the_end_is_a_planner_bug() {
        let task = FnTask(|_: usize, out: &mut [f32]| out.fill(0.0));
        let mut dst = vec![0.0f32; 8];
        write_rows(&task, &[3, 4], &mut dst, 0, &[4, 1]);
    }
}
