//! The KServe v2 REST API on axum: health, metadata, readiness, inference with JSON tensors
//! and Triton's binary tensor data extension, and `/metrics`.
//!
//! Binary extension: when the request has an `Inference-Header-Content-Length: N` header, the
//! first N body bytes are the JSON header and the rest are the raw tensors, in input order, of
//! the inputs whose `parameters.binary_data_size` gives their length. Outputs are returned the
//! same way when `outputs[i].parameters.binary_data` is true, or for every output when the
//! request's `parameters.binary_data_output` is true (what tritonclient sends when it names no
//! outputs).

use super::engine::Engine;
use super::error::InferError;
use super::model::ServedModel;
use super::tensor::{checked_shape, DataType, WireTensor};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Instant;

const HEADER_LENGTH: &str = "inference-header-content-length";

/// Inputs a request may carry (models take a handful; this bounds per-request bookkeeping).
pub const MAX_INPUTS: usize = 256;

pub fn router(engine: Arc<Engine>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2", get(server_metadata))
        .route("/v2/models/{name}", get(model_metadata))
        .route(
            "/v2/models/{name}/versions/{version}",
            get(model_metadata_v),
        )
        .route("/v2/models/{name}/ready", get(model_ready))
        .route(
            "/v2/models/{name}/versions/{version}/ready",
            get(model_ready_v),
        )
        .route("/v2/models/{name}/infer", post(infer))
        .route("/v2/models/{name}/versions/{version}/infer", post(infer_v))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(engine)
}

/// A JSON error body `{"error": message}` with the error's status.
fn error_response(e: &InferError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, json_body(&json!({"error": e.to_string()}))).into_response()
}

fn json_body(v: &Value) -> ([(header::HeaderName, HeaderValue); 1], String) {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        v.to_string(),
    )
}

async fn live() -> StatusCode {
    StatusCode::OK
}

async fn ready(State(engine): State<Arc<Engine>>) -> StatusCode {
    if engine.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

pub fn server_metadata_json() -> Value {
    json!({
        "name": "tsrun",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": ["binary_tensor_data", "model_repository_metadata"],
    })
}

async fn server_metadata() -> Response {
    json_body(&server_metadata_json()).into_response()
}

pub fn model_metadata_json(m: &ServedModel) -> Value {
    let tensors = |specs: &[super::model::TensorSpec]| -> Vec<Value> {
        specs
            .iter()
            .map(|s| {
                json!({"name": s.name, "datatype": s.reported_datatype(), "shape": s.reported_shape()})
            })
            .collect()
    };
    json!({
        "name": m.name,
        "versions": [m.version],
        "platform": "pytorch_torchscript",
        "inputs": tensors(&m.inputs),
        "outputs": tensors(&m.outputs),
    })
}

async fn model_metadata(State(engine): State<Arc<Engine>>, Path(name): Path<String>) -> Response {
    metadata_for(&engine, &name, None)
}

async fn model_metadata_v(
    State(engine): State<Arc<Engine>>,
    Path((name, version)): Path<(String, String)>,
) -> Response {
    metadata_for(&engine, &name, Some(&version))
}

fn metadata_for(engine: &Engine, name: &str, version: Option<&str>) -> Response {
    match engine.model(name, version) {
        Ok(m) => json_body(&model_metadata_json(m)).into_response(),
        Err(e) => error_response(&e),
    }
}

async fn model_ready(State(engine): State<Arc<Engine>>, Path(name): Path<String>) -> Response {
    ready_for(&engine, &name, None)
}

async fn model_ready_v(
    State(engine): State<Arc<Engine>>,
    Path((name, version)): Path<(String, String)>,
) -> Response {
    ready_for(&engine, &name, Some(&version))
}

fn ready_for(engine: &Engine, name: &str, version: Option<&str>) -> Response {
    match engine.model(name, version) {
        Ok(_) if engine.is_ready() => StatusCode::OK.into_response(),
        Ok(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Err(e) => error_response(&e),
    }
}

async fn metrics(State(engine): State<Arc<Engine>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        engine.metrics().render(),
    )
        .into_response()
}

#[derive(Deserialize)]
struct InferRequestJson {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Map<String, Value>,
    inputs: Vec<InputJson>,
    #[serde(default)]
    outputs: Vec<OutputJson>,
}

#[derive(Deserialize)]
struct InputJson {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Map<String, Value>,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
struct OutputJson {
    name: String,
    #[serde(default)]
    parameters: Map<String, Value>,
}

async fn infer(
    State(engine): State<Arc<Engine>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    infer_for(&engine, &name, None, &headers, &body).await
}

async fn infer_v(
    State(engine): State<Arc<Engine>>,
    Path((name, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    infer_for(&engine, &name, Some(&version), &headers, &body).await
}

async fn infer_for(
    engine: &Engine,
    name: &str,
    version: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let started = Instant::now();
    let result = infer_inner(engine, name, version, headers, body).await;
    let model_label = engine.model(name, None).map_or("", |m| m.name.as_str());
    engine.metrics().request(
        model_label,
        started.elapsed(),
        result.as_ref().err().map(InferError::kind),
    );
    match result {
        Ok(response) => response,
        Err(e) => {
            if matches!(e, InferError::Model(_)) {
                tracing::warn!(model = %name, error = %e, "model error");
            } else {
                tracing::debug!(model = %name, error = %e, "request failed");
            }
            error_response(&e)
        }
    }
}

async fn infer_inner(
    engine: &Engine,
    name: &str,
    version: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, InferError> {
    let model = engine.model(name, version)?;
    if let Some(encoding) = headers.get(header::CONTENT_ENCODING) {
        if encoding.as_bytes() != b"identity" {
            return Err(InferError::BadRequest(format!(
                "Content-Encoding {encoding:?} is not supported; send the body uncompressed"
            )));
        }
    }
    let (json_part, mut binary) = match headers.get(HEADER_LENGTH) {
        Some(v) => {
            let n: usize = v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| {
                    InferError::BadRequest(format!("{HEADER_LENGTH}: {v:?} is not a length"))
                })?;
            if n > body.len() {
                return Err(InferError::BadRequest(format!(
                    "{HEADER_LENGTH} is {n}, the body has {} bytes",
                    body.len()
                )));
            }
            body.split_at(n)
        }
        None => (body, &[][..]),
    };
    let request: InferRequestJson = serde_json::from_slice(json_part)
        .map_err(|e| InferError::BadRequest(format!("invalid inference request JSON: {e}")))?;
    if request.inputs.len() > MAX_INPUTS {
        return Err(InferError::BadRequest(format!(
            "{} inputs; at most {MAX_INPUTS}",
            request.inputs.len()
        )));
    }
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for input in request.inputs {
        let datatype = DataType::parse(&input.datatype).map_err(|e| e.context(&input.name))?;
        let shape = checked_shape(&input.shape).map_err(|e| e.context(&input.name))?;
        let tensor = match input.parameters.get("binary_data_size") {
            Some(size) => {
                let size = size
                    .as_u64()
                    .and_then(|s| usize::try_from(s).ok())
                    .ok_or_else(|| {
                        InferError::BadRequest(format!(
                            "input '{}': binary_data_size must be a byte count",
                            input.name
                        ))
                    })?;
                if size > binary.len() {
                    return Err(InferError::BadRequest(format!(
                        "input '{}': binary_data_size {size} exceeds the {} binary bytes left",
                        input.name,
                        binary.len()
                    )));
                }
                let (data, rest) = binary.split_at(size);
                binary = rest;
                WireTensor::from_raw(input.name, datatype, shape, data.to_vec())?
            }
            None => {
                let data = input.data.as_ref().ok_or_else(|| {
                    InferError::BadRequest(format!(
                        "input '{}' has neither data nor binary_data_size",
                        input.name
                    ))
                })?;
                WireTensor::from_json(input.name, datatype, shape, data)?
            }
        };
        inputs.push(tensor);
    }
    if !binary.is_empty() {
        return Err(InferError::BadRequest(format!(
            "{} binary bytes after the last binary input",
            binary.len()
        )));
    }
    let inputs = model.order_inputs(inputs)?;
    let outputs = engine.infer(model, inputs).await?;
    let all_binary = request
        .parameters
        .get("binary_data_output")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // which outputs to return, each with whether it goes in binary
    let selected: Vec<(WireTensor, bool)> = if request.outputs.is_empty() {
        outputs.into_iter().map(|t| (t, all_binary)).collect()
    } else {
        let mut by_name: Vec<Option<WireTensor>> = outputs.into_iter().map(Some).collect();
        let mut selected = Vec::with_capacity(request.outputs.len());
        for want in &request.outputs {
            let slot = by_name
                .iter_mut()
                .find(|t| t.as_ref().is_some_and(|t| t.name == want.name))
                .and_then(Option::take)
                .ok_or_else(|| {
                    InferError::BadRequest(format!(
                        "model '{}' has no output '{}' (or it was requested twice)",
                        model.name, want.name
                    ))
                })?;
            let binary = want
                .parameters
                .get("binary_data")
                .and_then(Value::as_bool)
                .unwrap_or(all_binary);
            selected.push((slot, binary));
        }
        selected
    };
    Ok(infer_response(model, request.id, selected))
}

/// The response: JSON only, or a JSON header followed by the binary outputs.
fn infer_response(
    model: &ServedModel,
    id: Option<String>,
    outputs: Vec<(WireTensor, bool)>,
) -> Response {
    let mut binary = Vec::new();
    let mut any_binary = false;
    let json_outputs: Vec<Value> = outputs
        .iter()
        .map(|(t, as_binary)| {
            let mut o = json!({"name": t.name, "datatype": t.datatype.name(), "shape": t.shape});
            if *as_binary {
                any_binary = true;
                o["parameters"] = json!({"binary_data_size": t.data.len()});
                binary.extend_from_slice(&t.data);
            } else {
                o["data"] = Value::Array(t.json_data());
            }
            o
        })
        .collect();
    let mut header_json = json!({
        "model_name": model.name,
        "model_version": model.version,
        "outputs": json_outputs,
    });
    if let Some(id) = id {
        header_json["id"] = Value::String(id);
    }
    let header_text = header_json.to_string();
    if !any_binary {
        return json_body(&header_json).into_response();
    }
    let header_len = header_text.len();
    let mut body = header_text.into_bytes();
    body.extend_from_slice(&binary);
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (
                header::HeaderName::from_static(HEADER_LENGTH),
                HeaderValue::from(header_len),
            ),
        ],
        body,
    )
        .into_response()
}
