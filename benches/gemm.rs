//! Throughput of the float32 nn kernels: GEMM (tsrun's packed kernels at every instruction set
//! the CPU has, and the `gemm` crate for comparison), 3x3 and 1x1 convolution and depthwise
//! convolution through the operator registry (the path models take, with the packed-weight
//! cache warm). Criterion's throughput is set to the floating-point operations of one call
//! (2 per multiply-add), so its "elem/s" column reads as FLOP/s.
//!
//! Peak for comparison: the `peak` group measures one core's FMA throughput with independent
//! accumulator chains (AVX-512 when present, else AVX2). Quoted: an AVX-512 core retiring 2 FMA
//! per cycle on 16 lanes does 2 x 16 x 2 = 64 FLOP per cycle (about 190 GFLOP/s at 3 GHz); AMD's
//! Zen 4 (the EPYC this was written on) executes 512-bit FMAs as two 256-bit halves, so its
//! peak is 32 FLOP per cycle, the same as AVX2 with two FMA pipes. `TSRUN_GEMM=crate` runs the
//! convolution groups on the earlier gemm-crate + im2col path for a side-by-side comparison.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tsrun::internals::ops::gemm::{
    sgemm, AOperand, BOperand, Epilogue, Isa, MatRef, PackedA, PackedB,
};
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::values::List;
use tsrun::internals::values::Type;
use tsrun::{IValue, Tensor};

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn isas() -> Vec<Isa> {
    [Isa::Avx512, Isa::Avx2, Isa::Portable]
        .into_iter()
        .filter(|i| i.is_supported())
        .collect()
}

fn gemm_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm f32");
    for &(m, n, k) in &[
        (64, 3136, 576),
        (256, 196, 2304),
        (512, 512, 512),
        (128, 1024, 256),
    ] {
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        let mut out = vec![0f32; m * n];
        let am = MatRef::new(&a, m, k, k, 1).expect("a");
        let bm = MatRef::new(&b, k, n, n, 1).expect("b");
        for isa in isas() {
            let pa = PackedA::new(isa, &am);
            g.bench_function(
                BenchmarkId::new(format!("{isa:?} packed A"), format!("{m}x{n}x{k}")),
                |bch| {
                    bch.iter(|| {
                        sgemm(
                            isa,
                            m,
                            n,
                            k,
                            AOperand::Packed(&pa),
                            BOperand::Mat(bm),
                            &mut out,
                            n,
                            &Epilogue::NONE,
                            true,
                        )
                        .expect("sgemm")
                    })
                },
            );
        }
        g.bench_function(
            BenchmarkId::new("gemm crate", format!("{m}x{n}x{k}")),
            |bch| {
                bch.iter(|| {
                    // SAFETY: a, b and out hold m*k, k*n and m*n floats, row-major, not aliased.
                    unsafe {
                        gemm::gemm(
                            m,
                            n,
                            k,
                            out.as_mut_ptr(),
                            1,
                            n as isize,
                            false,
                            a.as_ptr(),
                            1,
                            k as isize,
                            b.as_ptr(),
                            1,
                            n as isize,
                            0.0,
                            1.0,
                            false,
                            false,
                            false,
                            gemm::Parallelism::Rayon(rayon::current_num_threads()),
                        )
                    }
                })
            },
        );
    }
    g.finish();
}

/// The products of a transformer layer (BERT: 128 tokens, hidden 256, FFN 1024, 4 heads of 64)
/// as `linear` and attention run them: A the row-major activations (read in place), B the
/// packed weight (`linear`) or a row-major matrix (attention's `Q . K^T` and `P . V`, packed
/// per call); on one thread (`parallel: false`) and on the kernel team.
fn linear_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("linear f32");
    // B: the packed weight, attention's K^T (a column-major view of K, packed per call) or
    // its V (row-major, packed per call)
    for &(m, n, k, b_form) in &[
        (128, 256, 256, "packed B"),
        (128, 1024, 256, "packed B"),
        (128, 256, 1024, "packed B"),
        (128, 128, 64, "column-major B"),
        (128, 64, 128, "row-major B"),
    ] {
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        let mut out = vec![0f32; m * n];
        let am = MatRef::new(&a, m, k, k, 1).expect("a");
        let bm = if b_form == "column-major B" {
            MatRef::new(&b, k, n, 1, k)
        } else {
            MatRef::new(&b, k, n, n, 1)
        }
        .expect("b");
        for isa in isas() {
            let pb = PackedB::new(isa, &bm);
            for parallel in [false, true] {
                let name = format!(
                    "{isa:?} {b_form} {}",
                    if parallel { "team" } else { "1 thread" }
                );
                g.bench_function(BenchmarkId::new(name, format!("{m}x{n}x{k}")), |bch| {
                    bch.iter(|| {
                        let b = if b_form == "packed B" {
                            BOperand::Packed(&pb)
                        } else {
                            BOperand::Mat(bm)
                        };
                        sgemm(
                            isa,
                            m,
                            n,
                            k,
                            AOperand::Mat(am),
                            b,
                            &mut out,
                            n,
                            &Epilogue::NONE,
                            parallel,
                        )
                        .expect("sgemm")
                    })
                });
            }
        }
    }
    g.finish();
}

/// (name, input shape, weight shape, stride, padding, groups)
type ConvCase = (&'static str, [usize; 4], [usize; 4], i64, i64, i64);

fn conv_group(c: &mut Criterion, group: &str, cases: &[ConvCase]) {
    let registry = Registry::global();
    let kernel = registry.lookup("aten::conv2d", "").expect("aten::conv2d");
    let ctx = OpContext::default();
    let mut g = c.benchmark_group(group);
    for &(name, xs, ws, stride, pad, groups) in cases {
        let x = Tensor::from_slice(&values(xs.iter().product(), 3), &xs).expect("x");
        let w = Tensor::from_slice(&values(ws.iter().product(), 4), &ws).expect("w");
        let b = Tensor::from_slice(&values(ws[0], 5), &[ws[0]]).expect("b");
        let ints = |v: i64| IValue::List(List::new(Type::Int, vec![IValue::Int(v); 2]));
        let args = vec![
            IValue::Tensor(x),
            IValue::Tensor(w),
            IValue::Tensor(b),
            ints(stride),
            ints(pad),
            ints(1),
            IValue::Int(groups),
        ];
        let mut probe = args.clone();
        let out = kernel(&mut Args::new("aten::conv2d", &mut probe, &ctx)).expect("conv2d");
        let out = out.as_tensor().expect("tensor").clone();
        let macs = out.numel() * ws[1] * ws[2] * ws[3];
        g.throughput(Throughput::Elements(2 * macs as u64));
        g.bench_function(name, |bch| {
            bch.iter(|| {
                let mut a = args.clone();
                kernel(&mut Args::new("aten::conv2d", &mut a, &ctx)).expect("conv2d")
            })
        });
    }
    g.finish();
}

fn conv_bench(c: &mut Criterion) {
    conv_group(
        c,
        "conv3x3 f32",
        &[
            (
                "resnet layer1 64x56x56",
                [1, 64, 56, 56],
                [64, 64, 3, 3],
                1,
                1,
                1,
            ),
            (
                "resnet layer3 256x14x14",
                [1, 256, 14, 14],
                [256, 256, 3, 3],
                1,
                1,
                1,
            ),
            (
                "resnet stride2 128x28x28",
                [1, 64, 56, 56],
                [128, 64, 3, 3],
                2,
                1,
                1,
            ),
        ],
    );
    conv_group(
        c,
        "conv7x7 f32",
        &[(
            "resnet stem 3x224x224 s2",
            [1, 3, 224, 224],
            [64, 3, 7, 7],
            2,
            3,
            1,
        )],
    );
    conv_group(
        c,
        "conv1x1 f32",
        &[
            (
                "256->128 at 28x28",
                [1, 256, 28, 28],
                [128, 256, 1, 1],
                1,
                0,
                1,
            ),
            ("96->576 at 7x7", [1, 96, 7, 7], [576, 96, 1, 1], 1, 0, 1),
            // mobilenet_v3_small's channel counts off the wide tile: the 12 x 32 tile reading
            // the image's whole 32-column panels in place
            ("16->72 at 56x56", [1, 16, 56, 56], [72, 16, 1, 1], 1, 0, 1),
            ("96->40 at 14x14", [1, 96, 14, 14], [40, 96, 1, 1], 1, 0, 1),
            ("576->96 at 7x7", [1, 576, 7, 7], [96, 576, 1, 1], 1, 0, 1),
        ],
    );
    conv_group(
        c,
        "depthwise f32",
        &[
            (
                "3x3 144ch 56x56",
                [1, 144, 56, 56],
                [144, 1, 3, 3],
                1,
                1,
                144,
            ),
            (
                "3x3 s2 16ch 112x112",
                [1, 16, 112, 112],
                [16, 1, 3, 3],
                2,
                1,
                16,
            ),
            (
                "5x5 s2 96ch 28x28",
                [1, 96, 28, 28],
                [96, 1, 5, 5],
                2,
                2,
                96,
            ),
            // mobilenet_v3_small's wider maps (channels-last blocks with AVX-512 too)
            (
                "3x3 s2 72ch 56x56",
                [1, 72, 56, 56],
                [72, 1, 3, 3],
                2,
                1,
                72,
            ),
            ("3x3 88ch 28x28", [1, 88, 28, 28], [88, 1, 3, 3], 1, 1, 88),
            // mobilenet_v3_small's narrow maps: channels-last blocks
            (
                "5x5 240ch 14x14",
                [1, 240, 14, 14],
                [240, 1, 5, 5],
                1,
                2,
                240,
            ),
            ("5x5 576ch 7x7", [1, 576, 7, 7], [576, 1, 5, 5], 1, 2, 576),
        ],
    );
    // mobilenet_v3_small's stem: 16 channels (the 12 x 32 tile), image columns gathered at
    // stride 2 while packing
    conv_group(
        c,
        "conv3x3 s2 f32",
        &[(
            "mobilenet stem 3x224x224 s2",
            [1, 3, 224, 224],
            [16, 3, 3, 3],
            2,
            1,
            1,
        )],
    );
}

/// One core's FMA throughput: 12 independent vector accumulator chains.
fn peak_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("peak");
    const ITERS: usize = 1 << 16;
    #[cfg(target_arch = "x86_64")]
    {
        if Isa::Avx512.is_supported() {
            g.throughput(Throughput::Elements((ITERS * 12 * 16 * 2) as u64));
            // SAFETY: AVX-512F is present (checked above).
            g.bench_function("fma avx512 1 core", |b| {
                b.iter(|| unsafe { fma_chains_avx512(ITERS) })
            });
        }
        if Isa::Avx2.is_supported() {
            g.throughput(Throughput::Elements((ITERS * 12 * 8 * 2) as u64));
            // SAFETY: AVX2 and FMA are present (checked above).
            g.bench_function("fma avx2 1 core", |b| {
                b.iter(|| unsafe { fma_chains_avx2(ITERS) })
            });
        }
    }
    g.finish();
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_chains_avx512(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let m = _mm512_set1_ps(std::hint::black_box(0.999));
    let a = _mm512_set1_ps(std::hint::black_box(0.001));
    let mut acc = [_mm512_set1_ps(1.0); 12];
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_fmadd_ps(*v, m, a);
        }
    }
    acc.iter().map(|&v| _mm512_reduce_add_ps(v)).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains_avx2(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let m = _mm256_set1_ps(std::hint::black_box(0.999));
    let a = _mm256_set1_ps(std::hint::black_box(0.001));
    let mut acc = [_mm256_set1_ps(1.0); 12];
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_ps(*v, m, a);
        }
    }
    let mut out = [0f32; 8];
    let s = acc
        .iter()
        .fold(_mm256_setzero_ps(), |s, &v| _mm256_add_ps(s, v));
    _mm256_storeu_ps(out.as_mut_ptr(), s);
    out.iter().sum()
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = peak_bench, gemm_bench, linear_bench, conv_bench
}
criterion_main!(benches);
