//! Custom operators: kernels registered from Rust at run time for operators tsrun has none for
//! (a project's own `myops::fused_gelu`, or `torchvision::deform_conv2d`), by schema string.
//!
//! A registration does what PyTorch's `torch.library.define` + `impl` do for TorchScript: the
//! schema joins the global [`SchemaRegistry`] (after PyTorch's own overloads of the same name),
//! so the compiler type-checks `torch.ops.myops.fused_gelu(x)`, fills in its defaults and the
//! printers print the node as PyTorch does; the kernel joins a process-wide table that the
//! interpreter consults when it compiles a function into a plan. The plan holds the kernel
//! itself, so a call reaches it directly, without any lookup or lock.
//!
//! Registrations are permanent and cannot be replaced, as PyTorch refuses a second `define` of
//! one overload: a plan compiled earlier keeps the kernel it resolved, so a replacement would
//! leave two kernels answering for one operator.

use super::Registry;
use crate::ops::is_interpreter_op;
use crate::ops::schema::{has_type_vars, parse_schema, FunctionSchema, SchemaRegistry};
use crate::values::matches_type;
use crate::values::IValue;
use crate::values::Type;
use crate::{Error, Result};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// The kernel of a custom operator: the call's inputs in schema order, every default filled in
/// by the compiler (`a=1.0` left out at the call site arrives as `IValue::Double(1.0)`), and its
/// result: one value, or an `IValue::Tuple` with one item per output for an operator with
/// several (`-> (Tensor, Tensor)`).
pub type CustomKernel = Arc<dyn Fn(&[IValue]) -> Result<IValue> + Send + Sync + 'static>;

/// A registered operator as a plan holds it.
#[derive(Clone)]
pub(crate) struct CustomOp {
    /// `myops::fused_gelu`, as errors name it.
    pub name: Arc<str>,
    pub kernel: CustomKernel,
    schema: Arc<FunctionSchema>,
}

impl CustomOp {
    /// Run the kernel on `inputs`, checking that its result has the schema's return types (a
    /// wrong type would otherwise surface far away, in whichever operator reads it next). Any
    /// failure names the operator.
    pub fn call(&self, inputs: &[IValue]) -> Result<IValue> {
        (self.kernel)(inputs)
            .and_then(|out| self.check_result(out))
            .map_err(|e| Error::CustomKernelFailed {
                op: self.name.to_string(),
                source: Box::new(e),
            })
    }

    fn check_result(&self, out: IValue) -> Result<IValue> {
        if self.schema.is_varret {
            return Ok(out);
        }
        let returns = &self.schema.returns;
        let fits = |v: &IValue, t: &Type| has_type_vars(t) || matches_type(v, t);
        let ok = match (returns.as_slice(), &out) {
            ([], IValue::None) => true,
            ([], _) => false,
            ([one], v) => fits(v, &one.ty),
            (many, IValue::Tuple(t)) => {
                t.items().len() == many.len()
                    && t.items().iter().zip(many).all(|(v, r)| fits(v, &r.ty))
            }
            _ => false,
        };
        if ok {
            return Ok(out);
        }
        let declared: Vec<String> = returns.iter().map(|r| r.ty.to_string()).collect();
        Err(Error::Kernel(format!(
            "the kernel returned {} where the schema declares ({})",
            out.kind_name(),
            declared.join(", ")
        )))
    }
}

/// Kernels registered at run time, by qualified overload name (`myops::fused_gelu`,
/// `myops::f.out`). Written only by [`register_op`]; read when a plan is compiled.
fn registered() -> &'static RwLock<HashMap<String, CustomOp>> {
    static REGISTERED: OnceLock<RwLock<HashMap<String, CustomOp>>> = OnceLock::new();
    REGISTERED.get_or_init(Default::default)
}

/// Register `kernel` as the implementation of the operator `schema` declares, for every module
/// of this process: `"myops::fused_gelu(Tensor x, float a=1.0) -> Tensor"` makes
/// `torch.ops.myops.fused_gelu(x)` in archived code compile, print and run like a built-in
/// operator. The schema uses PyTorch's syntax (`torch.library.define`'s, with the qualified name
/// in front; an overload is named as in `myops::f.Scalar(...)`).
///
/// Kernels are resolved once, when a method is first compiled for running, so register before
/// the first call (or `Module::prepare`) of a method that uses the operator; loading the module
/// may come before or after. A call that fails because the operator is not registered
/// ([`Error::UnsupportedOps`], naming it and its source line) leaves nothing compiled, so the
/// next call after registering runs; a method compiled while the operator sat unregistered in
/// a branch it did not take keeps reporting it missing when the branch is reached.
///
/// The kernel receives the inputs in schema order with defaults filled in, and returns one
/// value, or an `IValue::Tuple` for several outputs; its error reaches the caller inside the
/// TorchScript traceback, as [`Error::CustomKernelFailed`] naming the operator (a kernel may
/// report a bad input as [`Error::Kernel`]). A result whose type differs from the schema's
/// returns is such an error too.
///
/// # Errors
///
/// - [`Error::InvalidSchema`]: `schema` does not parse (the error gives the byte and the
///   problem).
/// - [`Error::OpAlreadyRegistered`]: the overload already has a kernel, built into tsrun or
///   registered before. Registrations are permanent and never replaced, as PyTorch refuses a
///   second `define`: plans compiled earlier keep the kernel they resolved.
/// - [`Error::SchemaMismatch`]: PyTorch's operator table (`fixtures/schemas.txt`) already
///   declares this overload, without a kernel in tsrun (`torchvision::deform_conv2d`), and
///   `schema` declares it differently; the kernel must implement the declared schema.
///
/// ```no_run
/// use tsrun::{IValue, Tensor};
/// tsrun::register_op("myops::double_it(Tensor x) -> Tensor", |args: &[IValue]| {
///     let x: Vec<f32> = match args.first() {
///         Some(IValue::Tensor(t)) => t.to_vec()?,
///         _ => return Err(tsrun::Error::Kernel("x must be a Tensor".into())),
///     };
///     let doubled: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
///     let n = doubled.len();
///     Ok(IValue::Tensor(Tensor::from_vec(doubled, &[n])?))
/// })?;
/// # Ok::<(), tsrun::Error>(())
/// ```
pub fn register_op<F>(schema: &str, kernel: F) -> Result<()>
where
    F: Fn(&[IValue]) -> Result<IValue> + Send + Sync + 'static,
{
    let parsed = parse_schema(schema)?;
    let qualified = parsed.qualified_name();
    // One registration at a time: the checks below and the insertions are one step.
    let mut ops = registered().write();
    if ops.contains_key(&qualified) {
        return Err(Error::OpAlreadyRegistered {
            op: qualified,
            builtin: false,
        });
    }
    if Registry::global()
        .lookup(&parsed.name, &parsed.overload)
        .is_some()
        || is_interpreter_op(&qualified)
    {
        return Err(Error::OpAlreadyRegistered {
            op: qualified,
            builtin: true,
        });
    }
    let schemas = SchemaRegistry::global();
    let known = schemas.find(&qualified);
    if let Some(known) = &known {
        if !known.same_signature(&parsed) {
            let declared = schemas
                .schema_line(&qualified)
                .map_or_else(|| known.qualified_name(), str::to_string);
            return Err(Error::SchemaMismatch {
                op: qualified,
                given: schema.trim().to_string(),
                known: declared,
            });
        }
    }
    let parsed = Arc::new(parsed);
    ops.insert(
        qualified.clone(),
        CustomOp {
            name: qualified.into(),
            kernel: Arc::new(kernel),
            schema: known.clone().unwrap_or_else(|| parsed.clone()),
        },
    );
    // The kernel is in place before the compiler can see the schema, so no plan is compiled
    // against a schema whose kernel is still missing.
    if known.is_none() {
        schemas.define(parsed);
    }
    Ok(())
}

/// The kernel registered for exactly `qualified` (`myops::fused_gelu`, `myops::f.out`).
pub(crate) fn lookup(qualified: &str) -> Option<CustomOp> {
    registered().read().get(qualified).cloned()
}

/// Whether a kernel is registered at run time for exactly the overload `qualified`.
pub fn is_registered(qualified: &str) -> bool {
    registered().read().contains_key(qualified)
}

/// The overloads with a kernel registered at run time, sorted.
pub fn registered_ops() -> Vec<String> {
    let mut names: Vec<String> = registered().read().keys().cloned().collect();
    names.sort_unstable();
    names
}
