//! `tsrun compare-dir DIR [--rtol R] [--atol A] [--junit OUT.xml] [--json]`: check every golden
//! case under DIR (each immediate subfolder holding a `model.pt`, in the layout of
//! `tsrun::golden`) and print a table, one row per case: PASS, FAIL (a leaf outside the
//! tolerance, missing or extra) or ERROR (the case could not be loaded or run). `--junit`
//! writes the same as JUnit XML for CI. Exit code 1 when any case fails or errs.

use super::error::{usage, CliError, CliResult};
use crate::golden::{self, Case, Report, Tolerance};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `tsrun compare-dir`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareDirArgs {
    /// A folder of golden cases: each immediate subfolder holding a model.pt is one.
    pub dir: PathBuf,
    /// Relative tolerance (torch.allclose's default).
    #[arg(long, default_value_t = 1e-5)]
    pub rtol: f64,
    /// Absolute tolerance (torch.allclose's default).
    #[arg(long, default_value_t = 1e-8)]
    pub atol: f64,
    /// Also write the results as JUnit XML to this file.
    #[arg(long, value_name = "OUT.xml")]
    pub junit: Option<PathBuf>,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What checking one case gave.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    /// The case ran; the report says whether it passed.
    Checked(Report),
    /// Loading or running the case failed, with the error's text.
    Error(String),
}

/// A case's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
enum Status {
    Pass,
    /// A leaf outside the tolerance, or missing or extra.
    Fail,
    /// The case could not be loaded or run.
    Error,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Error => "ERROR",
        }
    }
}

/// One case's result.
#[derive(Debug, Serialize)]
struct CaseResult {
    name: String,
    status: Status,
    /// Why it failed or erred, in one line (empty when it passed).
    reason: String,
    seconds: f64,
    #[serde(flatten)]
    outcome: Outcome,
}

impl CaseResult {
    fn check(dir: &Path, tol: Tolerance) -> CaseResult {
        let start = Instant::now();
        let outcome = match Case::load(dir).and_then(|case| case.check(tol)) {
            Ok(report) => Outcome::Checked(report),
            Err(e) => Outcome::Error(e.to_string()),
        };
        let (status, reason) = match &outcome {
            Outcome::Checked(r) if r.passed() => (Status::Pass, String::new()),
            Outcome::Checked(r) => (Status::Fail, r.failure_summary()),
            // the first line: a traceback's last line is in the JUnit file and the JSON
            Outcome::Error(e) => (
                Status::Error,
                e.lines().next().unwrap_or_default().to_string(),
            ),
        };
        CaseResult {
            name: golden::case_name(dir),
            status,
            reason,
            seconds: start.elapsed().as_secs_f64(),
            outcome,
        }
    }
}

/// The case folders of `dir`: immediate subfolders holding a `model.pt`, sorted by name.
fn case_dirs(dir: &Path) -> CliResult<Vec<PathBuf>> {
    if !dir.exists() {
        return Err(usage(format!("{}: no such directory", dir.display())));
    }
    if !dir.is_dir() {
        return Err(usage(format!("{}: is not a directory", dir.display())));
    }
    let io_err = |e: std::io::Error| super::inputs::io_at(dir, e);
    let mut cases = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err)? {
        let path = entry.map_err(io_err)?.path();
        if path.is_dir() && path.join(golden::MODEL_FILE).is_file() {
            cases.push(path);
        }
    }
    cases.sort();
    if cases.is_empty() {
        return Err(usage(format!(
            "{}: no golden cases (subfolders holding a {})",
            dir.display(),
            golden::MODEL_FILE
        )));
    }
    Ok(cases)
}

/// The results as an aligned table: case, leaves, max abs and rel error, status and reason.
fn table(results: &[CaseResult]) -> String {
    let header = ["case", "leaves", "max abs err", "max rel err", "status"];
    let rows: Vec<[String; 5]> = results
        .iter()
        .map(|r| {
            let (leaves, abs, rel) = match &r.outcome {
                Outcome::Checked(report) => (
                    report.leaves.len().to_string(),
                    format!("{:.3e}", report.max_abs_error()),
                    format!("{:.3e}", report.max_rel_error()),
                ),
                Outcome::Error(_) => ("-".into(), "-".into(), "-".into()),
            };
            [
                r.name.clone(),
                leaves,
                abs,
                rel,
                r.status.as_str().to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: [&str; 5], reason: &str| {
        let mut s = format!(
            "{:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
        );
        if !reason.is_empty() {
            let pad = widths[4].saturating_sub(cells[4].len());
            s.push_str(&format!("{:pad$}  {reason}", ""));
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header, "");
    for (row, r) in rows.iter().zip(results) {
        out.push_str(&line(
            [&row[0], &row[1], &row[2], &row[3], &row[4]],
            &r.reason,
        ));
    }
    out
}

/// `text` escaped for a double-quoted XML attribute (`in_attribute`) or for character data:
/// markup characters as entities, characters XML 1.0 cannot hold at all as U+FFFD, and in an
/// attribute line breaks and tabs as character references (a parser would fold them into
/// spaces there; in character data they stay as they are, readable in the file).
fn xml_escape(text: &str, in_attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' if !in_attribute => out.push(c),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// The results as JUnit XML: one `<testsuite>` with a `<testcase>` per case, a `<failure>`
/// (the full report) for a failing case and an `<error>` for one that could not be checked.
fn junit_xml(results: &[CaseResult], classname: &str) -> String {
    let failures = results.iter().filter(|r| r.status == Status::Fail).count();
    let errors = results.iter().filter(|r| r.status == Status::Error).count();
    let seconds: f64 = results.iter().map(|r| r.seconds).sum();
    let counts = format!(
        "tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{seconds:.3}\"",
        results.len()
    );
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    // writing to a String cannot fail
    let _ = writeln!(xml, "<testsuites name=\"tsrun compare-dir\" {counts}>");
    let _ = writeln!(
        xml,
        "  <testsuite name=\"tsrun compare-dir\" {counts} skipped=\"0\">"
    );
    for r in results {
        let open = format!(
            "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\"",
            xml_escape(&r.name, true),
            xml_escape(classname, true),
            r.seconds
        );
        let (element, kind, body) = match &r.outcome {
            Outcome::Checked(report) if report.passed() => {
                let _ = writeln!(xml, "{open}/>");
                continue;
            }
            Outcome::Checked(report) => ("failure", "mismatch", report.to_string()),
            Outcome::Error(e) => ("error", "error", e.clone()),
        };
        let _ = writeln!(
            xml,
            "{open}>\n      <{element} message=\"{}\" type=\"{kind}\">{}</{element}>\n    </testcase>",
            xml_escape(&r.reason, true),
            xml_escape(&body, false)
        );
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

/// Run `tsrun compare-dir`.
pub fn run(args: &CompareDirArgs) -> CliResult {
    if !(args.rtol >= 0.0 && args.atol >= 0.0) {
        return Err(usage("--rtol and --atol must be non-negative"));
    }
    let tol = Tolerance::new(args.rtol, args.atol);
    let results: Vec<CaseResult> = case_dirs(&args.dir)?
        .iter()
        .map(|dir| CaseResult::check(dir, tol))
        .collect();
    let failed = results.iter().filter(|r| r.status == Status::Fail).count();
    let errors = results.iter().filter(|r| r.status == Status::Error).count();
    if args.json {
        let value = serde_json::json!({
            "ok": failed + errors == 0, "rtol": args.rtol, "atol": args.atol, "cases": results,
        });
        println!("{}", super::output::pretty_json(&value)?);
    } else {
        print!("{}", table(&results));
    }
    // after the table, so a JUnit path that cannot be written still leaves the results shown
    if let Some(path) = &args.junit {
        let xml = junit_xml(&results, &golden::case_name(&args.dir));
        // the error names the file
        crate::archive::write_atomically(path, |w| w.write_all(xml.as_bytes()))
            .map_err(crate::Error::from)?;
    }
    if failed + errors > 0 {
        return Err(CliError::Mismatch(format!(
            "{failed} of {} golden cases failed, {errors} could not be checked",
            results.len()
        )));
    }
    Ok(())
}
