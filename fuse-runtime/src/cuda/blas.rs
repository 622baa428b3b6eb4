//! A plan kernel's GEMM as cuBLAS calls: `out[batch.., m, n] = A[batch.., m, k] · B[batch.., k, n]` with A and B
//! read through arbitrary strides, mapped onto column-major `cublasGemmStridedBatchedEx` calls.
//!
//! cuBLAS is column-major, so the row-major product is computed as its transpose: `outᵀ (n×m) = Bᵀ (n×k) · Aᵀ
//! (k×m)`, `out` contiguous with leading dimension `n`. An operand is usable when one of its two matrix strides is
//! 1 (then the other is the leading dimension, transposed or not); the batch dims must collapse to one stride per
//! operand for the innermost group, and any outer groups become one call each. Anything else (a broadcast along a
//! matrix dim, two non-unit strides) is `None`: the runtime then launches the generated fallback GEMM.
//!
//! Pure arithmetic on the launch tables, compiled without the `cuda` feature too, so it is tested on any machine.

use super::spec::CudaGemm;

/// One `cublasGemmStridedBatchedEx` call. "first" is cuBLAS's A (our B), "second" its B (our A).
/// Offsets and strides are in elements of the buffers' storage type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlasCall {
    pub trans_first: bool,
    pub trans_second: bool,
    /// cuBLAS `m, n, k`: our `n, m, k`.
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub ld_first: i32,
    pub ld_second: i32,
    pub ldc: i32,
    /// Element offsets into B's buffer, A's buffer and the output buffer.
    pub first_offset: usize,
    pub second_offset: usize,
    pub out_offset: usize,
    pub stride_first: i64,
    pub stride_second: i64,
    pub stride_out: i64,
    pub batch: i32,
}

/// More calls than this for one GEMM (batch dims that do not collapse) and the fallback kernel is cheaper.
const MAX_CALLS: usize = 4096;

/// `(transposed, leading dimension)` of a column-major `rows × cols` operand whose element `(r, c)` lies at
/// `r·s_row + c·s_col`, or `None` when cuBLAS cannot read that layout.
fn operand(rows: usize, cols: usize, s_row: usize, s_col: usize) -> Option<(bool, usize)> {
    if rows == 1 || s_row == 1 {
        // A single column has no leading-dimension constraint beyond cuBLAS's `ld ≥ rows`.
        let ld = if cols == 1 { rows } else { s_col };
        if ld >= rows.max(1) {
            return Some((false, ld));
        }
    }
    if cols == 1 || s_col == 1 {
        let ld = if rows == 1 { cols } else { s_row };
        if ld >= cols.max(1) {
            return Some((true, ld));
        }
    }
    None
}

fn int(n: usize) -> Option<i32> {
    i32::try_from(n).ok()
}

/// One batch dim (or several merged): its size and the element stride of A, B and the output along it.
#[derive(Clone, Copy, Debug)]
struct BatchDim {
    size: usize,
    a: usize,
    b: usize,
    out: usize,
}

/// Merges adjacent batch dims that nest in all three tensors and drops size-1 dims (their strides never move).
fn collapse(dims: &[BatchDim]) -> Vec<BatchDim> {
    let mut merged: Vec<BatchDim> = Vec::new();
    for &d in dims.iter().rev().filter(|d| d.size > 1) {
        match merged.last_mut() {
            Some(inner)
                if d.a == inner.a * inner.size
                    && d.b == inner.b * inner.size
                    && d.out == inner.out * inner.size =>
            {
                inner.size *= d.size;
            }
            _ => merged.push(d),
        }
    }
    merged.reverse();
    merged
}

/// The cuBLAS calls computing `g` at these dynamic dims, or `None` when it needs the fallback kernel.
pub fn plan(g: &CudaGemm, dims: &[usize]) -> Option<Vec<BlasCall>> {
    let (m, n, k) = (g.m.eval(dims), g.n.eval(dims), g.k.eval(dims));
    let batch: Vec<usize> = g.batch.iter().map(|d| d.eval(dims)).collect();
    let q = batch.len();
    let (sa, sb) = (g.a_access.strides(dims), g.b_access.strides(dims));
    if sa.len() != q + 2 || sb.len() != q + 2 {
        return None;
    }
    let rows = if g.fold_batch {
        m * batch.iter().product::<usize>()
    } else {
        m
    };
    let (trans_first, ld_first) = operand(n, k, sb[q + 1], sb[q])?;
    let row_stride = if g.fold_batch {
        crate::strides::folded_row_stride(&batch, &sa[..q], m, sa[q])
    } else {
        sa[q]
    };
    let (trans_second, ld_second) = operand(k, rows, sa[q + 1], row_stride)?;
    let call = BlasCall {
        trans_first,
        trans_second,
        m: int(n)?,
        n: int(rows)?,
        k: int(k)?,
        ld_first: int(ld_first)?,
        ld_second: int(ld_second)?,
        ldc: int(n.max(1))?,
        first_offset: g.b_access.offset(dims),
        second_offset: g.a_access.offset(dims),
        out_offset: 0,
        stride_first: 0,
        stride_second: 0,
        stride_out: 0,
        batch: 1,
    };
    if g.fold_batch {
        return Some(vec![call]);
    }

    // The output is contiguous: its batch strides nest over `m·n`.
    let mut out_stride = m * n;
    let mut all = vec![
        BatchDim {
            size: 1,
            a: 0,
            b: 0,
            out: 0
        };
        q
    ];
    for p in (0..q).rev() {
        all[p] = BatchDim {
            size: batch[p],
            a: sa[p],
            b: sb[p],
            out: out_stride,
        };
        out_stride *= batch[p];
    }
    let groups = collapse(&all);
    let (outer, inner) = match groups.split_last() {
        Some((inner, outer)) => (outer, *inner),
        None => (
            &[][..],
            BatchDim {
                size: 1,
                a: 0,
                b: 0,
                out: 0,
            },
        ),
    };
    let calls: usize = outer.iter().map(|d| d.size).product();
    if calls > MAX_CALLS {
        return None;
    }
    let inner_call = BlasCall {
        stride_first: i64::try_from(inner.b).ok()?,
        stride_second: i64::try_from(inner.a).ok()?,
        stride_out: i64::try_from(inner.out).ok()?,
        batch: int(inner.size)?,
        ..call
    };
    let mut out = Vec::with_capacity(calls);
    for mut index in 0..calls {
        let mut c = inner_call.clone();
        for d in outer.iter().rev() {
            let i = index % d.size;
            index /= d.size;
            c.first_offset += i * d.b;
            c.second_offset += i * d.a;
            c.out_offset += i * d.out;
        }
        out.push(c);
    }
    Some(out)
}

#[cfg(test)]
mod tests;
