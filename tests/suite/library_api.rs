//! The crate-root surface a library user writes against: `tsrun::prelude`, conversions between
//! `IValue` and Rust values, ndarray import/export, and error categories (`Error::kind`).

use std::collections::HashMap;
use tsrun::prelude::*;
use tsrun::{ErrorKind, LoadOptions, RunOptions, TorchType};

use crate::common::fixtures_dir;

fn model(name: &str) -> std::path::PathBuf {
    fixtures_dir().join("models").join(name)
}

#[test]
fn rust_values_round_trip_through_ivalue() {
    let v: IValue = 7i64.into();
    assert_eq!(v.extract::<i64>().unwrap(), 7);
    let v: IValue = 2.5f64.into();
    assert_eq!(v.extract::<f64>().unwrap(), 2.5);
    let v: IValue = true.into();
    assert!(v.extract::<bool>().unwrap());
    let v: IValue = "tokens".into();
    assert_eq!(v.extract::<String>().unwrap(), "tokens");
    let v: IValue = Option::<i64>::None.into();
    assert_eq!(v.extract::<Option<i64>>().unwrap(), None);
    let v: IValue = Some(3i64).into();
    assert_eq!(v.extract::<Option<i64>>().unwrap(), Some(3));

    let v: IValue = vec![1.0f64, 2.0, 3.0].into();
    let list = v.as_list().expect("a list");
    assert_eq!(list.elem_type(), &f64::torch_type());
    assert_eq!(v.extract::<Vec<f64>>().unwrap(), vec![1.0, 2.0, 3.0]);

    let t = Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap();
    let v: IValue = (t.clone(), 4i64, "a").into();
    let (back, n, s): (Tensor, i64, String) = v.extract().unwrap();
    assert_eq!(back.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
    assert_eq!((n, s.as_str()), (4, "a"));

    let map: HashMap<String, f64> = [("the".to_string(), 3.0), ("quick".to_string(), 1.5)]
        .into_iter()
        .collect();
    let v: IValue = map.clone().into();
    let dict = v.as_dict().expect("a dict");
    assert_eq!(dict.key_type(), &String::torch_type());
    assert_eq!(dict.value_type(), &f64::torch_type());
    assert_eq!(v.extract::<HashMap<String, f64>>().unwrap(), map);

    let nested: IValue = vec![vec![1i64, 2], vec![3]].into();
    assert_eq!(
        nested.extract::<Vec<Vec<i64>>>().unwrap(),
        vec![vec![1, 2], vec![3]]
    );
}

#[test]
fn a_conversion_to_the_wrong_type_is_a_usage_error_naming_both_types() {
    let e = IValue::from(5i64).extract::<Tensor>().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage);
    assert!(matches!(e, Error::Conversion { got: "int", .. }), "{e}");
    assert_eq!(e.to_string(), "expected a Tensor, got a value of type int");
    let pair: IValue = (1i64, 2i64).into();
    let e = pair.extract::<(i64, i64, i64)>().unwrap_err();
    assert!(e.to_string().contains("a tuple of 3 elements"), "{e}");
}

#[test]
fn ndarray_arrays_convert_both_ways_in_row_major_order() {
    let a = ndarray::arr2(&[[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]]);
    let t = Tensor::from_ndarray(a.clone()).unwrap();
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(t.to_ndarray::<f32>().unwrap(), a.clone().into_dyn());
    // a transposed (non-standard-layout) array is copied in its logical order
    let t = Tensor::from_ndarray(a.t().to_owned()).unwrap();
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    let v = IValue::try_from(ndarray::Array1::from(vec![7i64, 8])).unwrap();
    assert_eq!(
        v.extract::<Tensor>().unwrap().to_vec::<i64>().unwrap(),
        vec![7, 8]
    );
    // the zero-copy view reads the tensor's own memory
    let t = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let guard = t.read::<f64>().unwrap();
    assert_eq!(guard.view()[[1, 0]], 3.0);
    // asking for another element type is an error, not a reinterpretation
    assert!(t.to_ndarray::<f32>().is_err());
}

#[test]
fn a_model_runs_through_the_root_surface() {
    let m = Module::load(model("mlp.pt")).unwrap();
    let width = m.parameters()[0].shape()[1];
    let x = Tensor::from_ndarray(ndarray::Array2::<f32>::zeros((1, width))).unwrap();
    let y: Tensor = m.forward(&[x.into()]).unwrap().extract().unwrap();
    assert_eq!(y.dim(), 2);
    let bytes = std::fs::read(model("mlp.pt")).unwrap();
    let from_bytes = Module::load_bytes(&bytes).unwrap();
    let from_reader = Module::load_reader(std::io::Cursor::new(bytes)).unwrap();
    assert_eq!(from_bytes.class_name(), from_reader.class_name());
}

#[test]
fn errors_sort_into_kinds() {
    let missing = Module::load(fixtures_dir().join("no_such_model.pt")).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::Io, "{missing}");

    let not_a_zip = Module::load_bytes(b"definitely not a zip archive").unwrap_err();
    assert_eq!(not_a_zip.kind(), ErrorKind::Load, "{not_a_zip}");

    let tiny = LoadOptions {
        max_archive_bytes: 16,
        ..LoadOptions::default()
    };
    let limited = Module::load_with(model("mlp.pt"), &tiny).unwrap_err();
    assert_eq!(limited.kind(), ErrorKind::Limit, "{limited}");

    let unsupported = Module::load(model("unsupported_ops.pt")).unwrap();
    let e = unsupported.prepare(&["forward"]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert_eq!(e.op(), Some("aten::_cslt_sparse_mm"), "{e}");

    // a call that fails inside the interpreter: the kind looks through the traceback
    let m = Module::load(model("mlp.pt")).unwrap();
    let wrong = Tensor::from_slice(&[1.0f32; 3], &[1, 3]).unwrap();
    let e = m.forward(&[wrong.into()]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Run, "{e}");

    let steps = RunOptions {
        max_steps: Some(1),
        ..RunOptions::default()
    };
    let x = Tensor::from_ndarray(ndarray::Array2::<f32>::zeros((
        1,
        m.parameters()[0].shape()[1],
    )))
    .unwrap();
    let e = m.call_opts(vec![x.into()], &steps).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit, "{e}");
}
