//! The compilation unit: every class (modules, script classes, NamedTuples, enums, interfaces)
//! and free function of a program, with their methods compiled to graphs on first use.

use crate::frontend::ast::{self, ClassKind, ExprKind, UnaryOp};
use crate::ir::decls::{ClassInfo, Declarations, MethodDecl, Param, Signature};
use crate::ir::graph::Graph;
use crate::ir::passes::{self, CalleeGraphs};
use crate::ir::{CompileError, NodeId};
use crate::values::types::Type;
use crate::values::{EnumValue, IValue, List, Tuple};
use indexmap::IndexMap;
use parking_lot::RwLock;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

thread_local! {
    /// Methods and functions being compiled on this thread, innermost last, tagged with their
    /// unit's address: a call to one of them is a recursive call.
    static COMPILING: RefCell<Vec<(usize, String)>> = const { RefCell::new(Vec::new()) };
}

/// Marks `key` as being compiled until dropped.
struct Compiling;

impl Compiling {
    fn enter(unit: &CompilationUnit, key: &str) -> Compiling {
        COMPILING.with(|c| c.borrow_mut().push((unit.tag(), key.to_string())));
        Compiling
    }
}

impl Drop for Compiling {
    fn drop(&mut self) {
        COMPILING.with(|c| c.borrow_mut().pop());
    }
}

/// A compiled function or method.
pub struct Function {
    pub name: String,
    /// `__torch__.M.forward` for methods, `__torch__.foo.bar` for free functions.
    pub qualname: String,
    pub signature: Signature,
    pub graph: Graph,
    inlined: OnceLock<Arc<Graph>>,
    optimized: OnceLock<Arc<Graph>>,
}

impl Function {
    pub fn new(name: String, qualname: String, signature: Signature, graph: Graph) -> Function {
        Function {
            name,
            qualname,
            signature,
            graph,
            inlined: OnceLock::new(),
            optimized: OnceLock::new(),
        }
    }
}

struct FunctionDecl {
    def: ast::FunctionDef,
    file: Arc<ast::File>,
    signature: Signature,
}

/// All compiled code of one loaded archive.
#[derive(Default)]
pub struct CompilationUnit {
    classes: HashMap<Arc<str>, Arc<ClassInfo>>,
    functions: HashMap<String, FunctionDecl>,
    /// Compiled methods and functions by qualname (`Class.method` or function qualname).
    compiled: RwLock<HashMap<String, Arc<Function>>>,
    /// Enum members by qualified name (`__torch__.Color.RED`).
    enum_members: HashMap<String, IValue>,
    /// The archive's `constants.pkl` tuple, referenced from code as `CONSTANTS.c<i>`.
    tensor_constants: Vec<IValue>,
    /// Qualnames of the functions loading runs (see `runs_at_load`), found on first use.
    load_time: OnceLock<HashSet<String>>,
    /// The archive's file format version, with which PyTorch's importer compiles class
    /// methods (not free functions): calls of operators changed since are upgraded.
    op_version: Option<u64>,
}

fn err_at(file: &ast::File, span: ast::Span, message: impl Into<String>) -> CompileError {
    let range = file.range(span);
    CompileError::At {
        location: range.location(),
        message: message.into(),
        at: Box::new(range.code_location()),
    }
}

impl CompilationUnit {
    /// Register every class and function of `files` (methods are compiled on first use), with
    /// the archive's tensor constants (`constants.pkl`), which code and parameter defaults name
    /// as `CONSTANTS.cN` (silero-vad's `state: Tensor=CONSTANTS.c0`).
    pub fn from_files(
        files: &[ast::File],
        tensor_constants: Vec<IValue>,
    ) -> Result<CompilationUnit, CompileError> {
        let mut unit = CompilationUnit {
            tensor_constants,
            ..CompilationUnit::default()
        };
        // enum members first: defaults and constants may name them
        for file in files {
            let module = crate::frontend::module_qualname(&file.source.name)
                .unwrap_or_else(|| "__torch__".to_string());
            for c in file.classes().filter(|c| c.kind == ClassKind::Enum) {
                let qualname: Arc<str> = format!("{module}.{}", c.name.name).into();
                for (name, value) in &c.assignments {
                    let v = literal_value(file, value, &unit.globals())?;
                    unit.enum_members.insert(
                        format!("{qualname}.{}", name.name),
                        IValue::Enum(Arc::new(EnumValue {
                            class: qualname.clone(),
                            name: name.name.as_str().into(),
                            value: v,
                        })),
                    );
                }
            }
        }
        for file in files {
            let file = Arc::new(file.clone());
            let module = crate::frontend::module_qualname(&file.source.name)
                .unwrap_or_else(|| "__torch__".to_string());
            for item in &file.items {
                match item {
                    ast::Item::Class(c) => unit.add_class(&file, &module, c)?,
                    ast::Item::Function(f) => {
                        let qualname = format!("{module}.{}", f.name.name);
                        let signature = signature_of(&file, f, None, &unit.globals())?;
                        unit.functions.insert(
                            qualname,
                            FunctionDecl {
                                def: f.clone(),
                                file: file.clone(),
                                signature,
                            },
                        );
                    }
                    ast::Item::Assign { .. } | ast::Item::Import { .. } => {}
                }
            }
        }
        Ok(unit)
    }

    /// Compile class methods as code of an archive of file format `version` (its `version`
    /// record), which PyTorch's importer passes as their operator version: calls of operators
    /// whose schema or meaning changed since match the old schema and are replaced by
    /// PyTorch's upgraders (`ir::upgraders`).
    pub fn with_op_version(mut self, version: u64) -> CompilationUnit {
        self.op_version = Some(version);
        self
    }

    fn add_class(
        &mut self,
        file: &Arc<ast::File>,
        module: &str,
        c: &ast::ClassDef,
    ) -> Result<(), CompileError> {
        let qualname: Arc<str> = format!("{module}.{}", c.name.name).into();
        let ty_of = |t: &ast::TypeExpr| t.to_type().map_err(|e| err_at(file, t.span, e));
        let mut attributes = Vec::new();
        let mut fields = Vec::new();
        for a in &c.attributes {
            let ty = ty_of(&a.ty)?;
            if c.kind == ClassKind::NamedTuple {
                let default = match &a.default {
                    Some(d) => Some(literal_value(file, d, &self.globals())?),
                    None => None,
                };
                fields.push((a.name.name.clone(), ty.clone(), default));
            }
            attributes.push((a.name.name.clone(), ty));
        }
        let mut constants = Vec::new();
        for k in &c.constants {
            constants.push((
                k.name.name.clone(),
                literal_value(file, &k.value, &self.globals())?,
            ));
        }
        let mut enum_values = Vec::new();
        if c.kind == ClassKind::Enum {
            for (name, value) in &c.assignments {
                enum_values.push((
                    name.name.clone(),
                    literal_value(file, value, &self.globals())?,
                ));
            }
        }
        let self_ty = Type::Class(qualname.clone());
        let mut methods = IndexMap::new();
        for m in &c.methods {
            let signature = signature_of(file, m, Some(&self_ty), &self.globals())?;
            methods.insert(
                m.name.name.clone(),
                MethodDecl {
                    def: m.clone(),
                    file: file.clone(),
                    signature,
                },
            );
        }
        self.classes.insert(
            qualname.clone(),
            Arc::new(ClassInfo {
                qualname,
                kind: c.kind,
                attributes,
                parameters: c.parameters.clone(),
                buffers: c.buffers.clone(),
                constants,
                fields,
                enum_values,
                methods,
            }),
        );
        Ok(())
    }

    /// The names a literal may use: enum members and tensor constants.
    fn globals(&self) -> LiteralGlobals<'_> {
        LiteralGlobals {
            enums: &self.enum_members,
            tensor_constants: &self.tensor_constants,
        }
    }
    pub fn tensor_constant(&self, index: usize) -> Option<IValue> {
        self.tensor_constants.get(index).cloned()
    }

    pub fn class(&self, qualname: &str) -> Option<&Arc<ClassInfo>> {
        self.classes.get(qualname)
    }
    pub fn class_names(&self) -> Vec<Arc<str>> {
        let mut v: Vec<_> = self.classes.keys().cloned().collect();
        v.sort();
        v
    }
    pub fn function_names(&self) -> Vec<String> {
        let mut v: Vec<_> = self.functions.keys().cloned().collect();
        v.sort();
        v
    }
    /// The signature of a free function, without compiling it.
    pub fn function_signature(&self, qualname: &str) -> Option<&Signature> {
        self.functions.get(qualname).map(|f| &f.signature)
    }

    /// The compiled method `name` of class `class_qualname`.
    pub fn method(&self, class_qualname: &str, name: &str) -> Result<Arc<Function>, CompileError> {
        let key = format!("{class_qualname}.{name}");
        if let Some(f) = self.compiled.read().get(&key) {
            return Ok(f.clone());
        }
        let class = self
            .classes
            .get(class_qualname)
            .ok_or_else(|| CompileError::Other(format!("unknown class {class_qualname}")))?;
        let decl = class.methods.get(name).ok_or_else(|| {
            CompileError::Other(format!("class {class_qualname} has no method {name}"))
        })?;
        let compiling = Compiling::enter(self, &key);
        let graph = super::emit::emit_function(
            self,
            &decl.file,
            &decl.def,
            &decl.signature,
            Some(class.clone()),
            self.op_version,
        )?;
        self.check_callees(&graph, graph.root)?;
        drop(compiling);
        let f = Arc::new(Function::new(
            name.to_string(),
            key.clone(),
            decl.signature.clone(),
            graph,
        ));
        self.compiled.write().insert(key, f.clone());
        Ok(f)
    }

    /// The compiled free function `qualname`.
    pub fn function(&self, qualname: &str) -> Result<Arc<Function>, CompileError> {
        if let Some(f) = self.compiled.read().get(qualname) {
            return Ok(f.clone());
        }
        let decl = self
            .functions
            .get(qualname)
            .ok_or_else(|| CompileError::Other(format!("unknown function {qualname}")))?;
        let compiling = Compiling::enter(self, qualname);
        // PyTorch's importer defines free functions without an operator version
        let graph =
            super::emit::emit_function(self, &decl.file, &decl.def, &decl.signature, None, None)?;
        self.check_callees(&graph, graph.root)?;
        drop(compiling);
        let f = Arc::new(Function::new(
            decl.def.name.name.clone(),
            qualname.to_string(),
            decl.signature.clone(),
            graph,
        ));
        self.compiled
            .write()
            .insert(qualname.to_string(), f.clone());
        Ok(f)
    }

    fn tag(&self) -> usize {
        self as *const CompilationUnit as usize
    }

    /// Compile every method and function `block` calls, as PyTorch defines a callee before
    /// emitting a call to it, so that a call back into a function still being compiled is
    /// rejected as PyTorch rejects recursion. Other errors of a callee are left for when it is
    /// compiled on its own (tsrun compiles lazily and may not support code that never runs).
    fn check_callees(&self, graph: &Graph, block: crate::ir::BlockId) -> Result<(), CompileError> {
        for &n in &graph.block(block).nodes {
            let node = graph.node(n);
            for &b in &node.blocks {
                self.check_callees(graph, b)?;
            }
            let (key, short) = match (node.kind.as_str(), node.inputs.first()) {
                ("prim::CallMethod", Some(&recv)) => {
                    let Type::Class(c) = &graph.value(recv).ty else {
                        continue;
                    };
                    let Some(class) = self.class(c) else { continue };
                    if matches!(
                        class.kind,
                        ast::ClassKind::Interface | ast::ClassKind::ModuleInterface
                    ) {
                        continue;
                    }
                    let Some(crate::ir::Attr::Str(m)) = node.attr("name") else {
                        continue;
                    };
                    if !class.has_method(m) {
                        continue;
                    }
                    (format!("{c}.{m}"), m.clone())
                }
                ("prim::CallFunction", Some(&f)) => {
                    let Type::Function(q) = &graph.value(f).ty else {
                        continue;
                    };
                    let Some(decl) = self.functions.get(&**q) else {
                        continue;
                    };
                    (q.to_string(), decl.def.name.name.clone())
                }
                _ => continue,
            };
            let tag = self.tag();
            let recursive =
                COMPILING.with(|c| c.borrow().iter().any(|(t, k)| *t == tag && *k == key));
            if recursive {
                return Err(CompileError::Recursion {
                    location: node
                        .source
                        .as_ref()
                        .map(|s| s.location())
                        .unwrap_or_else(|| key.clone()),
                    message: format!(
                        "method '{short}' is called recursively. Recursive calls are not supported"
                    ),
                });
            }
            if self.compiled.read().contains_key(&key) {
                continue;
            }
            let compiled = stacker::maybe_grow(256 * 1024, 2 * 1024 * 1024, || {
                if node.kind == "prim::CallMethod" {
                    key.rsplit_once('.')
                        .map(|(c, m)| self.method(c, m).map(|_| ()))
                        .unwrap_or(Ok(()))
                } else {
                    self.function(&key).map(|_| ())
                }
            });
            match compiled {
                Err(e @ CompileError::Recursion { .. }) => return Err(e),
                _ => continue,
            }
        }
        Ok(())
    }

    /// `function.graph` with every call inlined (`inlined_graph`).
    pub fn inlined_graph(&self, function: &Function) -> Result<Arc<Graph>, CompileError> {
        if let Some(g) = function.inlined.get() {
            return Ok(g.clone());
        }
        // PyTorch inlines into a copy of the graph, numbered afresh
        let mut g = function.graph.clone();
        g.renumber_as_copy();
        passes::inline_calls(&mut g, self)?;
        Ok(function.inlined.get_or_init(|| Arc::new(g)).clone())
    }

    /// The body a call inlines (PyTorch's `optimized_graph`): the callee with its own calls
    /// inlined, then cleaned up, so its constants are pooled at its top and land at the call
    /// site, where the caller's inlined graph leaves them.
    fn optimized_graph(&self, function: &Function) -> Result<Arc<Graph>, CompileError> {
        if let Some(g) = function.optimized.get() {
            return Ok(g.clone());
        }
        if self.runs_at_load(function) {
            // PyTorch's loading ran it (through `__setstate__`) before anything asked for
            // its graph, and that first run cached an unoptimized copy: calls stay calls,
            // constants stay where its graph has them
            let g = function.graph.clone();
            return Ok(function.optimized.get_or_init(|| Arc::new(g)).clone());
        }
        let mut g = (*self.inlined_graph(function)?).clone();
        // `preoptimizeGraph`: peephole, constant propagation on immutable types (each
        // eliminating dead code only when it changed something), constant pooling
        passes::peephole_optimize(&mut g);
        passes::propagate_constants(&mut g);
        passes::pool_constants(&mut g);
        Ok(function.optimized.get_or_init(|| Arc::new(g)).clone())
    }

    /// Whether loading the archive runs `function`: objects pickled through `__getstate__`
    /// run their class's `__setstate__` at load, and with it what it calls. Taken statically
    /// as every `__setstate__` and the calls its body makes unconditionally (outside any
    /// `if` or loop), transitively; a call in a branch is taken as not run.
    fn runs_at_load(&self, function: &Function) -> bool {
        self.load_time
            .get_or_init(|| {
                let mut found = HashSet::new();
                let mut pending: Vec<Arc<Function>> = self
                    .classes
                    .values()
                    .filter(|c| c.has_method("__setstate__") && c.has_method("__getstate__"))
                    .filter_map(|c| self.method(&c.qualname, "__setstate__").ok())
                    .collect();
                while let Some(f) = pending.pop() {
                    if !found.insert(f.qualname.clone()) {
                        continue;
                    }
                    for &n in &f.graph.block(f.graph.root).nodes {
                        let kind = f.graph.node(n).kind.as_str();
                        if kind == "prim::CallMethod" || kind == "prim::CallFunction" {
                            if self.stays_a_call(&f.graph, n) {
                                continue;
                            }
                            if let Ok(callee) = self.callee_of(&f.graph, n) {
                                pending.push(callee);
                            }
                        }
                    }
                }
                found
            })
            .contains(&function.qualname)
    }

    /// Whether a call node is never inlined: a call through an interface is bound at run
    /// time, and torchbind methods are native (PyTorch keeps both as calls).
    fn stays_a_call(&self, graph: &Graph, call: NodeId) -> bool {
        let receiver = graph.node(call).inputs.first().map(|&v| &graph.value(v).ty);
        let Some(Type::Class(c)) = receiver else {
            return false;
        };
        match self.class(c) {
            None => crate::values::ivalue::is_torchbind_class(c),
            Some(cl) => matches!(
                cl.kind,
                ast::ClassKind::Interface | ast::ClassKind::ModuleInterface
            ),
        }
    }

    /// The function a `prim::CallMethod` / `prim::CallFunction` node invokes.
    pub fn callee_of(&self, graph: &Graph, call: NodeId) -> Result<Arc<Function>, CompileError> {
        let node = graph.node(call);
        let first = node
            .inputs
            .first()
            .ok_or_else(|| CompileError::Other(format!("{} without inputs", node.kind)))?;
        let name = match node.attr("name") {
            Some(crate::ir::Attr::Str(s)) => Some(s.clone()),
            _ => None,
        };
        match (&graph.value(*first).ty, node.kind.as_str(), name) {
            (Type::Class(c), "prim::CallMethod", Some(m)) => self.method(c, &m),
            (Type::Function(f), "prim::CallFunction", _) => self.function(f),
            (t, k, _) => Err(CompileError::Other(format!("cannot resolve {k} on {t}"))),
        }
    }
}

impl Declarations for CompilationUnit {
    fn class(&self, qualname: &str) -> Option<&Arc<ClassInfo>> {
        CompilationUnit::class(self, qualname)
    }
    fn function_signature(&self, qualname: &str) -> Option<&Signature> {
        CompilationUnit::function_signature(self, qualname)
    }
    fn tensor_constant(&self, index: usize) -> Option<IValue> {
        CompilationUnit::tensor_constant(self, index)
    }
    fn upgrader_graph(&self, upgrader: &str) -> Result<Arc<Graph>, CompileError> {
        upgrader_graph(upgrader)
    }
}

/// Operator upgrader `name` compiled as PyTorch's `create_upgrader_graph` does: its source
/// defined alone in a fresh compilation unit, without an operator version. An upgrader that
/// does not annotate its return type (`linspace_0_7`) returns what the operator it replaces
/// returns, as PyTorch infers it from the return statements.
pub fn upgrader_graph(name: &str) -> Result<Arc<Graph>, CompileError> {
    let table = super::upgraders::Upgraders::global()?;
    table.graph(name, &|file, def| {
        let empty = CompilationUnit::default();
        let mut signature = signature_of(file, def, None, &empty.globals())?;
        if def.return_type.is_none() {
            let returns = table.entry_of(name).map(|e| &e.old_schema.returns);
            match returns.map(|r| r.as_slice()) {
                Some([only]) => signature.return_type = only.ty.clone(),
                _ => {
                    return Err(CompileError::Upgrader {
                        upgrader: name.to_string(),
                        message: "no return annotation and no single-result schema".into(),
                    })
                }
            }
        }
        super::emit::emit_function(&empty, file, def, &signature, None, None)
    })
}

impl CalleeGraphs for CompilationUnit {
    fn callee(&self, graph: &Graph, call: NodeId) -> Result<Option<Arc<Graph>>, CompileError> {
        if self.stays_a_call(graph, call) {
            return Ok(None);
        }
        let f = self.callee_of(graph, call)?;
        self.optimized_graph(&f).map(Some)
    }
}

/// The signature of a `def` (the first parameter of a method is `self`).
fn signature_of(
    file: &ast::File,
    f: &ast::FunctionDef,
    self_ty: Option<&Type>,
    globals: &LiteralGlobals<'_>,
) -> Result<Signature, CompileError> {
    let mut params = Vec::new();
    for (i, p) in f.params.iter().enumerate() {
        let ty = match (&p.ty, self_ty) {
            (Some(t), _) => t.to_type().map_err(|e| err_at(file, t.span, e))?,
            (None, Some(s)) if i == 0 => s.clone(),
            // unannotated parameters are Tensors, as in TorchScript
            (None, _) => Type::Tensor,
        };
        let default = match &p.default {
            Some(d) => Some(literal_value(file, d, globals)?),
            None => None,
        };
        params.push(Param {
            name: p.name.name.clone(),
            ty,
            default,
            kwarg_only: p.kwarg_only,
        });
    }
    let return_type = match &f.return_type {
        Some(t) => t.to_type().map_err(|e| err_at(file, t.span, e))?,
        None => Type::NoneType,
    };
    Ok(Signature {
        params,
        return_type,
    })
}

/// The global names a literal expression may use.
pub struct LiteralGlobals<'a> {
    /// Enum members by qualified name (`__torch__.Color.RED`).
    pub enums: &'a HashMap<String, IValue>,
    /// The archive's `constants.pkl` tuple (`CONSTANTS.c<i>`).
    pub tensor_constants: &'a [IValue],
}

/// The value of a literal expression (defaults, constants, enum values).
pub fn literal_value(
    file: &ast::File,
    e: &ast::Expr,
    globals: &LiteralGlobals<'_>,
) -> Result<IValue, CompileError> {
    let literal = |e| literal_value(file, e, globals);
    Ok(match &e.kind {
        ExprKind::Int(i) => IValue::Int(*i),
        ExprKind::Float(f) => IValue::Double(*f),
        ExprKind::Str(s) => IValue::str(s.as_str()),
        ExprKind::Bool(b) => IValue::Bool(*b),
        ExprKind::None => IValue::None,
        ExprKind::Unary {
            op: UnaryOp::Neg,
            operand,
        } => match literal(operand)? {
            IValue::Int(i) => IValue::Int(i.wrapping_neg()),
            IValue::Double(f) => IValue::Double(-f),
            _ => return Err(err_at(file, e.span, "cannot negate this literal")),
        },
        ExprKind::Tuple(items) => IValue::Tuple(Tuple::new(
            items.iter().map(literal).collect::<Result<_, _>>()?,
        )),
        ExprKind::List(items) => {
            let vals: Vec<IValue> = items.iter().map(literal).collect::<Result<_, _>>()?;
            let elem = vals
                .first()
                .map(crate::ir::graph::constant_type)
                .unwrap_or(Type::Tensor);
            IValue::List(List::new(elem, vals))
        }
        ExprKind::Attribute { .. } => match e.dotted_name().as_deref() {
            Some("math.inf") => IValue::Double(f64::INFINITY),
            Some("math.pi") => IValue::Double(std::f64::consts::PI),
            Some("math.e") => IValue::Double(std::f64::consts::E),
            Some("math.nan") => IValue::Double(f64::NAN),
            Some(name) => {
                let tensor_constant = name
                    .strip_prefix("CONSTANTS.c")
                    .and_then(|i| i.parse::<usize>().ok())
                    .and_then(|i| globals.tensor_constants.get(i));
                match tensor_constant.or_else(|| globals.enums.get(name)) {
                    Some(v) => v.clone(),
                    None => return Err(err_at(file, e.span, format!("unknown constant {name}"))),
                }
            }
            None => return Err(err_at(file, e.span, "unsupported constant expression")),
        },
        _ => return Err(err_at(file, e.span, "unsupported constant expression")),
    })
}
