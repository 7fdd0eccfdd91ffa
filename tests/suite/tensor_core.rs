//! Sanity checks of the shared tensor core (values come from PyTorch semantics verified by the
//! op golden suites; these check structural invariants only).

use tsrun::internals::tensor::{DType, Tensor};

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

#[test]
fn freed_buffers_are_reused_and_zeros_stays_zero() {
    let shape = [64 * 1024];
    let ones = Tensor::from_vec(vec![1.0f32; shape[0]], &shape).unwrap();
    let addr = ones.storage().read().unwrap().as_ptr() as usize;
    drop(ones);
    // the next buffer of that size on this thread is the freed one, old contents and all
    let reused = Tensor::empty(&shape, DType::Float32).unwrap();
    assert_eq!(reused.storage().read().unwrap().as_ptr() as usize, addr);
    assert!(reused.to_vec::<f32>().unwrap().iter().all(|&v| v == 1.0));
    drop(reused);
    // `zeros` reuses it too, but clears it
    let zeros = Tensor::zeros(&shape, DType::Float32).unwrap();
    assert_eq!(zeros.storage().read().unwrap().as_ptr() as usize, addr);
    assert!(zeros.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
}

/// Dropping a mapped weight's pages keeps its values (they are read back from the archive
/// file); an archive loaded from bytes lives in anonymous memory, whose pages are never dropped.
#[test]
fn released_mapped_pages_read_back_the_same_values() {
    let path = format!("{}/fixtures/models/resnet18.pt", env!("CARGO_MANIFEST_DIR"));
    let from_file = tsrun::internals::runtime::Module::load(&path).expect("load");
    let w = from_file.get_parameter("fc.weight").expect("fc.weight");
    assert!(
        w.storage().is_mapped(),
        "a stored, aligned record is mapped in place"
    );
    let before = w.to_vec::<f32>().expect("values");
    assert!(
        w.storage().release_mapped_pages(),
        "2 MB of weight spans whole pages"
    );
    assert_eq!(w.to_vec::<f32>().expect("values"), before);

    let bytes = std::fs::read(&path).expect("read");
    let from_bytes = tsrun::internals::runtime::Module::load_bytes(&bytes).expect("load");
    let w = from_bytes.get_parameter("fc.weight").expect("fc.weight");
    assert!(
        !w.storage().release_mapped_pages(),
        "anonymous pages must not be dropped"
    );
    assert_eq!(w.to_vec::<f32>().expect("values"), before);
}

/// `Storage::populate_mapped_pages` maps a file-backed weight's pages ahead (what `prepare` does
/// for the weights kernels read in place); the values are unchanged, and a heap storage has
/// nothing to populate.
#[test]
fn populated_mapped_pages_read_the_same_values() {
    let path = format!("{}/fixtures/models/resnet18.pt", env!("CARGO_MANIFEST_DIR"));
    let m = tsrun::internals::runtime::Module::load(&path).expect("load");
    let w = m.get_parameter("fc.weight").expect("fc.weight");
    let before = w.to_vec::<f32>().expect("values");
    // kernels older than Linux 5.14 refuse the advice, which leaves the pages to fault in
    let _ = w.storage().populate_mapped_pages();
    assert_eq!(w.to_vec::<f32>().expect("values"), before);
    let heap = tsrun::Tensor::from_vec(before.clone(), &[before.len()]).expect("tensor");
    assert!(!heap.storage().populate_mapped_pages());
    // an empty stored buffer (`zeros(0, 3)`): nothing to populate or release, and no panic
    // (its pointer need not lie inside the mapping)
    let path = format!("{}/fixtures/models/dtypes.pt", env!("CARGO_MANIFEST_DIR"));
    let m = tsrun::internals::runtime::Module::load(&path).expect("load");
    let empty = m.get_buffer("empty").expect("empty buffer");
    assert_eq!(empty.numel(), 0);
    assert!(!empty.storage().populate_mapped_pages());
    assert!(!empty.storage().release_mapped_pages());
}
