//! A model compiled into the executable with `include_bytes!`: no file to ship or find at run
//! time. `Module::load_bytes` reads the archive from memory.
//!
//!     cargo run --example embedded_model

use tsrun::prelude::*;

static MODEL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/models/mlp.pt"
));

fn main() -> Result<()> {
    let model = Module::load_bytes(MODEL)?;
    println!("{} ({} bytes embedded)", model.class_name(), MODEL.len());
    let width = model
        .parameters()
        .first()
        .filter(|w| w.dim() == 2)
        .map(|w| w.shape()[1])
        .ok_or_else(|| Error::Kernel("the first parameter is not a linear weight".into()))?;
    let x = Tensor::from_ndarray(ndarray::Array2::<f32>::ones((2, width)))?;
    let y: Tensor = model.forward(&[x.into()])?.extract()?;
    println!("output {:?}:\n{}", y.shape(), y.to_ndarray::<f32>()?);
    Ok(())
}
