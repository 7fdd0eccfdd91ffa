//! Overload resolution against operator schemas, as PyTorch's `tryMatchSchema` /
//! `matchSchemas`: positional and keyword arguments, defaults inserted as constants, implicit
//! conversions, type variables, and the output types.

use super::builder::Builder;
use crate::ir::graph::ValueId;
use crate::ops::schema::{
    eval_type_vars, is_subtype, match_type_vars, Argument, FunctionSchema, TypeEnv,
};
use crate::values::types::Type;
use std::sync::Arc;

/// A successful match: the inputs in schema order (defaults filled) and the return types.
pub struct Matched {
    pub schema: Arc<FunctionSchema>,
    pub inputs: Vec<ValueId>,
    pub return_types: Vec<Type>,
}

/// Pick the first overload that matches, first without implicit conversions, then with them
/// (a single overload is tried with conversions directly).
pub fn match_schemas(
    b: &mut Builder,
    schemas: &[Arc<FunctionSchema>],
    self_value: Option<ValueId>,
    args: &[ValueId],
    kwargs: &[(String, ValueId)],
) -> Result<Matched, String> {
    let passes: &[bool] = if schemas.len() == 1 {
        &[true]
    } else {
        &[false, true]
    };
    let mut failures = Vec::new();
    for &allow_conversions in passes {
        for schema in schemas {
            let mark = b.graph.block(b.block).nodes.len();
            match try_match_schema(b, schema, self_value, args, kwargs, allow_conversions) {
                Ok(m) => return Ok(m),
                Err(e) => {
                    // drop conversions and constants inserted by the failed attempt
                    let block = b.block;
                    b.graph.truncate_block(block, mark);
                    // As PyTorch's `matchSchemas`: the reasons come from the last pass
                    // (conversions allowed), one line per overload.
                    if allow_conversions {
                        failures.push(format!("  {}: {e}", schema.qualified_name()));
                    }
                }
            }
        }
    }
    let arg_types: Vec<String> = self_value
        .iter()
        .chain(args)
        .map(|v| b.ty(*v).to_string())
        .chain(kwargs.iter().map(|(k, v)| format!("{k}={}", b.ty(*v))))
        .collect();
    Err(format!(
        "no overload of {} matches arguments ({}):\n{}",
        schemas.first().map(|s| s.name.as_str()).unwrap_or("?"),
        arg_types.join(", "),
        failures.join("\n")
    ))
}

pub fn try_match_schema(
    b: &mut Builder,
    schema: &Arc<FunctionSchema>,
    mut self_value: Option<ValueId>,
    args: &[ValueId],
    kwargs: &[(String, ValueId)],
    allow_conversions: bool,
) -> Result<Matched, String> {
    let mut env = TypeEnv::new();
    let mut inputs = Vec::with_capacity(schema.arguments.len());
    let mut used_args = 0;
    let mut used_kwargs = vec![false; kwargs.len()];
    for (i, arg) in schema.arguments.iter().enumerate() {
        let actual = if arg.name == "self" && self_value.is_some() {
            self_value.take()
        } else if !arg.kwarg_only && used_args < args.len() {
            if allow_conversions && varargs_can_be_list(schema, i, arg) {
                let first = args[used_args];
                let first_ty = b.ty(first).clone();
                if !matches!(first_ty, Type::List(_)) && !convertible_to_list(&first_ty, arg) {
                    let elem = match unwrap_optional(&arg.ty) {
                        Type::List(e) => (**e).clone(),
                        _ => return Err("not a list".into()),
                    };
                    let rest: Vec<ValueId> = args[used_args..].to_vec();
                    for &v in &rest {
                        if !is_subtype(b.ty(v), &elem) {
                            return Err(format!("cannot pack {} into {}[]", b.ty(v), elem));
                        }
                    }
                    let list = b.insert1("prim::ListConstruct", None, rest, Type::list(elem));
                    used_args = args.len();
                    inputs.push(list);
                    continue;
                }
            }
            used_args += 1;
            Some(args[used_args - 1])
        } else if let Some(k) = kwargs.iter().position(|(n, _)| *n == arg.name) {
            used_kwargs[k] = true;
            Some(kwargs[k].1)
        } else if let Some(d) = &arg.default {
            // PyTorch inserts a default through `NamedValue(default)`, which has no range.
            let source = b.source.take();
            let v = b.constant(d.clone());
            b.source = source;
            Some(v)
        } else {
            return Err(format!("argument `{}` not provided", arg.name));
        };
        let Some(actual) = actual else {
            return Err("self".into());
        };
        inputs.push(match_argument(b, arg, actual, &mut env, allow_conversions)?);
    }
    if self_value.is_some() {
        return Err("unused self argument".into());
    }
    if schema.is_vararg {
        inputs.extend_from_slice(&args[used_args.min(args.len())..]);
        used_args = args.len();
    }
    if used_args < args.len() {
        return Err(format!(
            "expected at most {} positional arguments, got {}",
            used_args,
            args.len()
        ));
    }
    if let Some(k) = used_kwargs.iter().position(|u| !u) {
        return Err(format!("unknown keyword argument `{}`", kwargs[k].0));
    }
    let return_types = schema
        .returns
        .iter()
        .map(|r| eval_type_vars(&r.ty, &env).ok_or_else(|| format!("cannot infer {}", r.ty)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Matched {
        schema: schema.clone(),
        inputs,
        return_types,
    })
}

fn unwrap_optional(t: &Type) -> &Type {
    match t {
        Type::Optional(e) => e,
        t => t,
    }
}

/// The last positional formal is a non-broadcasting list: `x.view(1, 2, 3)` packs the
/// remaining positional arguments into it.
fn varargs_can_be_list(schema: &FunctionSchema, index: usize, arg: &Argument) -> bool {
    let is_last = schema
        .arguments
        .get(index + 1)
        .is_none_or(|next| next.kwarg_only);
    // the formal itself must be a list (`varargsCanBeUsedAsList`): not `Optional[List[T]]`
    let is_list = matches!(&arg.ty, Type::List(e) if !matches!(**e, Type::Var(_)));
    is_last && is_list && arg.fixed_len.is_none()
}

/// A homogeneous tuple may be passed where a list of its element type is expected.
fn convertible_to_list(actual: &Type, arg: &Argument) -> bool {
    match (actual, unwrap_optional(&arg.ty)) {
        (Type::Tuple(elems), Type::List(e)) => elems.iter().all(|t| is_subtype(t, e)),
        _ => false,
    }
}

fn match_argument(
    b: &mut Builder,
    arg: &Argument,
    value: ValueId,
    env: &mut TypeEnv,
    allow_conversions: bool,
) -> Result<ValueId, String> {
    let mut value = value;
    let vty = b.ty(value).clone();
    // a single int/float where `int[N]`/`float[N]` is expected is repeated N times
    if let (Some(n), Type::List(e)) = (arg.fixed_len, unwrap_optional(&arg.ty)) {
        if matches!(vty, Type::Int | Type::Float) && **e == vty {
            value = b.insert1(
                "prim::ListConstruct",
                None,
                vec![value; n],
                Type::list(vty.clone()),
            );
        }
    }
    let vty = b.ty(value).clone();
    if !match_type_vars(&arg.ty, &vty, env) {
        return Err(format!(
            "argument `{}`: type {} does not match {}",
            arg.name, vty, arg.ty
        ));
    }
    let concrete = eval_type_vars(&arg.ty, env).unwrap_or_else(|| arg.ty.clone());
    let value = convert_to_type(b, &concrete, value, allow_conversions);
    let vty = b.ty(value);
    if !is_subtype(vty, &concrete) {
        return Err(format!(
            "argument `{}` expected {}, found {}",
            arg.name, concrete, vty
        ));
    }
    Ok(value)
}

/// The elements of a tuple value: a `prim::TupleConstruct`'s inputs, else a new unpack.
pub fn tuple_elements(b: &mut Builder, value: ValueId) -> Vec<ValueId> {
    if let crate::ir::graph::Def::Node(n, _) = b.graph.value(value).def {
        let node = b.graph.node(n);
        if node.kind == "prim::TupleConstruct" {
            return node.inputs.clone();
        }
    }
    let types = match b.ty(value) {
        Type::Tuple(ts) => ts.clone(),
        _ => Vec::new(),
    };
    let n = b.insert("prim::TupleUnpack", None, vec![value], types);
    b.graph.node(n).outputs.clone()
}

/// Implicit conversions (`tryConvertToType`): tuple to list, tensor/number/bool to int or
/// float or Scalar, str to Device.
pub fn convert_to_type(
    b: &mut Builder,
    concrete: &Type,
    value: ValueId,
    allow_conversions: bool,
) -> ValueId {
    let vty = b.ty(value).clone();
    if let Type::Optional(inner) = concrete {
        if !matches!(vty, Type::Optional(_) | Type::NoneType) {
            return convert_to_type(b, inner, value, allow_conversions);
        }
    }
    let mut value = value;
    if let Type::Tuple(elems) = &vty {
        if let Type::List(e) = unwrap_optional(concrete) {
            if elems.iter().all(|t| is_subtype(t, e)) {
                let items = tuple_elements(b, value);
                value = b.insert1(
                    "prim::ListConstruct",
                    None,
                    items,
                    Type::list((**e).clone()),
                );
            }
        }
    }
    if !allow_conversions {
        return value;
    }
    let vty = b.ty(value).clone();
    let conversion = match (&vty, concrete) {
        (Type::Tensor, Type::Float) => Some(("aten::FloatImplicit", Type::Float)),
        (Type::Tensor, Type::Complex) => Some(("aten::ComplexImplicit", Type::Complex)),
        (Type::Tensor, Type::Int) => Some(("aten::IntImplicit", Type::Int)),
        (Type::Tensor, Type::Number) => Some(("aten::ScalarImplicit", Type::Number)),
        (Type::Number, Type::Float) | (Type::Bool, Type::Float) => {
            Some(("aten::Float", Type::Float))
        }
        (Type::Number, Type::Complex) => Some(("aten::Complex", Type::Complex)),
        (Type::Number, Type::Int) | (Type::Bool, Type::Int) | (Type::Bool, Type::Number) => {
            Some(("aten::Int", Type::Int))
        }
        (Type::Str, Type::Device) => Some(("aten::device", Type::Device)),
        _ => None,
    };
    match conversion {
        Some((op, out)) => {
            let overload = conversion_overload(op, &vty);
            b.insert1(op, Some(overload), vec![value], out)
        }
        None => value,
    }
}

/// The overload name of a conversion operator for an input of type `from`.
fn conversion_overload(op: &str, from: &Type) -> &'static str {
    match (op, from) {
        ("aten::FloatImplicit" | "aten::IntImplicit" | "aten::ScalarImplicit", _) => "",
        ("aten::ComplexImplicit", _) => "",
        ("aten::device", _) => "",
        (_, Type::Tensor) => "Tensor",
        (_, Type::Bool) => "bool",
        (_, Type::Number) => "Scalar",
        (_, Type::Int) => "int",
        (_, Type::Float) => "float",
        (_, Type::Str) => "str",
        _ => "",
    }
}
