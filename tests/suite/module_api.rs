//! The ScriptModule / nn.Module API on loaded modules against PyTorch's goldens
//! (fixtures/gen_module_api.py): train/eval, dtype casts, devices, grad mode, typed attributes,
//! state dicts (prefix, loading from archives, safetensors, npz, torch.save; strictness and
//! shape errors), the tree iterators, repr, and every change surviving save + reload.

use crate::common::{compare, decode, fixtures_dir, Arrays};
use serde_json::Value;
use std::path::PathBuf;
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

pub(crate) fn dir() -> PathBuf {
    fixtures_dir().join("module_api")
}

/// The golden JSON and its tensors.
pub(crate) struct Golden {
    pub json: Value,
    pub arrays: Arrays,
}

impl Golden {
    pub fn load() -> Golden {
        let text = std::fs::read_to_string(dir().join("golden.json")).expect("golden.json");
        Golden {
            json: serde_json::from_str(&text).expect("golden json"),
            arrays: Arrays::open(&dir().join("golden.npz")),
        }
    }

    pub fn value(&mut self, key: &str) -> IValue {
        let v = self.json[key].clone();
        decode(&v, &mut self.arrays)
    }

    pub fn tensor(&mut self, key: &str) -> Tensor {
        match self.value(key) {
            IValue::Tensor(t) => t,
            other => panic!("golden {key} is a {}", other.kind_name()),
        }
    }

    pub fn str(&self, key: &str) -> String {
        self.json[key].as_str().expect("golden string").to_string()
    }

    pub fn strings(&self, key: &str) -> Vec<String> {
        self.json[key]
            .as_array()
            .expect("golden list")
            .iter()
            .map(|s| s.as_str().expect("string").to_string())
            .collect()
    }

    /// A `[[name, tensor], ...]` golden.
    pub fn named(&mut self, v: &Value) -> Vec<(String, Tensor)> {
        v.as_array()
            .expect("named tensors")
            .iter()
            .map(|kv| {
                let t = match decode(&kv[1], &mut self.arrays) {
                    IValue::Tensor(t) => t,
                    other => panic!("not a tensor: {}", other.kind_name()),
                };
                (kv[0].as_str().expect("name").to_string(), t)
            })
            .collect()
    }
}

pub(crate) fn load(name: &str) -> Module {
    Module::load(dir().join(name)).expect("load fixture")
}

pub(crate) fn assert_close(got: &IValue, want: &IValue, rtol: f64, what: &str) {
    if let Err(e) = compare(got, want, rtol, 0.0, what) {
        panic!("{e}");
    }
}

/// Named tensors equal to a `[[name, tensor], ...]` golden, names and order included.
pub(crate) fn assert_named_close(
    got: &[(String, Tensor)],
    want: &[(String, Tensor)],
    rtol: f64,
    what: &str,
) {
    assert_eq!(got.len(), want.len(), "{what}: number of tensors");
    for ((gn, gt), (wn, wt)) in got.iter().zip(want) {
        assert_eq!(gn, wn, "{what}");
        assert_close(
            &IValue::Tensor(gt.clone()),
            &IValue::Tensor(wt.clone()),
            rtol,
            &format!("{what} {gn}"),
        );
    }
}

/// Save `m` and load the archive back. With `TSRUN_MODULE_API_SAVE_DIR` set, the archives stay
/// there for fixtures/check_module_api.py, which checks them with `torch.jit.load`; otherwise
/// they go to a scratch folder removed once the module is loaded (the module maps the file,
/// and a mapping outlives the file's name).
pub(crate) fn reload(m: &Module, name: &str) -> Module {
    let Some(dir) = std::env::var_os("TSRUN_MODULE_API_SAVE_DIR").map(PathBuf::from) else {
        let scratch = crate::common::ScratchDir::new("module_api");
        let path = scratch.join(name);
        m.save(&path).expect("save");
        return Module::load(&path).expect("reload");
    };
    std::fs::create_dir_all(&dir).expect("save dir");
    let path = dir.join(name);
    m.save(&path).expect("save");
    Module::load(&path).expect("reload")
}

fn err_text(r: tsrun::Result<impl std::fmt::Debug>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn eval_output_equals_pytorch() {
    let mut g = Golden::load();
    let m = load("net.pt");
    m.eval();
    let x = g.value("x");
    let out = m.call(std::slice::from_ref(&x)).expect("forward");
    assert_close(&out, &g.value("eval_out"), 1e-5, "eval_out");
}

#[test]
fn train_switches_batch_norm_and_survives_save() {
    let mut g = Golden::load();
    let m = load("bn_net.pt");
    m.train(true);
    assert!(m.modules().iter().all(|s| s.training()));
    let x = g.value("x");
    let out = m.call(std::slice::from_ref(&x)).expect("train forward");
    assert_close(&out, &g.value("bn_train_out"), 1e-5, "bn_train_out");
    let want = g.named(&g.json["bn_train_buffers"].clone());
    assert_named_close(
        &m.named_buffers("", true, true),
        &want,
        1e-5,
        "bn_train_buffers",
    );
    m.eval();
    assert!(m.modules().iter().all(|s| !s.training()));
    let out = m.call(std::slice::from_ref(&x)).expect("eval forward");
    let want_eval = g.value("bn_eval_after_train_out");
    assert_close(&out, &want_eval, 1e-5, "bn_eval_after_train_out");
    // the eval flags and the updated statistics are in the saved archive
    let back = reload(&m, "bn_eval.pt");
    assert!(back.modules().iter().all(|s| !s.training()));
    let out = back
        .call(std::slice::from_ref(&x))
        .expect("reloaded forward");
    assert_close(&out, &want_eval, 1e-5, "reloaded bn_eval_after_train_out");
}

#[test]
fn dtype_conversions_equal_pytorch() {
    let mut g = Golden::load();
    let x = g.tensor("x");
    for (name, dtype, rtol) in [
        ("double", DType::Float64, 1e-6),
        ("half", DType::Float16, 2e-2),
        ("bfloat16", DType::BFloat16, 5e-2),
    ] {
        let m = load("net.pt");
        m.eval();
        match name {
            "double" => m.double(),
            "half" => m.half(),
            _ => m.bfloat16(),
        }
        .expect("cast");
        let want_dtypes = g.json[format!("{name}_buffer_dtypes")].clone();
        for (k, t) in m.state_dict() {
            assert_eq!(
                t.dtype().name(),
                want_dtypes[&k].as_str().expect("dtype"),
                "{name} {k}"
            );
        }
        let xi = IValue::Tensor(x.to_dtype(dtype).expect("cast input"));
        let out = m.call(std::slice::from_ref(&xi)).expect("forward");
        assert_close(&out, &g.value(&format!("{name}_out")), rtol, name);
        let back = reload(&m, &format!("net_{name}.pt"));
        let out = back.call(&[xi]).expect("reloaded forward");
        assert_close(&out, &g.value(&format!("{name}_out")), rtol, name);
    }
    // `type(int64)` casts integer and floating tensors alike; `to` refuses integer dtypes
    let m = load("net.pt");
    assert!(m.to_dtype(DType::Int64).is_err());
    m.type_(DType::Float64).expect("type");
    assert!(m
        .state_dict()
        .iter()
        .all(|(_, t)| t.dtype() == DType::Float64));
}

#[test]
fn devices_cpu_only() {
    let m = load("net.pt");
    m.cpu().expect("cpu");
    m.to_device("cpu:0").expect("cpu:0");
    for (name, r) in [
        ("cuda", m.cuda()),
        ("xpu", m.xpu()),
        ("ipu", m.ipu()),
        ("mtia", m.mtia()),
    ] {
        let e = err_text(r);
        assert!(e.contains("no such device") && e.contains(name), "{e}");
    }
}

#[test]
fn grad_mode_inside_archived_code() {
    let g = Golden::load();
    let m = load("net.pt");
    let want = |key: &str| -> Vec<bool> {
        g.json[key]
            .as_array()
            .expect("bools")
            .iter()
            .map(|b| b.as_bool().expect("bool"))
            .collect()
    };
    let bools = |v: IValue| -> Vec<bool> {
        v.as_list()
            .expect("list")
            .to_vec()
            .iter()
            .map(|b| b.as_bool().expect("bool"))
            .collect()
    };
    let got = bools(m.run_method("grad_modes", &[]).expect("grad_modes"));
    assert_eq!(got, want("grad_modes"));
    let got = tsrun::no_grad(|| m.run_method("grad_modes", &[]).expect("grad_modes"));
    assert_eq!(bools(got), want("grad_modes_no_grad"));
    assert!(tsrun::is_grad_enabled(), "no_grad restores the mode");
}

#[test]
fn requires_grad_flags_survive_save() {
    let m = load("net.pt");
    m.requires_grad_(false);
    assert!(m.parameters().iter().all(|t| !t.requires_grad()));
    let back = reload(&m, "net_nograd.pt");
    assert!(back.parameters().iter().all(|t| !t.requires_grad()));
    back.requires_grad_(true);
    assert!(back.parameters().iter().all(|t| t.requires_grad()));
    back.zero_grad(true);
    // state_dict detaches unless keep_vars
    assert!(back
        .state_dict_with("", false)
        .expect("state_dict")
        .values()
        .all(|t| !t.requires_grad()));
    assert!(back.state_dict_with("", true).expect("state_dict")["fc1.weight"].requires_grad());
}

#[test]
fn set_attr_is_typed_and_saved() {
    let mut g = Golden::load();
    let m = load("net.pt");
    m.eval();
    // an int is converted for a float attribute, as Python does
    m.set_attr("scale", IValue::Int(2)).expect("scale = 2");
    assert!(matches!(m.attr("scale"), Some(IValue::Double(d)) if d == 2.0));
    let x = g.value("x");
    let out = m.call(std::slice::from_ref(&x)).expect("forward");
    assert_close(&out, &g.value("scale2_out"), 1e-5, "scale2_out");
    let e = err_text(m.set_attr("scale", IValue::str("x")));
    assert!(e.contains(&g.str("set_attr_wrong_type")), "{e}");
    m.set_attr("drop.mc_dropout_enabled", IValue::Bool(true))
        .expect("nested flag");
    let e = err_text(m.set_attr("drop.mc_dropout_enabled", IValue::Double(1.5)));
    assert!(
        e.contains("Could not cast attribute 'mc_dropout_enabled' to type bool"),
        "{e}"
    );
    let e = err_text(m.set_attr("drop.nosuch", IValue::Bool(true)));
    assert!(e.contains("has no attribute 'nosuch'"), "{e}");
    let e = err_text(m.set_attr("nope.flag", IValue::Bool(true)));
    assert!(e.contains("has no attribute `nope`"), "{e}");
    let back = reload(&m, "net_attrs.pt");
    assert!(matches!(back.attr("scale"), Some(IValue::Double(d)) if d == 2.0));
    let drop = back.get_submodule("drop").expect("drop");
    assert!(matches!(
        drop.attr("mc_dropout_enabled"),
        Some(IValue::Bool(true))
    ));
}

#[test]
fn state_dict_prefix_and_iterators() {
    let g = Golden::load();
    let m = load("net.pt");
    let keys: Vec<String> = m
        .state_dict_with("p.", false)
        .expect("state_dict")
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, g.strings("state_dict_prefixed"));
    let fc1 = m.get_submodule("fc1").expect("fc1");
    let names = |v: Vec<(String, Tensor)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(
        names(fc1.named_parameters("root.fc1", true, true)),
        g.strings("named_parameters_fc1_prefixed")
    );
    assert_eq!(
        names(m.named_parameters("", false, true)),
        g.strings("named_parameters_no_recurse")
    );
    let bn = m.get_submodule("bn").expect("bn");
    assert_eq!(
        names(bn.named_buffers("bn", true, true)),
        g.strings("named_buffers_bn")
    );
    let modules: Vec<String> = m
        .named_modules("root", true)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(modules, g.strings("named_modules_prefixed"));
    let children: Vec<String> = m.named_children().into_iter().map(|(n, _)| n).collect();
    assert_eq!(children, g.strings("named_children"));
    assert_eq!(m.to_string(), g.str("repr"));
    assert_eq!(fc1.extra_repr(), g.str("fc1_extra_repr"));
    let e = err_text(m.get_submodule("fc1.nope"));
    assert!(e.ends_with(&g.str("get_submodule_missing")), "{e}");
    let e = err_text(m.get_submodule("fc1.weight"));
    assert!(e.ends_with(&g.str("get_submodule_not_module")), "{e}");
}

#[test]
fn load_state_dict_from_every_source() {
    let mut g = Golden::load();
    let x = g.value("x");
    let want = g.value("loaded_out");
    for source in [
        "net_other.pt",
        "weights.safetensors",
        "weights.npz",
        "weights_torchsave.pth",
    ] {
        let m = load("net.pt");
        m.eval();
        let keys = m
            .load_state_dict_from(dir().join(source), true, false)
            .unwrap_or_else(|e| panic!("{source}: {e}"));
        assert_eq!(
            keys,
            tsrun::internals::runtime::module::IncompatibleKeys::default()
        );
        let out = m.call(std::slice::from_ref(&x)).expect("forward");
        assert_close(&out, &want, 1e-5, source);
        let back = reload(&m, "net_loaded.pt");
        let out = back
            .call(std::slice::from_ref(&x))
            .expect("reloaded forward");
        assert_close(&out, &want, 1e-5, source);
    }
    // assign replaces the tensors instead of copying into them
    let m = load("net.pt");
    m.eval();
    let state =
        tsrun::internals::runtime::module::read_state_dict(dir().join("weights.safetensors"))
            .expect("read");
    m.load_state_dict(&state, true, true).expect("assign");
    assert!(m
        .get_parameter("fc1.weight")
        .expect("w")
        .shares_storage(&state["fc1.weight"]));
    let out = m.call(std::slice::from_ref(&x)).expect("forward");
    assert_close(&out, &want, 1e-5, "assign");
}

#[test]
fn load_state_dict_errors_equal_pytorch() {
    let mut g = Golden::load();
    let x = g.value("x");
    let mut partial =
        tsrun::internals::runtime::module::read_state_dict(dir().join("weights.safetensors"))
            .expect("read");
    partial.shift_remove("fc2.bias");
    partial.insert(
        "extra.w".into(),
        Tensor::zeros(&[1], DType::Float32).expect("zeros"),
    );
    let m = load("net.pt");
    m.eval();
    let e = err_text(m.load_state_dict(&partial, true, false));
    assert!(e.ends_with(&g.str("strict_error")), "{e}");
    let m = load("net.pt");
    m.eval();
    let keys = m
        .load_state_dict(&partial, false, false)
        .expect("non-strict");
    assert_eq!(keys.missing_keys, g.strings("non_strict_missing"));
    assert_eq!(keys.unexpected_keys, g.strings("non_strict_unexpected"));
    let out = m.call(std::slice::from_ref(&x)).expect("forward");
    assert_close(&out, &g.value("non_strict_out"), 1e-5, "non_strict_out");
    let m = load("net.pt");
    let e = err_text(m.load_state_dict_from(dir().join("bad_shape.safetensors"), true, false));
    assert!(e.ends_with(&g.str("shape_error")), "{e}");
}

#[test]
fn rust_forward_hooks_follow_pytorch_order_and_remove() {
    use std::sync::Arc;
    let mut g = Golden::load();
    let m = load("net.pt");
    m.eval();
    let x = g.value("x");
    let double: tsrun::internals::runtime::module::ForwardPreHook = Arc::new(|_m, args| {
        let t = args[0].as_tensor().expect("tensor");
        let v: Vec<f32> = t.to_vec::<f32>()?.iter().map(|v| v * 2.0).collect();
        Ok(Some(vec![IValue::Tensor(Tensor::from_vec(v, t.shape())?)]))
    });
    let affine = |scale: f32, shift: f32| -> tsrun::internals::runtime::module::ForwardHook {
        Arc::new(move |_m, _args, out| {
            let t = out.as_tensor().expect("tensor");
            let v: Vec<f32> = t
                .to_vec::<f32>()?
                .iter()
                .map(|v| v * scale + shift)
                .collect();
            Ok(Some(IValue::Tensor(Tensor::from_vec(v, t.shape())?)))
        })
    };
    let h1 = m.register_forward_pre_hook(double, false);
    let h2 = m.register_forward_hook(affine(1.0, 1.0), false, false);
    let h3 = m.register_forward_hook(affine(3.0, 0.0), true, false);
    let out = m.call(std::slice::from_ref(&x)).expect("hooked forward");
    assert_close(&out, &g.value("hooked_out"), 1e-5, "hooked_out");
    // `forward` does not run hooks, as in PyTorch
    let plain = m.forward(std::slice::from_ref(&x)).expect("forward");
    assert_close(&plain, &g.value("eval_out"), 1e-5, "forward without hooks");
    for h in [h1, h2, h3] {
        h.remove();
    }
    let out = m.call(std::slice::from_ref(&x)).expect("forward");
    assert_close(&out, &g.value("eval_out"), 1e-5, "hooks removed");
    // always_call hooks see a failing forward; the error stands
    let seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = seen.clone();
    let _h = m.register_forward_hook(
        Arc::new(move |_m, _a, out| {
            flag.store(out.is_none(), std::sync::atomic::Ordering::SeqCst);
            Ok(None)
        }),
        false,
        true,
    );
    assert!(m.call(&[IValue::Int(3)]).is_err());
    assert!(seen.load(std::sync::atomic::Ordering::SeqCst));
    let e = err_text(m.register_full_backward_hook());
    assert!(e.starts_with(&g.str("backward_hook_error")), "{e}");
    assert!(e.contains("no autograd"), "{e}");
}

#[test]
fn state_dict_hooks_and_registration() {
    use std::sync::Arc;
    let g = Golden::load();
    let m = load("net.pt");
    let h = m.register_state_dict_post_hook(Arc::new(|_m, sd, _prefix| {
        sd.shift_remove("fc2.bias");
        Ok(())
    }));
    assert!(!m
        .state_dict_with("", false)
        .expect("sd")
        .contains_key("fc2.bias"));
    h.remove();
    assert!(m
        .state_dict_with("", false)
        .expect("sd")
        .contains_key("fc2.bias"));
    // a post hook that accepts a missing key makes a strict load pass
    let mut partial =
        tsrun::internals::runtime::module::read_state_dict(dir().join("weights.safetensors"))
            .expect("read");
    partial.shift_remove("fc2.bias");
    let _h = m.register_load_state_dict_post_hook(Arc::new(|_m, keys| {
        keys.missing_keys.retain(|k| k != "fc2.bias");
        Ok(())
    }));
    m.load_state_dict(&partial, true, false)
        .expect("strict with hook");
    let _p = m.register_load_state_dict_pre_hook(Arc::new(|_m, sd| {
        sd.insert("extra.w".into(), Tensor::zeros(&[1], DType::Float32)?);
        Ok(())
    }));
    let e = err_text(m.load_state_dict(&partial, true, false));
    assert!(
        e.contains("Unexpected key(s) in state_dict: \"extra.w\""),
        "{e}"
    );
    // registration: declared names are replaced, new names are PyTorch's error
    let e = err_text(m.register_buffer(
        "foo",
        Some(Tensor::zeros(&[2], DType::Float32).expect("t")),
        true,
    ));
    assert_eq!(e, g.str("register_buffer_new"));
    let e = err_text(m.register_parameter("pp", None));
    assert_eq!(e, g.str("register_parameter_new"));
    let bn = m.get_submodule("bn").expect("bn");
    // None and persistent=false are refused with PyTorch's messages, the buffer left as it was
    let mean_before = bn.get_buffer("running_mean").expect("buffer");
    let e = err_text(bn.register_buffer("running_mean", None, true));
    assert!(e.starts_with(&g.str("register_buffer_none")), "{e}");
    let ones = Tensor::from_vec(vec![1f32; 8], &[8]).expect("ones");
    let e = err_text(bn.register_buffer("running_mean", Some(ones), false));
    assert_eq!(e, g.str("register_buffer_non_persistent"));
    assert!(bn
        .get_buffer("running_mean")
        .expect("buffer")
        .shares_storage(&mean_before));
    let mean = Tensor::from_vec(vec![0.5f32; 8], &[8]).expect("mean");
    bn.register_buffer("running_mean", Some(mean.clone()), true)
        .expect("replace buffer");
    assert!(bn
        .get_buffer("running_mean")
        .expect("buffer")
        .shares_storage(&mean));
    let other = load("net.pt");
    assert!(m
        .set_submodule("fc1", &other.get_submodule("fc1").expect("fc1"))
        .is_err());
    m.set_submodule("fc1", &m.get_submodule("fc1").expect("fc1"))
        .expect("same archive");
    let e = err_text(m.set_submodule("fc1", &bn));
    assert!(e.contains("Could not cast attribute 'fc1'"), "{e}");
    // apply visits children before their parent, as nn.Module.apply
    let mut visited = Vec::new();
    m.apply(&mut |s| {
        let class = s.class_name();
        visited.push(class.rsplit('.').next().unwrap_or(class).to_string());
        Ok(())
    })
    .expect("apply");
    let g = Golden::load();
    assert_eq!(visited, g.strings("apply_order"));
    assert_eq!(
        Some(m.modules().len() as u64),
        g.json["modules_count"].as_u64()
    );
    assert_eq!(
        Some(m.children().len() as u64),
        g.json["children_count"].as_u64()
    );
}

#[test]
fn extra_state_and_to_empty() {
    let mut g = Golden::load();
    let m = load("extra_state.pt");
    let state = m.get_extra_state().expect("get_extra_state");
    assert_close(&state, &g.value("extra_state"), 0.0, "extra_state");
    let new = g.value("extra_state_after_set");
    m.set_extra_state(new.clone()).expect("set_extra_state");
    assert_close(&m.get_extra_state().expect("get"), &new, 0.0, "after set");
    let x = g.value("x");
    assert_close(
        &m.call(std::slice::from_ref(&x)).expect("forward"),
        &g.value("extra_state_out"),
        1e-6,
        "extra_state_out",
    );
    let back = reload(&m, "extra_state_set.pt");
    assert_close(
        &back.get_extra_state().expect("get"),
        &new,
        0.0,
        "reloaded extra state",
    );
    let net = load("net.pt");
    let e = err_text(net.get_extra_state());
    assert_eq!(e, g.str("no_extra_state_error"));
    assert!(net.set_extra_state(IValue::None).is_err());
    net.share_memory();
    net.to_empty("cpu").expect("to_empty");
    let meta: Vec<(String, String, Vec<usize>)> = net
        .state_dict()
        .into_iter()
        .map(|(k, t)| (k, t.dtype().name().to_string(), t.shape().to_vec()))
        .collect();
    let want: Vec<(String, String, Vec<usize>)> = g.json["to_empty_meta"]
        .as_array()
        .expect("meta")
        .iter()
        .map(|e| {
            (
                e[0].as_str().expect("name").to_string(),
                e[1].as_str().expect("dtype").to_string(),
                e[2].as_array()
                    .expect("shape")
                    .iter()
                    .map(|d| d.as_u64().expect("dim") as usize)
                    .collect(),
            )
        })
        .collect();
    assert_eq!(meta, want);
    assert!(err_text(net.to_empty("cuda")).contains("no such device"));
    net.eval();
    net.call(&[x]).expect("runs after to_empty");
}

#[test]
fn channels_last_equals_pytorch() {
    use tsrun::internals::runtime::module::MemoryFormat;
    let mut g = Golden::load();
    let m = load("conv.pt");
    m.eval();
    m.to_memory_format(MemoryFormat::ChannelsLast)
        .expect("channels_last");
    let want = g.json["channels_last_strides"].clone();
    for (k, t) in m.state_dict() {
        let strides: Vec<isize> = want[&k]
            .as_array()
            .expect("strides")
            .iter()
            .map(|s| s.as_i64().expect("stride") as isize)
            .collect();
        assert_eq!(t.strides(), strides.as_slice(), "{k}");
    }
    let img = g.value("img");
    let out = m.call(std::slice::from_ref(&img)).expect("forward");
    assert_close(
        &out,
        &g.value("channels_last_out"),
        1e-5,
        "channels_last_out",
    );
    let back = reload(&m, "conv_channels_last.pt");
    assert_eq!(
        back.get_parameter("0.weight").expect("weight").strides(),
        &[27, 1, 9, 3]
    );
    let out = back.call(&[img]).expect("reloaded forward");
    assert_close(
        &out,
        &g.value("channels_last_out"),
        1e-5,
        "reloaded channels_last_out",
    );
    let e = err_text(m.to_memory_format(MemoryFormat::ChannelsLast3d));
    assert!(e.contains("required rank 5 tensor"), "{e}");
    m.to_memory_format(MemoryFormat::Contiguous)
        .expect("contiguous");
    assert!(m.state_dict().iter().all(|(_, t)| t.is_contiguous()));
}

#[test]
fn kwargs_hooks_and_state_dict_pre_hooks_follow_pytorch() {
    use std::sync::Arc;
    use tsrun::internals::runtime::module::Kwargs;
    let mut g = Golden::load();
    let m = load("net.pt");
    m.eval();
    let x = g.value("x");
    let doubled = |v: &IValue| -> tsrun::Result<IValue> {
        let t = v.as_tensor().expect("tensor");
        let d: Vec<f32> = t.to_vec::<f32>()?.iter().map(|v| v * 2.0).collect();
        Ok(IValue::Tensor(Tensor::from_vec(d, t.shape())?))
    };
    let keys_seen = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let seen = keys_seen.clone();
    let pre = m.register_forward_pre_hook_with_kwargs(
        Arc::new(move |_m, args, kwargs| {
            let mut kwargs = kwargs.clone();
            if let Some(v) = kwargs.get_mut("x") {
                *v = doubled(v)?;
            }
            Ok(Some((args.to_vec(), kwargs)))
        }),
        false,
    );
    let post = m.register_forward_hook_with_kwargs(
        Arc::new(move |_m, _args, kwargs, out| {
            let mut keys: Vec<String> = kwargs.keys().cloned().collect();
            keys.sort();
            *seen.lock() = keys;
            let t = out.as_tensor().expect("tensor");
            let v: Vec<f32> = t.to_vec::<f32>()?.iter().map(|v| v - 1.0).collect();
            Ok(Some(IValue::Tensor(Tensor::from_vec(v, t.shape())?)))
        }),
        false,
        false,
    );
    let mut kwargs = Kwargs::new();
    kwargs.insert("x".into(), x.clone());
    let out = m
        .call_kwargs(vec![], kwargs)
        .expect("call with x by keyword");
    assert_close(
        &out,
        &g.value("kwargs_hooked_out"),
        1e-5,
        "kwargs_hooked_out",
    );
    assert_eq!(*keys_seen.lock(), g.strings("kwargs_hook_keys"));
    pre.remove();
    post.remove();
    // binding errors carry Python's wording (PyTorch qualifies the method with its class)
    let mut bad = Kwargs::new();
    bad.insert("y".into(), x.clone());
    let e = err_text(m.call_kwargs(vec![x.clone()], bad));
    assert!(
        g.str("unexpected_kwarg")
            .ends_with(e.split(": ").last().unwrap_or(&e)),
        "{e}"
    );
    let mut dup = Kwargs::new();
    dup.insert("x".into(), x.clone());
    let e = err_text(m.call_kwargs(vec![x.clone()], dup));
    assert!(
        g.str("duplicate_kwarg")
            .ends_with(e.split(": ").last().unwrap_or(&e)),
        "{e}"
    );

    // state-dict pre hooks see the prefix and keep_vars; removed, they no longer run
    let calls = Arc::new(parking_lot::Mutex::new(Vec::<(String, bool)>::new()));
    let log = calls.clone();
    let h = m.register_state_dict_pre_hook(Arc::new(move |_m, prefix, keep_vars| {
        log.lock().push((prefix.to_string(), keep_vars));
        Ok(())
    }));
    m.state_dict_with("root.", true).expect("state dict");
    h.remove();
    m.state_dict_with("", false).expect("state dict");
    let expected = g.json["state_dict_pre_hook_calls"].clone();
    let expected: Vec<(String, bool)> = expected
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| {
            (
                c[0].as_str().expect("prefix").to_string(),
                c[1].as_bool().expect("keep_vars"),
            )
        })
        .collect();
    assert_eq!(*calls.lock(), expected);
}
