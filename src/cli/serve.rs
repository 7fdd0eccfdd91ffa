//! `tsrun serve MODEL_DIR_OR_FILES... [--http ADDR] [--grpc ADDR] [--threads N]
//! [--max-batch N --batch-timeout-ms T] [--max-concurrency N] [--timeout SECS]`: serve archives
//! over the Open Inference Protocol (KServe v2); the server itself lives in `crate::serve`.

use crate::serve::{serve, ServeConfig};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Archives to serve, or directories whose `.pt` / `.pth` files are served; each model is
    /// named after its file stem (version 1). A `model-config.json` beside an archive names
    /// its inputs and outputs (see src/serve/model.rs).
    #[arg(required = true)]
    pub models: Vec<PathBuf>,
    /// REST (KServe v2 HTTP) listen address.
    #[arg(long, default_value = "0.0.0.0:8000")]
    pub http: String,
    /// gRPC (inference.GRPCInferenceService) listen address.
    #[arg(long, default_value = "0.0.0.0:8001")]
    pub grpc: String,
    /// Serve no REST API.
    #[arg(long)]
    pub no_http: bool,
    /// Serve no gRPC API.
    #[arg(long)]
    pub no_grpc: bool,
    /// Threads of the kernel pool each model call uses (as `torch.set_num_threads`).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Model calls running at once (worker threads; default: the number of CPUs).
    #[arg(long = "max-concurrency")]
    pub max_concurrency: Option<usize>,
    /// Dynamic batching: rows (dim 0) gathered into one model call; 1 turns it off.
    #[arg(long = "max-batch", default_value_t = 1)]
    pub max_batch: usize,
    /// How long a batch waits to fill after its first request, in milliseconds.
    #[arg(long = "batch-timeout-ms", default_value_t = 2.0)]
    pub batch_timeout_ms: f64,
    /// Requests that may wait per queue before the server answers 503.
    #[arg(long = "max-queue", default_value_t = 1024)]
    pub max_queue: usize,
    /// Per-request deadline in seconds (queueing included); the model call is stopped at it.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Largest request body or gRPC message, in bytes.
    #[arg(long = "max-body-bytes", default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
}

fn bad(message: String) -> crate::Error {
    crate::Error::Module(message)
}

impl ServeArgs {
    pub fn config(&self) -> crate::Result<ServeConfig> {
        let seconds = |flag: &str, v: f64| {
            Duration::try_from_secs_f64(v)
                .map_err(|_| bad(format!("{flag} {v}: expected a non-negative number")))
        };
        let defaults = ServeConfig::default();
        Ok(ServeConfig {
            models: self.models.clone(),
            http_addr: (!self.no_http).then(|| self.http.clone()),
            grpc_addr: (!self.no_grpc).then(|| self.grpc.clone()),
            workers: self.max_concurrency.unwrap_or(defaults.workers).max(1),
            max_batch: self.max_batch.max(1),
            batch_timeout: seconds("--batch-timeout-ms", self.batch_timeout_ms / 1000.0)?,
            queue_capacity: self.max_queue.max(1),
            timeout: self.timeout.map(|t| seconds("--timeout", t)).transpose()?,
            max_body_bytes: self.max_body_bytes,
            io_threads: defaults.io_threads,
            shutdown_grace: defaults.shutdown_grace,
        })
    }
}

pub fn run(args: &ServeArgs) -> crate::Result<()> {
    if let Some(n) = args.threads {
        crate::runtime::set_num_threads(n)?;
    }
    serve(&args.config()?).map_err(|e| bad(e.to_string()))
}
