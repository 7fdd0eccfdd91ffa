//! PyTorch's CPU capability: which build of its vectorized kernels ATen's `DispatchStub` runs
//! (`compute_cpu_capability` in DispatchStub.cpp), reported by `aten::_get_cpu_capability`.
//! Kernels whose results differ between those builds (`onednn::qadd.tensor`'s AVX-512 vector
//! body) follow it to agree with PyTorch on the same machine.
//!
//! On x86-64, as PyTorch's wheels: `ATEN_CPU_CAPABILITY=avx512|avx2|default` chooses (another
//! value is ignored, PyTorch warns), else AVX-512 when the CPU has `avx512vl`, `avx512bw`,
//! `avx512dq` and `fma`, AVX2 with `avx2` and `fma`, else the default build. Elsewhere only
//! `ATEN_CPU_CAPABILITY=default` is known: PyTorch's ARM, POWER and Z builds detect SVE, VSX or
//! ZVECTOR, which tsrun does not reproduce.

use super::kernels::unsupported_feature;
use super::{Args, Registry};
use crate::values::IValue;
use std::sync::OnceLock;

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_get_cpu_capability", get_cpu_capability);
}

/// The builds of PyTorch's x86-64 kernels.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CpuCapability {
    Default,
    Avx2,
    Avx512,
}

impl CpuCapability {
    /// PyTorch's name (`torch.backends.cpu.get_cpu_capability()`).
    fn name(self) -> &'static str {
        match self {
            CpuCapability::Default => "DEFAULT",
            CpuCapability::Avx2 => "AVX2",
            CpuCapability::Avx512 => "AVX512",
        }
    }
}

/// The capability PyTorch would run with in this process (read once, as PyTorch does); `None`
/// where it depends on detection tsrun does not reproduce (not x86-64).
pub(crate) fn cpu_capability() -> Option<CpuCapability> {
    static CAPABILITY: OnceLock<Option<CpuCapability>> = OnceLock::new();
    *CAPABILITY.get_or_init(|| {
        let chosen = std::env::var("ATEN_CPU_CAPABILITY").ok();
        match chosen.as_deref() {
            Some("default") => Some(CpuCapability::Default),
            #[cfg(target_arch = "x86_64")]
            Some("avx512") => Some(CpuCapability::Avx512),
            #[cfg(target_arch = "x86_64")]
            Some("avx2") => Some(CpuCapability::Avx2),
            _ => detected(),
        }
    })
}

#[cfg(target_arch = "x86_64")]
fn detected() -> Option<CpuCapability> {
    let fma = is_x86_feature_detected!("fma");
    Some(
        if fma
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
        {
            CpuCapability::Avx512
        } else if fma && is_x86_feature_detected!("avx2") {
            CpuCapability::Avx2
        } else {
            CpuCapability::Default
        },
    )
}

#[cfg(not(target_arch = "x86_64"))]
fn detected() -> Option<CpuCapability> {
    None
}

fn get_cpu_capability(a: &mut Args<'_>) -> crate::Result<IValue> {
    let capability = cpu_capability().ok_or_else(|| {
        unsupported_feature(
            a.op,
            "the CPU capability of a build for another architecture than x86-64 (SVE, VSX \
             or ZVECTOR detection)",
        )
    })?;
    Ok(IValue::String(capability.name().into()))
}
