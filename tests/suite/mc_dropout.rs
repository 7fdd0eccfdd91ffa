//! Monte Carlo dropout (darts' MonteCarloDropout: dropout kept active in eval mode by
//! `mc_dropout_enabled`) on a scripted module from fixtures/gen_module_api.py.

use crate::module_api::{assert_close, load, reload, Golden};
use tsrun::ops::OpContext;
use tsrun::runtime::{IValue, Module};
use tsrun::tensor::Tensor;

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
