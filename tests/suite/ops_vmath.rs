//! The vectorized float32 kernels (exp, tanh, sigmoid, erf, gelu, silu) against PyTorch over
//! the whole float range (fixtures/ops/vmath.npz, written by fixtures/gen_vmath.py), element by
//! element, through the registry as a graph calls them: contiguous float32 inputs take the
//! vector path, a strided view of the same values the generic one.

use crate::common::{fixtures_dir, Arrays};
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

/// One function under test: its golden key, operator, extra arguments and tolerances.
struct Case {
    key: &'static str,
    op: &'static str,
    extra: Vec<IValue>,
    rtol: f64,
    atol: f64,
}

fn case(key: &'static str, op: &'static str, extra: Vec<IValue>, rtol: f64, atol: f64) -> Case {
    Case {
        key,
        op,
        extra,
        rtol,
        atol,
    }
}

fn functions() -> Vec<Case> {
    // atol covers results PyTorch itself returns below the normal range (flushed or
    // subnormal); erf-based functions get the float32 op goldens' atol, because PyTorch's own
    // vectorized erf is an approximation with 1.5e-7 absolute error.
    vec![
        case("exp", "aten::exp", vec![], 1e-6, 1e-44),
        case("tanh", "aten::tanh", vec![], 1e-6, 1e-44),
        case("sigmoid", "aten::sigmoid", vec![], 1e-6, 1.2e-38),
        case("silu", "aten::silu", vec![], 1e-6, 1.2e-38),
        case("erf", "aten::erf", vec![], 1e-6, 1e-6),
        case("gelu", "aten::gelu", vec![IValue::str("none")], 1e-6, 1e-6),
        case(
            "gelu_tanh",
            "aten::gelu",
            vec![IValue::str("tanh")],
            1e-6,
            1e-6,
        ),
    ]
}

fn run(op: &str, x: &Tensor, extra: &[IValue]) -> Tensor {
    let kernel = Registry::global()
        .lookup(op, "")
        .unwrap_or_else(|| panic!("{op} is registered"));
    let mut values = vec![IValue::Tensor(x.clone())];
    values.extend(extra.iter().cloned());
    let ctx = OpContext::default();
    match kernel(&mut Args::new(op, &mut values, &ctx)) {
        Ok(IValue::Tensor(t)) => t,
        other => panic!("{op}: {other:?}"),
    }
}

/// `|got - want| <= atol + rtol * |want|`; NaN must match NaN, infinities exactly.
fn close(g: f32, w: f32, rtol: f64, atol: f64) -> bool {
    if w.is_nan() {
        g.is_nan()
    } else if w.is_infinite() {
        g == w
    } else {
        (g as f64 - w as f64).abs() <= atol + rtol * (w as f64).abs()
    }
}

/// Elements close to neither of PyTorch's answers (its vectorized path over the whole tensor,
/// its scalar path element by element), as messages.
fn mismatches(
    x: &[f32],
    got: &[f32],
    vectorized: &[f32],
    scalar: &[f32],
    rtol: f64,
    atol: f64,
) -> Vec<String> {
    let mut bad = Vec::new();
    for (((&xi, &g), &w), &ws) in x.iter().zip(got).zip(vectorized).zip(scalar) {
        if !close(g, w, rtol, atol) && !close(g, ws, rtol, atol) {
            bad.push(format!("x={xi:e}: got {g:e}, want {w:e} or {ws:e}"));
        }
    }
    bad
}

#[test]
fn vector_math_matches_pytorch_over_the_float_range() {
    let mut arrays = Arrays::open(&fixtures_dir().join("ops").join("vmath.npz"));
    let x = arrays.tensor("x", DType::Float32);
    let xs = x.to_vec::<f32>().expect("x");
    assert!(xs.len() > 3000, "the golden spans the range");
    // The same values as a strided view (every element of a [n, 2] buffer's first column).
    let doubled: Vec<f32> = xs.iter().flat_map(|&v| [v, 0.0]).collect();
    let buffer = Tensor::from_vec(doubled, &[xs.len(), 2]).expect("buffer");
    let strided = buffer
        .as_strided(&[xs.len()], &[2], 0)
        .expect("strided view");
    assert!(!strided.is_contiguous());
    let mut checked = 0;
    for Case {
        key,
        op,
        extra,
        rtol,
        atol,
    } in functions()
    {
        let want = arrays
            .tensor(key, DType::Float32)
            .to_vec::<f32>()
            .expect("golden");
        let want_scalar = arrays
            .tensor(&format!("{key}_scalar"), DType::Float32)
            .to_vec::<f32>()
            .expect("golden");
        for (path, input) in [("contiguous", &x), ("strided", &strided)] {
            let got = run(op, input, &extra);
            assert_eq!(got.dtype(), DType::Float32, "{key}");
            assert_eq!(got.shape(), x.shape(), "{key}");
            let got = got.to_vec::<f32>().expect("result");
            let bad = mismatches(&xs, &got, &want, &want_scalar, rtol, atol);
            assert!(
                bad.is_empty(),
                "{key} ({path}): {} of {} elements differ from PyTorch, e.g. {:?}",
                bad.len(),
                xs.len(),
                &bad[..bad.len().min(5)]
            );
            checked += got.len();
        }
    }
    assert_eq!(checked, 2 * 7 * xs.len());
}

#[test]
fn vector_math_takes_the_parallel_path_on_large_inputs() {
    // 40,000 elements is above the rayon threshold: chunks must line up with the serial result.
    let n = 40_000;
    let vals: Vec<f32> = (0..n).map(|i| (i as f32 - 20_000.0) / 997.0).collect();
    let x = Tensor::from_vec(vals.clone(), &[n]).expect("x");
    for Case { key, op, extra, .. } in functions() {
        let whole = run(op, &x, &extra).to_vec::<f32>().expect("whole");
        for start in [0usize, 8191, 8192, 39_999] {
            let part = Tensor::from_vec(vals[start..].to_vec(), &[n - start]).expect("part");
            let got = run(op, &part, &extra).to_vec::<f32>().expect("part");
            assert_eq!(got[..], whole[start..], "{key} from {start}");
        }
    }
}
