//! The README's main command: one transformer encoder layer (hidden 384, 12 heads, FFN 1536) on seeded random
//! weights, batch 8 × sequence 128 with padding. Prints an output checksum, the fused plan, and eager vs fused time.
//! With `--drift`, prints the drift report instead: fused and eager plans against the f64 reference on the same
//! inputs, and the first kernel where the two plans part, if any.

use std::time::Instant;

use fuse_examples::models::encoder::encoder::EncoderLayer;
use fuse_examples::timing::median_ms;
use fuse_runtime::Tensor;
use fuse_tests::drift::{self, Tolerance};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (batch, seq) = (8, 128);
    let model = EncoderLayer::random(42);
    let x = Tensor::randn(&[batch, seq, 384], 1);
    // Sequence b keeps its first 128 - 8b tokens; the rest is padding.
    let mask: Vec<f32> = (0..batch * seq)
        .map(|i| {
            if i % seq < seq - 8 * (i / seq) {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    let mask = Tensor::from_f32(&[batch, seq], mask)?;
    if std::env::args().skip(1).any(|a| a == "--drift") {
        let report = drift::check(model.compiled(), &[&x, &mask], Tolerance::default())
            .map_err(|e| format!("drift check: {e}"))?;
        println!("{report}");
        return Ok(());
    }

    let start = Instant::now();
    let fused = model.forward(&x, &mask)?;
    let first_ms = start.elapsed().as_secs_f64() * 1e3;
    let eager = model.forward_eager(&x, &mask)?;

    println!(
        "output {:?}, checksum {:.6}",
        fused.shape(),
        fused.checksum()
    );
    println!(
        "fused vs eager: max abs difference {:.3e}\n",
        fused.max_abs_diff(&eager).unwrap_or(f32::NAN)
    );
    println!("{}", model.plan().at(&[batch, seq]));
    println!(
        "eager plan: {} kernels, {:.2} MB moved",
        model.eager_plan().kernel_count(),
        model.eager_plan().at(&[batch, seq]).bytes_moved() as f64 / 1e6
    );

    let fused_ms = median_ms(15, || model.forward(&x, &mask).map(drop))?;
    let eager_ms = median_ms(15, || model.forward_eager(&x, &mask).map(drop))?;
    println!("\ntime (median of 15, batch {batch} × seq {seq}):");
    println!("  first fused call {first_ms:8.2} ms");
    println!("  fused            {fused_ms:8.2} ms");
    println!(
        "  eager            {eager_ms:8.2} ms   ({:.2}× slower)",
        eager_ms / fused_ms
    );
    if std::env::var_os("FUSE_PROFILE").is_some() {
        for (name, ms) in
            model
                .compiled()
                .profile(fuse_runtime::PlanMode::Fused, &[&x, &mask], 10)?
        {
            println!("  {name:<22} {ms:8.3} ms");
        }
    }
    Ok(())
}
