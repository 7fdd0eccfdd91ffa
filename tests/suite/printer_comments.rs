//! The `# file:line:col` comment of every node in `str(m.graph)` and `str(m.inlined_graph)`,
//! against PyTorch's goldens. Only the comments are compared (value numbering is checked
//! elsewhere): PyTorch maps each node's range in the archive code through the code file's
//! `debug_pkl` to the original Python source, and prints nothing for nodes without a range.

use tsrun::internals::ir::printer::{print_graph, PrintOptions};

use crate::common::{compiled_method, printed_goldens};

/// One printed node: its kind (with attributes, for constants) and its trailing comment.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct NodeLine {
    kind: String,
    comment: Option<String>,
}

/// The node lines of a printed graph, in order. Node lines are the ones with ` = `
/// (`%out : T = kind[attrs](inputs)`, or ` = kind(...)` without outputs); inputs, block
/// headers, `->` and `return` lines have no comments. Constants keep their attributes
/// (`prim::Constant[value=1]`) so equal constants pair up whatever their order.
fn node_lines(printed: &str) -> Vec<NodeLine> {
    printed
        .lines()
        .filter_map(|line| {
            let t = line.trim_start();
            if t.starts_with("graph(") || t.starts_with("block") || t.starts_with("->") {
                return None;
            }
            let (_, rest) = line.split_once(" = ")?;
            let comment = comment(rest);
            let body = match &comment {
                Some(c) => &rest[..rest.len() - c.len() - 3],
                None => rest,
            };
            let kind = if body.starts_with("prim::Constant") {
                body.rsplit_once('(').map_or(body, |(k, _)| k)
            } else {
                &body[..body.find(['[', '(']).unwrap_or(body.len())]
            };
            Some(NodeLine {
                kind: kind.to_string(),
                comment,
            })
        })
        .collect()
}

/// The text after the last ` # ` when it ends in `:LINE:COL` (a string constant may hold ` # `).
fn comment(rest: &str) -> Option<String> {
    let (_, c) = rest.rsplit_once(" # ")?;
    let mut parts = c.rsplitn(3, ':');
    let col = parts.next()?;
    let line = parts.next()?;
    parts.next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(col) && digits(line)).then(|| c.to_string())
}

/// Constants (which PyTorch's pooling may order differently) sorted, the other nodes in
/// graph order.
fn split_constants(lines: Vec<NodeLine>) -> (Vec<NodeLine>, Vec<NodeLine>) {
    let (mut constants, others): (Vec<_>, Vec<_>) = lines
        .into_iter()
        .partition(|n| n.kind.starts_with("prim::Constant"));
    constants.sort();
    (constants, others)
}

/// The lines of sorted `a` that sorted `b` lacks (multiset difference).
fn missing_from<'a>(a: &'a [NodeLine], b: &[NodeLine]) -> Vec<&'a NodeLine> {
    let mut rest = b.iter().peekable();
    let mut out = Vec::new();
    for n in a {
        while rest.next_if(|m| *m < n).is_some() {}
        if rest.next_if(|m| *m == n).is_none() {
            out.push(n);
        }
    }
    out
}

#[derive(Default)]
struct Tally {
    total: usize,
    same: usize,
    differing: Vec<String>,
}

impl Tally {
    /// A method counts when its node sequence lines up with PyTorch's and every comment
    /// matches: other nodes line by line, constants (whose order is PyTorch's pooling order)
    /// as multisets of value and comment. Only the first difference of a method is listed
    /// unless `TSRUN_ALL_COMMENT_DIFFS` is set.
    fn check(&mut self, label: &str, ours: Result<String, String>, theirs: &str) {
        self.total += 1;
        let ours = match ours {
            Ok(o) => o,
            Err(e) => return self.differing.push(format!("{label}: {e}")),
        };
        let (our_constants, ours) = split_constants(node_lines(&ours));
        let (their_constants, theirs) = split_constants(node_lines(theirs));
        let kinds = |v: &[NodeLine]| v.iter().map(|n| n.kind.clone()).collect::<Vec<_>>();
        if kinds(&ours) != kinds(&theirs) {
            return self
                .differing
                .push(format!("{label}: node sequences differ (not compared)"));
        }
        let mut bad: Vec<String> = ours
            .iter()
            .zip(&theirs)
            .filter(|(a, b)| a.comment != b.comment)
            .map(|(a, b)| {
                format!(
                    "{}\n    ours:    {:?}\n    pytorch: {:?}",
                    a.kind, a.comment, b.comment
                )
            })
            .collect();
        if our_constants != their_constants {
            let show = |v: Vec<&NodeLine>| {
                v.iter()
                    .map(|n| format!("{} # {}", n.kind, n.comment.as_deref().unwrap_or("-")))
                    .collect::<Vec<_>>()
                    .join(" | ")
            };
            bad.push(format!(
                "constants\n    ours:    {}\n    pytorch: {}",
                show(missing_from(&our_constants, &their_constants)),
                show(missing_from(&their_constants, &our_constants)),
            ));
        }
        match bad.first() {
            None => self.same += 1,
            Some(first) => self.differing.push(format!("{label}: {first}")),
        }
        if std::env::var_os("TSRUN_ALL_COMMENT_DIFFS").is_some() {
            for b in bad.iter().skip(1) {
                self.differing.push(format!("{label}: {b}"));
            }
        }
    }
}

/// The comments of every golden method's `graph` and `inlined_graph`, against PyTorch's; the
/// tallies are ratchets.
#[test]
fn graph_comments_match_pytorch() {
    let (mut graph, mut inlined) = (Tally::default(), Tally::default());
    for (fixture, root, json) in &printed_goldens() {
        for (path, methods) in json.as_object().into_iter().flatten() {
            for (method, printed) in methods.as_object().into_iter().flatten() {
                let label = format!("{fixture} [{path}] {method}");
                let compiled = compiled_method(root, path, method);
                if let Some(want) = printed.get("graph").and_then(|c| c.as_str()) {
                    let ours = compiled
                        .as_ref()
                        .map_err(Clone::clone)
                        .map(|(_, f)| print_graph(&f.graph, PrintOptions::default()));
                    graph.check(&label, ours, want);
                }
                if let Some(want) = printed.get("inlined_graph").and_then(|c| c.as_str()) {
                    let ours = compiled.as_ref().map_err(Clone::clone).and_then(|(u, f)| {
                        u.inlined_graph(f)
                            .map(|g| print_graph(&g, PrintOptions::default()))
                            .map_err(|e| e.to_string())
                    });
                    inlined.check(&label, ours, want);
                }
            }
        }
    }
    for (name, t) in [("graph", &graph), ("inlined_graph", &inlined)] {
        println!(
            "{name}: {}/{} methods print PyTorch's source comments",
            t.same, t.total
        );
    }
    for (name, t) in [("graph", &graph), ("inlined_graph", &inlined)] {
        for d in &t.differing {
            println!("[{name}] {d}");
        }
    }
    assert!(graph.total > 0 && inlined.total > 0);
    assert!(
        graph.same >= GRAPH_FLOOR,
        "graph: {} < {GRAPH_FLOOR}",
        graph.same
    );
    assert!(
        inlined.same >= INLINED_FLOOR,
        "inlined_graph: {} < {INLINED_FLOOR}",
        inlined.same
    );
}

/// Every graph (1434) and inlined graph (1236) prints every comment as PyTorch does.
const GRAPH_FLOOR: usize = 1434;
const INLINED_FLOOR: usize = 1236;
