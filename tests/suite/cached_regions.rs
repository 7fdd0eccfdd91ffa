//! Parameter-only regions (`ir::passes::invariant_regions`, kept by the interpreter's region
//! cache) against PyTorch's outputs from fixtures/gen_cached_regions.py: weight
//! standardization, weight normalization, a relative position bias, a LoRA-merged weight and
//! tensors derived inside a loop give PyTorch's results on every call, the kept results follow
//! in-place writes, load_state_dict and replaced parameters, and a derived tensor that escapes
//! the forward or is written by it is computed afresh on every call.

use crate::common::{fixtures_dir, Arrays};
use crate::conv_fusion::assert_close;
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

fn goldens() -> Arrays {
    Arrays::open(&fixtures_dir().join("cached_regions").join("goldens.npz"))
}

fn load(case: &str) -> Module {
    let path = fixtures_dir()
        .join("cached_regions")
        .join(format!("{case}.pt"));
    let m = Module::load(path).expect("load");
    m.eval();
    m
}

fn call(m: &Module, x: &Tensor) -> IValue {
    m.forward(&[IValue::Tensor(x.clone())]).expect("forward")
}

fn tensor(v: &IValue) -> Tensor {
    v.as_tensor().expect("tensor result").clone()
}

/// (regions, runs that took kept results, runs that computed them)
fn regions(m: &Module) -> (usize, u64, u64) {
    m.interpreter().expect("interpreter").cached_regions()
}

#[test]
fn cached_regions_match_pytorch_on_every_call() {
    let mut g = goldens();
    // (case, regions in its compiled plans: one per method holding parameter-only work;
    // std_conv's two layers have two classes, their out_channels constants differing)
    for (case, n) in [
        ("std_conv", 2),
        ("std_conv_traced", 2),
        ("wn_conv1d_traced", 1),
        ("rel_pos_bias", 1),
        ("lora", 1),
        ("in_loop", 2),
    ] {
        let m = load(case);
        let x = g.tensor(&format!("{case}.x"), DType::Float32);
        let want = g.tensor(&format!("{case}.y"), DType::Float32);
        for i in 0..3 {
            assert_close(&format!("{case} call {i}"), &tensor(&call(&m, &x)), &want);
        }
        let (count, hits, misses) = regions(&m);
        assert_eq!(count, n, "{case}: regions");
        assert!(
            hits > 0 && hits >= misses,
            "{case}: kept results not reused ({hits} hits, {misses} runs)"
        );
    }
}

#[test]
fn cached_regions_follow_changes_to_the_parameters() {
    let mut g = goldens();
    // (case, parameter doubled, parameters loaded, parameter replaced, (runs computing the
    // region, runs reusing it) over the 8 calls: std_conv's two layers share one plan and
    // each change touches one of them)
    for (case, inplace, load_keys, set, counts) in [
        (
            "std_conv",
            "a.weight",
            &["b.weight"][..],
            "a.weight",
            (5, 11),
        ),
        ("rel_pos_bias", "table", &["table"][..], "table", (4, 4)),
        (
            "lora",
            "lora_a",
            &["lora_b", "weight"][..],
            "lora_b",
            (4, 4),
        ),
    ] {
        let m = load(case);
        let x = g.tensor(&format!("{case}.x"), DType::Float32);
        let want = g.tensor(&format!("{case}.y"), DType::Float32);
        assert_close(case, &tensor(&call(&m, &x)), &want);
        assert_close(case, &tensor(&call(&m, &x)), &want);

        // doubled in place (bumps the storage's version)
        let mut owner: Option<IValue> = None;
        let mut p = None;
        for part in inplace.split('.') {
            let v = match &owner {
                None => m.attr(part),
                Some(o) => o.as_object().and_then(|o| o.get(part)),
            };
            p = v.as_ref().and_then(|v| v.as_tensor().cloned());
            owner = v;
        }
        let p = p.expect("parameter");
        p.write::<f32>()
            .expect("write")
            .view_mut()
            .mapv_inplace(|v| v * 2.0);
        let want = g.tensor(&format!("{case}.after_inplace"), DType::Float32);
        for _ in 0..2 {
            assert_close(&format!("{case} in place"), &tensor(&call(&m, &x)), &want);
        }

        // copied into the existing tensors
        let mut state = tsrun::internals::runtime::module::StateDict::new();
        for key in load_keys {
            state.insert(
                key.to_string(),
                g.tensor(&format!("{case}.sd.{key}"), DType::Float32),
            );
        }
        m.load_state_dict(&state, false, false)
            .expect("load_state_dict");
        let want = g.tensor(&format!("{case}.after_load"), DType::Float32);
        for _ in 0..2 {
            assert_close(&format!("{case} loaded"), &tensor(&call(&m, &x)), &want);
        }

        // replaced by another tensor
        let new = g.tensor(&format!("{case}.new_param"), DType::Float32);
        m.set_attr(set, IValue::Tensor(new)).expect("set_attr");
        let want = g.tensor(&format!("{case}.after_set"), DType::Float32);
        for _ in 0..2 {
            assert_close(&format!("{case} replaced"), &tensor(&call(&m, &x)), &want);
        }
        let (_, hits, misses) = regions(&m);
        assert_eq!((misses, hits), counts, "{case}: (computed, reused)");
    }
}

#[test]
fn derived_tensors_that_escape_or_are_written_are_not_shared() {
    let mut g = goldens();
    let m = load("escapes");
    let x = g.tensor("escapes.x", DType::Float32);
    let first = call(&m, &x);
    let w = first.as_tuple().expect("tuple").items()[1].clone();
    let w = tensor(&w);
    w.write::<f32>()
        .expect("write")
        .view_mut()
        .mapv_inplace(|v| v + 1.0);
    assert_close(
        "caller's write",
        &w,
        &g.tensor("escapes.w1", DType::Float32),
    );
    let second = call(&m, &x);
    let items = second.as_tuple().expect("tuple").items().to_vec();
    assert_close(
        "second y",
        &tensor(&items[0]),
        &g.tensor("escapes.y2", DType::Float32),
    );
    assert_close(
        "second w",
        &tensor(&items[1]),
        &g.tensor("escapes.w2", DType::Float32),
    );
    // `exp(weight)` is kept; the product returned is made afresh on every call
    assert_eq!(regions(&m), (1, 1, 1), "only the unreturned part is kept");

    let m = load("written");
    let x = g.tensor("written.x", DType::Float32);
    assert_close(
        "written",
        &tensor(&call(&m, &x)),
        &g.tensor("written.y", DType::Float32),
    );
    let x2 = g.tensor("written.x2", DType::Float32);
    assert_close(
        "written again",
        &tensor(&call(&m, &x2)),
        &g.tensor("written.y2", DType::Float32),
    );
    assert_eq!(regions(&m).0, 0, "a tensor written in place is not kept");
}
