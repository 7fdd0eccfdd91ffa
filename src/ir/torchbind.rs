//! Method signatures of the C++ (torchbind) classes quantized archives hold, e.g.
//! `__torch__.torch.classes.quantized.Conv2dPackedParamsBase`: archives carry no code for them,
//! so calls such as `_packed_params.unpack()` are typed from this table (PyTorch's
//! `torch::class_<...>.def(...)` registrations in ATen's quantized CPU code). The methods
//! themselves run natively (`ops::quantized::torchbind`); like PyTorch, `inlined_graph` keeps
//! them as `prim::CallMethod`.

use super::decls::{Param, Signature};
use crate::values::types::Type;

fn tensor_and_optional_bias() -> Type {
    Type::Tuple(vec![Type::Tensor, Type::Optional(Box::new(Type::Tensor))])
}

/// The signature of method `name` of torchbind class `class` (`self` first), if tsrun knows it.
pub fn method_signature(class: &str, name: &str) -> Option<Signature> {
    let short = class.strip_prefix("__torch__.torch.classes.quantized.")?;
    let ret = match (short, name) {
        (
            "Conv2dPackedParamsBase" | "Conv3dPackedParamsBase" | "LinearPackedParamsBase",
            "unpack",
        ) => tensor_and_optional_bias(),
        ("Conv2dPackedParamsBase" | "Conv3dPackedParamsBase", m) => match m {
            "weight" => Type::Tensor,
            "bias" => Type::Optional(Box::new(Type::Tensor)),
            "stride" | "padding" | "output_padding" | "dilation" => Type::list(Type::Int),
            "groups" => Type::Int,
            "transpose" => Type::Bool,
            _ => return None,
        },
        ("LinearPackedParamsBase", "bias") => Type::Optional(Box::new(Type::Tensor)),
        ("EmbeddingPackedParamsBase", "unpack") => Type::Tensor,
        ("EmbeddingPackedParamsBase", "bit_rate" | "version") => Type::Int,
        _ => return None,
    };
    Some(Signature {
        params: vec![Param {
            name: "self".into(),
            ty: Type::Class(class.into()),
            default: None,
            kwarg_only: false,
        }],
        return_type: ret,
    })
}
