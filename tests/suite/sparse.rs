//! Sparse tensors: every case of fixtures/ops/sparse.json (fixtures/gen_ops_sparse.py, from
//! PyTorch) must match PyTorch's result or error, sparse results compared by layout, size,
//! coalesced flag and component tensors; dense kernels refuse sparse arguments naming the
//! operator and the layout.

use crate::common;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::tensor::{Layout, Tensor};
use tsrun::internals::values::IValue;

#[test]
fn sparse_ops_match_pytorch() {
    common::assert_op_cases("sparse");
}

fn coo_3x3() -> Tensor {
    let indices = Tensor::from_vec(vec![0i64, 1, 2, 1, 0, 2], &[2, 3]).expect("indices");
    let values = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).expect("values");
    Tensor::sparse_coo(indices, values, &[3, 3], false).expect("coo")
}

#[test]
fn dense_kernels_refuse_sparse_tensors_naming_op_and_layout() {
    let registry = Registry::global();
    let ctx = OpContext::default();
    let kernel = registry.lookup("aten::relu", "").expect("relu");
    let mut args = vec![IValue::Tensor(coo_3x3())];
    let err =
        kernel(&mut Args::new("aten::relu", &mut args, &ctx)).expect_err("relu of a sparse tensor");
    let text = err.to_string();
    assert!(
        text.contains("'aten::relu'")
            && text.contains("'SparseCPU'")
            && text.contains("sparse_coo"),
        "{text}"
    );
    // element access and views refuse too, whatever the caller
    let t = coo_3x3();
    assert_eq!(t.layout(), Layout::SparseCoo);
    let read = t
        .read::<f32>()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        read.contains("torch.sparse_coo tensor where a strided one"),
        "{read}"
    );
    assert!(t.as_strided(&[9], &[1], 0).is_err());
    assert!(t.to_vec::<f32>().is_err());
}

#[test]
fn sparse_components_are_validated() {
    let indices = Tensor::from_vec(vec![0i64, 3], &[1, 2]).expect("indices");
    let values = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).expect("values");
    let err = Tensor::sparse_coo(indices, values, &[3], false).expect_err("index 3 of size 3");
    assert!(err.to_string().contains("found index 3"), "{err}");
}

/// fixtures/sparse_gnn (fixtures/gen_sparse_gnn.py): a scripted graph network with COO and
/// CSR adjacency buffers.
struct Gnn {
    golden: serde_json::Value,
    arrays: common::Arrays,
}

impl Gnn {
    fn open() -> Gnn {
        let dir = common::fixtures_dir().join("sparse_gnn");
        let golden = serde_json::from_reader(
            std::fs::File::open(dir.join("golden.json")).expect("golden.json"),
        )
        .expect("golden json");
        let arrays = common::Arrays::open(&dir.join("golden.npz"));
        Gnn { golden, arrays }
    }

    fn value(&mut self, key: &str) -> IValue {
        common::decode(&self.golden[key], &mut self.arrays)
    }

    fn text(&self, key: &str) -> &str {
        self.golden[key].as_str().expect("repr text")
    }
}

fn assert_runs_like_pytorch(m: &tsrun::Module, g: &mut Gnn) {
    let x = g.value("input");
    let out = m.forward(&[x]).expect("forward");
    common::compare(&out, &g.value("forward"), 1e-5, 1e-6, "forward").expect("forward");
    let degree = m.run_method("degree", &[]).expect("degree");
    common::compare(&degree, &g.value("degree"), 1e-6, 1e-7, "degree").expect("degree");
}

#[test]
fn sparse_gnn_loads_prints_runs_and_saves() {
    use tsrun::internals::cli::repr::tensor_repr;
    let mut g = Gnn::open();
    let m = tsrun::Module::load(common::fixtures_dir().join("sparse_gnn/model.pt")).expect("load");
    let adj = match m.attr("adj") {
        Some(IValue::Tensor(t)) => t,
        other => panic!("adj is {other:?}"),
    };
    let adj_csr = match m.attr("adj_csr") {
        Some(IValue::Tensor(t)) => t,
        other => panic!("adj_csr is {other:?}"),
    };
    assert_eq!(adj.layout(), Layout::SparseCoo);
    assert_eq!(adj_csr.layout(), Layout::SparseCsr);
    assert_eq!(tensor_repr(&adj), g.text("adj_repr"));
    assert_eq!(tensor_repr(&adj_csr), g.text("adj_csr_repr"));
    let registry = Registry::global();
    let ctx = OpContext::default();
    let coalesce = registry.lookup("aten::coalesce", "").expect("coalesce");
    let mut args = vec![IValue::Tensor(adj.clone())];
    let coalesced = coalesce(&mut Args::new("aten::coalesce", &mut args, &ctx)).expect("coalesce");
    let IValue::Tensor(coalesced) = coalesced else {
        panic!("coalesce gave {coalesced:?}")
    };
    assert_eq!(tensor_repr(&coalesced), g.text("coalesced_repr"));
    assert_runs_like_pytorch(&m, &mut g);

    // saved as `_rebuild_sparse_tensor` records and loaded back: the same buffers and results
    let path = std::env::temp_dir().join(format!("tsrun_sparse_gnn_{}.pt", std::process::id()));
    m.save(&path).expect("save");
    let back = tsrun::Module::load(&path).expect("reload");
    let _ = std::fs::remove_file(&path);
    for name in ["adj", "adj_csr"] {
        let (Some(IValue::Tensor(a)), Some(IValue::Tensor(b))) = (m.attr(name), back.attr(name))
        else {
            panic!("{name} missing after the round trip")
        };
        common::compare_tensors(&b, &a, 0.0, 0.0, name).expect("same buffer");
    }
    assert_runs_like_pytorch(&back, &mut g);
}

/// A `torch.save` state dict of sparse tensors (Python's `_rebuild_sparse_tensor(layout,
/// data)` records, fixtures/gen_sparse_gnn.py) reads back as PyTorch wrote it.
#[test]
fn torch_save_state_dicts_with_sparse_tensors_load() {
    let mut g = Gnn::open();
    let got = tsrun::read_state_dict(common::fixtures_dir().join("sparse_gnn/state_dict.pth"))
        .expect("read state dict");
    let want: Vec<(String, IValue)> = g.golden["state_dict"]
        .as_array()
        .expect("state_dict")
        .clone()
        .iter()
        .map(|kv| {
            let name = kv[0].as_str().expect("name").to_string();
            (name, common::decode(&kv[1], &mut g.arrays))
        })
        .collect();
    assert_eq!(got.len(), want.len());
    for ((gn, gt), (wn, wt)) in got.iter().zip(&want) {
        assert_eq!(gn, wn);
        common::compare(&IValue::Tensor(gt.clone()), wt, 0.0, 0.0, gn).expect("same tensor");
    }
}

/// A huge sparse size with one entry densifies only within the allocation limit: an error,
/// not an abort.
#[test]
fn densifying_a_huge_sparse_tensor_is_a_limit_error() {
    let indices = Tensor::from_vec(vec![5i64, 7], &[2, 1]).expect("indices");
    let values = Tensor::from_vec(vec![1.0f32], &[1]).expect("values");
    let huge = Tensor::sparse_coo(indices, values, &[1 << 20, 1 << 20], true).expect("coo");
    let registry = Registry::global();
    let ctx = OpContext::default();
    let kernel = registry.lookup("aten::to_dense", "").expect("to_dense");
    let mut args = vec![IValue::Tensor(huge), IValue::None, IValue::None];
    let err = kernel(&mut Args::new("aten::to_dense", &mut args, &ctx))
        .expect_err("a 4 TiB dense result");
    assert_eq!(err.kind(), tsrun::ErrorKind::Limit, "{err}");
}

/// The sparse parts are one pointer on `Tensor`: an `IValue` (moved at every interpreter
/// instruction) stays within the 128 bytes tensor/mod.rs's `Shape` comment budgets for.
#[test]
fn the_sparse_layout_keeps_ivalue_within_128_bytes() {
    let size = std::mem::size_of::<IValue>();
    assert!(size <= 128, "IValue is {size} bytes");
}
