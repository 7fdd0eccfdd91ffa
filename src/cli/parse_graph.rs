//! `tsrun parse-graph FILE [-i INPUT]...`: load PyTorch IR text (`str(m.graph)`, as
//! `torch._C.parse_ir` reads it), print it back as tsrun parsed it, or with inputs run it.
//!
//! The text names no overloads (`aten::add(%x, %y, %1)`), so each operator call is resolved to
//! the one schema overload whose arguments accept the values' types, as `parse_ir` does when it
//! looks operators up. Graphs that call methods of `self` need their module and cannot run here.

use super::error::{usage, CliResult};
use super::inputs::InputArgs;
use crate::ir::graph::Graph;
use crate::ir::printer::{print_graph, PrintOptions};
use crate::ops::schema::{is_subtype, SchemaRegistry};
use crate::runtime::interpreter::{
    build_plan, is_interpreter_op, Interpreter, Plan, PlanBuilder, Program,
};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `tsrun parse-graph`.
#[derive(Debug, Clone, clap::Args)]
pub struct ParseGraphArgs {
    /// A file holding one graph's IR text.
    pub file: PathBuf,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Seed of the run's generator (and of --random).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// With inputs: print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Name the function built from the parsed graph is called by.
const GRAPH_FUNCTION: &str = "graph";

/// A program of one free function: the parsed graph.
struct GraphProgram {
    graph: Graph,
}

impl Program for GraphProgram {
    fn method(
        &self,
        _class: &str,
        _name: &str,
        _build: PlanBuilder<'_>,
    ) -> crate::Result<Option<Plan>> {
        Ok(None)
    }
    fn function(&self, qualname: &str, build: PlanBuilder<'_>) -> crate::Result<Option<Plan>> {
        if qualname == GRAPH_FUNCTION {
            build(&self.graph).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// Give every operator node the overload its argument types select (the first one accepting
/// them, in PyTorch's registration order).
fn resolve_overloads(graph: &mut Graph) {
    let registry = SchemaRegistry::global();
    let mut nodes = Vec::new();
    graph.walk(graph.root, &mut |n| nodes.push(n));
    for n in nodes {
        let node = graph.node(n);
        if node.overload.is_some() || is_interpreter_op(&node.kind) {
            continue;
        }
        let types: Vec<_> = node
            .inputs
            .iter()
            .map(|&v| graph.value(v).ty.clone())
            .collect();
        let overloads = registry.overloads(&node.kind);
        let chosen = overloads.iter().find(|s| {
            let positional: Vec<_> = s.arguments.iter().filter(|a| !a.kwarg_only).collect();
            let arity_ok = if s.is_vararg {
                types.len() >= positional.len()
            } else {
                types.len() <= s.arguments.len()
                    && s.arguments[types.len()..]
                        .iter()
                        .all(|a| a.default.is_some())
            };
            arity_ok
                && s.arguments
                    .iter()
                    .zip(&types)
                    .all(|(a, t)| is_subtype(t, &a.ty) || a.fixed_len.is_some())
        });
        if let Some(schema) = chosen {
            let overload = schema.overload.clone();
            graph.nodes[n.0 as usize].overload = Some(overload);
        }
    }
}

/// Run a parsed graph on `inputs` with a generator seeded with `seed`, its operator calls
/// resolved to overloads first (what `tsrun parse-graph FILE -i ...` does).
pub fn run_graph(
    mut graph: Graph,
    inputs: Vec<crate::values::IValue>,
    seed: u64,
) -> crate::Result<crate::values::IValue> {
    resolve_overloads(&mut graph);
    // check the graph builds before running: a missing overload names itself here
    build_plan(GRAPH_FUNCTION, &graph)?;
    let interpreter = Interpreter::new(Arc::new(GraphProgram { graph }));
    let ctx = crate::ops::OpContext::with_seed(seed);
    interpreter.call_function(GRAPH_FUNCTION, inputs, &ctx)
}

/// Run `tsrun parse-graph`.
pub fn run(args: &ParseGraphArgs) -> CliResult {
    let text = String::from_utf8(super::inputs::read_file(&args.file)?)
        .map_err(|_| usage(format!("{}: not UTF-8 text", args.file.display())))?;
    let graph = crate::ir::parse_graph::parse_graph(&text).map_err(|e| {
        let source =
            crate::frontend::source::Source::new(args.file.display().to_string(), text.clone(), 1);
        let (line, col) = source.line_col(e.offset.min(text.len()));
        crate::Error::Module(format!(
            "{}:{line}:{}: {}",
            args.file.display(),
            col + 1,
            e.message
        ))
    })?;
    if args.inputs.inputs.is_empty() && args.inputs.random.is_empty() {
        print!("{}", print_graph(&graph, PrintOptions::default()));
        return Ok(());
    }
    let mut inputs = Vec::new();
    for text in &args.inputs.inputs {
        inputs.push(super::inputs::parse_input_value(text)?);
    }
    inputs.extend(super::inputs::random_inputs(
        &args.inputs.random,
        args.seed,
    )?);
    let result = run_graph(graph, inputs, args.seed)?;
    if args.json {
        println!("{}", super::output::to_json(&result, &|_| None)?);
    } else {
        println!("{}", super::repr::python_repr(&result, &|_| None));
    }
    Ok(())
}
