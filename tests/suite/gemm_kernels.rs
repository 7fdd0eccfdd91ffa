//! The packed float32 GEMM (`tsrun::internals::ops::gemm`) against a float64 reference, for every
//! instruction set this CPU supports: edge tiles, several K blocks, pre-packed operands, the
//! implicit-im2col image operand, the fused epilogue, threading, and the packed-weight cache's
//! invalidation when a weight is written.

use tsrun::internals::ops::gemm::{
    cached_packed_a, cached_packed_b, gemv_packed_b, gemv_packed_b_columns, sgemm,
    sgemm_transposed, AOperand, Activation, BOperand, Bias, DirectImage, Epilogue, ImageOperand,
    Isa, MatRef, PackedA, PackedB,
};
use tsrun::internals::tensor::{DType, Tensor};

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn isas() -> Vec<Isa> {
    let v: Vec<Isa> = [Isa::Avx512, Isa::Avx512Wide, Isa::Avx2, Isa::Portable]
        .into_iter()
        .filter(|i| i.is_supported())
        .collect();
    assert!(v.contains(&Isa::Portable) && v.contains(&Isa::detected()));
    v
}

fn act(a: Activation, v: f64) -> f64 {
    match a {
        Activation::Identity => v,
        Activation::Relu => v.max(0.0),
        Activation::Clamp(lo, hi) => v.max(lo as f64).min(hi as f64),
        Activation::Hardswish => v * (v + 3.0).clamp(0.0, 6.0) / 6.0,
        Activation::Hardsigmoid => (v + 3.0).clamp(0.0, 6.0) / 6.0,
        Activation::Silu => v / (1.0 + (-v).exp()),
    }
}

/// Check `got` (row stride `ldc`) against `sum_k a(i,k) b(k,j)` plus the epilogue, with a
/// float32 accumulation bound.
#[allow(clippy::too_many_arguments)]
fn check(
    what: &str,
    got: &[f32],
    ldc: usize,
    m: usize,
    n: usize,
    k: usize,
    a: &dyn Fn(usize, usize) -> f32,
    b: &dyn Fn(usize, usize) -> f32,
    epi: &Epilogue,
) {
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0f64, 0f64);
            for p in 0..k {
                let t = a(i, p) as f64 * b(p, j) as f64;
                s += t;
                mag += t.abs();
            }
            match epi.bias {
                Bias::None => {}
                Bias::PerRow(v) => s += v[i] as f64,
                Bias::PerColumn(v) => s += v[j] as f64,
            }
            if let Some(r) = epi.residual {
                s += r[i * ldc + j] as f64;
            }
            let want = act(epi.activation, s);
            let tol = 1e-6 * (k.max(8) as f64) * (mag + 1.0);
            let g = got[i * ldc + j] as f64;
            assert!(
                (g - want).abs() <= tol,
                "{what}: C[{i},{j}] = {g}, want {want} (m={m} n={n} k={k})"
            );
        }
    }
}

const SHAPES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (13, 33, 7),
    (12, 32, 256),
    (25, 70, 300),
    (7, 600, 40),
    (130, 9, 520),
    (3, 5, 0),
];

#[test]
fn strided_and_packed_operands_match_reference() {
    for isa in isas() {
        for &(m, n, k) in &SHAPES {
            let av = values(m * k, 1);
            let bv = values(k * n, 2);
            // A column-major (strides 1, m) to exercise strided packing; B row-major
            let a = MatRef::new(&av, m, k, 1, m.max(1)).unwrap();
            let b = MatRef::new(&bv, k, n, n, 1).unwrap();
            let fa = |i: usize, p: usize| av[i + p * m];
            let fb = |p: usize, j: usize| bv[p * n + j];
            let pa = PackedA::new(isa, &a);
            let pb = PackedB::new(isa, &b);
            // the same A row-major with padded rows (stride k + 5), which the AVX-512 kernel
            // reads in place
            let lda = k + 5;
            let mut rv = vec![f32::NAN; m * lda];
            for i in 0..m {
                for p in 0..k {
                    rv[i * lda + p] = fa(i, p);
                }
            }
            let ar = MatRef::new(&rv, m, k, lda, 1).unwrap();
            // the same B column-major with padded columns (stride k + 3), as a linear weight
            // `[n, k]` and attention's K^T are read, packed by transposing blocks
            let ldb = k + 3;
            let mut cv = vec![f32::NAN; n * ldb];
            for p in 0..k {
                for j in 0..n {
                    cv[j * ldb + p] = fb(p, j);
                }
            }
            let bc = MatRef::new(&cv, k, n, 1, ldb).unwrap();
            let pbc = PackedB::new(isa, &bc);
            let ldc = n + 3;
            for (name, ao, bo) in [
                ("mat x mat", AOperand::Mat(a), BOperand::Mat(b)),
                ("packed x mat", AOperand::Packed(&pa), BOperand::Mat(b)),
                ("mat x packed", AOperand::Mat(a), BOperand::Packed(&pb)),
                (
                    "row-major mat x packed",
                    AOperand::Mat(ar),
                    BOperand::Packed(&pb),
                ),
                ("row-major mat x mat", AOperand::Mat(ar), BOperand::Mat(b)),
                (
                    "row-major mat x column-major mat",
                    AOperand::Mat(ar),
                    BOperand::Mat(bc),
                ),
                (
                    "mat x column-major mat",
                    AOperand::Mat(a),
                    BOperand::Mat(bc),
                ),
                (
                    "row-major mat x packed column-major",
                    AOperand::Mat(ar),
                    BOperand::Packed(&pbc),
                ),
            ] {
                for parallel in [false, true] {
                    let mut c = vec![f32::NAN; m.max(1) * ldc];
                    sgemm(isa, m, n, k, ao, bo, &mut c, ldc, &Epilogue::NONE, parallel).unwrap();
                    check(
                        &format!("{isa:?} {name} parallel={parallel}"),
                        &c,
                        ldc,
                        m,
                        n,
                        k,
                        &fa,
                        &fb,
                        &Epilogue::NONE,
                    );
                }
            }
        }
    }
}

/// The one-row product over a packed B (the recurrent step's `h @ W_hh^T`) against a float64
/// reference for every instruction set (one and several K blocks), and restricted to column
/// ranges (the two-thread LSTM's gate rows): every column bit for bit as the whole product.
#[test]
fn gemv_over_packed_b_and_its_column_ranges() {
    for isa in isas() {
        for &(k, n) in &[(7usize, 100usize), (300, 70), (128, 512)] {
            let xv = values(k, 3);
            let bv = values(k * n, 4);
            let pb = PackedB::new(isa, &MatRef::new(&bv, k, n, n, 1).unwrap());
            let mut whole = vec![0.5f32; n];
            gemv_packed_b(&xv, &pb, &mut whole);
            for (j, &got) in whole.iter().enumerate() {
                let want = 0.5
                    + (0..k)
                        .map(|p| xv[p] as f64 * bv[p * n + j] as f64)
                        .sum::<f64>();
                assert!(
                    (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()) * k as f64,
                    "{isa:?} k={k} n={n} column {j}: {got} vs {want}"
                );
            }
            // unaligned, single-column, empty, adjacent and out-of-range ranges, out of order
            let ranges = [50..n, 3..40, 0..0, 64..65, 1..2, 2..3, n - 1..n + 40];
            let mut parts = vec![0.5f32; ranges.iter().map(|r| r.len()).sum()];
            gemv_packed_b_columns(&xv, &pb, &ranges, &mut parts);
            let mut at = 0;
            for r in &ranges {
                for j in r.clone() {
                    if j < n {
                        assert_eq!(
                            parts[at].to_bits(),
                            whole[j].to_bits(),
                            "{isa:?} k={k} n={n} column {j} of range {r:?}"
                        );
                    } else {
                        assert_eq!(parts[at], 0.5, "{isa:?}: column {j} is past B");
                    }
                    at += 1;
                }
            }
        }
    }
}

#[test]
fn epilogue_bias_residual_activation() {
    let (m, n, k) = (29, 45, 300);
    let av = values(m * k, 3);
    let bv = values(k * n, 4);
    let rows = values(m, 5);
    let cols = values(n, 6);
    let residual = values(m * n, 7);
    let a = MatRef::new(&av, m, k, k, 1).unwrap();
    let b = MatRef::new(&bv, k, n, n, 1).unwrap();
    let fa = |i: usize, p: usize| av[i * k + p];
    let fb = |p: usize, j: usize| bv[p * n + j];
    for isa in isas() {
        for activation in [
            Activation::Identity,
            Activation::Relu,
            Activation::Clamp(0.0, 6.0),
            Activation::Hardswish,
            Activation::Silu,
        ] {
            for bias in [Bias::None, Bias::PerRow(&rows), Bias::PerColumn(&cols)] {
                let epi = Epilogue {
                    bias,
                    residual: Some(&residual),
                    activation,
                };
                let mut c = vec![0f32; m * n];
                sgemm(
                    isa,
                    m,
                    n,
                    k,
                    AOperand::Mat(a),
                    BOperand::Mat(b),
                    &mut c,
                    n,
                    &epi,
                    true,
                )
                .unwrap();
                check(
                    &format!("{isa:?} {activation:?}"),
                    &c,
                    n,
                    m,
                    n,
                    k,
                    &fa,
                    &fb,
                    &epi,
                );
            }
        }
    }
}

/// The image operand equals the im2col matrix: compare against a direct convolution.
#[test]
fn image_operand_is_implicit_im2col() {
    // (channels, image hw, kernel hw, stride, pad, dilation)
    let cases = [
        (3, [9, 8], [3, 3], [1, 1], [1, 1], [1, 1]),
        (4, [10, 9], [3, 2], [2, 1], [0, 1], [2, 1]),
        (5, [6, 6], [1, 1], [1, 1], [0, 0], [1, 1]),
        (5, [7, 6], [1, 1], [2, 2], [0, 0], [1, 1]),
        (17, [12, 11], [3, 3], [2, 2], [1, 1], [1, 1]),
        (2, [40, 33], [5, 5], [1, 1], [2, 2], [1, 1]),
        // 1x1 read in place by the 12 x 32 tile: two depth blocks, two column blocks, the
        // second ending in a partial panel (packed)
        (300, [23, 23], [1, 1], [1, 1], [0, 0], [1, 1]),
    ];
    let cout = 14;
    for isa in isas() {
        for &(ch, [h, w], [kh, kw], [sh, sw], [ph, pw], [dh, dw]) in &cases {
            let oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
            let ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
            let img = values(ch * h * w, 8);
            let wts = values(cout * ch * kh * kw, 9);
            let im = ImageOperand::new(
                &img,
                ch,
                [1, h, w],
                [1, kh, kw],
                [1, oh, ow],
                [1, sh, sw],
                [0, ph, pw],
                [1, dh, dw],
            )
            .unwrap();
            let kdim = ch * kh * kw;
            let a = MatRef::new(&wts, cout, kdim, kdim, 1).unwrap();
            let pa = PackedA::new(isa, &a);
            let (l, mut c) = (oh * ow, vec![0f32; cout * oh * ow]);
            sgemm(
                isa,
                cout,
                l,
                kdim,
                AOperand::Packed(&pa),
                BOperand::Image(im),
                &mut c,
                l,
                &Epilogue::NONE,
                true,
            )
            .unwrap();
            let fa = |i: usize, p: usize| wts[i * kdim + p];
            let fb = |p: usize, j: usize| {
                let (c0, t) = (p / (kh * kw), p % (kh * kw));
                let (ty, tx) = (t / kw, t % kw);
                let (y, x) = (j / ow, j % ow);
                let iy = (y * sh + ty * dh) as isize - ph as isize;
                let ix = (x * sw + tx * dw) as isize - pw as isize;
                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                    0.0
                } else {
                    img[(c0 * h + iy as usize) * w + ix as usize]
                }
            };
            check(
                &format!("{isa:?} conv {ch}x{h}x{w} k{kh}x{kw}"),
                &c,
                l,
                cout,
                l,
                kdim,
                &fa,
                &fb,
                &Epilogue::NONE,
            );
            // the same convolution as image^T . weight^T with a per-channel bias, copied
            // channel-major into the output as convolution's wide path runs it
            let bias = values(cout, 11);
            let wt = MatRef::new(&wts, kdim, cout, 1, kdim).unwrap();
            let pb = PackedB::new(isa, &wt);
            let mut scratch = vec![f32::NAN; l * cout];
            let mut out = vec![f32::NAN; cout * l];
            let epi_t = Epilogue {
                bias: Bias::PerColumn(&bias),
                ..Epilogue::NONE
            };
            let mut transposed = |out: &mut [f32]| {
                sgemm_transposed(
                    isa,
                    l,
                    cout,
                    kdim,
                    AOperand::ImageT(im),
                    BOperand::Packed(&pb),
                    &mut scratch,
                    cout,
                    &epi_t,
                    out,
                    l,
                    true,
                )
            };
            transposed(&mut out).unwrap();
            check(
                &format!("{isa:?} transposed conv {ch}x{h}x{w} k{kh}x{kw}"),
                &out,
                l,
                cout,
                l,
                kdim,
                &fa,
                &fb,
                &Epilogue {
                    bias: Bias::PerRow(&bias),
                    ..Epilogue::NONE
                },
            );
            let mut short = vec![0f32; cout * l - 1];
            assert!(transposed(&mut short).is_err());
        }
    }
}

/// The wide tile reading A in place from a zero-padded image (`DirectImage`) computes the
/// convolution: stride 1 and 2, dilation, several K blocks, a one-row map with a partial tile;
/// geometry that would read outside the image is refused.
#[test]
fn direct_image_operand_is_the_convolution() {
    // (channels, image hw, kernel hw, stride, pad, dilation)
    let cases = [
        (3, [9, 14], [3, 3], [1, 1], [1, 1], [1, 1]),
        (30, [13, 27], [3, 3], [2, 2], [1, 1], [1, 1]),
        (4, [12, 21], [3, 3], [1, 1], [2, 2], [2, 2]),
        (5, [1, 19], [1, 3], [1, 1], [0, 1], [1, 1]),
    ];
    let cout = 128;
    let isa = Isa::Avx512Wide;
    if !isa.is_supported() {
        return;
    }
    for &(ch, [h, w], [kh, kw], [sh, sw], [ph, pw], [dh, dw]) in &cases {
        let oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
        let ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
        let (hp, wp) = (h + 2 * ph, w + 2 * pw);
        let img = values(ch * h * w, 12);
        let mut padded = vec![0f32; ch * hp * wp + 16];
        for c0 in 0..ch {
            for y in 0..h {
                let at = (c0 * hp + y + ph) * wp + pw;
                padded[at..at + w].copy_from_slice(&img[(c0 * h + y) * w..][..w]);
            }
        }
        let mut offsets = vec![];
        for c0 in 0..ch {
            for ty in 0..kh {
                for tx in 0..kw {
                    offsets.push(c0 * hp * wp + ty * dh * wp + tx * dw);
                }
            }
        }
        let l = oh * ow;
        let d = DirectImage::new(&padded, &offsets, l, ow, sh * wp, sw, 7).unwrap();
        // reading one float less than the last tile needs is refused
        let far = (l - 1) / 7 * 7;
        let need = (far / ow) * sh * wp + (far % ow) * sw + 6 * sw + offsets.iter().max().unwrap();
        assert!(DirectImage::new(&padded[..need], &offsets, l, ow, sh * wp, sw, 7).is_none());
        let kdim = ch * kh * kw;
        let wts = values(cout * kdim, 13);
        let pb = PackedB::new(isa, &MatRef::new(&wts, kdim, cout, 1, kdim).unwrap());
        let mut c = vec![f32::NAN; l * cout];
        sgemm(
            isa,
            l,
            cout,
            kdim,
            AOperand::Direct(d),
            BOperand::Packed(&pb),
            &mut c,
            cout,
            &Epilogue::NONE,
            true,
        )
        .unwrap();
        let fa = |j: usize, p: usize| {
            let (c0, t) = (p / (kh * kw), p % (kh * kw));
            let (ty, tx) = (t / kw, t % kw);
            let (y, x) = (j / ow, j % ow);
            let iy = (y * sh + ty * dh) as isize - ph as isize;
            let ix = (x * sw + tx * dw) as isize - pw as isize;
            if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                0.0
            } else {
                img[(c0 * h + iy as usize) * w + ix as usize]
            }
        };
        let fb = |p: usize, i: usize| wts[i * kdim + p];
        check(
            &format!("direct conv {ch}x{h}x{w} k{kh}x{kw} s{sw}"),
            &c,
            cout,
            l,
            cout,
            kdim,
            &fa,
            &fb,
            &Epilogue::NONE,
        );
        // only the wide tile reads a direct operand
        assert!(sgemm(
            Isa::Avx512,
            l,
            cout,
            kdim,
            AOperand::Direct(d),
            BOperand::Packed(&PackedB::new(
                Isa::Avx512,
                &MatRef::new(&wts, kdim, cout, 1, kdim).unwrap()
            )),
            &mut c,
            cout,
            &Epilogue::NONE,
            true,
        )
        .is_err());
    }
}

#[test]
fn mismatched_operands_are_errors() {
    let isa = Isa::detected();
    let v = values(64, 10);
    let a = MatRef::new(&v, 4, 4, 4, 1).unwrap();
    let b = MatRef::new(&v, 5, 4, 4, 1).unwrap();
    let mut c = vec![0f32; 16];
    assert!(sgemm(
        isa,
        4,
        4,
        4,
        AOperand::Mat(a),
        BOperand::Mat(b),
        &mut c,
        4,
        &Epilogue::NONE,
        false
    )
    .is_err());
    let b = MatRef::new(&v, 4, 4, 4, 1).unwrap();
    let mut small = vec![0f32; 15];
    assert!(sgemm(
        isa,
        4,
        4,
        4,
        AOperand::Mat(a),
        BOperand::Mat(b),
        &mut small,
        4,
        &Epilogue::NONE,
        false
    )
    .is_err());
    let bias = [0f32; 3];
    let epi = Epilogue {
        bias: Bias::PerRow(&bias),
        ..Epilogue::NONE
    };
    assert!(sgemm(
        isa,
        4,
        4,
        4,
        AOperand::Mat(a),
        BOperand::Mat(b),
        &mut c,
        4,
        &epi,
        false
    )
    .is_err());
    assert!(MatRef::new(&v, 9, 8, 8, 1).is_none());
    if isa != Isa::Portable {
        let pa = PackedA::new(Isa::Portable, &a);
        assert!(sgemm(
            isa,
            4,
            4,
            4,
            AOperand::Packed(&pa),
            BOperand::Mat(b),
            &mut c,
            4,
            &Epilogue::NONE,
            false
        )
        .is_err());
    }
}

/// A cached packing is reused while the weight is untouched and redone once it is written.
#[test]
fn packed_weight_cache_follows_writes() {
    let isa = Isa::detected();
    let (m, k) = (20, 30);
    let w = Tensor::from_slice(&values(m * k, 11), &[m, k]).unwrap();
    let pack = |w: &Tensor| {
        let g = w.read::<f32>().unwrap();
        let a = MatRef::new(g.as_slice().unwrap(), m, k, k, 1).unwrap();
        (
            cached_packed_a(isa, w.storage(), w.storage_offset(), &a),
            cached_packed_b(isa, w.storage(), w.storage_offset(), &a),
        )
    };
    let (a1, b1) = pack(&w);
    let (a2, b2) = pack(&w);
    assert!(std::sync::Arc::ptr_eq(&a1, &a2) && std::sync::Arc::ptr_eq(&b1, &b2));
    // write through a view: the next packing must see the new values
    w.write::<f32>().unwrap().view_mut().fill(2.0);
    let (a3, _) = pack(&w);
    assert!(!std::sync::Arc::ptr_eq(&a1, &a3));
    let ones = vec![1f32; k];
    let b = MatRef::new(&ones, k, 1, 1, 1).unwrap();
    let mut c = vec![0f32; m];
    sgemm(
        isa,
        m,
        1,
        k,
        AOperand::Packed(&a3),
        BOperand::Mat(b),
        &mut c,
        1,
        &Epilogue::NONE,
        false,
    )
    .unwrap();
    assert!(c.iter().all(|&v| v == 2.0 * k as f32), "{c:?}");
    // a copy of the values in another storage is packed on its own
    let other = Tensor::from_slice(&values(m * k, 11), &[m, k]).unwrap();
    let (a4, _) = pack(&other);
    assert!(!std::sync::Arc::ptr_eq(&a3, &a4));
    assert_eq!(other.dtype(), DType::Float32);
}

/// `Module::prepare` packs every convolution weight the float32 kernel would pack (scripted
/// `conv2d` and traced `_convolution`), in the layout its tile reads (as A, or transposed as B
/// for the wide AVX-512 tile), so the first call does not; depthwise weights, which that
/// kernel reads unpacked, are left alone.
#[test]
fn prepare_packs_convolution_weights() {
    let tsrun::internals::ops::gemm::Backend::Packed(isa) = tsrun::internals::ops::gemm::backend()
    else {
        return; // TSRUN_GEMM selected the gemm crate: nothing is packed ahead
    };
    for name in ["mobilenet_v2_tiny.pt", "convnet_traced.pt"] {
        let path = format!("{}/fixtures/models/{name}", env!("CARGO_MANIFEST_DIR"));
        let m = tsrun::internals::runtime::Module::load(&path).expect("load");
        m.prepare(&["forward"]).expect("prepare");
        let (mut packed, mut depthwise) = (0, 0);
        // the weights of every Conv2d (not ConvTranspose2d, which the GEMM reads unpacked)
        let convs = m
            .named_modules("", true)
            .into_iter()
            .filter(|(_, sub)| sub.class_name().ends_with(".Conv2d"));
        for (pname, sub) in convs {
            let w = sub.get_parameter("weight").expect("weight");
            let (cout, cg) = (w.shape()[0], w.shape()[1]);
            let kvol: usize = w.shape()[2..].iter().product();
            let guard = w.read::<f32>().expect("read");
            let ws = guard.as_slice().expect("contiguous");
            let kdim = cg * kvol;
            // packed per group: each group's block of rows at its own offset
            // or, for the 7 x 64 AVX-512 tile, transposed as one B operand; plain, or scaled
            // by the batch norm that follows the convolution (folded in)
            use tsrun::internals::ops::gemm::is_scaled_packing_cached as scaled;
            let wide = MatRef::new(ws, kdim, cout, 1, kdim).is_some_and(|wt| {
                let (s, o) = (w.storage(), w.storage_offset());
                tsrun::internals::ops::gemm::is_packed_b_cached(Isa::Avx512Wide, s, o, &wt)
                    || scaled(Isa::Avx512Wide, s, o, &wt, false)
            });
            let cached = wide
                || (1..=cout).filter(|g| cout % g == 0).any(|groups| {
                    let rows = cout / groups;
                    (0..groups).all(|grp| {
                        let a = MatRef::new(&ws[grp * rows * kdim..], rows, kdim, kdim, 1)
                            .expect("matrix");
                        let (s, o) = (w.storage(), w.storage_offset() + grp * rows * kdim);
                        tsrun::internals::ops::gemm::is_packed_a_cached(isa, s, o, &a)
                            || scaled(isa, s, o, &a, true)
                    })
                });
            if cg == 1 && kvol > 1 {
                depthwise += 1;
                assert!(!cached, "{name}: depthwise {pname} was packed");
            } else {
                packed += 1;
                assert!(
                    cached,
                    "{name}: {pname} {:?} not packed by prepare",
                    w.shape()
                );
            }
        }
        assert!(packed > 0, "{name}: no convolution weight found");
        if name.starts_with("mobilenet") {
            assert!(depthwise > 0, "{name}: no depthwise weight found");
        }
    }
}

/// `Module::prepare` packs the weight of every `Linear` as the transposed B operand the
/// float32 `linear` kernel reads.
#[test]
fn prepare_packs_linear_weights() {
    let tsrun::internals::ops::gemm::Backend::Packed(isa) = tsrun::internals::ops::gemm::backend()
    else {
        return;
    };
    let path = format!("{}/fixtures/models/mlp.pt", env!("CARGO_MANIFEST_DIR"));
    let m = tsrun::internals::runtime::Module::load(&path).expect("load");
    m.prepare(&["forward"]).expect("prepare");
    let linears: Vec<_> = m
        .named_modules("", true)
        .into_iter()
        .filter(|(_, sub)| sub.class_name().ends_with(".Linear"))
        .collect();
    assert!(linears.len() >= 2, "{} Linear modules", linears.len());
    for (name, sub) in linears {
        let w = sub.get_parameter("weight").expect("weight");
        let (out_f, k) = (w.shape()[0], w.shape()[1]);
        let guard = w.read::<f32>().expect("read");
        let wt =
            MatRef::new(guard.as_slice().expect("contiguous"), k, out_f, 1, k).expect("matrix");
        assert!(
            tsrun::internals::ops::gemm::is_packed_b_cached(
                isa,
                w.storage(),
                w.storage_offset(),
                &wt
            ),
            "{name}.weight not packed by prepare"
        );
    }
}

/// `Module::prepare` packs each recurrent layer's `W_hh` as its one-row step product reads it,
/// and its `W_ih` as the input projection's GEMM reads it (both as `linear` packs a weight).
#[test]
fn prepare_packs_recurrent_weights() {
    let tsrun::internals::ops::gemm::Backend::Packed(isa) = tsrun::internals::ops::gemm::backend()
    else {
        return;
    };
    let path = format!(
        "{}/fixtures/models/lstm_tagger.pt",
        env!("CARGO_MANIFEST_DIR")
    );
    let m = tsrun::internals::runtime::Module::load(&path).expect("load");
    m.prepare(&["forward"]).expect("prepare");
    let mut checked = 0;
    for (name, w) in m.named_parameters("", true, true) {
        if !name
            .rsplit('.')
            .next()
            .is_some_and(|n| n.starts_with("weight_hh_l") || n.starts_with("weight_ih_l"))
        {
            continue;
        }
        let (n, k) = (w.shape()[0], w.shape()[1]);
        let guard = w.read::<f32>().expect("read");
        let wt = MatRef::new(guard.as_slice().expect("contiguous"), k, n, 1, k).expect("matrix");
        assert!(
            tsrun::internals::ops::gemm::is_packed_b_cached(
                isa,
                w.storage(),
                w.storage_offset(),
                &wt
            ),
            "{name} not packed by prepare"
        );
        checked += 1;
    }
    assert!(checked >= 2, "no recurrent weights in the fixture");
}

/// After `prepare` (weights packed, their archive pages released), resnet18 gives bit for bit
/// the output of a module loaded and called without it.
#[test]
fn prepared_module_computes_what_an_unprepared_one_does() {
    let root = env!("CARGO_MANIFEST_DIR");
    let path = format!("{root}/fixtures/models/resnet18.pt");
    let x = tsrun::internals::cli::inputs::read_npy(std::path::Path::new(&format!(
        "{root}/fixtures/inputs/image_1x3x224x224.npy"
    )))
    .expect("input");
    let input = [tsrun::internals::values::IValue::Tensor(x)];
    let plain = tsrun::internals::runtime::Module::load(&path).expect("load");
    let want = plain.forward(&input).expect("forward");
    let prepared = tsrun::internals::runtime::Module::load(&path).expect("load");
    prepared.prepare(&["forward"]).expect("prepare");
    let got = prepared.forward(&input).expect("forward");
    let (tsrun::internals::values::IValue::Tensor(g), tsrun::internals::values::IValue::Tensor(w)) =
        (got, want)
    else {
        panic!("tensors expected");
    };
    assert_eq!(g.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
}

/// Parallel products started from several threads at once (one of them runs on the kernel
/// team, the others on rayon's pool while the team is busy), on pools of two and three
/// threads: every result is bit for bit the serial product (each task owns whole output tiles
/// and sums K in the same order).
#[test]
fn parallel_products_from_concurrent_callers_match_the_serial_product() {
    let isa = Isa::detected();
    let (m, n, k) = (40, 700, 150);
    let av = values(m * k, 7);
    let bv = values(k * n, 8);
    let a = MatRef::new(&av, m, k, k, 1).unwrap();
    let b = MatRef::new(&bv, k, n, n, 1).unwrap();
    let product = |parallel: bool| {
        let mut c = vec![f32::NAN; m * n];
        sgemm(
            isa,
            m,
            n,
            k,
            AOperand::Mat(a),
            BOperand::Mat(b),
            &mut c,
            n,
            &Epilogue::NONE,
            parallel,
        )
        .unwrap();
        c.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
    };
    let serial = product(false);
    for threads in [2, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..25 {
                        let got = pool.install(|| product(true));
                        assert!(got == serial, "{threads} threads: parallel differs");
                    }
                });
            }
        });
    }
}
