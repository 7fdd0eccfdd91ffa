//! Monte Carlo dropout: keep dropout active at inference and read the spread of many passes as
//! the model's uncertainty. The archive's dropout submodule is darts' `MonteCarloDropout`
//! (dropout that stays on in eval mode while its `mc_dropout_enabled` flag is set); the flag is
//! switched from Rust, then `mc_samples` runs seeded passes in parallel.
//!
//!     cargo run --example mc_dropout

use tsrun::{IValue, Module, Result, Tensor};

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/module_api/net.pt");

fn main() -> Result<()> {
    let model = Module::load(MODEL)?;
    model.eval();
    let x: IValue = Tensor::from_slice(&[0.2f32, -1.0, 0.7, 1.5], &[1, 4])?.into();

    let deterministic: Tensor = model.forward(std::slice::from_ref(&x))?.extract()?;
    println!("dropout off: {:?}", deterministic.to_vec::<f32>()?);

    model.set_attr("drop.mc_dropout_enabled", IValue::Bool(true))?;
    let mc = model.mc_samples(&[x], 200, 0)?; // pass i is seeded 0 + i: reproducible
    println!("200 passes with dropout on:");
    println!("  mean     {:?}", mc.mean.to_vec::<f32>()?);
    println!("  variance {:?}", mc.variance.to_vec::<f32>()?);
    Ok(())
}
