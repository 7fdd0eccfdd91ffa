//! Sanity checks of the shared tensor core (values come from PyTorch semantics verified by the
//! op golden suites; these check structural invariants only).

use tsrun::tensor::{DType, Tensor};

#[test]
fn views_share_storage_and_stay_in_bounds() {
    let t = Tensor::from_vec((0..12).map(|x| x as f32).collect(), &[3, 4]).unwrap();
    let tr = t.as_strided(&[4, 3], &[1, 4], 0).unwrap();
    assert!(tr.shares_storage(&t));
    assert!(!tr.is_contiguous());
    assert!(t.as_strided(&[4, 4], &[4, 1], 0).is_err());
    let c = tr.contiguous().unwrap();
    assert!(!c.shares_storage(&t));
    assert_eq!(c.to_vec::<f32>().unwrap()[..4], [0.0, 4.0, 8.0, 1.0]);
    assert_eq!(t.to_dtype(DType::Int64).unwrap().dtype(), DType::Int64);
}
