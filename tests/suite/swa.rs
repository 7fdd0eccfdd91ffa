//! `tsrun::swa::AveragedModel` and `update_bn` against torch.optim.swa_utils
//! (fixtures/gen_module_api.py: three snapshots of one architecture).

use crate::module_api::{assert_close, assert_named_close, dir, load, reload, Golden};
use std::sync::Arc;
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::Tensor;
use tsrun::internals::values::IValue;
use tsrun::swa::{self, AveragedModel};

fn snapshots() -> Vec<Module> {
    (0..3).map(|k| load(&format!("snap{k}.pt"))).collect()
}

fn check_state(g: &mut Golden, label: &str, m: &Module) {
    let want = g.named(&g.json["averaged"][label]["state_dict"].clone());
    assert_named_close(&m.state_dict(), &want, 1e-6, label);
}

fn averaged(label: &str) -> AveragedModel {
    let snaps = snapshots();
    let avg = AveragedModel::new(&snaps[0]).expect("new");
    let mut avg = match label {
        "swa" => avg,
        "swa_buffers" => avg.use_buffers(true),
        "ema" => avg.ema(0.9).expect("ema"),
        _ => avg.ema(0.9).expect("ema").use_buffers(true),
    };
    for s in &snaps {
        avg.update_parameters(s).expect("update");
    }
    avg
}

#[test]
fn swa_and_ema_equal_pytorch() {
    let mut g = Golden::load();
    for label in ["swa", "swa_buffers", "ema", "ema_buffers"] {
        let avg = averaged(label);
        let n = g.json["averaged"][label]["n_averaged"].as_i64().expect("n");
        assert_eq!(avg.n_averaged(), n, "{label}");
        check_state(&mut g, label, avg.module());
        // saved as the original architecture
        let back = reload(avg.module(), &format!("avg_{label}.pt"));
        assert_eq!(back.class_name(), load("snap0.pt").class_name());
        check_state(&mut g, label, &back);
    }
}

#[test]
fn per_tensor_avg_fn_equals_the_multi_fn() {
    let mut g = Golden::load();
    let snaps = snapshots();
    let mut avg = AveragedModel::new(&snaps[0])
        .expect("new")
        .avg_fn(swa::get_ema_avg_fn(0.9).expect("ema fn"));
    for s in &snaps {
        avg.update_parameters(s).expect("update");
    }
    check_state(&mut g, "ema", avg.module());
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let mut custom = AveragedModel::new(&snaps[0])
        .expect("new")
        .multi_avg_fn(Arc::new(move |a: &[Tensor], c: &[Tensor], n: i64| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            swa::get_swa_multi_avg_fn()(a, c, n)
        }));
    for s in &snaps {
        custom.update_parameters(s).expect("update");
    }
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "first call copies"
    );
    check_state(&mut g, "swa", custom.module());
    assert!(AveragedModel::new(&snaps[0])
        .expect("new")
        .ema(1.5)
        .is_err());
}

#[test]
fn update_bn_equals_pytorch() {
    let mut g = Golden::load();
    let avg = averaged("swa");
    let model = avg.module();
    model.eval();
    let batches =
        tsrun::internals::runtime::module::read_npz(&dir().join("bn_data.npz")).expect("batches");
    swa::update_bn(batches.into_values().map(IValue::Tensor), model).expect("update_bn");
    let want_training = g.json["update_bn"]["training_after"]
        .as_bool()
        .expect("bool");
    assert_eq!(model.training(), want_training);
    let want = g.named(&g.json["update_bn"]["buffers"].clone());
    assert_named_close(
        &model.named_buffers("", true, true),
        &want,
        1e-6,
        "update_bn",
    );
    let x = g.value("x");
    let out = model.call(&[x]).expect("forward");
    let want = g.json["update_bn"]["eval_out"].clone();
    let want = crate::common::decode(&want, &mut g.arrays);
    assert_close(&out, &want, 1e-5, "update_bn eval_out");
}

#[test]
fn cli_average_and_load_state_dict() {
    let mut g = Golden::load();
    let out = crate::common::ScratchDir::new("swa_cli");
    let tsrun = |args: &[&std::ffi::OsStr]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_tsrun"))
            .args(args)
            .output()
            .expect("run tsrun");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let snaps: Vec<std::path::PathBuf> =
        (0..3).map(|k| dir().join(format!("snap{k}.pt"))).collect();
    for (label, flags) in [
        ("swa", vec![]),
        ("swa_buffers", vec!["--use-buffers"]),
        ("ema", vec!["--ema", "0.9"]),
        ("ema_buffers", vec!["--ema", "0.9", "--use-buffers"]),
    ] {
        let p = out.join(format!("{label}.pt"));
        let mut args: Vec<&std::ffi::OsStr> = vec!["average".as_ref(), p.as_os_str()];
        args.extend(snaps.iter().map(|s| s.as_os_str()));
        args.extend(flags.iter().map(std::ffi::OsStr::new));
        let (ok, err) = tsrun(&args);
        assert!(ok, "{label}: {err}");
        check_state(&mut g, label, &Module::load(&p).expect("load average"));
    }
    let p = out.join("bn.pt");
    let data = dir().join("bn_data.npz");
    let mut args: Vec<&std::ffi::OsStr> = vec!["average".as_ref(), p.as_os_str()];
    args.extend(snaps.iter().map(|s| s.as_os_str()));
    args.extend(["--update-bn".as_ref(), data.as_os_str()]);
    let (ok, err) = tsrun(&args);
    assert!(ok, "{err}");
    let m = Module::load(&p).expect("load");
    let want = g.named(&g.json["update_bn"]["buffers"].clone());
    assert_named_close(
        &m.named_buffers("", true, true),
        &want,
        1e-6,
        "average --update-bn",
    );
    // load-state-dict: strict mismatch and shape errors carry PyTorch's message
    let net = dir().join("net.pt");
    let loaded = out.join("loaded.pt");
    let weights = dir().join("weights.npz");
    let (ok, err) = tsrun(&[
        "load-state-dict".as_ref(),
        net.as_os_str(),
        weights.as_os_str(),
        loaded.as_os_str(),
        "--strict".as_ref(),
    ]);
    assert!(ok, "{err}");
    let m = Module::load(&loaded).expect("load");
    m.eval();
    let out_ = m.call(&[g.value("x")]).expect("forward");
    assert_close(&out_, &g.value("loaded_out"), 1e-5, "cli load-state-dict");
    let bad = dir().join("bad_shape.safetensors");
    let (ok, err) = tsrun(&[
        "load-state-dict".as_ref(),
        net.as_os_str(),
        bad.as_os_str(),
        loaded.as_os_str(),
    ]);
    assert!(!ok);
    assert!(err.contains(&g.str("shape_error")), "{err}");
}
