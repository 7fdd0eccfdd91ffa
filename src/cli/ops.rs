//! `tsrun ops [--missing] [--registered] [FILTER]`: the operator overloads PyTorch defines (its
//! schema list) and whether tsrun has a kernel registered for exactly that overload; a summary
//! line counts them.

use crate::ir::schema::SchemaRegistry;
use crate::ops::Registry;

#[derive(clap::Args, Debug, Clone)]
pub struct OpsArgs {
    /// List only overloads without a kernel.
    #[arg(long)]
    pub missing: bool,
    /// List only the names kernels are registered under, one a line, without the summary
    /// (fixtures/gen_ops_coverage.py reads this list).
    #[arg(long, conflicts_with = "missing")]
    pub registered: bool,
    /// Only operators whose qualified name contains this text (`aten::conv`).
    pub filter: Option<String>,
}

/// Overloads that never run in an inference graph: out= variants, autograd internals.
pub fn is_runtime_relevant(qualified: &str) -> bool {
    !(qualified.ends_with("_out")
        || qualified.ends_with(".out")
        || qualified.contains("_backward")
        || qualified.contains(".grad_input")
        || qualified.starts_with("aten::_foreach"))
}

/// (overloads with an exact kernel, runtime-relevant overloads) over PyTorch's schema list,
/// optionally only names containing `filter`; `each` sees every counted overload.
pub fn exact_coverage(filter: Option<&str>, mut each: impl FnMut(&str, bool)) -> (usize, usize) {
    let kernels = Registry::global();
    let (mut total, mut covered) = (0usize, 0usize);
    for schema in SchemaRegistry::global().all() {
        let qualified = schema.qualified_name();
        if !is_runtime_relevant(&qualified) || filter.is_some_and(|f| !qualified.contains(f)) {
            continue;
        }
        let has = kernels.lookup(&schema.name, &schema.overload).is_some()
            || crate::runtime::interpreter::is_interpreter_op(&qualified);
        total += 1;
        covered += usize::from(has);
        each(&qualified, has);
    }
    (covered, total)
}

pub fn run(args: &OpsArgs) -> crate::Result<()> {
    let filter = args.filter.as_deref();
    if args.registered {
        for name in Registry::global().names() {
            if filter.is_none_or(|f| name.contains(f)) {
                println!("{name}");
            }
        }
        return Ok(());
    }
    let (covered, total) = exact_coverage(filter, |qualified, has| {
        if !(args.missing && has) {
            println!("{} {qualified}", if has { "yes" } else { "no " });
        }
    });
    println!(
        "# {covered} of {total} operator overloads have a kernel for exactly that overload \
         (out=, backward and _foreach variants not counted)"
    );
    Ok(())
}
