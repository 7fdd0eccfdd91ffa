//! Every TorchScript code file of every fixture archive parses; syntax errors name
//! `file:line:col` and the offending token.

use std::io::Read;
use std::path::{Path, PathBuf};

use tsrun::internals::frontend::ast::{ClassKind, ExprKind, Item, StmtKind, TypeExprKind};
use tsrun::internals::frontend::{module_qualname, parse_file};

fn fixture_archives() -> Vec<PathBuf> {
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models")];
    // Extra archives for exploration (e.g. freshly saved models), never required.
    if let Ok(extra) = std::env::var("TSRUN_EXTRA_ARCHIVES") {
        dirs.extend(extra.split(':').map(PathBuf::from));
    }
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "pt") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// (entry name, text) of every `code/**.py` entry.
fn code_files(archive: &Path) -> Vec<(String, String)> {
    let f = std::fs::File::open(archive).expect("open archive");
    let mut zip = zip::ZipArchive::new(f).expect("zip");
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).expect("zip entry");
        let name = entry.name().to_string();
        if name.ends_with(".py") && name.contains("/code/") {
            let mut text = String::new();
            entry.read_to_string(&mut text).expect("utf-8 code file");
            out.push((name, text));
        }
    }
    out
}

#[test]
fn every_fixture_code_file_parses() {
    let archives = fixture_archives();
    assert!(
        !archives.is_empty(),
        "no fixture archives under fixtures/models (merge main for the fixtures helper's models)"
    );
    let (mut files, mut classes, mut functions) = (0, 0, 0);
    let mut failures = Vec::new();
    for archive in &archives {
        for (name, text) in code_files(archive) {
            assert!(module_qualname(&name).is_some(), "{name}: no qualname");
            files += 1;
            match parse_file(&name, &text) {
                Ok(file) => {
                    classes += file.classes().count();
                    functions += file.functions().count();
                }
                Err(e) => failures.push(format!("{}: {e}", archive.display())),
            }
        }
    }
    println!(
        "parsed {files} code files from {} archives: {classes} classes, {functions} free functions",
        archives.len()
    );
    assert!(
        failures.is_empty(),
        "parse failures:\n{}",
        failures.join("\n")
    );
}

const MODULE: &str = r#"class Net(Module):
  __parameters__ = ["weight", "bias", ]
  __buffers__ = []
  weight : Tensor
  training : bool
  fc1 : __torch__.torch.nn.modules.linear.Linear
  p : Final[float] = 0.29999999999999999
  def forward(self: __torch__.Net,
    x: Tensor,
    y: Optional[int]=None) -> Tuple[Tensor, List[int]]:
    _0 = uninitialized(bool)
    out = annotate(List[int], [])
    if torch.__isnot__(y, None):
      y0 = unchecked_cast(int, y)
    else:
      ops.prim.RaiseException("AssertionError: bad \'x\'\n", "builtins.ValueError")
    _3, _4 = (fc1).forward(x, ), -9223372036854775808
    t = torch.slice(x, 0, None, None, 2)[0:2, ..., ::2]
    return (torch.add(CONSTANTS.c0, -inf), [a if b else c for a in out if not a is None])
class Color(Enum):
  RED = 1
class I(ModuleInterface):
  def forward(self, x: Tensor) -> Tensor:
    pass
def helper(x: Tensor,
    k: int=2) -> Tensor:
  return torch.mul(x, k)
"#;

#[test]
fn module_class_structure() {
    let file = parse_file("code/__torch__.py", MODULE).expect("parses");
    let classes: Vec<_> = file.classes().collect();
    assert_eq!(classes.len(), 3);
    let net = classes[0];
    assert_eq!(net.kind, ClassKind::Module);
    assert_eq!(net.parameters, vec!["weight", "bias"]);
    assert!(net.buffers.is_empty());
    let attrs: Vec<_> = net
        .attributes
        .iter()
        .map(|a| a.name.name.as_str())
        .collect();
    assert_eq!(attrs, vec!["weight", "training", "fc1"]);
    assert_eq!(
        net.attributes[2].ty.kind,
        TypeExprKind::Name("__torch__.torch.nn.modules.linear.Linear".into())
    );
    assert_eq!(net.constants.len(), 1);
    assert!(matches!(net.constants[0].value.kind, ExprKind::Float(f) if f == 0.3));
    let fwd = &net.methods[0];
    assert_eq!(fwd.params.len(), 3);
    assert_eq!(
        fwd.return_type
            .as_ref()
            .map(|t| t.to_type().map(|t| t.to_string())),
        Some(Ok("(Tensor, int[])".to_string()))
    );
    assert!(matches!(
        fwd.params[2].default.as_ref().map(|d| &d.kind),
        Some(ExprKind::None)
    ));
    // Spans point back into the source.
    assert_eq!(file.range(fwd.name.span).text(), "forward");
    let StmtKind::Assign { value, .. } = &fwd.body[3].kind else {
        panic!("tuple assignment expected, got {:?}", fwd.body[3].kind);
    };
    let ExprKind::Tuple(items) = &value.kind else {
        panic!("tuple value expected");
    };
    assert!(matches!(items[1].kind, ExprKind::Int(i64::MIN)));
    assert_eq!(classes[1].kind, ClassKind::Enum);
    assert_eq!(classes[1].assignments[0].0.name, "RED");
    assert_eq!(classes[2].kind, ClassKind::ModuleInterface);
    assert_eq!(file.functions().count(), 1);
    assert!(matches!(file.items[3], Item::Function(_)));
}

fn syntax_error(text: &str) -> String {
    match parse_file("code/__torch__/m.py", text) {
        Ok(_) => panic!("expected a syntax error for {text:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn syntax_errors_name_file_line_col_and_token() {
    let e = syntax_error("def f(x: Tensor) -> Tensor:\n  return x +\n");
    assert!(e.starts_with("code/__torch__/m.py:2:"), "{e}");
    assert!(e.contains("newline"), "{e}");

    let e = syntax_error("class A(Module):\n  x : int\n  def f(self):\n    y = = 2\n");
    assert!(e.starts_with("code/__torch__/m.py:4:9:"), "{e}");
    assert!(e.contains("`=`"), "{e}");

    let e = syntax_error("def f():\n    return 1\n  return 2\n");
    assert!(e.starts_with("code/__torch__/m.py:3:3:"), "{e}");
    assert!(e.contains("unindent"), "{e}");

    let e = syntax_error("def f():\n  return \"abc\n");
    assert!(e.starts_with("code/__torch__/m.py:2:10:"), "{e}");
    assert!(e.contains("unterminated string"), "{e}");

    let e = syntax_error("def f():\n  return g(a=1, 2)\n");
    assert!(e.starts_with("code/__torch__/m.py:2:17:"), "{e}");
    assert!(e.contains("positional argument follows keyword"), "{e}");

    let e = syntax_error("class A(Module):\n  __parameters__ = [1]\n");
    assert!(
        e.contains("__parameters__ must be a list of strings"),
        "{e}"
    );
}
