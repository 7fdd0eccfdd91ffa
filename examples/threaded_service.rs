//! A service that loads a model once and answers requests from many threads.
//!
//! `Module` is a cheap handle (`Clone + Send + Sync`): every worker holds a clone and calls
//! `forward` concurrently; weights are shared, never copied. `prepare` compiles the methods
//! and packs the weights before the first request, so no request pays for that.
//!
//!     cargo run --example threaded_service

use std::sync::mpsc;
use std::thread;
use tsrun::{Module, Result, Tensor};

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/models/mlp.pt");
const WORKERS: usize = 4;
const REQUESTS_PER_WORKER: usize = 25;

fn main() -> Result<()> {
    let model = Module::load(MODEL)?;
    model.prepare(&["forward"])?;
    let width = input_width(&model)?;

    let (replies, answers) = mpsc::channel();
    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let model = model.clone();
            let replies = replies.clone();
            thread::spawn(move || -> Result<()> {
                for request in 0..REQUESTS_PER_WORKER {
                    // each request: a row of features derived from its number
                    let seed = (worker * REQUESTS_PER_WORKER + request) as f32;
                    let row: Vec<f32> = (0..width).map(|j| (seed + j as f32).sin()).collect();
                    let x = Tensor::from_slice(&row, &[1, width])?;
                    let y: Tensor = model.forward(&[x.into()])?.extract()?;
                    let scores = y.to_vec::<f32>()?;
                    let best = argmax(&scores);
                    // the receiver lives until every worker is joined
                    let _ = replies.send((worker, request, best));
                }
                Ok(())
            })
        })
        .collect();
    drop(replies);

    let mut per_class = std::collections::BTreeMap::new();
    for (_, _, best) in answers {
        *per_class.entry(best).or_insert(0usize) += 1;
    }
    for w in workers {
        w.join()
            .map_err(|_| tsrun::Error::Kernel("a worker panicked".into()))??;
    }
    let total: usize = per_class.values().sum();
    println!("{total} requests answered by {WORKERS} threads sharing one model");
    for (class, n) in per_class {
        println!("  class {class}: {n}");
    }
    Ok(())
}

/// The number of input features: the first parameter of the first linear layer is its
/// `[out_features, in_features]` weight.
fn input_width(model: &Module) -> Result<usize> {
    let (_, weight) = model
        .state_dict()
        .into_iter()
        .find(|(name, t)| name.ends_with("weight") && t.dim() == 2)
        .ok_or_else(|| tsrun::Error::Kernel("the model has no 2-D weight".into()))?;
    Ok(weight.shape()[1])
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &x)| {
            if x > best.1 {
                (i, x)
            } else {
                best
            }
        })
        .0
}
