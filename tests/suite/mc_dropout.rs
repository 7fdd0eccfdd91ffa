//! Monte Carlo dropout (darts' MonteCarloDropout: dropout kept active in eval mode by
//! `mc_dropout_enabled`) on a scripted module from fixtures/gen_module_api.py.

use crate::module_api::{assert_close, load, reload, Golden};
use tsrun::internals::ops::OpContext;
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::Tensor;
use tsrun::internals::values::IValue;

const P: f64 = 0.3;

/// The dropout submodule alone: its output is its input with elements zeroed or scaled.
fn drop_module() -> Module {
    let m = load("net.pt");
    m.eval();
    m.set_attr("drop.mc_dropout_enabled", IValue::Bool(true))
        .expect("flag on");
    m.get_submodule("drop").expect("drop")
}

#[test]
fn flag_on_in_eval_drops_with_probability_p_and_scales() {
    let drop = drop_module();
    assert!(!drop.training());
    let n = 64;
    let x = Tensor::from_vec((1..=n).map(|i| i as f32).collect::<Vec<_>>(), &[n]).expect("x");
    let xv = x.to_vec::<f64>().expect("x values");
    let (mut zeros, mut total) = (0usize, 0usize);
    for seed in 0..2000u64 {
        let out = drop
            .call_with(vec![IValue::Tensor(x.clone())], &OpContext::with_seed(seed))
            .expect("forward");
        let out = out
            .as_tensor()
            .expect("tensor")
            .to_vec::<f64>()
            .expect("values");
        for (o, i) in out.iter().zip(&xv) {
            total += 1;
            if *o == 0.0 {
                zeros += 1;
            } else {
                let want = i / (1.0 - P);
                assert!((o - want).abs() <= 1e-5 * want, "kept {o}, want {want}");
            }
        }
    }
    let fraction = zeros as f64 / total as f64;
    assert!(
        (fraction - P).abs() < 0.02,
        "zeroed fraction {fraction}, p {P}"
    );
}

#[test]
fn seeds_reproduce_and_differ() {
    let mut g = Golden::load();
    let m = load("net.pt");
    m.eval();
    m.set_attr("drop.mc_dropout_enabled", IValue::Bool(true))
        .expect("flag on");
    let x = g.value("x");
    let run = |seed: u64| {
        m.call_with(vec![x.clone()], &OpContext::with_seed(seed))
            .expect("forward")
            .as_tensor()
            .expect("tensor")
            .to_vec::<f32>()
            .expect("values")
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
    let a = m.mc_samples(std::slice::from_ref(&x), 16, 100).expect("mc");
    let b = m.mc_samples(std::slice::from_ref(&x), 16, 100).expect("mc");
    let c = m.mc_samples(std::slice::from_ref(&x), 16, 101).expect("mc");
    let av = a.samples.to_vec::<f32>().expect("a");
    assert_eq!(av, b.samples.to_vec::<f32>().expect("b"));
    assert_ne!(av, c.samples.to_vec::<f32>().expect("c"));
    assert_eq!(a.samples.shape(), &[16, 16, 3]);
    // pass i is the call seeded `seed + i`
    let pass3: Vec<f32> = av[3 * 48..4 * 48].to_vec();
    assert_eq!(pass3, run(103));
    // mean and variance over the passes
    let mean = a.mean.to_vec::<f64>().expect("mean");
    let var = a.variance.to_vec::<f64>().expect("var");
    for j in 0..48 {
        let col: Vec<f64> = (0..16).map(|i| av[i * 48 + j] as f64).collect();
        let mu = col.iter().sum::<f64>() / 16.0;
        let v = col.iter().map(|c| (c - mu) * (c - mu)).sum::<f64>() / 15.0;
        assert!((mean[j] - mu).abs() <= 1e-5 * (1.0 + mu.abs()));
        assert!((var[j] - v).abs() <= 1e-5 * (1.0 + v.abs()));
    }
    assert!(
        var.iter().any(|v| *v > 0.0),
        "dropout active: passes differ"
    );
}

#[test]
fn flag_off_is_deterministic_and_equals_pytorch() {
    let mut g = Golden::load();
    let m = load("net.pt");
    m.eval();
    m.set_attr("drop.mc_dropout_enabled", IValue::Bool(true))
        .expect("flag on");
    m.set_attr("drop.mc_dropout_enabled", IValue::Bool(false))
        .expect("flag off");
    let x = g.value("x");
    let want = g.value("eval_out");
    let s = m.mc_samples(std::slice::from_ref(&x), 8, 5).expect("mc");
    assert!(s
        .variance
        .to_vec::<f64>()
        .expect("var")
        .iter()
        .all(|v| *v == 0.0));
    assert_close(&IValue::Tensor(s.mean), &want, 1e-5, "mean flag off");
    let back = reload(&m, "net_mc_off.pt");
    let out = back
        .call_with(vec![x], &OpContext::with_seed(9))
        .expect("forward");
    assert_close(&out, &want, 1e-5, "reloaded flag off");
}

/// A call with its own seeded context gives the same result whatever other threads do with the
/// process-wide generator (`tsrun::manual_seed` and unseeded calls).
#[test]
fn per_call_seed_ignores_other_threads() {
    let drop = drop_module();
    let x = Tensor::from_vec(vec![1.0f32; 256], &[256]).expect("x");
    let seeded = |seed: u64| {
        drop.call_with(vec![IValue::Tensor(x.clone())], &OpContext::with_seed(seed))
            .expect("forward")
            .as_tensor()
            .expect("tensor")
            .to_vec::<f32>()
            .expect("values")
    };
    let want = seeded(42);
    std::thread::scope(|s| {
        let noise = s.spawn(|| {
            for i in 0..200 {
                tsrun::manual_seed(i);
                drop.call(&[IValue::Tensor(x.clone())])
                    .expect("unseeded forward");
            }
        });
        for _ in 0..200 {
            assert_eq!(seeded(42), want);
        }
        noise.join().expect("noise thread");
    });
}

#[test]
fn cli_run_sets_flags_and_modes() {
    let mut g = Golden::load();
    let dir = crate::common::ScratchDir::new("mc_cli");
    let x = dir.join("x.npy");
    let xt = g.tensor("x");
    ndarray_npy::write_npy(&x, &xt.to_ndarray::<f32>().expect("x array")).expect("write x");
    let model = crate::module_api::dir().join("net.pt");
    let run = |extra: &[&str], seed: &str, out: &str| -> Tensor {
        let args = [&["--seed", seed], extra].concat();
        cli_run_npz(&model, &x, &args, &dir.join(out))
    };
    let on = ["--eval", "--set", "drop.mc_dropout_enabled=true"];
    let (a, b, c) = (
        run(&on, "1", "a.npz"),
        run(&on, "1", "b.npz"),
        run(&on, "2", "c.npz"),
    );
    let values = |t: &Tensor| t.to_vec::<f32>().expect("values");
    assert_eq!(values(&a), values(&b), "same seed, same output");
    assert_ne!(values(&a), values(&c), "different seeds differ");
    let off = run(
        &["--eval", "--set", "drop.mc_dropout_enabled=false"],
        "3",
        "off.npz",
    );
    assert_close(
        &IValue::Tensor(off),
        &g.value("eval_out"),
        1e-5,
        "cli flag off",
    );
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_tsrun"))
        .arg("run")
        .arg(&model)
        .arg("-i")
        .arg(&x)
        .args(["--set", "drop.mc_dropout_enabled=2.5"])
        .output()
        .expect("run tsrun");
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("Could not cast attribute 'mc_dropout_enabled' to type bool"),
        "{stderr}"
    );
}

/// `tsrun run MODEL -i X EXTRA... -o OUT` in `dir`; the `out` array of the written npz (which
/// also holds `structure.json`).
fn cli_run_npz(
    model: &std::path::Path,
    x: &std::path::Path,
    extra: &[&str],
    out: &std::path::Path,
) -> Tensor {
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_tsrun"))
        .arg("run")
        .arg(model)
        .arg("-i")
        .arg(x)
        .args(extra)
        .arg("-o")
        .arg(out)
        .status()
        .expect("run tsrun");
    assert!(status.success(), "tsrun run {extra:?}");
    let mut npz =
        ndarray_npy::NpzReader::new(std::fs::File::open(out).expect("open npz")).expect("npz");
    let arr: ndarray::ArrayD<f32> = npz.by_name("out").expect("out array");
    Tensor::from_ndarray(arr).expect("tensor")
}

#[test]
fn cli_run_train_turns_batch_norm_training_back_on() {
    let mut g = Golden::load();
    let dir = crate::common::ScratchDir::new("train_cli");
    let x = dir.join("x.npy");
    let xt = g.tensor("x");
    ndarray_npy::write_npy(&x, &xt.to_ndarray::<f32>().expect("x array")).expect("write x");
    // bn_net_eval.pt is saved in eval mode; --train makes batch norm use batch statistics
    let model = crate::module_api::dir().join("bn_net_eval.pt");
    let run = |mode: &str, out: &str| cli_run_npz(&model, &x, &[mode], &dir.join(out));
    let train = run("--train", "train.npz");
    assert_close(
        &IValue::Tensor(train),
        &g.value("bn_train_out"),
        1e-5,
        "--train",
    );
    // without the flag the archive's eval mode holds: running statistics, not batch ones
    let eval = run("--eval", "eval.npz");
    let want = g.tensor("bn_train_out").to_vec::<f32>().expect("values");
    assert_ne!(
        eval.to_vec::<f32>().expect("values"),
        want,
        "--eval differs"
    );
}
