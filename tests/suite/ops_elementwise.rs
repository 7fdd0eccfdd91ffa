//! Golden tests: every case of fixtures/ops/elementwise.json (written by fixtures/gen_ops_elementwise.py from
//! PyTorch) runs through the registry and must match PyTorch's result or error.

use crate::common;

#[test]
fn elementwise_ops_match_pytorch() {
    common::assert_op_cases("elementwise");
}

/// A binary op whose one side is constant along trailing dims (a per-channel scale or bias,
/// either operand, any batch) or a row repeated along leading dims takes a block-wise path; it must give exactly what the same op
/// gives on the operand materialized to the full shape.
#[test]
fn per_channel_broadcast_equals_the_materialized_operand() {
    use tsrun::internals::ops::{Args, OpContext, Registry};
    use tsrun::internals::tensor::Tensor;
    use tsrun::internals::values::IValue;
    let ctx = OpContext::default();
    let run = |op: &str, overload: &str, args: Vec<IValue>| -> Tensor {
        let kernel = Registry::global().lookup(op, overload).expect("kernel");
        let mut args = args;
        match kernel(&mut Args::new(op, &mut args, &ctx)).expect("runs") {
            IValue::Tensor(t) => t,
            other => panic!("{other:?}"),
        }
    };
    let vals = |n: usize, k: f32| {
        (0..n)
            .map(|i| (i as f32 * 0.37 + k).sin())
            .collect::<Vec<f32>>()
    };
    // (full shape, small shape)
    let cases: [(&[usize], &[usize]); 8] = [
        (&[2, 3, 4, 5], &[3, 1, 1]),
        (&[2, 3, 4, 5], &[1, 3, 1, 1]),
        (&[1, 6, 7, 7], &[1, 6, 1, 1]),
        (&[2, 3, 4, 5], &[4, 1]),
        (&[3, 8], &[8, 1][1..]),
        // a row repeated along the leading dims: a bias, an attention mask over the heads
        (&[2, 3, 4, 5], &[5]),
        (&[2, 3, 4, 5], &[4, 5]),
        (&[1, 4, 6, 6], &[1, 1, 1, 6]),
    ];
    for (full, small) in cases {
        let n: usize = full.iter().product();
        let a = Tensor::from_vec(vals(n, 0.5), full).unwrap();
        let bsmall = vals(small.iter().product(), 1.5);
        // the small operand repeated to the full shape by index arithmetic
        let pad = full.len() - small.len();
        let mut bfull = Vec::with_capacity(n);
        for i in 0..n {
            let (mut rem, mut idx, mut stride) = (i, 0, 1);
            for d in (0..full.len()).rev() {
                let coord = rem % full[d];
                rem /= full[d];
                if d >= pad {
                    let sd = small[d - pad];
                    idx += (coord % sd) * stride;
                    stride *= sd;
                }
            }
            bfull.push(bsmall[idx]);
        }
        let b = Tensor::from_vec(bsmall, small).unwrap();
        let bf = Tensor::from_vec(bfull, full).unwrap();
        for (op, overload, extra) in [
            ("aten::mul", "Tensor", vec![]),
            ("aten::add", "Tensor", vec![IValue::Int(1)]),
            ("aten::sub", "Tensor", vec![IValue::Int(1)]),
        ] {
            for swap in [false, true] {
                let args = |x: &Tensor, y: &Tensor| {
                    let (p, q) = if swap { (y, x) } else { (x, y) };
                    let mut v = vec![IValue::Tensor(p.clone()), IValue::Tensor(q.clone())];
                    v.extend(extra.iter().cloned());
                    v
                };
                let got = run(op, overload, args(&a, &b));
                let want = run(op, overload, args(&a, &bf));
                assert_eq!(
                    got.shape(),
                    want.shape(),
                    "{op} {full:?} {small:?} swap {swap}"
                );
                assert_eq!(
                    got.to_vec::<f32>().unwrap(),
                    want.to_vec::<f32>().unwrap(),
                    "{op} {full:?} {small:?} swap {swap}"
                );
            }
        }
    }
}
