//! PyTorch's operator upgraders (`torch/csrc/jit/operator_upgraders`): when an operator's
//! schema or meaning changed, archives whose file format version predates the change still
//! load as they ran. A class method of such an archive is compiled against the operator's old
//! schema, and right after emission each call of it is replaced by the body of an upgrader, a
//! TorchScript function written with today's operators (`div_Tensor_0_3` truncates integer
//! division, as `aten::div` did up to version 3). The table (operator, the version that
//! changed it, upgrader, old schema) and the upgraders' sources are PyTorch's, generated into
//! `fixtures/upgraders.txt` by `fixtures/gen_upgraders.py`; the sources compile lazily, once
//! per process, through the compilation unit (which owns the emitter).

use crate::frontend::{self, ast, source::Source};
use crate::ir::graph::Graph;
use crate::ir::CompileError;
use crate::ops::schema::{parse_schema, FunctionSchema};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// PyTorch's version map and upgrader sources (BSD-3-Clause, PyTorch).
static TABLE: &str = include_str!("../../fixtures/upgraders.txt");

/// The file name PyTorch gives an upgrader's source: its ranges print as `<string>:L:C`.
const SOURCE_NAME: &str = "<string>";

/// One entry of PyTorch's operator version map.
pub struct UpgraderEntry {
    /// The operator overload whose schema or meaning changed (`aten::div.Tensor`).
    pub op: &'static str,
    /// The file format version that changed it: archives of older versions need the upgrader.
    pub bumped_at: u64,
    /// The upgrader function (`div_Tensor_0_3`).
    pub upgrader: &'static str,
    /// The operator's schema before the change, which calls in older archives match.
    pub old_schema: Arc<FunctionSchema>,
}

/// The version map and the upgraders' sources, with the graphs compiled so far.
pub struct Upgraders {
    /// Entries per operator overload, oldest change first.
    by_op: HashMap<&'static str, Vec<UpgraderEntry>>,
    sources: HashMap<&'static str, &'static str>,
    graphs: Mutex<HashMap<&'static str, Arc<Graph>>>,
}

impl Upgraders {
    /// The table of the PyTorch the fixtures were generated with.
    pub fn global() -> Result<&'static Upgraders, CompileError> {
        static TABLE_PARSED: OnceLock<Result<Upgraders, CompileError>> = OnceLock::new();
        TABLE_PARSED
            .get_or_init(|| Upgraders::parse(TABLE))
            .as_ref()
            .map_err(Clone::clone)
    }

    fn parse(text: &'static str) -> Result<Upgraders, CompileError> {
        let mut pieces = text.split("@@ upgrader ");
        let header = pieces.next().unwrap_or("");
        let mut by_op: HashMap<&'static str, Vec<UpgraderEntry>> = HashMap::new();
        for line in header.lines().filter(|l| l.starts_with("entry ")) {
            let bad = |message: String| CompileError::Upgrader {
                upgrader: line.to_string(),
                message,
            };
            let mut fields = line.splitn(5, ' ').skip(1);
            let (Some(op), Some(version), Some(upgrader), Some(schema)) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(bad("expected `entry OP VERSION UPGRADER SCHEMA`".into()));
            };
            let bumped_at = version
                .parse()
                .map_err(|_| bad(format!("version `{version}` is not a number")))?;
            let old_schema = parse_schema(schema).map_err(|e| bad(e.to_string()))?;
            by_op.entry(op).or_default().push(UpgraderEntry {
                op,
                bumped_at,
                upgrader,
                old_schema: Arc::new(old_schema),
            });
        }
        for entries in by_op.values_mut() {
            entries.sort_by_key(|e| e.bumped_at);
        }
        let mut sources = HashMap::new();
        for piece in pieces {
            let (name, source) = piece.split_once('\n').unwrap_or((piece, ""));
            sources.insert(name.trim(), source);
        }
        Ok(Upgraders {
            by_op,
            sources,
            graphs: Mutex::new(HashMap::new()),
        })
    }

    /// Whether any operator changed after file format `version` (archives this PyTorch
    /// writes need no upgrader).
    pub fn applies_to(&self, version: u64) -> bool {
        self.by_op.values().flatten().any(|e| e.bumped_at > version)
    }

    /// The upgrader a call of `op` (`aten::div.Tensor`) needs in an archive of file format
    /// `version` (PyTorch's `findUpgrader`: the first change after that version).
    pub fn find(&self, op: &str, version: u64) -> Option<&UpgraderEntry> {
        self.by_op.get(op)?.iter().find(|e| e.bumped_at > version)
    }

    /// The old schemas of operator `name` (`aten::linspace`) current at `version`, whatever
    /// their overload: what a call matches when no overload of the name exists any more
    /// (PyTorch's `loadPossibleHistoricOps`).
    pub fn historic(&self, name: &str, version: u64) -> Vec<Arc<FunctionSchema>> {
        let mut ops: Vec<&&str> = self
            .by_op
            .keys()
            .filter(|op| op.split_once('.').map_or(**op, |(base, _)| base) == name)
            .collect();
        ops.sort();
        ops.into_iter()
            .filter_map(|op| self.find(op, version))
            .map(|e| e.old_schema.clone())
            .collect()
    }

    /// The overloads a call of `name` matches in an archive of file format `version`, in
    /// PyTorch's order (`emitBuiltinCall`): the current overloads unchanged since, then the
    /// old schemas of those changed later.
    pub fn overloads_at(
        &self,
        name: &str,
        current: &[Arc<FunctionSchema>],
        version: u64,
    ) -> Vec<Arc<FunctionSchema>> {
        let mut unchanged = Vec::with_capacity(current.len());
        let mut old = Vec::new();
        for schema in current {
            match self.find(&schema.qualified_name(), version) {
                Some(e) => old.push(e.old_schema.clone()),
                None => unchanged.push(schema.clone()),
            }
        }
        if current.is_empty() {
            old = self.historic(name, version);
        }
        unchanged.extend(old);
        unchanged
    }

    /// The graph of upgrader `name`, compiled by `compile` (given the parsed source and the
    /// upgrader's `def`) on first use.
    pub fn graph(
        &self,
        name: &str,
        compile: &dyn Fn(&ast::File, &ast::FunctionDef) -> Result<Graph, CompileError>,
    ) -> Result<Arc<Graph>, CompileError> {
        if let Some(g) = self.graphs.lock().get(name) {
            return Ok(g.clone());
        }
        let (&key, &text) =
            self.sources
                .get_key_value(name)
                .ok_or_else(|| CompileError::Upgrader {
                    upgrader: name.to_string(),
                    message: "no source for this upgrader".into(),
                })?;
        let bad = |message: String| CompileError::Upgrader {
            upgrader: name.to_string(),
            message,
        };
        let file = frontend::parse_source(Source::new(SOURCE_NAME, text, 1))
            .map_err(|e| bad(e.to_string()))?;
        let def = file
            .items
            .iter()
            .find_map(|item| match item {
                ast::Item::Function(f) if f.name.name == name => Some(f),
                _ => None,
            })
            .ok_or_else(|| bad("the source does not define it".into()))?;
        let graph = Arc::new(compile(&file, def)?);
        Ok(self.graphs.lock().entry(key).or_insert(graph).clone())
    }

    /// The entry naming upgrader `name`.
    pub fn entry_of(&self, name: &str) -> Option<&UpgraderEntry> {
        self.by_op.values().flatten().find(|e| e.upgrader == name)
    }

    /// Every upgrader with a source, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.sources.keys().copied().collect();
        v.sort();
        v
    }
}
