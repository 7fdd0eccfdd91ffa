//! Where model calls run: a pool of dedicated worker threads fed by a bounded queue, and one
//! batcher thread per batched model that gathers requests into a dim-0 batch. The async side
//! only ever `try_send`s a job and awaits a oneshot reply, so a model call never occupies the
//! executor, and a full queue is a prompt 503 instead of unbounded memory.

use super::error::InferError;
use super::metrics::Metrics;
use super::model::ServedModel;
use super::tensor::{outputs_of, WireTensor};
use crate::runtime::RunOptions;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How the engine runs calls.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Model calls running at once (worker threads).
    pub workers: usize,
    /// Requests that may wait for a worker (per batcher and in the shared queue).
    pub queue_capacity: usize,
    /// How long a batcher waits for a batch to fill after its first request.
    pub batch_timeout: Duration,
    /// Per-request deadline, from arrival to reply.
    pub timeout: Option<Duration>,
}

type Reply = Result<Vec<WireTensor>, InferError>;

/// One request waiting for its model call.
struct Pending {
    inputs: Vec<WireTensor>,
    enqueued: Instant,
    deadline: Option<Instant>,
    reply: oneshot::Sender<Reply>,
}

impl Pending {
    /// Rows this request adds to a batch (dim 0 of its first input; 1 for scalars).
    fn rows(&self) -> usize {
        self.inputs
            .first()
            .and_then(|t| t.shape.first().copied())
            .unwrap_or(1)
    }
}

/// Requests of one model to run in one worker turn (batched where they are compatible).
struct Job {
    model: Arc<ServedModel>,
    items: Vec<Pending>,
}

pub struct Engine {
    models: HashMap<String, Arc<ServedModel>>,
    metrics: Arc<Metrics>,
    config: EngineConfig,
    /// `None` once shut down.
    queues: Mutex<Option<Queues>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Queues {
    pool: SyncSender<Job>,
    batchers: HashMap<String, SyncSender<Pending>>,
}

impl Engine {
    /// Starts the workers and a batcher for every model with `max_batch > 1`.
    pub fn start(
        models: Vec<ServedModel>,
        metrics: Arc<Metrics>,
        config: EngineConfig,
    ) -> std::io::Result<Engine> {
        let models: HashMap<String, Arc<ServedModel>> = models
            .into_iter()
            .map(|m| (m.name.clone(), Arc::new(m)))
            .collect();
        let (pool, jobs) = mpsc::sync_channel::<Job>(config.queue_capacity.max(1));
        let jobs = Arc::new(Mutex::new(jobs));
        let mut threads = Vec::new();
        for i in 0..config.workers.max(1) {
            let jobs = Arc::clone(&jobs);
            let metrics = Arc::clone(&metrics);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("tsrun-worker-{i}"))
                    .spawn(move || worker(&jobs, &metrics))?,
            );
        }
        let mut batchers = HashMap::new();
        for model in models.values().filter(|m| m.max_batch > 1) {
            let (tx, rx) = mpsc::sync_channel::<Pending>(config.queue_capacity.max(1));
            let model = Arc::clone(model);
            let pool = pool.clone();
            let timeout = config.batch_timeout;
            batchers.insert(model.name.clone(), tx);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("tsrun-batch-{}", model.name))
                    .spawn(move || batcher(model, &rx, &pool, timeout))?,
            );
        }
        Ok(Engine {
            models,
            metrics,
            config,
            queues: Mutex::new(Some(Queues { pool, batchers })),
            threads: Mutex::new(threads),
        })
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Models by name, sorted.
    pub fn models(&self) -> Vec<&Arc<ServedModel>> {
        let mut v: Vec<_> = self.models.values().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Whether the engine still takes requests.
    pub fn is_ready(&self) -> bool {
        self.queues.lock().is_ok_and(|q| q.is_some())
    }

    /// The model `name`, at `version` when one is given (only "1" exists).
    pub fn model(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<&Arc<ServedModel>, InferError> {
        let model = self
            .models
            .get(name)
            .ok_or_else(|| InferError::NotFound(format!("unknown model '{name}'")))?;
        match version {
            Some(v) if !v.is_empty() && v != model.version => Err(InferError::NotFound(format!(
                "model '{name}' has no version '{v}' (versions: {})",
                model.version
            ))),
            _ => Ok(model),
        }
    }

    /// Runs `inputs` (already ordered and checked by `ServedModel::order_inputs`) through
    /// the model, batched with other requests when the model allows it.
    pub async fn infer(
        &self,
        model: &Arc<ServedModel>,
        inputs: Vec<WireTensor>,
    ) -> Result<Vec<WireTensor>, InferError> {
        let (reply, answer) = oneshot::channel();
        let now = Instant::now();
        let pending = Pending {
            inputs,
            enqueued: now,
            deadline: self.config.timeout.map(|t| now + t),
            reply,
        };
        self.submit(model, pending)?;
        let wait = async {
            answer.await.unwrap_or_else(|_| {
                Err(InferError::Unavailable(
                    "the worker dropped the request (server shutting down)".into(),
                ))
            })
        };
        match self.config.timeout {
            // the worker enforces the deadline too (RunOptions); this bound also covers a
            // request stuck behind slow calls in the queue
            Some(t) => tokio::time::timeout(t + Duration::from_millis(100), wait)
                .await
                .unwrap_or_else(|_| {
                    Err(InferError::Timeout(format!(
                        "no answer within the {:.3} s request timeout",
                        t.as_secs_f64()
                    )))
                }),
            None => wait.await,
        }
    }

    fn submit(&self, model: &Arc<ServedModel>, pending: Pending) -> Result<(), InferError> {
        let queues = self
            .queues
            .lock()
            .map_err(|_| InferError::Unavailable("engine lock poisoned".into()))?;
        let queues = queues
            .as_ref()
            .ok_or_else(|| InferError::Unavailable("the server is shutting down".into()))?;
        let full = || {
            InferError::Unavailable(format!(
                "model '{}' has {} requests queued; retry later",
                model.name, self.config.queue_capacity
            ))
        };
        let closed = || InferError::Unavailable("the server is shutting down".into());
        match queues.batchers.get(&model.name) {
            Some(batcher) => batcher.try_send(pending).map_err(|e| match e {
                TrySendError::Full(_) => full(),
                TrySendError::Disconnected(_) => closed(),
            }),
            None => queues
                .pool
                .try_send(Job {
                    model: Arc::clone(model),
                    items: vec![pending],
                })
                .map_err(|e| match e {
                    TrySendError::Full(_) => full(),
                    TrySendError::Disconnected(_) => closed(),
                }),
        }
    }

    /// Stops taking requests, lets queued ones finish and joins every thread.
    pub fn shutdown(&self) {
        if let Ok(mut q) = self.queues.lock() {
            // dropping the senders ends the batchers (after their last batch), which drops
            // their pool senders, which ends the workers once the queue is empty
            q.take();
        }
        let threads = self
            .threads
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Gathers requests of one model until `max_batch` rows or `timeout` after the first, then
/// hands the batch to the pool (blocking: a busy pool lets the next batch grow).
fn batcher(
    model: Arc<ServedModel>,
    requests: &Receiver<Pending>,
    pool: &SyncSender<Job>,
    timeout: Duration,
) {
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match requests.recv() {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let close_at = Instant::now() + timeout;
        let mut rows = first.rows();
        let mut items = vec![first];
        while rows < model.max_batch {
            let left = close_at.saturating_duration_since(Instant::now());
            match requests.recv_timeout(left) {
                Ok(p) if rows + p.rows() > model.max_batch => {
                    carried = Some(p);
                    break;
                }
                Ok(p) => {
                    rows += p.rows();
                    items.push(p);
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        let job = Job {
            model: Arc::clone(&model),
            items,
        };
        if pool.send(job).is_err() {
            return;
        }
    }
}

fn worker(jobs: &Mutex<Receiver<Job>>, metrics: &Metrics) {
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => run_job(job, metrics),
            Err(_) => return,
        }
    }
}

/// Answers every request of `job`: requests whose client is gone are skipped, expired ones
/// get a timeout, and the rest run in groups of compatible inputs, one model call per group.
fn run_job(job: Job, metrics: &Metrics) {
    let started = Instant::now();
    let mut live = Vec::with_capacity(job.items.len());
    for p in job.items {
        if p.reply.is_closed() {
            continue;
        }
        if p.deadline.is_some_and(|d| d <= started) {
            let _ = p.reply.send(Err(InferError::Timeout(
                "the request timed out while queued".into(),
            )));
            continue;
        }
        metrics.queued(&job.model.name, started - p.enqueued);
        live.push(p);
    }
    while !live.is_empty() {
        let key = batch_key(&live[0]);
        let (group, rest): (Vec<Pending>, Vec<Pending>) = live
            .into_iter()
            .partition(|p| key.is_some() && batch_key(p) == key);
        live = rest;
        if group.is_empty() {
            // the first request cannot be batched at all
            let p = live.remove(0);
            run_single(&job.model, p, metrics);
        } else if group.len() == 1 {
            for p in group {
                run_single(&job.model, p, metrics);
            }
        } else {
            run_batch(&job.model, group, metrics);
        }
    }
}

/// What requests must share to be concatenated along dim 0: per input, its datatype and the
/// shape after dim 0. `None` when an input has no dim 0.
fn batch_key(p: &Pending) -> Option<Vec<(super::tensor::DataType, Vec<usize>)>> {
    p.inputs
        .iter()
        .map(|t| {
            t.shape
                .split_first()
                .map(|(_, rest)| (t.datatype, rest.to_vec()))
        })
        .collect()
}

fn run_single(model: &ServedModel, p: Pending, metrics: &Metrics) {
    let rows = p.rows();
    let result = call_model(model, &p.inputs, p.deadline, rows, metrics);
    let _ = p.reply.send(result);
}

/// Concatenates the group's inputs along dim 0, runs the model once and splits every output
/// back by rows. If an output's dim 0 is not the batch's (the model does not map rows to
/// rows), each request runs on its own instead.
fn run_batch(model: &ServedModel, group: Vec<Pending>, metrics: &Metrics) {
    let rows: Vec<usize> = group.iter().map(Pending::rows).collect();
    let total: usize = rows.iter().sum();
    let deadline = group.iter().filter_map(|p| p.deadline).min();
    let inputs: Vec<WireTensor> = (0..group[0].inputs.len())
        .map(|i| {
            let first = &group[0].inputs[i];
            let mut shape = first.shape.clone();
            shape[0] = total;
            let mut data = Vec::with_capacity(group.iter().map(|p| p.inputs[i].data.len()).sum());
            for p in &group {
                data.extend_from_slice(&p.inputs[i].data);
            }
            WireTensor {
                name: first.name.clone(),
                datatype: first.datatype,
                shape,
                data,
            }
        })
        .collect();
    match call_model(model, &inputs, deadline, total, metrics) {
        Ok(outputs) => match split_rows(&outputs, &rows) {
            Some(parts) => {
                for (p, part) in group.into_iter().zip(parts) {
                    let _ = p.reply.send(Ok(part));
                }
            }
            None => {
                tracing::debug!(model = %model.name, "outputs not batch-shaped; running requests one by one");
                for p in group {
                    run_single(model, p, metrics);
                }
            }
        },
        Err(e) => {
            // one bad request must not fail its batch-mates: retry them one by one
            if matches!(e, InferError::Model(_)) {
                for p in group {
                    run_single(model, p, metrics);
                }
            } else {
                let message = e.to_string();
                for p in group {
                    let _ = p.reply.send(Err(clone_error(&e, &message)));
                }
            }
        }
    }
}

fn clone_error(e: &InferError, message: &str) -> InferError {
    let m = message.to_string();
    match e {
        InferError::BadRequest(_) => InferError::BadRequest(m),
        InferError::NotFound(_) => InferError::NotFound(m),
        InferError::Model(_) => InferError::Model(m),
        InferError::Unavailable(_) => InferError::Unavailable(m),
        InferError::Timeout(_) => InferError::Timeout(m),
    }
}

/// Every output cut into `rows`-sized pieces along dim 0, per request; `None` unless every
/// output has dim 0 equal to the sum of `rows`.
fn split_rows(outputs: &[WireTensor], rows: &[usize]) -> Option<Vec<Vec<WireTensor>>> {
    let total: usize = rows.iter().sum();
    let mut parts: Vec<Vec<WireTensor>> = rows.iter().map(|_| Vec::new()).collect();
    for out in outputs {
        if out.shape.first() != Some(&total) || total == 0 {
            return None;
        }
        let row_bytes = out.data.len() / total;
        let mut offset = 0;
        for (part, &n) in parts.iter_mut().zip(rows) {
            let mut shape = out.shape.clone();
            shape[0] = n;
            let len = n * row_bytes;
            part.push(WireTensor {
                name: out.name.clone(),
                datatype: out.datatype,
                shape,
                data: out.data.get(offset..offset + len)?.to_vec(),
            });
            offset += len;
        }
    }
    Some(parts)
}

/// One model call with the request deadline as its run timeout; a panic inside the
/// interpreter or a kernel becomes a 500 instead of taking the worker down.
fn call_model(
    model: &ServedModel,
    inputs: &[WireTensor],
    deadline: Option<Instant>,
    rows: usize,
    metrics: &Metrics,
) -> Reply {
    let arguments = model.arguments(inputs)?;
    let mut options = RunOptions::default();
    if let Some(d) = deadline {
        let left = d.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(InferError::Timeout(
                "the request timed out while queued".into(),
            ));
        }
        options.timeout = Some(left);
    }
    let started = Instant::now();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        model.module.call_opts(arguments, &options)
    }));
    metrics.model_call(&model.name, rows, started.elapsed());
    match result {
        Ok(Ok(value)) => outputs_of(&value, &model.output_names()),
        Ok(Err(e)) if e.limit().is_some_and(|l| l.which == "timeout") => {
            Err(InferError::Timeout(format!("model '{}': {e}", model.name)))
        }
        Ok(Err(e)) => Err(InferError::Model(format!(
            "model '{}' failed: {e}",
            model.name
        ))),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(model = %model.name, panic = %what, "model call panicked");
            Err(InferError::Model(format!(
                "model '{}' panicked (a tsrun bug): {what}",
                model.name
            )))
        }
    }
}
