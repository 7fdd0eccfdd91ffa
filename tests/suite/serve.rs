//! `tsrun serve` driven over real sockets on 127.0.0.1: a tiny HTTP/1.1 client for the REST API
//! and the generated tonic client for gRPC. Expected values are PyTorch's goldens of the `mlp`
//! fixture (fixtures/golden/mlp: call 0 is a 1x8 input, call 1 a 3x8 input).

use crate::common::{fixtures_dir, Arrays};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;
use tsrun::internals::serve::{start, ServeConfig, ServerHandle};
use tsrun::DType;

/// A tensor as flat f32 elements and its shape.
type Flat = (Vec<f32>, Vec<usize>);

/// (input, output) of golden call `i` of the mlp fixture.
fn golden(i: usize) -> (Flat, Flat) {
    let mut a = Arrays::open(&fixtures_dir().join("golden/mlp/runs.npz"));
    let x = a.tensor(&format!("{i}.in.0"), DType::Float32);
    let y = a.tensor(&format!("{i}.out"), DType::Float32);
    (
        (x.to_vec::<f32>().unwrap(), x.shape().to_vec()),
        (y.to_vec::<f32>().unwrap(), y.shape().to_vec()),
    )
}

fn close(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= 1e-5 + 1e-4 * w.abs())
}

/// A directory holding `mlp.pt` (unconfigured) and, in a subdirectory, `mlp_cfg.pt` with a
/// `model-config.json` naming its tensors. The server reads both when it starts, so the caller
/// may drop the directory once `start` returns.
fn model_dir(tag: &str) -> (crate::common::ScratchDir, PathBuf, PathBuf) {
    let dir = crate::common::ScratchDir::new(&format!("serve-{tag}"));
    let cfg_dir = dir.join("configured");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let src = fixtures_dir().join("models/mlp.pt");
    std::fs::copy(&src, dir.join("mlp.pt")).unwrap();
    std::fs::copy(&src, cfg_dir.join("mlp_cfg.pt")).unwrap();
    std::fs::write(
        cfg_dir.join("model-config.json"),
        r#"{"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}]}"#,
    )
    .unwrap();
    let (plain, configured) = (dir.join("mlp.pt"), cfg_dir.join("mlp_cfg.pt"));
    (dir, plain, configured)
}

fn server(tag: &str, max_batch: usize) -> ServerHandle {
    let (_dir, plain, configured) = model_dir(tag);
    start(&ServeConfig {
        models: vec![plain, configured],
        http_addr: Some("127.0.0.1:0".into()),
        grpc_addr: Some("127.0.0.1:0".into()),
        workers: 2,
        max_batch,
        batch_timeout: Duration::from_millis(2),
        ..ServeConfig::default()
    })
    .expect("server starts")
}

struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`, so the body ends at EOF).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> HttpResponse {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("header end");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v == "chunked")
    {
        body = dechunk(&body);
    }
    HttpResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
}

fn infer_json(addr: SocketAddr, model: &str, body: &Value) -> HttpResponse {
    http(
        addr,
        "POST",
        &format!("/v2/models/{model}/infer"),
        &[("Content-Type", "application/json".into())],
        body.to_string().as_bytes(),
    )
}

fn output_f32(resp: &Value, i: usize) -> (Vec<f32>, Vec<usize>) {
    let o = &resp["outputs"][i];
    let data = o["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let shape = o["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    (data, shape)
}

#[test]
fn serve_http_metadata_readiness_and_json_inference() {
    let srv = server("http", 1);
    let addr = srv.http_addr.unwrap();
    assert_eq!(http(addr, "GET", "/v2/health/live", &[], b"").status, 200);
    assert_eq!(http(addr, "GET", "/v2/health/ready", &[], b"").status, 200);
    let meta = http(addr, "GET", "/v2", &[], b"").json();
    assert_eq!(meta["name"], "tsrun");
    assert!(meta["extensions"]
        .as_array()
        .unwrap()
        .contains(&json!("binary_tensor_data")));
    let m = http(addr, "GET", "/v2/models/mlp", &[], b"").json();
    assert_eq!(m["name"], "mlp");
    assert_eq!(m["versions"], json!(["1"]));
    assert_eq!(m["inputs"][0]["name"], "input__0");
    assert_eq!(m["outputs"][0]["name"], "output__0");
    let m = http(addr, "GET", "/v2/models/mlp_cfg/versions/1", &[], b"").json();
    assert_eq!(
        m["inputs"],
        json!([{"name": "x", "datatype": "FP32", "shape": [-1, 8]}])
    );
    assert_eq!(
        http(addr, "GET", "/v2/models/mlp/ready", &[], b"").status,
        200
    );
    assert_eq!(
        http(addr, "GET", "/v2/models/nope/ready", &[], b"").status,
        404
    );
    assert_eq!(
        http(addr, "GET", "/v2/models/mlp/versions/7", &[], b"").status,
        404
    );

    for call in [0, 1] {
        let ((x, xs), (y, ys)) = golden(call);
        let r = infer_json(
            addr,
            "mlp",
            &json!({"id": "r1", "inputs": [{"name": "input__0", "datatype": "FP32", "shape": xs, "data": x}]}),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["id"], "r1");
        assert_eq!(v["model_name"], "mlp");
        let (got, shape) = output_f32(&v, 0);
        assert_eq!(shape, ys);
        assert!(close(&got, &y), "{got:?} vs PyTorch {y:?}");
    }
    // the configured model, with a nested data array
    let ((x, _), (y, _)) = golden(0);
    let r = infer_json(
        addr,
        "mlp_cfg",
        &json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [x]}],
                "outputs": [{"name": "y"}]}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["outputs"][0]["name"], "y");
    assert!(close(&output_f32(&v, 0).0, &y));

    let metrics = String::from_utf8(http(addr, "GET", "/metrics", &[], b"").body).unwrap();
    assert!(
        metrics.contains("tsrun_requests_total{model=\"mlp\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("tsrun_request_duration_seconds_bucket"));
    assert!(metrics.contains("tsrun_batch_size_count{model=\"mlp\"} 2"));
    srv.shutdown();
}

#[test]
fn serve_http_binary_tensor_data() {
    let srv = server("binary", 1);
    let addr = srv.http_addr.unwrap();
    let ((x, xs), (y, ys)) = golden(1);
    let raw: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let header = json!({
        "inputs": [{"name": "x", "datatype": "FP32", "shape": xs,
                    "parameters": {"binary_data_size": raw.len()}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": true}}],
    })
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend_from_slice(&raw);
    let r = http(
        addr,
        "POST",
        "/v2/models/mlp_cfg/infer",
        &[
            ("Content-Type", "application/octet-stream".into()),
            ("Inference-Header-Content-Length", header.len().to_string()),
        ],
        &body,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let n: usize = r
        .header("inference-header-content-length")
        .expect("binary response header")
        .parse()
        .unwrap();
    let head: Value = serde_json::from_slice(&r.body[..n]).unwrap();
    let out = &head["outputs"][0];
    assert_eq!(out["shape"], json!(ys));
    assert_eq!(out["parameters"]["binary_data_size"], json!(y.len() * 4));
    let got: Vec<f32> = r.body[n..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert!(close(&got, &y), "{got:?} vs PyTorch {y:?}");

    // no outputs named + binary_data_output, as tritonclient sends by default
    let header = json!({
        "parameters": {"binary_data_output": true},
        "inputs": [{"name": "input__0", "datatype": "FP32", "shape": xs,
                    "parameters": {"binary_data_size": raw.len()}}],
    })
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend_from_slice(&raw);
    let r = http(
        addr,
        "POST",
        "/v2/models/mlp/infer",
        &[("Inference-Header-Content-Length", header.len().to_string())],
        &body,
    );
    assert_eq!(r.status, 200);
    let n: usize = r
        .header("inference-header-content-length")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(r.body.len() - n, y.len() * 4);
    srv.shutdown();
}

#[test]
fn serve_http_bad_input_and_model_error() {
    let srv = server("errors", 1);
    let addr = srv.http_addr.unwrap();
    let ((x, xs), _) = golden(0);
    let cases = [
        // unknown input name
        (
            "mlp_cfg",
            json!({"inputs": [{"name": "z", "datatype": "FP32", "shape": xs, "data": x}]}),
            "no input 'z'",
        ),
        // wrong datatype for the configured input
        (
            "mlp_cfg",
            json!({"inputs": [{"name": "x", "datatype": "FP64", "shape": xs, "data": x}]}),
            "datatype FP64, expected FP32",
        ),
        // wrong shape for the configured input
        (
            "mlp_cfg",
            json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": x}]}),
            "expected [-1, 8]",
        ),
        // data does not fill the shape
        (
            "mlp",
            json!({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [2, 8], "data": x}]}),
            "expected 16",
        ),
        // unknown datatype
        (
            "mlp",
            json!({"inputs": [{"name": "input__0", "datatype": "FP99", "shape": xs, "data": x}]}),
            "unknown datatype",
        ),
        // missing input
        ("mlp", json!({"inputs": []}), "missing input 'input__0'"),
        // huge shape: refused before any allocation
        (
            "mlp",
            json!({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [i64::MAX, 8], "data": x}]}),
            "overflows",
        ),
    ];
    for (model, body, needle) in cases {
        let r = infer_json(addr, model, &body);
        assert_eq!(
            r.status,
            400,
            "{body}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let msg = r.json()["error"].as_str().unwrap().to_string();
        assert!(msg.contains(needle), "{msg:?} should say {needle:?}");
    }
    let r = http(addr, "POST", "/v2/models/mlp/infer", &[], b"{not json");
    assert_eq!(r.status, 400);
    let r = infer_json(addr, "nope", &json!({"inputs": []}));
    assert_eq!(r.status, 404);
    // the unconfigured model takes any shape, so a 1x5 input reaches the model and fails there
    let r = infer_json(
        addr,
        "mlp",
        &json!({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 5], "data": [1, 2, 3, 4, 5]}]}),
    );
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    let msg = r.json()["error"].as_str().unwrap().to_string();
    assert!(msg.contains("mlp"), "{msg}");
    // the server is still fine
    let ((x, xs), (y, _)) = golden(0);
    let r = infer_json(
        addr,
        "mlp",
        &json!({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": xs, "data": x}]}),
    );
    assert!(close(&output_f32(&r.json(), 0).0, &y));
    let metrics = String::from_utf8(http(addr, "GET", "/metrics", &[], b"").body).unwrap();
    assert!(
        metrics.contains("tsrun_request_errors_total{model=\"mlp\",kind=\"model_error\"} 1"),
        "{metrics}"
    );
    srv.shutdown();
}

#[test]
fn serve_http_concurrent_clients_with_batching() {
    let srv = server("concurrency", 8);
    let addr = srv.http_addr.unwrap();
    let goldens = [golden(0), golden(1)];
    std::thread::scope(|s| {
        for client in 0..16 {
            let goldens = &goldens;
            s.spawn(move || {
                for i in 0..100 {
                    let ((x, xs), (y, ys)) = &goldens[(client + i) % 2];
                    let r = infer_json(
                        addr,
                        "mlp",
                        &json!({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": xs, "data": x}]}),
                    );
                    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                    let (got, shape) = output_f32(&r.json(), 0);
                    assert_eq!(&shape, ys);
                    assert!(close(&got, y), "client {client} request {i}: {got:?} vs {y:?}");
                }
            });
        }
    });
    let metrics = String::from_utf8(http(addr, "GET", "/metrics", &[], b"").body).unwrap();
    assert!(
        metrics.contains("tsrun_request_success_total{model=\"mlp\"} 1600"),
        "{metrics}"
    );
    srv.shutdown();
}

#[test]
fn serve_grpc() {
    use tsrun::internals::serve::grpc::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
    use tsrun::internals::serve::grpc::inference::*;
    let srv = server("grpc", 1);
    let addr = srv.grpc_addr.unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut c = GrpcInferenceServiceClient::new(channel);
        assert!(
            c.server_live(ServerLiveRequest {})
                .await
                .unwrap()
                .into_inner()
                .live
        );
        assert!(
            c.server_ready(ServerReadyRequest {})
                .await
                .unwrap()
                .into_inner()
                .ready
        );
        let ready = c
            .model_ready(ModelReadyRequest {
                name: "mlp".into(),
                version: "1".into(),
            })
            .await
            .unwrap();
        assert!(ready.into_inner().ready);
        let meta = c
            .server_metadata(ServerMetadataRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(meta.name, "tsrun");
        let meta = c
            .model_metadata(ModelMetadataRequest {
                name: "mlp_cfg".into(),
                version: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(meta.inputs[0].name, "x");
        assert_eq!(meta.inputs[0].shape, vec![-1, 8]);

        let ((x, xs), (y, ys)) = golden(1);
        let input = |contents| model_infer_request::InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: xs.iter().map(|&d| d as i64).collect(),
            contents,
            ..Default::default()
        };
        // raw_input_contents, as tritonclient sends
        let raw = ModelInferRequest {
            model_name: "mlp_cfg".into(),
            inputs: vec![input(None)],
            raw_input_contents: vec![x.iter().flat_map(|v| v.to_le_bytes()).collect()],
            ..Default::default()
        };
        // typed contents
        let typed = ModelInferRequest {
            model_name: "mlp_cfg".into(),
            inputs: vec![input(Some(InferTensorContents {
                fp32_contents: x.clone(),
                ..Default::default()
            }))],
            ..Default::default()
        };
        for req in [raw, typed] {
            let r = c.model_infer(req).await.unwrap().into_inner();
            assert_eq!(r.outputs[0].name, "y");
            assert_eq!(
                r.outputs[0].shape,
                ys.iter().map(|&d| d as i64).collect::<Vec<_>>()
            );
            let got: Vec<f32> = r.raw_output_contents[0]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert!(close(&got, &y), "{got:?} vs PyTorch {y:?}");
        }
        let bad = ModelInferRequest {
            model_name: "mlp_cfg".into(),
            inputs: vec![model_infer_request::InferInputTensor {
                datatype: "INT64".into(),
                ..input(None)
            }],
            raw_input_contents: vec![vec![0; 3 * 8 * 8]],
            ..Default::default()
        };
        let e = c.model_infer(bad).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("expected FP32"), "{}", e.message());
        let missing = c
            .model_ready(ModelReadyRequest {
                name: "nope".into(),
                version: String::new(),
            })
            .await
            .unwrap_err();
        assert_eq!(missing.code(), tonic::Code::NotFound);
    });
    // the channel's connection task lives on `rt`: close it, or the drain waits for it
    drop(rt);
    srv.shutdown();
}
