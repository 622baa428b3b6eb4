//! Stride rules shared by the CPU's GEMM driver and the cuBLAS plan.

/// The stride between the rows of a product's A once its batch folds into the rows: the row stride `rs`, or with
/// one row per batch the stride of the innermost batch axis longer than 1. A plan gives a static length-1 axis
/// stride 0 (a decoder's head reads `[batch, 1, hidden]`), and that axis is never stepped over, so the batch's
/// stride is what spaces the rows. The CUDA writer's `folded_row_stride` makes the same choice at build time.
pub(crate) fn folded_row_stride(
    batch: &[usize],
    batch_strides: &[usize],
    m: usize,
    rs: usize,
) -> usize {
    let innermost = batch.iter().zip(batch_strides).rev().find(|(&d, _)| d != 1);
    match innermost {
        Some((_, &stride)) if m == 1 => stride,
        _ => rs,
    }
}
