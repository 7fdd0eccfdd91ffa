//! `tsrun serve`: an Open Inference Protocol (KServe v2) model server over HTTP/REST (axum)
//! and gRPC (tonic), so KServe, Triton's clients and ordinary load balancers can drive tsrun.
//!
//! Layering: above `runtime` (it calls `Module`), beside `cli` (which only parses flags into a
//! [`ServeConfig`]). The parts: `model` (archives, `model-config.json`, input checks),
//! `tensor` (protocol tensors as raw bytes), `engine` (worker threads, dynamic batching,
//! deadlines), `http` and `grpc` (the two protocols over one engine), `metrics` (Prometheus).
//!
//! Requests never run model code on the async executor: handlers parse and validate, hand a
//! job to the engine's bounded queue and await its reply.

pub mod engine;
pub mod error;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod model;
pub mod tensor;

pub use error::{InferError, ServeError};

use engine::{Engine, EngineConfig};
use metrics::Metrics;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Everything `tsrun serve` needs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Archives or directories of archives.
    pub models: Vec<PathBuf>,
    /// REST listen address (`None`: no HTTP server).
    pub http_addr: Option<String>,
    /// gRPC listen address (`None`: no gRPC server).
    pub grpc_addr: Option<String>,
    /// Model calls running at once.
    pub workers: usize,
    /// Rows per dynamic batch (1: no batching), unless a model's config says otherwise.
    pub max_batch: usize,
    pub batch_timeout: Duration,
    /// Requests waiting per queue before the server answers 503.
    pub queue_capacity: usize,
    pub timeout: Option<Duration>,
    /// Largest request body (HTTP) or message (gRPC).
    pub max_body_bytes: usize,
    /// Threads of the async runtime that parses and answers requests.
    pub io_threads: usize,
    /// How long shutdown waits for open connections to finish before closing them.
    pub shutdown_grace: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            models: Vec::new(),
            http_addr: Some("0.0.0.0:8000".into()),
            grpc_addr: Some("0.0.0.0:8001".into()),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            max_batch: 1,
            batch_timeout: Duration::from_millis(2),
            queue_capacity: 1024,
            timeout: None,
            max_body_bytes: 64 << 20,
            io_threads: 2,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// A running server: its bound addresses and the means to stop it.
pub struct ServerHandle {
    pub http_addr: Option<SocketAddr>,
    pub grpc_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// Stops accepting connections, lets in-flight requests finish, then stops the workers.
    pub fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Blocks until the server stopped (after SIGTERM or ctrl-c when started by [`serve`]).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bind(addr: &str) -> Result<std::net::TcpListener, ServeError> {
    let bind_err = |source| ServeError::Bind {
        addr: addr.to_string(),
        source,
    };
    let listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
    listener.set_nonblocking(true).map_err(bind_err)?;
    Ok(listener)
}

/// Loads the models, binds the listeners and starts serving on a background runtime.
/// Addresses with port 0 get a free port (see [`ServerHandle::http_addr`]).
pub fn start(config: &ServeConfig) -> Result<ServerHandle, ServeError> {
    start_inner(config, false)
}

/// `tsrun serve`: [`start`], then serve until SIGTERM or ctrl-c, then drain and stop.
pub fn serve(config: &ServeConfig) -> Result<(), ServeError> {
    init_logging();
    start_inner(config, true)?.wait();
    tracing::info!("server stopped");
    Ok(())
}

/// Logs go to stderr as `tracing` events; `RUST_LOG`-style levels from `TSRUN_LOG`
/// (`error`, `warn`, `info` (default), `debug`, `trace`).
fn init_logging() {
    let level = std::env::var("TSRUN_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .try_init();
}

fn start_inner(config: &ServeConfig, handle_signals: bool) -> Result<ServerHandle, ServeError> {
    if config.http_addr.is_none() && config.grpc_addr.is_none() {
        return Err(ServeError::Invalid(
            "neither --http nor --grpc: nothing to serve on".into(),
        ));
    }
    let mut models = Vec::new();
    for path in model::discover(&config.models)? {
        let started = std::time::Instant::now();
        let m = model::load_model(&path, config.max_batch)?;
        if models.iter().any(|o: &model::ServedModel| o.name == m.name) {
            return Err(ServeError::DuplicateModel(m.name));
        }
        tracing::info!(model = %m.name, path = %path.display(), max_batch = m.max_batch,
            load_ms = started.elapsed().as_millis() as u64, "model loaded");
        models.push(m);
    }
    let metrics = Arc::new(Metrics::new(models.iter().map(|m| m.name.as_str())));
    let engine = Arc::new(
        Engine::start(
            models,
            metrics,
            EngineConfig {
                workers: config.workers,
                queue_capacity: config.queue_capacity,
                batch_timeout: config.batch_timeout,
                timeout: config.timeout,
            },
        )
        .map_err(ServeError::Runtime)?,
    );
    let http_listener = config.http_addr.as_deref().map(bind).transpose()?;
    let grpc_listener = config.grpc_addr.as_deref().map(bind).transpose()?;
    let local = |l: &Option<std::net::TcpListener>| {
        l.as_ref()
            .map(|l| l.local_addr().map_err(ServeError::Runtime))
            .transpose()
    };
    let http_addr = local(&http_listener)?;
    let grpc_addr = local(&grpc_listener)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.io_threads.max(1))
        .thread_name("tsrun-io")
        .enable_io()
        .enable_time()
        .build()
        .map_err(ServeError::Runtime)?;
    let (shutdown, stop) = watch::channel(false);
    let max_body = config.max_body_bytes;
    let grace = config.shutdown_grace;
    let signals = handle_signals.then(|| shutdown.clone());
    let thread = std::thread::Builder::new()
        .name("tsrun-serve".into())
        .spawn(move || {
            runtime.block_on(run_servers(
                Arc::clone(&engine),
                http_listener,
                grpc_listener,
                max_body,
                stop,
                signals,
                grace,
            ));
            // every connection has drained: finish queued calls and join the workers
            engine.shutdown();
        })
        .map_err(ServeError::Runtime)?;
    if let Some(a) = http_addr {
        tracing::info!(addr = %a, "HTTP (KServe v2 REST) listening");
    }
    if let Some(a) = grpc_addr {
        tracing::info!(addr = %a, "gRPC (inference.GRPCInferenceService) listening");
    }
    Ok(ServerHandle {
        http_addr,
        grpc_addr,
        shutdown,
        thread: Some(thread),
    })
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Waits for SIGTERM or ctrl-c and then asks every server to stop.
async fn forward_signals(shutdown: watch::Sender<bool>) {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested: draining in-flight requests");
    let _ = shutdown.send(true);
}

async fn run_servers(
    engine: Arc<Engine>,
    http: Option<std::net::TcpListener>,
    grpc: Option<std::net::TcpListener>,
    max_body: usize,
    stop: watch::Receiver<bool>,
    signals: Option<watch::Sender<bool>>,
    grace: Duration,
) {
    if let Some(s) = signals {
        tokio::spawn(forward_signals(s));
    }
    let http_task = http.map(|l| {
        let app = http::router(Arc::clone(&engine), max_body);
        let stop = stop.clone();
        tokio::spawn(async move {
            let listener = match tokio::net::TcpListener::from_std(l) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(error = %e, "HTTP listener");
                    return;
                }
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(stopped(stop))
                .await
            {
                tracing::error!(error = %e, "HTTP server");
            }
        })
    });
    let grpc_task = grpc.map(|l| {
        let service = grpc::GrpcInferenceServiceServer::new(grpc::InferenceService {
            engine: Arc::clone(&engine),
        })
        .max_decoding_message_size(max_body)
        .max_encoding_message_size(max_body);
        let stop = stop.clone();
        tokio::spawn(async move {
            let listener = match tokio::net::TcpListener::from_std(l) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(error = %e, "gRPC listener");
                    return;
                }
            };
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, stopped(stop))
                .await
            {
                tracing::error!(error = %e, "gRPC server");
            }
        })
    });
    let drained = async {
        if let Some(t) = http_task {
            let _ = t.await;
        }
        if let Some(t) = grpc_task {
            let _ = t.await;
        }
    };
    // an idle keep-alive connection (HTTP/2 especially) can stay open indefinitely: after the
    // grace period the runtime is dropped, which closes whatever is left
    let deadline = async {
        stopped(stop).await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        _ = drained => {},
        _ = deadline => tracing::warn!("shutdown grace period over: closing open connections"),
    }
}
