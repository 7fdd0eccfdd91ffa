//! Errors as data: where PyTorch raised an index, dimension or shape error in an op golden
//! (fixtures/ops/*.json cases with an `error`), tsrun's kernel returns the typed
//! `TensorError` variant for that class (the dimension asked for and the rank, the index, the
//! dimension and its size, the requested shape and the element count), and its text is PyTorch's
//! message.

use crate::common::{decode, fixtures_dir, Arrays};
use serde_json::Value;
use std::fs::File;
use tsrun::error::TensorError;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::values::IValue;
use tsrun::Error;

/// The classes of PyTorch messages with a typed variant: the message test, the variant test,
/// whether tsrun's text must end with PyTorch's message (else contain it), and how many goldens
/// of the class there were when the check was written (more may come).
struct Class {
    name: &'static str,
    message: fn(&str) -> bool,
    variant: fn(&TensorError) -> bool,
    ends_with: bool,
    /// The part of PyTorch's message tsrun's text must end with or contain (all of it, or a
    /// suffix where tsrun's wording of the rest may differ).
    compared: fn(&str) -> &str,
    at_least: usize,
}

/// All of PyTorch's message.
fn whole(m: &str) -> &str {
    m
}

/// `not implemented for 'Long'` of PyTorch's dispatcher message: the dtype, which the typed
/// variant carries. The kernel's name before it is PyTorch's internal stub name
/// (`add_stub`, `max_all`), which tsrun does not reproduce for every operator.
fn dtype_part(m: &str) -> &str {
    m.find(" not implemented for '").map_or(m, |i| &m[i..])
}

const CLASSES: &[Class] = &[
    Class {
        name: "DimOutOfRange",
        message: |m| m.starts_with("Dimension out of range"),
        variant: |e| matches!(e, TensorError::DimOutOfRange { .. }),
        ends_with: true,
        compared: whole,
        at_least: 12,
    },
    Class {
        name: "IndexOutOfBounds",
        message: |m| m.starts_with("index ") && m.contains(" is out of bounds for dimension "),
        variant: |e| matches!(e, TensorError::IndexOutOfBounds { .. }),
        ends_with: true,
        compared: whole,
        at_least: 14,
    },
    Class {
        name: "SelectOutOfRange",
        message: |m| m.starts_with("select(): index "),
        variant: |e| matches!(e, TensorError::SelectOutOfRange { .. }),
        ends_with: true,
        compared: whole,
        at_least: 3,
    },
    Class {
        name: "NarrowOutOfRange",
        message: |m| m.starts_with("start (") && m.contains("exceeds dimension size"),
        variant: |e| matches!(e, TensorError::NarrowOutOfRange { .. }),
        ends_with: true,
        compared: whole,
        at_least: 4,
    },
    Class {
        name: "InvalidShape",
        message: |m| m.starts_with("shape '") && m.contains("is invalid for input of size"),
        variant: |e| matches!(e, TensorError::InvalidShape { .. }),
        ends_with: true,
        compared: whole,
        at_least: 2,
    },
    Class {
        name: "ConvInputChannels",
        message: |m| m.starts_with("Given groups=") && m.ends_with("channels instead"),
        variant: |e| matches!(e, TensorError::ConvInputChannels { .. }),
        ends_with: true,
        compared: whole,
        at_least: 2,
    },
    Class {
        name: "NotImplementedForDType",
        message: |m| {
            m.starts_with('"')
                && m.split_once("\" not implemented for '")
                    .is_some_and(|(kernel, dtype)| !kernel.contains(' ') && dtype.ends_with('\''))
        },
        variant: |e| matches!(e, TensorError::NotImplementedForDType { .. }),
        ends_with: true,
        compared: dtype_part,
        at_least: 103,
    },
    Class {
        name: "MatmulShapes",
        message: |m| m.contains("mat1 and mat2 shapes cannot be multiplied"),
        variant: |e| matches!(e, TensorError::MatmulShapes { .. }),
        ends_with: true,
        compared: whole,
        at_least: 11,
    },
    Class {
        name: "DTypeMismatch",
        message: |m| m.starts_with("expected scalar type ") && m.contains(" but found "),
        variant: |e| matches!(e, TensorError::DTypeMismatch { .. }),
        ends_with: true,
        compared: whole,
        at_least: 14,
    },
    Class {
        name: "LookupOutOfRange",
        message: |m| m == "index out of range in self",
        variant: |e| matches!(e, TensorError::LookupOutOfRange { .. }),
        ends_with: false,
        compared: whole,
        at_least: 6,
    },
];

#[test]
fn index_dimension_and_shape_errors_carry_their_fields() {
    let dir = fixtures_dir().join("ops");
    let ctx = OpContext::default();
    let mut checked = vec![0usize; CLASSES.len()];
    let mut mismatches = Vec::new();
    let mut families: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures/ops")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    families.sort();
    for json_path in families {
        let json: Value =
            serde_json::from_reader(File::open(&json_path).expect("open")).expect("json");
        let mut arrays: Option<Arrays> = None;
        for case in json["cases"].as_array().into_iter().flatten() {
            let Some(message) = case["error"].as_str() else {
                continue;
            };
            let Some(k) = CLASSES.iter().position(|c| (c.message)(message)) else {
                continue;
            };
            let class = &CLASSES[k];
            let arrays =
                arrays.get_or_insert_with(|| Arrays::open(&json_path.with_extension("npz")));
            let (op, overload) = (
                case["op"].as_str().expect("op"),
                case["overload"].as_str().unwrap_or(""),
            );
            let kernel = Registry::global().lookup(op, overload).expect("a kernel");
            let mut args: Vec<IValue> = case["args"]
                .as_array()
                .expect("args")
                .iter()
                .map(|a| decode(a, arrays))
                .collect();
            // as the interpreter calls it (float8/complex32 arguments go through the same gate)
            let name = if overload.is_empty() {
                op.to_string()
            } else {
                format!("{op}.{overload}")
            };
            let got = tsrun::internals::ops::storage_dtypes::call(kernel, &name, &mut args, &ctx);
            checked[k] += 1;
            let text_ok = |e: &Error| {
                let text = e.to_string();
                let message = (class.compared)(message);
                if class.ends_with {
                    text.ends_with(message)
                } else {
                    text.contains(message)
                }
            };
            match &got {
                Err(e @ Error::Tensor(t)) if (class.variant)(t) && text_ok(e) => {}
                other => mismatches.push(format!(
                    "{}: {op}.{overload}: {other:?} vs {message}",
                    class.name
                )),
            }
        }
    }
    for (class, &n) in CLASSES.iter().zip(&checked) {
        assert!(
            n >= class.at_least,
            "only {n} {} goldens found (expected at least {})",
            class.name,
            class.at_least
        );
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

/// A half model fed float32 input fails in its convolution with both dtypes as data, an input
/// of the wrong rank with the shapes, and a matrix product of two dtypes names both operands'
/// dtypes.
#[test]
fn convolution_and_matmul_errors_carry_dtypes_and_shapes() {
    use tsrun::internals::runtime::Module;
    use tsrun::internals::tensor::{DType, Tensor};
    let m = Module::load(fixtures_dir().join("conv_fusion/cbr_3x3.pt")).expect("load");
    m.eval();
    m.half().expect("half");
    let x = Tensor::zeros(&[2, 8, 12, 12], DType::Float32).expect("input");
    let err = m
        .forward(&[IValue::Tensor(x)])
        .expect_err("float32 input, float16 weights");
    match err.root_cause() {
        Error::Tensor(TensorError::InputWeightDTypes { op, input, weight }) => {
            assert_eq!((*input, *weight), (DType::Float32, DType::Float16));
            assert!(op.contains("conv"), "{op}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.op(), Some("aten::conv2d"));
    // an image without batch and channel dimensions
    m.float().expect("float");
    let x = Tensor::zeros(&[12, 12], DType::Float32).expect("input");
    let err = m.forward(&[IValue::Tensor(x)]).expect_err("a 2-d input");
    match err.root_cause() {
        Error::Tensor(TensorError::ConvInputRank {
            batched_rank,
            weight,
            input,
            ..
        }) => {
            assert_eq!((*batched_rank, weight.as_slice()), (4, &[16, 8, 3, 3][..]));
            assert_eq!(input, &[12, 12]);
        }
        other => panic!("{other:?}"),
    }

    let ctx = OpContext::default();
    let kernel = Registry::global().lookup("aten::mm", "").expect("mm");
    let mut args = vec![
        IValue::Tensor(Tensor::zeros(&[2, 3], DType::Float32).expect("a")),
        IValue::Tensor(Tensor::zeros(&[3, 2], DType::Float64).expect("b")),
    ];
    match kernel(&mut Args::new("aten::mm", &mut args, &ctx)) {
        Err(Error::Tensor(TensorError::OperandDTypes { left, right, .. })) => {
            assert_eq!((left, right), (DType::Float32, DType::Float64));
        }
        other => panic!("{other:?}"),
    }
}
