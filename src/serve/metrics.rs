//! Prometheus metrics, kept as atomics per model (the model set is fixed at start, so the map
//! is never written after construction and needs no lock) and written in the text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds, in seconds, of the latency histograms' buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
/// Upper bounds of the batch-size histogram's buckets (rows per model call).
const BATCH_BUCKETS: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// The error kinds counted (`InferError::kind`).
pub const ERROR_KINDS: [&str; 5] = [
    "bad_request",
    "not_found",
    "model_error",
    "unavailable",
    "timeout",
];

/// A cumulative histogram: one counter per bucket, the count and the sum (in micro-units, so
/// it stays an integer atomic).
struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    fn observe(&self, value: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| value <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((value * 1e6) as u64, Ordering::Relaxed);
    }

    fn write(&self, out: &mut String, metric: &str, model: &str) {
        let mut cumulative = 0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{metric}_bucket{{model=\"{model}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{metric}_bucket{{model=\"{model}\",le=\"+Inf\"}} {count}"
        );
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{metric}_sum{{model=\"{model}\"}} {sum}");
        let _ = writeln!(out, "{metric}_count{{model=\"{model}\"}} {count}");
    }
}

/// Picks one histogram of a model's metrics.
type HistogramOf = fn(&ModelMetrics) -> &Histogram;

struct ModelMetrics {
    requests: AtomicU64,
    successes: AtomicU64,
    errors: [AtomicU64; ERROR_KINDS.len()],
    request_latency: Histogram,
    queue_time: Histogram,
    compute_time: Histogram,
    batch_size: Histogram,
}

impl ModelMetrics {
    fn new() -> ModelMetrics {
        ModelMetrics {
            requests: AtomicU64::new(0),
            successes: AtomicU64::new(0),
            errors: Default::default(),
            request_latency: Histogram::new(&LATENCY_BUCKETS),
            queue_time: Histogram::new(&LATENCY_BUCKETS),
            compute_time: Histogram::new(&LATENCY_BUCKETS),
            batch_size: Histogram::new(&BATCH_BUCKETS),
        }
    }
}

/// Every model's counters. Requests for unknown models are counted under `model=""` so a
/// client cannot grow the map.
pub struct Metrics {
    models: BTreeMap<String, ModelMetrics>,
    unknown: ModelMetrics,
}

impl Metrics {
    pub fn new<'a>(models: impl IntoIterator<Item = &'a str>) -> Metrics {
        Metrics {
            models: models
                .into_iter()
                .map(|m| (m.to_string(), ModelMetrics::new()))
                .collect(),
            unknown: ModelMetrics::new(),
        }
    }

    fn model(&self, name: &str) -> &ModelMetrics {
        self.models.get(name).unwrap_or(&self.unknown)
    }

    /// One finished request: its end-to-end latency and outcome.
    pub fn request(&self, model: &str, latency: Duration, error: Option<&'static str>) {
        let m = self.model(model);
        m.requests.fetch_add(1, Ordering::Relaxed);
        m.request_latency.observe(latency.as_secs_f64());
        match error.and_then(|kind| ERROR_KINDS.iter().position(|k| *k == kind)) {
            Some(i) => {
                m.errors[i].fetch_add(1, Ordering::Relaxed);
            }
            None => {
                m.successes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Time a request waited before its model call started.
    pub fn queued(&self, model: &str, wait: Duration) {
        self.model(model).queue_time.observe(wait.as_secs_f64());
    }

    /// One model call over `rows` batch rows taking `compute`.
    pub fn model_call(&self, model: &str, rows: usize, compute: Duration) {
        let m = self.model(model);
        m.batch_size.observe(rows as f64);
        m.compute_time.observe(compute.as_secs_f64());
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let all = || {
            self.models
                .iter()
                .map(|(k, v)| (k.as_str(), v))
                .chain(std::iter::once(("", &self.unknown)))
        };
        let counter =
            |out: &mut String, name: &str, help: &str, get: &dyn Fn(&ModelMetrics) -> u64| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
                for (model, m) in all() {
                    let _ = writeln!(out, "{name}{{model=\"{model}\"}} {}", get(m));
                }
            };
        counter(
            &mut out,
            "tsrun_requests_total",
            "Inference requests received.",
            &|m| m.requests.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "tsrun_request_success_total",
            "Inference requests answered without error.",
            &|m| m.successes.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP tsrun_request_errors_total Failed inference requests by kind.\n# TYPE tsrun_request_errors_total counter"
        );
        for (model, m) in all() {
            for (kind, n) in ERROR_KINDS.iter().zip(&m.errors) {
                let _ = writeln!(
                    out,
                    "tsrun_request_errors_total{{model=\"{model}\",kind=\"{kind}\"}} {}",
                    n.load(Ordering::Relaxed)
                );
            }
        }
        let histograms: [(&str, &str, HistogramOf); 4] = [
            (
                "tsrun_request_duration_seconds",
                "End-to-end inference request latency.",
                |m| &m.request_latency,
            ),
            (
                "tsrun_queue_duration_seconds",
                "Time a request waited for a worker (and its batch).",
                |m| &m.queue_time,
            ),
            (
                "tsrun_compute_duration_seconds",
                "Time of one model call (one batch).",
                |m| &m.compute_time,
            ),
            ("tsrun_batch_size", "Rows (dim 0) per model call.", |m| {
                &m.batch_size
            }),
        ];
        for (name, help, get) in histograms {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            for (model, m) in all() {
                get(m).write(&mut out, name, model);
            }
        }
        out
    }
}
