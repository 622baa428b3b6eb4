use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(4, 4)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> (Tensor, Tensor, Tensor) {
            let y = x.matmul(&self.w);
            (y.relu(), y.gelu(), y.sigmod())
        }
    }
}

// Every method of the real API, used as a user would: the stub emitted beside the error must type-check all of
// them, so the one real error is the only one.
fn main() -> fuse_runtime::Result<()> {
    let x = Tensor::randn(&[2, 4], 1);
    let model = m::Model::random(0);
    let (a, b, c) = model.forward(&x)?;
    let _ = (a.shape(), b.shape(), c.shape());
    let _ = model.forward_eager(&x)?;
    let _ = model.forward_with(fuse_runtime::PlanMode::Fused, &x)?;
    let _ = (
        model.plan(),
        model.eager_plan(),
        model.weights(),
        model.compiled(),
    );
    let _ = (m::Model::spec(), m::Model::PLAN_HASH);
    let _ = m::Model::load("weights.safetensors")?;
    let _ = m::Model::from_weights(Vec::new())?.into_compiled();
    Ok(())
}
