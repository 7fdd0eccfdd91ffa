//! `tsrun ops [--missing] [FILTER]`: the operator overloads PyTorch defines (its schema list) and
//! whether tsrun has a kernel for each; a summary line counts them.

use crate::ir::schema::SchemaRegistry;
use crate::ops::Registry;

#[derive(clap::Args, Debug, Clone)]
pub struct OpsArgs {
    /// List only overloads without a kernel.
    #[arg(long)]
    pub missing: bool,
    /// Only operators whose qualified name contains this text (`aten::conv`).
    pub filter: Option<String>,
}

/// Overloads that never run in an inference graph: out= variants, autograd internals.
fn is_runtime_relevant(qualified: &str) -> bool {
    !(qualified.ends_with("_out")
        || qualified.ends_with(".out")
        || qualified.contains("_backward")
        || qualified.contains(".grad_input")
        || qualified.starts_with("aten::_foreach"))
}

pub fn run(args: &OpsArgs) -> crate::Result<()> {
    let kernels = Registry::global();
    let (mut total, mut covered) = (0usize, 0usize);
    for schema in SchemaRegistry::global().all() {
        let qualified = schema.qualified_name();
        if !is_runtime_relevant(&qualified) {
            continue;
        }
        if let Some(f) = &args.filter {
            if !qualified.contains(f.as_str()) {
                continue;
            }
        }
        let has = kernels.lookup(&schema.name, &schema.overload).is_some()
            || crate::runtime::interpreter::is_interpreter_op(&schema.name);
        total += 1;
        covered += usize::from(has);
        if !(args.missing && has) {
            println!("{} {qualified}", if has { "yes" } else { "no " });
        }
    }
    println!("# {covered} of {total} operator overloads have a kernel (out= and backward variants not counted)");
    Ok(())
}
