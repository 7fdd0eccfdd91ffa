//! Running an archive that calls custom operators: register a Rust kernel for each by its
//! schema, then load and call the module as usual.
//!
//! The archive (fixtures/gen_custom_op.py) was scripted from a module calling
//! `torch.ops.myops.fused_gelu(x)` and `torch.ops.myops.scale_shift(y, 2.0, shift=0.25)`,
//! operators defined in Python with `torch.library`:
//!
//!     cargo run --example custom_op

use tsrun::{Error, IValue, Module, Result, Tensor};

/// The float32 data and shape of tensor argument `i`.
fn tensor_arg(args: &[IValue], i: usize) -> Result<(Vec<f32>, Vec<usize>)> {
    match args.get(i) {
        Some(IValue::Tensor(t)) => Ok((t.to_vec::<f32>()?, t.shape().to_vec())),
        other => Err(Error::Kernel(format!(
            "argument {i} must be a Tensor, got {}",
            other.map_or("nothing", IValue::kind_name)
        ))),
    }
}

/// Float argument `i` (the compiler has filled in every default, so it is always there).
fn float_arg(args: &[IValue], i: usize) -> Result<f32> {
    args.get(i)
        .and_then(IValue::as_double)
        .map(|v| v as f32)
        .ok_or_else(|| Error::Kernel(format!("argument {i} must be a float")))
}

/// `myops::fused_gelu(Tensor x, float a=1.0) -> Tensor`: `a * gelu(x)`.
fn fused_gelu(args: &[IValue]) -> Result<IValue> {
    let (x, shape) = tensor_arg(args, 0)?;
    let a = float_arg(args, 1)?;
    let y: Vec<f32> = x
        .iter()
        .map(|&v| {
            let v = f64::from(v);
            a * (0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2))) as f32
        })
        .collect();
    Ok(IValue::Tensor(Tensor::from_vec(y, &shape)?))
}

fn main() -> Result<()> {
    // Before the first call; loading may come before or after.
    tsrun::register_op(
        "myops::fused_gelu(Tensor x, float a=1.0) -> Tensor",
        fused_gelu,
    )?;
    // Closures are kernels too; several outputs are returned as a tuple.
    tsrun::register_op(
        "myops::scale_shift(Tensor x, float scale, *, float shift=0.0) -> (Tensor, Tensor)",
        |args: &[IValue]| {
            let (x, shape) = tensor_arg(args, 0)?;
            let (scale, shift) = (float_arg(args, 1)?, float_arg(args, 2)?);
            let scaled: Vec<f32> = x.iter().map(|v| v * scale).collect();
            let shifted: Vec<f32> = scaled.iter().map(|v| v + shift).collect();
            Ok(IValue::tuple(vec![
                IValue::Tensor(Tensor::from_vec(shifted, &shape)?),
                IValue::Tensor(Tensor::from_vec(scaled, &shape)?),
            ]))
        },
    )?;

    let model = Module::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/custom_op/custom_op.pt"
    ))?;
    let x: Vec<f32> = (0..15).map(|i| i as f32 / 4.0 - 1.75).collect();
    let out = model.forward(&[IValue::Tensor(Tensor::from_vec(x, &[3, 5])?)])?;
    // forward returns `(z + shifted, scaled)`
    let IValue::Tuple(outputs) = out else {
        println!("{out:?}");
        return Ok(());
    };
    for (name, value) in ["z + shifted", "scaled"].iter().zip(outputs.items()) {
        if let IValue::Tensor(t) = value {
            println!("{name}: {:?}", t.to_vec::<f32>()?);
        }
    }
    Ok(())
}
