//! Load test of `tsrun serve` on 127.0.0.1 (about 45 s): throughput and p50/p99 latency for the
//! MLP and resnet18 fixtures with and without dynamic batching, next to the in-process call
//! latency of the same model. Clients and server share this process and machine.
//!
//!     cargo bench --bench serve_load            # TSRUN_LOAD_SECONDS=N scales each phase
//!
//! Requests use the binary tensor extension (as tritonclient sends them) over keep-alive
//! HTTP/1.1 connections, one per client thread.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tsrun::internals::serve::{start, ServeConfig};
use tsrun::{IValue, Module, Tensor};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/models/{name}.pt"))
}

/// A keep-alive HTTP/1.1 connection sending one prepared inference request again and again.
struct Client {
    reader: BufReader<TcpStream>,
    request: Vec<u8>,
}

impl Client {
    fn new(addr: SocketAddr, model: &str, shape: &[usize]) -> Client {
        let n: usize = shape.iter().product();
        let raw: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 97) as f32 / 97.0).to_le_bytes())
            .collect();
        let header = format!(
            r#"{{"inputs":[{{"name":"input__0","datatype":"FP32","shape":{shape:?},"parameters":{{"binary_data_size":{}}}}}],"parameters":{{"binary_data_output":true}}}}"#,
            raw.len()
        );
        let mut request = format!(
            "POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {addr}\r\nInference-Header-Content-Length: {}\r\nContent-Length: {}\r\n\r\n",
            header.len(),
            header.len() + raw.len()
        )
        .into_bytes();
        request.extend_from_slice(header.as_bytes());
        request.extend_from_slice(&raw);
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).ok();
        Client {
            reader: BufReader::new(stream),
            request,
        }
    }

    /// One request; panics on anything but a 200 (a load test of errors measures nothing).
    fn call(&mut self) {
        self.reader
            .get_mut()
            .write_all(&self.request)
            .expect("send");
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("status");
        assert!(line.contains(" 200 "), "status {line}");
        let mut length = 0;
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header");
            if line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().expect("length");
                }
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).expect("body");
    }
}

struct Stats {
    throughput: f64,
    p50: Duration,
    p99: Duration,
}

fn summarize(mut latencies: Vec<Duration>, elapsed: Duration) -> Stats {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    Stats {
        throughput: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.5),
        p99: at(0.99),
    }
}

/// `clients` threads calling for `seconds`.
fn drive(addr: SocketAddr, model: &str, shape: &[usize], clients: usize, seconds: f64) -> Stats {
    let until = Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let latencies: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| {
                    let mut c = Client::new(addr, model, shape);
                    c.call(); // warm
                    let mut lat = Vec::new();
                    let t0 = Instant::now();
                    while t0.elapsed() < until {
                        let t = Instant::now();
                        c.call();
                        lat.push(t.elapsed());
                    }
                    lat
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client"))
            .collect()
    });
    summarize(latencies, started.elapsed())
}

fn in_process(model: &str, shape: &[usize], seconds: f64) -> Stats {
    let m = Module::load(fixture(model)).expect("load");
    m.eval();
    let n: usize = shape.iter().product();
    let x = Tensor::from_vec((0..n).map(|i| (i % 97) as f32 / 97.0).collect(), shape).expect("x");
    let input = [IValue::Tensor(x)];
    m.forward(&input).expect("warm");
    let mut lat = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        m.forward(&input).expect("call");
        lat.push(t.elapsed());
    }
    summarize(lat, t0.elapsed())
}

fn row(what: &str, s: &Stats) {
    println!(
        "| {what} | {:.0} req/s | {:.3} ms | {:.3} ms |",
        s.throughput,
        s.p50.as_secs_f64() * 1e3,
        s.p99.as_secs_f64() * 1e3
    );
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse
    let phase: f64 = std::env::var("TSRUN_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4.0);
    let server = |max_batch: usize| {
        start(&ServeConfig {
            models: vec![fixture("mlp"), fixture("resnet18")],
            http_addr: Some("127.0.0.1:0".into()),
            grpc_addr: None,
            workers: 2,
            max_batch,
            batch_timeout: Duration::from_millis(2),
            ..ServeConfig::default()
        })
        .expect("server")
    };
    let mlp = [1usize, 8];
    let resnet = [1usize, 3, 224, 224];
    println!("| case | throughput | p50 | p99 |\n|---|---|---|---|");
    row("mlp in-process call", &in_process("mlp", &mlp, phase / 2.0));
    row(
        "resnet18 in-process call",
        &in_process("resnet18", &resnet, phase),
    );
    for (max_batch, label) in [(1, "unbatched"), (16, "batched (max 16, 2 ms)")] {
        let srv = server(max_batch);
        let addr = srv.http_addr.expect("http");
        if max_batch == 1 {
            row("mlp HTTP, 1 client", &drive(addr, "mlp", &mlp, 1, phase));
            row(
                "resnet18 HTTP, 1 client",
                &drive(addr, "resnet18", &resnet, 1, phase),
            );
        }
        row(
            &format!("mlp HTTP, 16 clients, {label}"),
            &drive(addr, "mlp", &mlp, 16, phase),
        );
        row(
            &format!("resnet18 HTTP, 4 clients, {label}"),
            &drive(addr, "resnet18", &resnet, 4, phase * 1.5),
        );
        srv.shutdown();
    }
}
