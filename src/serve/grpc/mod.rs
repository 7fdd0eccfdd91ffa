//! The KServe v2 gRPC API (`inference.GRPCInferenceService`, the package and service Triton's
//! clients call) on tonic. The messages and service traits are generated from the vendored
//! `src/serve/proto/grpc_predict_v2.proto` into `inference.rs` by `tools/protogen` (protox, so
//! no `protoc` is needed, and checked in, so building tsrun runs no code generator).
//!
//! Tensors travel as `raw_input_contents` / `raw_output_contents` (row-major little-endian
//! bytes, what tritonclient sends and reads) or, for inputs, as typed `contents`.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod inference;

use super::engine::Engine;
use super::error::InferError;
use super::http::MAX_INPUTS;
use super::model::ServedModel;
use super::tensor::{checked_shape, DataType, WireTensor};
use inference::grpc_inference_service_server::GrpcInferenceService;
pub use inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use inference::*;
use std::sync::Arc;
use std::time::Instant;
use tonic::{Request, Response, Status};

pub struct InferenceService {
    pub engine: Arc<Engine>,
}

fn status(e: &InferError) -> Status {
    let message = e.to_string();
    match e {
        InferError::BadRequest(_) => Status::invalid_argument(message),
        InferError::NotFound(_) => Status::not_found(message),
        InferError::Model(_) => Status::internal(message),
        InferError::Unavailable(_) => Status::unavailable(message),
        InferError::Timeout(_) => Status::deadline_exceeded(message),
    }
}

fn version_arg(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

fn tensor_metadata(
    specs: &[super::model::TensorSpec],
) -> Vec<model_metadata_response::TensorMetadata> {
    specs
        .iter()
        .map(|s| model_metadata_response::TensorMetadata {
            name: s.name.clone(),
            datatype: s.reported_datatype().into(),
            shape: s.reported_shape(),
        })
        .collect()
}

#[tonic::async_trait]
impl GrpcInferenceService for InferenceService {
    async fn server_live(
        &self,
        _: Request<ServerLiveRequest>,
    ) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<ServerReadyRequest>,
    ) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse {
            ready: self.engine.is_ready(),
        }))
    }

    async fn model_ready(
        &self,
        request: Request<ModelReadyRequest>,
    ) -> Result<Response<ModelReadyResponse>, Status> {
        let r = request.into_inner();
        self.engine
            .model(&r.name, version_arg(&r.version))
            .map_err(|e| status(&e))?;
        Ok(Response::new(ModelReadyResponse {
            ready: self.engine.is_ready(),
        }))
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        Ok(Response::new(ServerMetadataResponse {
            name: "tsrun".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: vec![
                "binary_tensor_data".into(),
                "model_repository_metadata".into(),
            ],
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let r = request.into_inner();
        let m = self
            .engine
            .model(&r.name, version_arg(&r.version))
            .map_err(|e| status(&e))?;
        Ok(Response::new(ModelMetadataResponse {
            name: m.name.clone(),
            versions: vec![m.version.clone()],
            platform: "pytorch_torchscript".into(),
            inputs: tensor_metadata(&m.inputs),
            outputs: tensor_metadata(&m.outputs),
        }))
    }

    async fn model_infer(
        &self,
        request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        let started = Instant::now();
        let r = request.into_inner();
        let result = self.infer(r).await;
        match result {
            Ok((name, response)) => {
                self.engine
                    .metrics()
                    .request(&name, started.elapsed(), None);
                Ok(Response::new(response))
            }
            Err((name, e)) => {
                self.engine
                    .metrics()
                    .request(&name, started.elapsed(), Some(e.kind()));
                if matches!(e, InferError::Model(_)) {
                    tracing::warn!(model = %name, error = %e, "model error");
                }
                Err(status(&e))
            }
        }
    }
}

impl InferenceService {
    /// Runs one ModelInfer request; the error carries the model name for the metrics
    /// (empty for unknown models, so clients cannot add labels).
    async fn infer(
        &self,
        r: ModelInferRequest,
    ) -> Result<(String, ModelInferResponse), (String, InferError)> {
        let model = self
            .engine
            .model(&r.model_name, version_arg(&r.model_version))
            .map_err(|e| (String::new(), e))?;
        let name = model.name.clone();
        let fail = |e| (name.clone(), e);
        let inputs = request_tensors(&r).map_err(fail)?;
        let inputs = model.order_inputs(inputs).map_err(fail)?;
        let outputs = self.engine.infer(model, inputs).await.map_err(fail)?;
        let outputs = select_outputs(model, outputs, &r.outputs).map_err(fail)?;
        let mut response = ModelInferResponse {
            model_name: model.name.clone(),
            model_version: model.version.clone(),
            id: r.id,
            ..Default::default()
        };
        for t in outputs {
            response
                .outputs
                .push(model_infer_response::InferOutputTensor {
                    name: t.name,
                    datatype: t.datatype.name().into(),
                    shape: t.shape.iter().map(|&d| d as i64).collect(),
                    ..Default::default()
                });
            response.raw_output_contents.push(t.data);
        }
        Ok((name, response))
    }
}

/// The requested outputs in request order (all of them when none are named).
fn select_outputs(
    model: &ServedModel,
    outputs: Vec<WireTensor>,
    requested: &[model_infer_request::InferRequestedOutputTensor],
) -> Result<Vec<WireTensor>, InferError> {
    if requested.is_empty() {
        return Ok(outputs);
    }
    let mut pool: Vec<Option<WireTensor>> = outputs.into_iter().map(Some).collect();
    requested
        .iter()
        .map(|want| {
            pool.iter_mut()
                .find(|t| t.as_ref().is_some_and(|t| t.name == want.name))
                .and_then(Option::take)
                .ok_or_else(|| {
                    InferError::BadRequest(format!(
                        "model '{}' has no output '{}' (or it was requested twice)",
                        model.name, want.name
                    ))
                })
        })
        .collect()
}

/// The request's input tensors, from `raw_input_contents` (one entry per input, in order) or
/// from each input's typed `contents`.
fn request_tensors(r: &ModelInferRequest) -> Result<Vec<WireTensor>, InferError> {
    if r.inputs.len() > MAX_INPUTS {
        return Err(InferError::BadRequest(format!(
            "{} inputs; at most {MAX_INPUTS}",
            r.inputs.len()
        )));
    }
    if !r.raw_input_contents.is_empty() && r.raw_input_contents.len() != r.inputs.len() {
        return Err(InferError::BadRequest(format!(
            "{} raw_input_contents for {} inputs",
            r.raw_input_contents.len(),
            r.inputs.len()
        )));
    }
    r.inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let datatype = DataType::parse(&input.datatype).map_err(|e| e.context(&input.name))?;
            let shape = checked_shape(&input.shape).map_err(|e| e.context(&input.name))?;
            let data = match r.raw_input_contents.get(i) {
                Some(raw) => raw.clone(),
                None => typed_contents(datatype, input.contents.as_ref())
                    .map_err(|e| e.context(&input.name))?,
            };
            WireTensor::from_raw(input.name.clone(), datatype, shape, data)
        })
        .collect()
}

/// Little-endian bytes of typed `contents`; each value must fit the datatype.
fn typed_contents(
    datatype: DataType,
    contents: Option<&InferTensorContents>,
) -> Result<Vec<u8>, InferError> {
    let empty = InferTensorContents::default();
    let c = contents.unwrap_or(&empty);
    let range = |v: &dyn std::fmt::Display| {
        InferError::BadRequest(format!("value {v} does not fit {}", datatype.name()))
    };
    macro_rules! narrow {
        ($src:expr, $t:ty) => {{
            let mut out = Vec::with_capacity($src.len() * std::mem::size_of::<$t>());
            for &v in &$src {
                let x = <$t>::try_from(v).map_err(|_| range(&v))?;
                out.extend_from_slice(&x.to_le_bytes());
            }
            out
        }};
    }
    Ok(match datatype {
        DataType::Bool => c.bool_contents.iter().map(|&b| u8::from(b)).collect(),
        DataType::Int8 => narrow!(c.int_contents, i8),
        DataType::Int16 => narrow!(c.int_contents, i16),
        DataType::Int32 => narrow!(c.int_contents, i32),
        DataType::Int64 => narrow!(c.int64_contents, i64),
        DataType::UInt8 => narrow!(c.uint_contents, u8),
        DataType::UInt16 => narrow!(c.uint_contents, u16),
        DataType::UInt32 => narrow!(c.uint_contents, u32),
        DataType::UInt64 => narrow!(c.uint64_contents, u64),
        DataType::Fp32 => c
            .fp32_contents
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DataType::Fp64 => c
            .fp64_contents
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DataType::Fp16 | DataType::Bf16 => {
            return Err(InferError::BadRequest(format!(
                "{} tensors must be sent as raw_input_contents",
                datatype.name()
            )))
        }
    })
}
