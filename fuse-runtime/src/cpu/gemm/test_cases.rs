//! The shapes and operands the reduced-precision GEMM tests (int8, bf16) run every kernel on.

use super::{BView, Strided};
use crate::tensor::Tensor;

pub fn randv(n: usize, seed: u64) -> Vec<f32> {
    Tensor::randn(&[n], seed).as_f32().unwrap().to_vec()
}

#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// B stored column-contiguous (a Linear layer's Wᵀ), and A read through a transposed view.
    pub b_trans: bool,
    /// Padding of every leading dimension and B's offset in its buffer.
    pub pad: usize,
    /// The product's first column of B (a whole panel of `nr`) and how many.
    pub col0: usize,
    pub cols: usize,
}

/// Fixed cases (odd depths, views, column windows, products of a few rows as a decoding step has) and 16
/// random ones, for panels of `nr` columns.
pub fn cases(nr: usize) -> Vec<Case> {
    let fixed = [
        (1, 1, 1, false, 0, 0, 1),
        (7, 13, 45, true, 3, 32, 13),
        (13, 384, 96, true, 0, 0, 96),
        (25, 1023, 70, false, 5, 32, 38),
        (300, 66, 33, true, 1, 0, 33),
        (12, 4, 32, false, 0, 0, 32),
        (6, 5, 64, true, 2, 32, 32),
        (9, 1100, 40, false, 1, 32, 8),
        (2, 300, 70, true, 0, 32, 38),
        (3, 129, 64, false, 2, 0, 64),
        (4, 576, 96, true, 1, 32, 64),
        (8, 200, 40, false, 0, 0, 40),
        (5, 700, 70, true, 1, 32, 38),
    ];
    let mut state = 0x853c_49e6_748f_ea9bu64;
    let mut next = |below: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % below as u64) as usize
    };
    let mut cases: Vec<Case> = fixed
        .iter()
        .map(|&(m, k, n, b_trans, pad, col0, cols)| Case {
            m,
            k,
            n,
            b_trans,
            pad,
            col0,
            cols,
        })
        .collect();
    for _ in 0..16 {
        let (m, k, n) = (1 + next(40), 1 + next(300), 1 + next(100));
        let col0 = nr * next(n.div_ceil(nr));
        cases.push(Case {
            m,
            k,
            n,
            b_trans: next(2) == 0,
            pad: next(3) * 2,
            col0,
            cols: 1 + next(n - col0),
        });
    }
    cases
}

/// One case's operands: B's buffer and view, A's buffer and strides.
pub struct Operands {
    pub b: Vec<f32>,
    pub view: BView,
    pub a: Vec<f32>,
    pub a_rs: usize,
    pub a_cs: usize,
}

impl Operands {
    /// Random operands for `case`. A is m×k inside rows of k + pad, scaled per row so rows differ in size; with B
    /// transposed, A is read through a transposed view too (element (i, l) at l·(m + pad) + i), which the drivers
    /// gather row by row.
    pub fn new(case: &Case, seed: u64) -> Operands {
        let Case {
            m,
            k,
            n,
            b_trans,
            pad,
            ..
        } = *case;
        let (rs, cs) = if b_trans { (1, k + pad) } else { (n + pad, 1) };
        let b = randv(pad + (k - 1) * rs + (n - 1) * cs + 1, seed);
        let view = BView {
            offset: pad,
            rs,
            cs,
            k,
            n,
        };
        let (a_rs, a_cs) = if b_trans { (1, m + pad) } else { (k + pad, 1) };
        let mut a = randv(pad + (m - 1) * a_rs + (k - 1) * a_cs + 1, seed + 1);
        for i in 0..m {
            for l in 0..k {
                a[i * a_rs + l * a_cs] *= 0.1 + i as f32 % 7.0;
            }
        }
        Operands {
            b,
            view,
            a,
            a_rs,
            a_cs,
        }
    }

    pub fn a_ptr(&self) -> Strided<*const f32> {
        Strided::new(self.a.as_ptr(), self.a_rs as isize, self.a_cs as isize)
    }

    /// A's rows.
    pub fn a_rows(&self, m: usize) -> Vec<Vec<f32>> {
        (0..m)
            .map(|i| {
                (0..self.view.k)
                    .map(|l| self.a[i * self.a_rs + l * self.a_cs])
                    .collect()
            })
            .collect()
    }

    /// B's columns `col0..col0 + cols`.
    pub fn b_cols(&self, col0: usize, cols: usize) -> Vec<Vec<f32>> {
        let v = self.view;
        (col0..col0 + cols)
            .map(|j| {
                (0..v.k)
                    .map(|l| self.b[v.offset + l * v.rs + j * v.cs])
                    .collect()
            })
            .collect()
    }
}

/// Runs `case` on operands made from `seed`: B packed by `pack`, the product by `gemm` (dims (m, k, cols), the
/// first column, A, C). Returns (C, A's rows, B's columns) for the checks.
pub fn run_case<P>(
    case: &Case,
    seed: u64,
    pack: impl Fn(&[f32], BView) -> P,
    gemm: impl Fn(&P, (usize, usize, usize), usize, Strided<*const f32>, Strided<*mut f32>),
) -> (Vec<f32>, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let ops = Operands::new(case, seed);
    let packed = pack(&ops.b, ops.view);
    let mut c = vec![f32::NAN; case.m * case.cols];
    gemm(
        &packed,
        (case.m, case.k, case.cols),
        case.col0,
        ops.a_ptr(),
        Strided::new(c.as_mut_ptr(), case.cols as isize, 1),
    );
    (c, ops.a_rows(case.m), ops.b_cols(case.col0, case.cols))
}
