//! TorchScript tracebacks as data: a call that fails three calls deep (forward -> a submodule
//! method -> a free function) returns one `TracebackFrame` per call with its code-file line
//! and the original Python line from `debug_pkl`, checked against the text PyTorch's
//! interpreter raised for the same archive and input (fixtures/gen_traceback.py).

use crate::common::fixtures_dir;
use serde_json::Value;
use std::io::{Read, Write};
use tsrun::error::{CodeLocation, RuntimeError, TensorError, TracebackFrame};
use tsrun::{Error, ErrorKind, IValue, Module};

fn expected() -> Value {
    let path = fixtures_dir().join("traceback").join("expected.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("expected.json")).expect("json")
}

/// What `Module::forward` returns for the case's input.
fn fail(case: &str) -> Error {
    let dir = fixtures_dir().join("traceback");
    let module = Module::load(dir.join("deep_error.pt")).expect("load");
    let x = tsrun::internals::tensor::npy::read_npy_file(&dir.join(format!("{case}.npy")))
        .expect("input");
    module
        .forward(&[IValue::Tensor(x)])
        .expect_err("the input makes the model fail")
}

/// A golden frame's header and highlighted line, as PyTorch printed them.
fn golden_frame(v: &Value) -> (String, usize, String, String) {
    (
        v["file"].as_str().expect("file").to_string(),
        v["line"].as_u64().expect("line") as usize,
        v["function"].as_str().expect("function").to_string(),
        v["source_line"].as_str().expect("source_line").to_string(),
    )
}

fn ours(function: &str, at: &CodeLocation) -> (String, usize, String, String) {
    (
        at.file.clone(),
        at.line,
        function.to_string(),
        at.source_line.clone(),
    )
}

fn code_frames(frames: &[TracebackFrame]) -> Vec<(String, usize, String, String)> {
    frames
        .iter()
        .map(|f| ours(f.function_name(), f.at.as_ref().expect("a code location")))
        .collect()
}

fn original_frames(frames: &[TracebackFrame]) -> Vec<(String, usize, String, String)> {
    frames
        .iter()
        .filter_map(|f| Some(ours(f.function_name(), f.original.as_ref()?)))
        .collect()
}

#[test]
fn a_shape_error_three_calls_deep_has_pytorchs_frames() {
    let golden = &expected()["shape_mismatch"];
    let e = fail("shape_mismatch");
    assert_eq!(e.kind(), ErrorKind::Run);
    let frames = e.traceback().expect("a TorchScript traceback");
    assert_eq!(
        frames
            .iter()
            .map(|f| f.function.as_str())
            .collect::<Vec<_>>(),
        [
            "__torch__.traceback_model.Net.forward",
            "__torch__.traceback_model.Block.project",
            "__torch__.traceback_model.check_and_project",
        ]
    );
    let want: Vec<_> = golden["serialized"]
        .as_array()
        .expect("frames")
        .iter()
        .map(golden_frame)
        .collect();
    assert_eq!(code_frames(frames), want);
    let want: Vec<_> = golden["original"]
        .as_array()
        .expect("frames")
        .iter()
        .map(golden_frame)
        .collect();
    assert_eq!(original_frames(frames), want);
    // the serialized-code spans are the emitter's, marking what PyTorch marks: a call's
    // callee (`torch.matmul`, `block).project` of `(block).project(h, )`), not the whole call
    for (frame, golden) in frames
        .iter()
        .zip(golden["serialized"].as_array().expect("frames"))
    {
        let at = frame.at.as_ref().expect("a code location");
        assert_eq!(
            (at.col - 1, at.width),
            (
                golden["col"].as_u64().expect("col") as usize,
                golden["width"].as_u64().expect("width") as usize
            ),
            "{at:?}"
        );
    }
    // the original spans come from PyTorch's own records: the same columns and widths
    for (frame, golden) in frames
        .iter()
        .zip(golden["original"].as_array().expect("frames"))
    {
        let original = frame.original.as_ref().expect("an original location");
        assert_eq!(
            original.col - 1,
            golden["col"].as_u64().expect("col") as usize
        );
        assert_eq!(
            original.width,
            golden["width"].as_u64().expect("width") as usize
        );
    }
    // the failing operation's error, below the frames
    let Error::Runtime(RuntimeError::Traceback { cause, .. }) = &e else {
        panic!("{e:?}");
    };
    assert!(matches!(**cause, Error::Tensor(_)), "{cause:?}");
    let pytorch_error = golden["error"].as_str().expect("error");
    let message = pytorch_error.trim_start_matches("RuntimeError: ");
    assert!(cause.to_string().contains(message), "{cause} vs {message}");
    // the same as data: the failing operator, where the code calls it, and the shapes
    assert_eq!(e.op(), Some("aten::matmul"));
    let at = e.location().expect("the failing operation's location");
    assert_eq!(
        (at.file.as_str(), at.line),
        ("code/__torch__/traceback_model.py", 30)
    );
    assert_eq!(
        frames.iter().map(|f| f.op.as_deref()).collect::<Vec<_>>(),
        [None, None, Some("aten::matmul")],
        "only the operator call's frame names an operator"
    );
    assert!(
        matches!(
            **cause,
            Error::Tensor(TensorError::MatmulShapes {
                mat1: [2, 5],
                mat2: [4, 3],
                ..
            })
        ),
        "{cause:?}"
    );
}

/// PyTorch's text, line by line, without the context lines it prints around each highlighted
/// line (tsrun keeps only the line itself) and with tsrun's own wording of the error.
#[test]
fn display_follows_pytorchs_traceback_text() {
    let e = fail("shape_mismatch");
    let text = e.to_string();
    let golden = &expected()["shape_mismatch"];
    let pytorch = golden["message"].as_str().expect("message");
    let headers = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with("Traceback of") || l.starts_with("  File "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(headers(&text), headers(pytorch), "{text}");
    assert!(text.starts_with("The following operation failed in the TorchScript interpreter.\n"));
    // each frame's line, then the tildes under its span: the callee, as PyTorch marks it
    assert!(
        text.contains("  return torch.matmul(x, w)\n         ~~~~~~~~~~~~ <--- HERE\n"),
        "{text}"
    );
    assert!(
        text.contains("    return torch.matmul(x, w)\n           ~~~~~~~~~~~~ <--- HERE\n"),
        "{text}"
    );
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.starts_with("RuntimeError: ")
                && l.ends_with("mm: mat1 and mat2 shapes cannot be multiplied (2x5 and 4x3)")),
        "{text}"
    );
}

/// PyTorch reports a `raise` in an inlined function with the raising line only, named after
/// the method called (`forward`); tsrun keeps the whole call stack, whose innermost frame is
/// that line.
#[test]
fn a_raised_exception_names_its_class_and_the_raising_line() {
    let golden = &expected()["raise_value_error"];
    let e = fail("raise_value_error");
    assert_eq!(e.kind(), ErrorKind::Run);
    let frames = e.traceback().expect("a TorchScript traceback");
    assert_eq!(frames.len(), 3);
    // a `raise` is no operator call
    assert_eq!(e.op(), None);
    let innermost = frames.last().expect("a frame");
    let (file, line, _, source_line) = golden_frame(&golden["serialized"][0]);
    let at = innermost.at.as_ref().expect("a code location");
    assert_eq!(
        (&at.file, at.line, &at.source_line),
        (&file, line, &source_line)
    );
    let (file, line, _, source_line) = golden_frame(&golden["original"][0]);
    let original = innermost.original.as_ref().expect("an original location");
    assert_eq!(
        (&original.file, original.line, &original.source_line),
        (&file, line, &source_line)
    );
    assert_eq!(
        original.col - 1,
        golden["original"][0]["col"].as_u64().expect("col") as usize
    );
    // the exception's class and message end the text, as PyTorch's
    let last = e.to_string().lines().last().map(str::to_string);
    assert_eq!(last.as_deref(), golden["error"].as_str());
    assert!(matches!(
        e.root_cause(),
        Error::Runtime(RuntimeError::Exception { kind, .. }) if kind == "builtins.ValueError"
    ));
}

/// An archive without debug_pkl records: frames keep their code location, have no original
/// one, and the text has PyTorch's one-section header.
#[test]
fn without_debug_records_frames_have_no_original_line() {
    let src = fixtures_dir().join("traceback").join("deep_error.pt");
    let bytes = std::fs::read(src).expect("archive");
    let mut zin = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("zip");
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for i in 0..zin.len() {
        let mut file = zin.by_index(i).expect("entry");
        let name = file.name().to_string();
        if name.ends_with(".debug_pkl") {
            continue;
        }
        let mut data = Vec::new();
        file.read_to_end(&mut data).expect("read");
        out.start_file(name, stored).expect("start");
        out.write_all(&data).expect("write");
    }
    let bytes = out.finish().expect("zip").into_inner();
    let module = Module::load_bytes(&bytes).expect("load");
    let x = tsrun::Tensor::from_slice(&[1.0f32; 10], &[2, 5]).expect("x");
    let e = module
        .forward(&[IValue::Tensor(x)])
        .expect_err("a shape error");
    let frames = e.traceback().expect("a traceback");
    assert_eq!(frames.len(), 3);
    assert!(frames
        .iter()
        .all(|f| f.at.is_some() && f.original.is_none()));
    let text = e.to_string();
    assert!(
        text.contains("\nTraceback of TorchScript (most recent call last):\n"),
        "{text}"
    );
    assert!(!text.contains("original code"), "{text}");
}

/// A frame's original location comes from `debug_pkl` ranges, which are input: bounds past the
/// text, inside a character, reversed, and a huge starting line give a location, never a panic.
#[test]
fn hostile_original_ranges_give_a_location() {
    use tsrun::internals::frontend::source::{Source, SourceRange};
    let text = "def f(x):\n    return é + x\n";
    for first_line in [1, usize::MAX] {
        let source = Source::original(Some("f.py".into()), text.into(), first_line);
        let e_acute = text.find('é').expect("é");
        for (start, end) in [
            (e_acute + 1, e_acute + 1), // inside é
            (e_acute, e_acute + 1),
            (text.len() + 5, text.len() + 50), // past the end
            (14, 3),                           // reversed
            (usize::MAX, usize::MAX),
            (0, usize::MAX),
        ] {
            let at = SourceRange::new(source.clone(), start, end).code_location();
            assert!(at.width >= 1 && at.col >= 1, "{start}..{end}: {at:?}");
            assert!(text.contains(&at.source_line), "{start}..{end}: {at:?}");
        }
        let at = SourceRange::new(source.clone(), e_acute, e_acute + 2).code_location();
        assert_eq!((at.col, at.width), (12, 1), "{at:?}");
    }
}
