//! `tsrun ops [--missing] [--registered] [FILTER]`: the operator overloads PyTorch defines (its
//! schema list) and whether tsrun has a kernel registered for exactly that overload; a summary
//! line counts them. `tsrun ops MODEL [--json]`: every operator overload the model's
//! compiled methods and functions use, with or without a kernel (built in, or registered with
//! `tsrun::register_op` by a library user), all at once.

use crate::ops::schema::SchemaRegistry;
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
    /// Only operators whose qualified name contains this text (`aten::conv`); or a model file:
    /// the operators that archive uses (every method and function compiled).
    #[arg(value_name = "FILTER|MODEL")]
    pub filter: Option<String>,
    /// With a model: print JSON.
    #[arg(long)]
    pub json: bool,
}

/// One operator overload a model uses.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UsedOp {
    /// `aten::add.Tensor`.
    pub name: String,
    pub supported: bool,
    /// Nodes calling it across every compiled graph.
    pub uses: usize,
    /// The first call's TorchScript source (`code/__torch__.py:12`), when known.
    pub first_use: Option<String>,
}

/// A method or function that failed to compile: `(qualified name, error)`.
pub type CompileFailure = (String, String);

/// Every operator overload the model's methods and free functions use (methods that fail to
/// compile are reported and skipped).
pub fn used_ops(
    module: &crate::runtime::Module,
) -> crate::Result<(Vec<UsedOp>, Vec<CompileFailure>)> {
    use crate::runtime::interpreter::is_interpreter_op;
    let unit = module.compilation_unit()?;
    let mut graphs = Vec::new();
    let mut failures = Vec::new();
    // Operators whose schema the compiler does not know (a custom operator not registered with
    // `register_op`): the calling method does not compile, but the operator is one the model
    // uses and tsrun cannot run.
    let mut unknown: Vec<(String, String)> = Vec::new();
    let mut failed = |name: String, e: crate::ir::CompileError| {
        if let crate::ir::CompileError::UnknownOperator { op, at, .. } = &e {
            unknown.push((op.clone(), format!("{}:{}", at.file, at.line)));
        }
        failures.push((name, e.to_string()));
    };
    for (class, decl) in &module.classes().classes {
        for method in &decl.methods {
            match unit.method(class, &method.name) {
                Ok(f) => graphs.push(f),
                Err(e) => failed(format!("{class}.{}", method.name), e),
            }
        }
    }
    for name in unit.function_names() {
        match unit.function(&name) {
            Ok(f) => graphs.push(f),
            Err(e) => failed(name, e),
        }
    }
    let mut ops: indexmap::IndexMap<String, UsedOp> = indexmap::IndexMap::new();
    for (name, at) in unknown {
        let entry = ops.entry(name.clone()).or_insert_with(|| UsedOp {
            name,
            supported: false,
            uses: 0,
            first_use: Some(at),
        });
        entry.uses += 1;
    }
    for f in &graphs {
        let g = &f.graph;
        g.walk(g.root, &mut |n| {
            let node = g.node(n);
            if is_interpreter_op(&node.kind) {
                return;
            }
            let name = node.qualified_op();
            let entry = ops.entry(name.clone()).or_insert_with(|| UsedOp {
                supported: crate::ops::has_kernel(
                    &node.kind,
                    node.overload.as_deref().unwrap_or(""),
                ),
                name,
                uses: 0,
                first_use: node.source.as_ref().map(|s| {
                    let (line, _) = s.source.line_col(s.start);
                    format!("{}:{line}", s.source.name)
                }),
            });
            entry.uses += 1;
        });
    }
    let mut ops: Vec<UsedOp> = ops.into_values().collect();
    ops.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((ops, failures))
}

fn run_model(path: &std::path::Path, json: bool) -> crate::Result<()> {
    let module = crate::runtime::Module::load(path)?;
    let (ops, failures) = used_ops(&module)?;
    let missing = ops.iter().filter(|o| !o.supported).count();
    if json {
        let failures: Vec<serde_json::Value> = failures
            .iter()
            .map(|(g, e)| serde_json::json!({"graph": g, "error": e}))
            .collect();
        let value = serde_json::json!({"operators": ops, "compile_failures": failures});
        println!("{}", super::output::pretty_json(&value)?);
    } else {
        for op in &ops {
            let status = if op.supported { "yes" } else { "no " };
            let at = match (&op.first_use, op.supported) {
                (Some(at), false) => format!("  (first used at {at})"),
                _ => String::new(),
            };
            println!("{status} {} x{}{at}", op.name, op.uses);
        }
        for (graph, error) in &failures {
            println!("!   {graph} does not compile: {error}");
        }
        println!(
            "# {} operator overloads used, {missing} without a kernel",
            ops.len()
        );
    }
    Ok(())
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
    if let Some(model) = args.filter.as_deref().map(std::path::Path::new) {
        // an operator filter (`aten::conv`) never names a file
        if model.is_file() || model.extension().is_some_and(|e| e == "pt") {
            return run_model(model, args.json);
        }
    }
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
    let outs: Vec<(String, bool)> = crate::ops::out_variants::coverage()
        .into_iter()
        .filter(|(q, _)| filter.is_none_or(|f| q.contains(f)))
        .collect();
    let out_covered = outs.iter().filter(|(_, has)| *has).count();
    println!(
        "# {out_covered} of {} out= overloads run (their own kernel, or their functional \
         sibling's with the result written into out)",
        outs.len()
    );
    Ok(())
}
