//! Inspecting a model's tree and exporting its weights: the submodules, every parameter and
//! buffer with its shape and dtype, the total size, then the state dict written to
//! safetensors and npz (both readable from Python: `safetensors.torch.load_file`,
//! `numpy.load`), and read back.
//!
//!     cargo run --example export_weights [MODEL.pt] [OUT_DIR]

use tsrun::{Module, Result};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let model_path = args.next().unwrap_or_else(|| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/models/convnet.pt").to_string()
    });
    let out_dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let model = Module::load(&model_path)?;

    println!("{}", model.class_name());
    for (name, sub) in model.named_modules("", true).into_iter().skip(1) {
        println!("  {name}: {}", sub.class_name());
    }
    let state = model.state_dict();
    let mut bytes = 0;
    for (name, t) in &state {
        println!("  {name:40} {:?} {}", t.shape(), t.dtype().name());
        bytes += t.numel() * t.dtype().size();
    }
    println!(
        "{} tensors, {} parameters, {bytes} bytes",
        state.len(),
        model.parameters().len()
    );

    for ext in ["safetensors", "npz"] {
        let path = out_dir.join(format!("weights.{ext}"));
        tsrun::write_state_dict(&path, &state)?;
        let back = tsrun::read_state_dict(&path)?;
        println!(
            "wrote {} ({} tensors read back)",
            path.display(),
            back.len()
        );
    }
    Ok(())
}
