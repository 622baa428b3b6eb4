//! Each [`BlasCall`] plan is run through a host emulation of column-major `gemmStridedBatched` and compared with
//! the row-major product read through the same strides: the mapping is checked without a GPU.

use super::*;
use crate::cuda::spec::CudaAccess;
use crate::exec::Mono;

fn fixed(n: usize) -> Mono {
    Mono {
        coeff: n,
        syms: vec![],
    }
}

fn monos(v: Vec<usize>) -> Vec<Mono> {
    v.into_iter().map(fixed).collect()
}

/// A GEMM over fixed sizes with the given strides (`[batch.., rows, cols]` for each operand).
fn gemm(
    batch: &[usize],
    m: usize,
    n: usize,
    k: usize,
    sa: &[usize],
    sb: &[usize],
    fold: bool,
) -> CudaGemm {
    CudaGemm {
        a: 0,
        b: 1,
        m: fixed(m),
        n: fixed(n),
        k: fixed(k),
        batch: monos(batch.to_vec()),
        fold_batch: fold,
        epilogue: false,
        a_access: CudaAccess {
            offset: monos(vec![3]),
            strides: monos(sa.to_vec()),
        },
        b_access: CudaAccess {
            offset: monos(vec![]),
            strides: monos(sb.to_vec()),
        },
    }
}

fn data(len: usize, seed: usize) -> Vec<f64> {
    (0..len)
        .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f64) / 500.0 - 1.0)
        .collect()
}

/// Column-major strided-batched GEMM on the host, as cuBLAS defines it.
fn emulate(calls: &[BlasCall], first: &[f64], second: &[f64], out: &mut [f64]) {
    for c in calls {
        for z in 0..c.batch as usize {
            let f0 = c.first_offset + z * c.stride_first as usize;
            let s0 = c.second_offset + z * c.stride_second as usize;
            let o0 = c.out_offset + z * c.stride_out as usize;
            for i in 0..c.m as usize {
                for j in 0..c.n as usize {
                    let mut acc = 0.0;
                    for l in 0..c.k as usize {
                        let fa = if c.trans_first {
                            first[f0 + l + i * c.ld_first as usize]
                        } else {
                            first[f0 + i + l * c.ld_first as usize]
                        };
                        let sb = if c.trans_second {
                            second[s0 + j + l * c.ld_second as usize]
                        } else {
                            second[s0 + l + j * c.ld_second as usize]
                        };
                        acc += fa * sb;
                    }
                    out[o0 + i + j * c.ldc as usize] = acc;
                }
            }
        }
    }
}

/// The row-major product through the accesses, output contiguous.
fn reference(g: &CudaGemm, a: &[f64], b: &[f64]) -> Vec<f64> {
    let d: &[usize] = &[];
    let (m, n, k) = (g.m.eval(d), g.n.eval(d), g.k.eval(d));
    let batch: Vec<usize> = g.batch.iter().map(|x| x.eval(d)).collect();
    let (sa, sb) = (g.a_access.strides(d), g.b_access.strides(d));
    let (a0, b0) = (g.a_access.offset(d), g.b_access.offset(d));
    let q = batch.len();
    let total: usize = batch.iter().product();
    let mut out = vec![0.0; total * m * n];
    for z in 0..total {
        let (mut rest, mut ao, mut bo) = (z, a0, b0);
        for p in (0..q).rev() {
            let i = rest % batch[p];
            rest /= batch[p];
            ao += i * sa[p];
            bo += i * sb[p];
        }
        for i in 0..m {
            for j in 0..n {
                out[(z * m + i) * n + j] = (0..k)
                    .map(|l| a[ao + i * sa[q] + l * sa[q + 1]] * b[bo + l * sb[q] + j * sb[q + 1]])
                    .sum();
            }
        }
    }
    out
}

#[track_caller]
fn check(g: &CudaGemm, calls_expected: usize) {
    let calls = plan(g, &[]).expect("cuBLAS can run this layout");
    assert_eq!(calls.len(), calls_expected, "{calls:#?}");
    let (a, b) = (data(20_000, 1), data(20_000, 2));
    let want = reference(g, &a, &b);
    let mut got = vec![f64::NAN; want.len()];
    emulate(&calls, &b, &a, &mut got);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() < 1e-9, "element {i}: {g} vs {w}");
    }
}

#[test]
fn linear_layer_folds_the_batch_into_rows() {
    // x [2, 5, 3, 24] · w.t() with w [16, 24]: B = wᵀ, shared by the batch; unfolded, the batch collapses.
    check(
        &gemm(&[2, 5], 3, 16, 24, &[360, 72, 24, 1], &[0, 0, 1, 24], false),
        1,
    );
    check(&gemm(&[2], 5, 16, 24, &[120, 24, 1], &[0, 1, 24], true), 1);
}

#[test]
fn one_row_per_batch_folds_through_the_batch_stride() {
    // A decoder's head: h [8, 1, 24] (the length-1 axis with stride 0, rows 40 floats apart) · E.t() with
    // E [16, 24]. Folded, the rows are the batch's; reading them at the row axis's stride 0 would repeat row 0.
    check(&gemm(&[8], 1, 16, 24, &[40, 0, 1], &[0, 1, 24], true), 1);
    check(
        &gemm(&[4, 2], 1, 16, 24, &[80, 40, 0, 1], &[0, 0, 1, 24], true),
        1,
    );
}

#[test]
fn batched_product_is_one_strided_call() {
    // x [3, 5, 24] · y [3, 24, 5].
    check(&gemm(&[3], 5, 5, 24, &[120, 24, 1], &[120, 5, 1], false), 1);
}

#[test]
fn transposed_operands() {
    // yᵀ · xᵀ: A = yᵀ from y [3, 24, 5], B = xᵀ from x [3, 5, 24].
    check(&gemm(&[3], 5, 5, 24, &[120, 1, 5], &[120, 1, 24], false), 1);
}

#[test]
fn attention_heads_that_do_not_nest_loop_over_the_outer_dim() {
    // q [2, 4, 6, 8] read from [2, 6, 4, 8] (heads permuted out of a [b, s, h·d] tensor), k likewise, transposed.
    let (b, h, s, d) = (2, 4, 6, 8);
    let sa = [s * h * d, d, h * d, 1];
    let sb = [s * h * d, d, 1, h * d];
    check(&gemm(&[b, h], s, s, d, &sa, &sb, false), b);
    // Contiguous heads collapse into one call.
    check(
        &gemm(
            &[b, h],
            s,
            s,
            d,
            &[h * s * d, s * d, d, 1],
            &[h * s * d, s * d, 1, d],
            false,
        ),
        1,
    );
}

#[test]
fn size_one_dims_take_any_stride() {
    check(
        &gemm(&[1, 3], 1, 7, 1, &[999, 4, 0, 0], &[0, 7, 0, 1], false),
        1,
    );
}

#[test]
fn unreadable_layouts_fall_back() {
    // Neither matrix stride of A is 1.
    assert_eq!(
        plan(&gemm(&[], 4, 4, 4, &[8, 2], &[4, 1], false), &[]),
        None
    );
    // A broadcast along k: a leading dimension of 0.
    assert_eq!(
        plan(&gemm(&[], 4, 4, 4, &[1, 0], &[4, 1], false), &[]),
        None
    );
}
