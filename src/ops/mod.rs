//! Operator kernels by family, and the registry the interpreter dispatches through.
//!
//! A kernel receives the node's inputs positionally, in schema order, with every default already
//! filled in by the compiler (PyTorch graphs carry all arguments explicitly). It returns one
//! `IValue`; operators with several outputs return an `IValue::Tuple` that the interpreter
//! spreads over the node's outputs.
//!
//! Kernels are registered by exact qualified overload name (`aten::add.Tensor`); the default
//! overload has no suffix (`aten::relu`). Lookup is exact: an overload is supported only where a
//! kernel was registered for it, so a kernel serving several overloads handles each one's
//! arguments (tests/suite/ops_coverage.rs checks every name against `fixtures/schemas.txt`).

pub mod activation;
pub mod args;
pub mod aten_test_ops;
pub mod attention;
pub mod awaitables;
pub mod bessel;
pub mod c10d;
pub mod calculus;
pub mod call_limits;
pub mod conv;
pub mod cpu_capability;
pub mod creation;
pub mod custom;
pub mod deform_conv;
pub mod dyn_quant_4bit;
pub mod elementwise;
pub mod elementwise_chain;
pub mod embedding;
pub mod fft;
pub mod flat_buffers;
pub mod gemm;
pub mod grad_mode;
pub mod graph_pass_prims;
pub mod grids;
pub mod grouped_mm;
pub mod histogram;
pub mod image_codecs;
pub mod incomplete_gamma;
pub mod index;
pub mod int_matmul;
pub mod interpolate;
pub mod jagged;
pub mod jit_builtins;
pub mod jit_fusion_prims;
pub(crate) mod kernels;
pub mod linalg;
pub mod linalg_composite;
pub mod linalg_decomp;
pub mod linalg_dense;
pub mod linalg_eig;
pub mod linalg_ldl;
pub mod linalg_least_squares;
pub mod linalg_products;
pub mod losses;
pub mod matrix_build;
pub mod mkldnn;
pub mod mkldnn_prepacked;
pub mod mkldnn_rnn;
pub mod nested;
pub mod no_autograd;
pub mod norm;
pub mod norms;
pub mod onnx_attention;
pub mod onnx_symbolic;
pub mod optimizers;
pub mod orthogonal_polynomials;
pub mod out_variants;
pub mod packed;
pub mod philox;
pub mod pool;
pub mod prims;
pub mod profiler;
pub mod qparams_search;
pub mod quantized;
pub mod random;
pub mod random_samplers;
pub mod reduce;
pub mod rnn;
pub mod rotated_boxes;
pub mod scalar;
pub mod scaled_mm;
pub mod schema;
pub mod sdp_choice;
pub mod shape;
pub mod sobol;
pub mod sort;
pub mod sparse;
pub mod sparse_indices;
pub mod special;
pub mod static_runtime;
pub mod statistics;
pub mod storage_dtypes;
pub mod tensor_queries;
pub mod torch_library_ops;
pub mod type_queries;
pub mod view_copy;
pub mod vision;
pub mod xnnpack_prepacked;

pub use args::{Args, OpContext, QuantizedEngine};
pub use custom::{register_op, CustomKernel};

use crate::values::IValue;
use std::collections::HashMap;
use std::sync::OnceLock;

/// A kernel: reads its arguments, returns its result.
pub type Kernel = fn(&mut Args<'_>) -> crate::Result<IValue>;

/// Whether the exact overload `op` + `overload` (`aten::add` + `Tensor`; empty for the default
/// one) has a kernel: a built-in one, one registered at run time ([`register_op`]), or, for an
/// out= overload, its functional sibling's ([`out_variants`]).
pub fn has_kernel(op: &str, overload: &str) -> bool {
    if Registry::global().lookup(op, overload).is_some() {
        return true;
    }
    let qualified = if overload.is_empty() {
        op.to_string()
    } else {
        format!("{op}.{overload}")
    };
    custom::is_registered(&qualified) || out_variants::resolve(&qualified).is_some()
}

/// Name -> kernel table of the built-in kernels (custom operators registered at run time live
/// in [`custom`]).
#[derive(Default)]
pub struct Registry {
    kernels: HashMap<String, Kernel>,
    /// Names registered more than once, in registration order (the later kernel wins).
    replaced: Vec<String>,
}

impl Registry {
    /// Register `kernel` under `name` (`aten::add.Tensor` or `aten::relu`). A later registration of
    /// the same name replaces the earlier one.
    pub fn add(&mut self, name: &str, kernel: Kernel) {
        if self.kernels.insert(name.to_string(), kernel).is_some() {
            self.replaced.push(name.to_string());
        }
    }

    /// The names registered more than once (each later registration replaced a kernel): a
    /// test keeps this list to the intended overrides, since two families registering one
    /// overload would otherwise silently keep only the last.
    pub fn replaced(&self) -> &[String] {
        &self.replaced
    }

    /// Register one kernel under several names.
    pub fn add_all(&mut self, names: &[&str], kernel: Kernel) {
        for n in names {
            self.add(n, kernel);
        }
    }

    /// Register one kernel under several overloads of `op` (`""` is the default overload).
    pub fn add_overloads(&mut self, op: &str, overloads: &[&str], kernel: Kernel) {
        for o in overloads {
            if o.is_empty() {
                self.add(op, kernel);
            } else {
                self.add(&format!("{op}.{o}"), kernel);
            }
        }
    }

    /// Register `kernel` under `name` only if PyTorch defines that overload: for generic families
    /// (every math function lists `int`/`float`/`complex`/`bool` number overloads, in-place
    /// twins of every unary function) where not every member exists.
    pub fn add_if_defined(&mut self, name: &str, kernel: Kernel) {
        if crate::ops::schema::SchemaRegistry::global().contains(name) {
            self.add(name, kernel);
        }
    }

    /// [`Registry::add_if_defined`] for each of `overloads` of `op`.
    pub fn add_defined_overloads(&mut self, op: &str, overloads: &[&str], kernel: Kernel) {
        for o in overloads {
            if o.is_empty() {
                self.add_if_defined(op, kernel);
            } else {
                self.add_if_defined(&format!("{op}.{o}"), kernel);
            }
        }
    }

    /// The kernel registered for exactly `op` with `overload` (`aten::add` + `Tensor`; an empty
    /// overload is the default one). No fallback to other overloads: their arguments differ.
    pub fn lookup(&self, op: &str, overload: &str) -> Option<Kernel> {
        if overload.is_empty() {
            self.kernels.get(op).copied()
        } else {
            self.kernels.get(&format!("{op}.{overload}")).copied()
        }
    }

    /// Register under `new` the kernel registered as `old` (an operator PyTorch defines with
    /// the same arguments and results: `aten::special_i0` for `aten::i0`); nothing if `old` has
    /// no kernel.
    pub fn alias(&mut self, new: &str, old: &str) {
        if let Some(k) = self.kernels.get(old).copied() {
            self.add(new, k);
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.kernels.contains_key(name)
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.kernels.keys().map(|s| s.as_str()).collect();
        v.sort_unstable();
        v
    }

    /// The process-wide registry with every family registered.
    pub fn global() -> &'static Registry {
        static REGISTRY: OnceLock<Registry> = OnceLock::new();
        REGISTRY.get_or_init(|| {
            let mut r = Registry::default();
            elementwise::register(&mut r);
            activation::register(&mut r);
            reduce::register(&mut r);
            calculus::register(&mut r);
            statistics::register(&mut r);
            creation::register(&mut r);
            random::register(&mut r);
            philox::register(&mut r);
            random_samplers::register(&mut r);
            linalg::register(&mut r);
            linalg_products::register(&mut r);
            conv::register(&mut r);
            pool::register(&mut r);
            norm::register(&mut r);
            rnn::register(&mut r);
            packed::register(&mut r);
            norms::register(&mut r);
            matrix_build::register(&mut r);
            vision::register(&mut r);
            image_codecs::register(&mut r);
            deform_conv::register(&mut r);
            mkldnn::register(&mut r);
            mkldnn_rnn::register(&mut r);
            mkldnn_prepacked::register(&mut r);
            xnnpack_prepacked::register(&mut r);
            rotated_boxes::register(&mut r);
            attention::register(&mut r);
            onnx_attention::register(&mut r);
            onnx_symbolic::register(&mut r);
            sdp_choice::register(&mut r);
            embedding::register(&mut r);
            interpolate::register(&mut r);
            index::register(&mut r);
            shape::register(&mut r);
            view_copy::register(&mut r);
            sort::register(&mut r);
            type_queries::register(&mut r);
            fft::register(&mut r);
            linalg_dense::register(&mut r);
            linalg_decomp::register(&mut r);
            linalg_ldl::register(&mut r);
            linalg_eig::register(&mut r);
            linalg_least_squares::register(&mut r);
            scalar::register(&mut r);
            special::register(&mut r);
            bessel::register(&mut r);
            incomplete_gamma::register(&mut r);
            histogram::register(&mut r);
            linalg_composite::register(&mut r);
            losses::register(&mut r);
            grids::register(&mut r);
            tensor_queries::register(&mut r);
            cpu_capability::register(&mut r);
            orthogonal_polynomials::register(&mut r);
            prims::register(&mut r);
            static_runtime::register(&mut r);
            graph_pass_prims::register(&mut r);
            no_autograd::register(&mut r);
            jit_builtins::register(&mut r);
            optimizers::register(&mut r);
            flat_buffers::register(&mut r);
            sparse_indices::register(&mut r);
            aten_test_ops::register(&mut r);
            jagged::register(&mut r);
            nested::register(&mut r);
            torch_library_ops::register(&mut r);
            profiler::register(&mut r);
            c10d::register(&mut r);
            qparams_search::register(&mut r);
            dyn_quant_4bit::register(&mut r);
            grouped_mm::register(&mut r);
            scaled_mm::register(&mut r);
            sobol::register(&mut r);
            awaitables::register(&mut r);
            sparse::register(&mut r);
            // last: wraps the float kernels of the aten ops it gives a quantized path
            quantized::register(&mut r);
            r
        })
    }
}

/// Operators the interpreter executes itself rather than through a kernel.
pub fn is_interpreter_op(kind: &str) -> bool {
    matches!(
        kind,
        "prim::Constant"
            | "prim::If"
            | "prim::Loop"
            | "prim::CallMethod"
            | "prim::CallFunction"
            | "prim::GetAttr"
            | "prim::SetAttr"
            | "prim::TupleConstruct"
            | "prim::TupleUnpack"
            | "prim::TupleIndex"
            | "prim::TupleSlice"
            | "prim::ListConstruct"
            | "prim::ListUnpack"
            | "prim::DictConstruct"
            | "prim::RaiseException"
            | "prim::Uninitialized"
            | "prim::unchecked_cast"
            | "prim::unchecked_unwrap_optional"
            | "prim::data"
            | "prim::isinstance"
            | "prim::CreateObject"
            | "prim::Enter"
            | "prim::Exit"
            | "prim::Print"
            | "aten::warn"
            // forked calls and their futures (`torch.jit.fork` / `torch.jit.wait`)
            | "prim::fork"
            | "aten::wait"
    ) || jit_fusion_prims::NODE_PRIM_KINDS.contains(&kind)
}
