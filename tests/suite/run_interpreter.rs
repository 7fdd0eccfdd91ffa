//! Interpreter failure behaviour on hand-built graphs: an operator with no kernel names itself and
//! its source line, exceptions carry a TorchScript traceback through calls, runaway recursion is
//! stopped with an error instead of overflowing the stack.

use std::collections::HashMap;
use std::sync::Arc;
use tsrun::internals::frontend::source::{Source, SourceRange};
use tsrun::internals::ir::graph::Attr;
use tsrun::internals::ir::Graph;
use tsrun::internals::runtime::interpreter::{
    default_context, Interpreter, Plan, PlanBuilder, Program,
};
use tsrun::internals::values::Type;
use tsrun::internals::values::{IValue, Object};

#[derive(Default)]
struct Functions(HashMap<String, Graph>);

impl Program for Functions {
    fn method(&self, _: &str, _: &str, _: PlanBuilder<'_>) -> tsrun::Result<Option<Plan>> {
        Ok(None)
    }
    fn function(&self, q: &str, build: PlanBuilder<'_>) -> tsrun::Result<Option<Plan>> {
        match self.0.get(q) {
            Some(g) => build(g).map(Some),
            None => Ok(None),
        }
    }
}

const CODE: &str =
    "def f(x: int) -> int:\n  return g(x)\ndef g(x: int) -> int:\n  return ops.unknown(x)\n";

fn range(text: &str) -> SourceRange {
    let src = Source::new("code/__torch__/m.py", CODE, 1);
    let start = CODE.find(text).unwrap_or(0);
    SourceRange::new(src, start, start + text.len())
}

/// `def name(x: int) -> int: return <kind>(x)` (a call of `callee` when given).
fn one_op(kind: &str, callee: Option<&str>, at: &str) -> Graph {
    let mut g = Graph::new();
    let x = g.add_input(Type::Int, Some("x".into()));
    let root = g.root;
    let mut inputs = vec![x];
    if let Some(c) = callee {
        let f = g.create_node("prim::Constant", vec![], vec![Type::Function(c.into())]);
        g.node_mut(f)
            .attrs
            .push(("name".into(), Attr::Str(c.into())));
        g.append(root, f);
        inputs.insert(0, g.node(f).outputs[0]);
    }
    let n = g.create_node(kind, inputs, vec![Type::Int]);
    g.node_mut(n).source = Some(range(at));
    g.append(root, n);
    let out = g.node(n).outputs[0];
    g.block_mut(root).returns.push(out);
    g
}

#[test]
fn missing_kernel_names_the_op_and_the_line() {
    let mut p = Functions::default();
    p.0.insert("f".into(), one_op("prim::CallFunction", Some("g"), "g(x)"));
    p.0.insert("g".into(), one_op("ops::unknown", None, "ops.unknown(x)"));
    let interp = Interpreter::new(Arc::new(p));
    let e = interp
        .call_function("f", vec![IValue::Int(1)], default_context())
        .expect_err("ops::unknown has no kernel");
    let text = e.to_string();
    assert!(text.contains("ops::unknown"), "{text}");
    assert!(text.contains("line 2, in f"), "{text}");
    // g is compiled on its first call, and fails there: the op is on its straight path
    assert!(
        text.contains("g uses operator overloads tsrun has no kernel for")
            && text.contains("line 4: return ops.unknown(x)"),
        "{text}"
    );
    assert!(
        text.find("in f").unwrap_or(usize::MAX) < text.find("g uses").unwrap_or(0),
        "outermost frame first: {text}"
    );
}

#[test]
fn runaway_recursion_is_an_error() {
    let mut p = Functions::default();
    p.0.insert("f".into(), one_op("prim::CallFunction", Some("f"), "g(x)"));
    let interp = Interpreter::new(Arc::new(p));
    let e = interp
        .call_function("f", vec![IValue::Int(1)], default_context())
        .expect_err("infinite recursion must fail");
    assert!(e.to_string().contains("recursion"), "{e}");
}

#[test]
fn calling_a_missing_method_fails_with_its_name() {
    let interp = Interpreter::new(Arc::new(Functions::default()));
    let obj = Object::new("__torch__.M".into(), Default::default());
    let e = interp
        .call_method(&obj, "forward", vec![], default_context())
        .expect_err("no such method");
    assert!(
        e.to_string().contains("__torch__.M has no method forward"),
        "{e}"
    );
}
