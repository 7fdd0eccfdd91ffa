//! `tsrun bench`: the JSON report's fields and the three-significant-digit time format.

use crate::common::fixtures_dir;
use tsrun::internals::cli::bench::{format_seconds, measure, BenchArgs};

#[test]
fn times_keep_three_significant_digits_at_every_scale() {
    let cases = [
        (1.234e-8, "12.3 ns"),
        (9.996e-7, "1.00 us"),
        (1.0e-5, "10.0 us"),
        (1.234e-5, "12.3 us"),
        (3.36e-4, "336 us"),
        (9.9996e-4, "1.00 ms"),
        (1.5e-3, "1.50 ms"),
        (0.0459, "45.9 ms"),
        (0.1, "100 ms"),
        (2.3149, "2.31 s"),
        (125.0, "125 s"),
    ];
    for (secs, text) in cases {
        assert_eq!(format_seconds(secs), text, "{secs}");
    }
}

#[test]
fn bench_reports_every_field() {
    let dir = std::env::temp_dir().join(format!("tsrun-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let input = dir.join("x.npy");
    let x = ndarray::ArrayD::<f32>::from_elem(ndarray::IxDyn(&[1, 8]), 0.5);
    ndarray_npy::write_npy(&input, &x).expect("write npy");
    let args = BenchArgs {
        model: fixtures_dir().join("models").join("mlp.pt"),
        method: "forward".into(),
        inputs: tsrun::internals::cli::inputs::InputArgs {
            inputs: vec![input.to_string_lossy().into_owned()],
            ..Default::default()
        },
        iterations: 7,
        warmup: 2,
        threads: None,
        json: true,
        callers: 1,
        profile: false,
        limits: Default::default(),
    };
    let r = measure(&args).expect("bench runs");
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(r.iterations, 7);
    assert_eq!((r.callers, r.calls_per_s), (1, None));
    assert!(r.threads >= 1);
    assert!(0.0 < r.min_s && r.min_s <= r.median_s && r.median_s <= r.max_s);
    assert!(r.first_call_s > 0.0 && r.load_s > 0.0);
    // the process holds at least the archive's bytes once loaded
    let archive = std::fs::metadata(&args.model).expect("archive").len();
    assert!(r.peak_rss_bytes.expect("Linux reports VmHWM") > archive);
    // getrusage counts minor faults on Linux; a later call reuses the first call's buffers
    assert!(r.first_call_minor_faults.is_some());
    assert!(r.minor_faults_per_call.is_some_and(|f| f >= 0.0));
    // and CPU time (the first call ran, so its user + system time is counted, maybe as 0
    // at the clock's resolution)
    assert!(r.first_call_cpu_s.is_some_and(|s| s >= 0.0));
    assert!(r.cpu_s_per_call.is_some_and(|s| s >= 0.0));
    let json: serde_json::Value = serde_json::to_value(&r).expect("the report serializes");
    let keys: Vec<&str> = json
        .as_object()
        .expect("one object")
        .keys()
        .map(|k| k.as_str())
        .collect();
    for k in [
        "median_s",
        "min_s",
        "max_s",
        "first_call_s",
        "load_s",
        "peak_rss_bytes",
        "first_call_minor_faults",
        "minor_faults_per_call",
        "first_call_cpu_s",
        "cpu_s_per_call",
        "threads",
        "iterations",
    ] {
        assert!(keys.contains(&k), "{k} in {keys:?}");
    }
    // without --profile the report has no profile
    assert!(!keys.contains(&"profile"), "{keys:?}");
}

/// `--profile`: the operators of fixtures' mlp.pt (Linear -> ReLU -> Linear, then a Linear and
/// `tanh` in its head), each with its runs per call, and a remainder between them.
#[test]
fn profile_times_each_operator_of_a_call() {
    let args = BenchArgs {
        model: fixtures_dir().join("models").join("mlp.pt"),
        method: "forward".into(),
        inputs: tsrun::internals::cli::inputs::InputArgs {
            random: vec!["2x8".into()],
            ..Default::default()
        },
        iterations: 5,
        warmup: 1,
        threads: None,
        json: true,
        callers: 1,
        profile: true,
        limits: Default::default(),
    };
    let r = measure(&args).expect("bench runs");
    let profile = r.profile.expect("--profile reports");
    assert_eq!(profile.calls, 5);
    let runs = |pred: &dyn Fn(&str) -> bool| -> f64 {
        profile
            .ops
            .iter()
            .filter(|o| pred(&o.op))
            .map(|o| o.runs * o.op.matches("linear").count() as f64)
            .sum()
    };
    // three Linear modules per call, fused with their activation or not
    assert_eq!(runs(&|op| op.contains("linear")), 3.0, "{:?}", profile.ops);
    let tanh = profile.ops.iter().find(|o| o.op == "aten::tanh");
    assert_eq!(tanh.map(|o| o.runs), Some(1.0), "{:?}", profile.ops);
    // most expensive first, and the operators' sum never exceeds the call's wall time
    assert!(profile.ops.windows(2).all(|w| w[0].time_s >= w[1].time_s));
    let in_ops: f64 = profile.ops.iter().map(|o| o.time_s).sum();
    assert!(in_ops > 0.0 && in_ops <= profile.call_s * (1.0 + 1e-9));
    assert!((in_ops + profile.between_ops_s - profile.call_s).abs() < 1e-9);
    // the JSON carries every operator
    let json = serde_json::to_value(&profile).expect("serializes");
    assert_eq!(
        json["ops"].as_array().map(Vec::len),
        Some(profile.ops.len())
    );
}
