//! Golden cases for the `onednn::` int8 operators of x86 inductor's quantization lowering
//! (qlinear / qconv pointwise with post-ops, the weight prepacks, the fp16 dynamic linear),
//! written by fixtures/gen_ops_onednn.py, and for the uint8 `onednn::qadd.tensor` /
//! `qadd_relu.tensor` / `qmul.tensor` (fixtures/gen_ops_onednn_int8_binary.py).

use crate::common::{self, decode, decode_all, fixtures_dir, Arrays};
use serde_json::Value;
use std::fs::File;
use tsrun::error::TensorError;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::{IValue, List, Type};
use tsrun::Error;

#[test]
fn onednn_quantized_ops() {
    common::assert_op_cases("onednn");
}

/// The CPU capability PyTorch runs with on this machine and environment (its
/// `compute_cpu_capability` for x86-64 wheels: `ATEN_CPU_CAPABILITY`, else the CPU's
/// features), which decides the uint8 add and mul kernels' results; `None` on other
/// architectures, where tsrun does not detect it.
fn pytorch_cpu_capability() -> Option<&'static str> {
    let chosen = std::env::var("ATEN_CPU_CAPABILITY").ok();
    #[cfg(target_arch = "x86_64")]
    {
        Some(match chosen.as_deref() {
            Some("avx512") => "AVX512",
            Some("avx2") => "AVX2",
            Some("default") => "DEFAULT",
            _ if is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("fma") =>
            {
                "AVX512"
            }
            _ if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") => "AVX2",
            _ => "DEFAULT",
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (chosen.as_deref() == Some("default")).then_some("DEFAULT")
    }
}

/// `aten::_get_cpu_capability` answers as PyTorch does here (the golden PyTorch wrote under
/// this capability), or refuses where tsrun cannot tell.
#[test]
fn cpu_capability_is_pytorchs() {
    match pytorch_cpu_capability() {
        Some(capability) => {
            common::assert_op_cases(&format!("cpu_capability_{}", capability.to_lowercase()))
        }
        None => {
            let kernel = Registry::global()
                .lookup("aten::_get_cpu_capability", "")
                .expect("kernel");
            let got = kernel(&mut Args::new(
                "aten::_get_cpu_capability",
                &mut Vec::new(),
                &OpContext::default(),
            ));
            assert!(
                matches!(
                    got,
                    Err(Error::Tensor(TensorError::UnsupportedFeature { .. }))
                ),
                "{got:?}"
            );
        }
    }
}

/// `Err` unless `got` has `want`'s dtype, shape and bits.
fn same_bits(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "{} {:?}, want {} {:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let bits = |t: &Tensor| -> Vec<u32> {
        if t.dtype() == DType::UInt8 {
            let v: Vec<u8> = t.to_vec().expect("uint8 values");
            v.into_iter().map(u32::from).collect()
        } else {
            // (bfloat16 and float16 widen to float32 exactly)
            let v: Vec<f32> = t.to_vec().expect("float values");
            v.into_iter().map(f32::to_bits).collect()
        }
    };
    let (g, w) = (bits(got), bits(want));
    match g.iter().zip(&w).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "element {i} of {}: bits {:#x}, want {:#x}",
            g.len(),
            g[i],
            w[i]
        )),
    }
}

/// The uint8 add / add+relu / mul against the goldens PyTorch computes on a CPU like this one,
/// bit for bit: AVX-512's sign-extending vector body and scalar tail, or the scalar kernel
/// (recorded with `ATEN_CPU_CAPABILITY=avx2`); operands made non-contiguous by view chains
/// (walked in memory order, the result in the first operand's layout); and the refusals with
/// PyTorch's words. (`ATEN_CPU_CAPABILITY=avx2 cargo test` checks the scalar family on an
/// AVX-512 machine: tsrun follows the variable as PyTorch does.)
#[test]
fn onednn_int8_add_and_mul_match_pytorch_bit_for_bit() {
    let family = if pytorch_cpu_capability() == Some("AVX512") {
        "onednn_int8_binary_avx512"
    } else {
        "onednn_int8_binary_scalar"
    };
    let dir = fixtures_dir().join("ops");
    let json: Value =
        serde_json::from_reader(File::open(dir.join(format!("{family}.json"))).expect("json"))
            .expect("valid json");
    let mut arrays = Arrays::open(&dir.join(format!("{family}.npz")));
    let ctx = OpContext::default();
    let call = |op: &str, overload: &str, args: &mut Vec<IValue>| {
        let name = format!("{op}.{overload}");
        let name = name.trim_end_matches('.');
        let kernel = Registry::global()
            .lookup(op, overload)
            .unwrap_or_else(|| panic!("no kernel for {name}"));
        kernel(&mut Args::new(name, args, &ctx))
    };
    let cases = json["cases"].as_array().expect("cases");
    let (mut errors, mut viewed, mut failures) = (0, 0, Vec::new());
    for (i, case) in cases.iter().enumerate() {
        let (op, overload) = (
            case["op"].as_str().expect("op"),
            case["overload"].as_str().expect("overload"),
        );
        let mut args = decode_all(&case["args"], &mut arrays);
        for view in case["views"].as_array().into_iter().flatten() {
            let j = view[0].as_u64().expect("argument index") as usize;
            viewed += 1;
            for step in view[1].as_array().expect("view chain") {
                let mut view_args = vec![args[j].clone()];
                view_args.extend(decode_all(&step[2], &mut arrays));
                let (vop, vov) = (step[0].as_str().expect("op"), step[1].as_str().expect("ov"));
                args[j] = call(vop, vov, &mut view_args).expect("view op");
            }
        }
        let got = call(op, overload, &mut args);
        let outcome = match (&got, case.get("error").and_then(Value::as_str)) {
            (Err(e @ Error::Tensor(TensorError::Int8Binary { .. })), Some(message)) => {
                errors += 1;
                if e.to_string() == message {
                    Ok(())
                } else {
                    Err(format!("message {e}, want {message}"))
                }
            }
            (Ok(IValue::Tensor(t)), None) => {
                let want = decode(&case["out"], &mut arrays);
                let want = want.as_tensor().expect("a tensor golden");
                same_bits(t, want).and_then(|()| match case.get("strides") {
                    Some(s) => {
                        let s: Vec<isize> = serde_json::from_value(s.clone()).expect("strides");
                        if t.strides() == s.as_slice() {
                            Ok(())
                        } else {
                            Err(format!("strides {:?}, want {s:?}", t.strides()))
                        }
                    }
                    None => Ok(()),
                })
            }
            (got, want) => Err(format!("got {got:?}, want {want:?}")),
        };
        if let Err(e) = outcome {
            failures.push(format!("case {i} {op}.{overload}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{family}: {failures:#?}");
    // (the generator's 3 ops x 21 refusals, 3 ops x 2 dtypes x 9 viewed operands)
    assert_eq!((errors, viewed), (63, 54), "{family}: the goldens changed");
    println!("{family}: {} cases", cases.len());
}

/// An operand that is not non-overlapping and dense (a strided slice, an expanded row) is
/// refused by name: PyTorch's kernel reads `numel()` bytes of memory from its first element,
/// elements the view does not hold, which no golden can pin down.
#[test]
fn onednn_int8_add_refuses_operands_with_gaps() {
    let ctx = OpContext::default();
    let call = |name: &str, args: Vec<IValue>| {
        let (op, overload) = name.split_once('.').unwrap_or((name, ""));
        let kernel = Registry::global().lookup(op, overload).expect("kernel");
        let mut args = args;
        kernel(&mut Args::new(name, &mut args, &ctx))
    };
    let bytes: Vec<u8> = (0..24).map(|i| i * 10).collect();
    let base = IValue::Tensor(Tensor::from_vec(bytes, &[4, 6]).expect("tensor"));
    let every_other_column = call(
        "aten::slice.Tensor",
        vec![
            base.clone(),
            IValue::Int(1),
            IValue::Int(0),
            IValue::Int(6),
            IValue::Int(2),
        ],
    )
    .expect("slice");
    let row = call(
        "aten::slice.Tensor",
        vec![
            base,
            IValue::Int(0),
            IValue::Int(0),
            IValue::Int(1),
            IValue::Int(1),
        ],
    )
    .expect("slice");
    let expanded = call(
        "aten::expand",
        vec![
            row,
            IValue::List(List::new(Type::Int, vec![IValue::Int(4), IValue::Int(6)])),
            IValue::Bool(false),
        ],
    )
    .expect("expand");
    let dense = IValue::Tensor(Tensor::from_vec(vec![7u8; 12], &[4, 3]).expect("tensor"));
    let dense_wide = IValue::Tensor(Tensor::from_vec(vec![7u8; 24], &[4, 6]).expect("tensor"));
    for (x, y) in [
        (every_other_column.clone(), dense.clone()),
        (dense, every_other_column),
        (expanded, dense_wide),
    ] {
        let args = vec![
            x,
            IValue::Double(0.1),
            IValue::Int(3),
            y,
            IValue::Double(0.05),
            IValue::Int(5),
            IValue::Double(0.2),
            IValue::Int(10),
            IValue::Int(DType::UInt8.to_scalar_type()),
        ];
        let got = call("onednn::qadd.tensor", args);
        assert!(
            matches!(
                &got,
                Err(Error::Tensor(TensorError::UnsupportedFeature { op, .. }))
                    if op == "onednn::qadd.tensor"
            ),
            "{got:?}"
        );
    }
}
