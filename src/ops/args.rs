//! Typed access to a kernel's positional arguments.

use crate::tensor::{DType, Scalar, Tensor};
use crate::values::{Generator, SharedGenerator};
use crate::values::{IValue, List};
use crate::Error;
use parking_lot::Mutex;
use std::sync::Arc;

/// PyTorch's quantized engine (`torch.backends.quantized.engine`) whose arithmetic the
/// quantized convolutions reproduce. PyTorch's packed weights take the engine current when
/// they are unpacked at load; tsrun takes it per call ([`crate::runtime::RunOptions`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuantizedEngine {
    /// PyTorch's default engine (`x86`) as it runs on this machine: [`QuantizedEngine::X86`] on
    /// Linux where the CPU has AVX512-VNNI (`cpuinfo_has_x86_avx512vnni`, which PyTorch
    /// checks), else fbgemm's arithmetic, as the `x86` engine then runs every convolution
    /// through fbgemm.
    #[default]
    Native,
    /// fbgemm's integer requantization (`torch.backends.quantized.engine = "fbgemm"`).
    Fbgemm,
    /// The `x86` engine as it runs on CPUs with AVX512-VNNI, whatever this CPU has (to
    /// reproduce results computed on such a machine): it hands a convolution whose weight is
    /// symmetric (zero points 0), with at most 100 groups and no output padding, to oneDNN
    /// (`should_use_onednn_quant`), whose float requantization rounds about one output in a
    /// few thousand to the other neighbour; everything else runs as fbgemm.
    X86,
    /// PyTorch's `qnnpack` engine on x86 (its SSE2 kernels): convolutions and linear layers
    /// add the bias quantized to int32 before one float multiply, and `add`, average pooling
    /// and the spatial `mean` run QNNPACK's own integer kernels.
    Qnnpack,
}

impl QuantizedEngine {
    /// Whether eligible convolutions follow oneDNN's requantization (see
    /// [`QuantizedEngine::X86`]).
    pub fn onednn_convolutions(self) -> bool {
        match self {
            QuantizedEngine::Fbgemm | QuantizedEngine::Qnnpack => false,
            QuantizedEngine::X86 => true,
            QuantizedEngine::Native => x86_engine_uses_onednn(),
        }
    }

    /// Whether quantized kernels follow QNNPACK (see [`QuantizedEngine::Qnnpack`]).
    pub fn qnnpack(self) -> bool {
        self == QuantizedEngine::Qnnpack
    }
}

/// Whether PyTorch's x86 engine would use oneDNN here: Linux (`should_use_onednn_quant` uses
/// fbgemm elsewhere) on a CPU with AVX512-VNNI (detected once).
fn x86_engine_uses_onednn() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *VNNI.get_or_init(|| is_x86_feature_detected!("avx512vnni"))
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

/// Per-call state kernels may need.
pub struct OpContext {
    /// The default random generator (`torch.manual_seed` sets it).
    pub generator: SharedGenerator,
    /// The call's deadline, step budget, depth and cancel flag (`RunOptions`); `None` runs
    /// unbounded except for the interpreter's default call depth.
    pub limits: Option<Arc<super::call_limits::CallLimits>>,
    /// Whose arithmetic the quantized convolutions follow.
    pub quantized_engine: QuantizedEngine,
}

impl Default for OpContext {
    fn default() -> Self {
        OpContext {
            generator: Arc::new(Mutex::new(Generator::new(Generator::DEFAULT_SEED))),
            limits: None,
            quantized_engine: Default::default(),
        }
    }
}

impl OpContext {
    /// A context with its own generator seeded like `torch.manual_seed(seed)`.
    pub fn with_seed(seed: u64) -> OpContext {
        OpContext {
            generator: Arc::new(Mutex::new(Generator::new(seed))),
            limits: None,
            quantized_engine: Default::default(),
        }
    }
}

/// A kernel's arguments: the operator name (for errors), the values, and the context.
pub struct Args<'a> {
    pub op: &'a str,
    pub values: &'a mut [IValue],
    pub ctx: &'a OpContext,
}

impl<'a> Args<'a> {
    pub fn new(op: &'a str, values: &'a mut [IValue], ctx: &'a OpContext) -> Args<'a> {
        Args { op, values, ctx }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn bad(&self, i: usize, expected: &'static str) -> Error {
        Error::BadArgument {
            op: self.op.to_string(),
            index: i,
            expected,
            got: self
                .values
                .get(i)
                .map(|v| v.kind_name().to_string())
                .unwrap_or_else(|| "nothing (too few arguments)".into()),
        }
    }

    pub fn get(&self, i: usize) -> crate::Result<&IValue> {
        self.values.get(i).ok_or_else(|| self.bad(i, "an argument"))
    }

    /// Move argument `i` out (leaves `None`), e.g. to reuse a buffer.
    pub fn take(&mut self, i: usize) -> crate::Result<IValue> {
        if i >= self.values.len() {
            return Err(self.bad(i, "an argument"));
        }
        Ok(std::mem::take(&mut self.values[i]))
    }

    pub fn is_none(&self, i: usize) -> bool {
        matches!(self.values.get(i), None | Some(IValue::None))
    }

    /// The generator a random op draws from: its `Generator? generator` argument `i` when one is
    /// given, else the call's default generator (`torch.manual_seed`'s).
    pub fn generator(&self, i: usize) -> crate::Result<SharedGenerator> {
        match self.values.get(i) {
            None | Some(IValue::None) => Ok(self.ctx.generator.clone()),
            Some(IValue::Generator(g)) => Ok(g.clone()),
            Some(_) => Err(self.bad(i, "a Generator")),
        }
    }

    /// A strided `Tensor` argument: a sparse or nested one is refused naming this op and the
    /// layout (as PyTorch's dispatcher refuses a kernel its backend lacks).
    pub fn tensor(&self, i: usize) -> crate::Result<Tensor> {
        match self.get(i)? {
            IValue::Tensor(t) => match t.sparse_parts() {
                None if t.is_nested() => Err(crate::tensor::TensorError::NestedNotSupported {
                    op: Some(self.op.to_string()),
                }
                .into()),
                None => Ok(t.clone()),
                Some(parts) => Err(crate::tensor::TensorError::NotStrided {
                    op: Some(self.op.to_string()),
                    layout: parts.layout(),
                }
                .into()),
            },
            _ => Err(self.bad(i, "Tensor")),
        }
    }
    /// A `Tensor` argument of any layout, for kernels that handle sparse tensors (or only read
    /// metadata every layout has: size, dtype, layout).
    pub fn any_layout_tensor(&self, i: usize) -> crate::Result<Tensor> {
        match self.get(i)? {
            IValue::Tensor(t) => Ok(t.clone()),
            _ => Err(self.bad(i, "Tensor")),
        }
    }
    pub fn opt_any_layout_tensor(&self, i: usize) -> crate::Result<Option<Tensor>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.any_layout_tensor(i).map(Some)
    }
    pub fn opt_tensor(&self, i: usize) -> crate::Result<Option<Tensor>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.tensor(i).map(Some)
    }

    pub fn int(&self, i: usize) -> crate::Result<i64> {
        match self.get(i)? {
            IValue::Int(v) => Ok(*v),
            IValue::Bool(b) => Ok(*b as i64),
            _ => Err(self.bad(i, "int")),
        }
    }
    pub fn opt_int(&self, i: usize) -> crate::Result<Option<i64>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.int(i).map(Some)
    }

    pub fn double(&self, i: usize) -> crate::Result<f64> {
        match self.get(i)? {
            IValue::Double(v) => Ok(*v),
            IValue::Int(v) => Ok(*v as f64),
            IValue::Bool(b) => Ok(*b as i64 as f64),
            _ => Err(self.bad(i, "float")),
        }
    }
    pub fn opt_double(&self, i: usize) -> crate::Result<Option<f64>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.double(i).map(Some)
    }

    pub fn bool(&self, i: usize) -> crate::Result<bool> {
        match self.get(i)? {
            IValue::Bool(b) => Ok(*b),
            IValue::Int(v) => Ok(*v != 0),
            _ => Err(self.bad(i, "bool")),
        }
    }
    pub fn opt_bool(&self, i: usize) -> crate::Result<Option<bool>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.bool(i).map(Some)
    }

    /// A `Scalar` argument (bool, int, float or complex).
    pub fn scalar(&self, i: usize) -> crate::Result<Scalar> {
        self.get(i)?
            .as_scalar()
            .ok_or_else(|| self.bad(i, "Scalar"))
    }
    pub fn opt_scalar(&self, i: usize) -> crate::Result<Option<Scalar>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.scalar(i).map(Some)
    }

    pub fn str(&self, i: usize) -> crate::Result<Arc<str>> {
        match self.get(i)? {
            IValue::String(s) => Ok(s.clone()),
            _ => Err(self.bad(i, "str")),
        }
    }
    pub fn opt_str(&self, i: usize) -> crate::Result<Option<Arc<str>>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.str(i).map(Some)
    }

    pub fn list(&self, i: usize) -> crate::Result<List> {
        match self.get(i)? {
            IValue::List(l) => Ok(l.clone()),
            _ => Err(self.bad(i, "List")),
        }
    }

    /// An `int[]` argument. A single int is accepted and broadcast by the caller if the schema
    /// says `int[N]` (PyTorch allows `kernel_size=3` for `int[2]`).
    pub fn int_list(&self, i: usize) -> crate::Result<Vec<i64>> {
        match self.get(i)? {
            IValue::List(l) => l
                .items()
                .iter()
                .map(|v| v.as_int())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(i, "int[]")),
            IValue::Tuple(t) => t
                .items()
                .iter()
                .map(|v| v.as_int())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(i, "int[]")),
            IValue::Int(v) => Ok(vec![*v]),
            _ => Err(self.bad(i, "int[]")),
        }
    }
    pub fn opt_int_list(&self, i: usize) -> crate::Result<Option<Vec<i64>>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.int_list(i).map(Some)
    }

    pub fn double_list(&self, i: usize) -> crate::Result<Vec<f64>> {
        match self.get(i)? {
            IValue::List(l) => l
                .items()
                .iter()
                .map(|v| v.as_double())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(i, "float[]")),
            IValue::Double(v) => Ok(vec![*v]),
            _ => Err(self.bad(i, "float[]")),
        }
    }
    pub fn opt_double_list(&self, i: usize) -> crate::Result<Option<Vec<f64>>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.double_list(i).map(Some)
    }

    pub fn bool_list(&self, i: usize) -> crate::Result<Vec<bool>> {
        match self.get(i)? {
            IValue::List(l) => l
                .items()
                .iter()
                .map(|v| v.as_bool())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(i, "bool[]")),
            _ => Err(self.bad(i, "bool[]")),
        }
    }

    pub fn tensor_list(&self, i: usize) -> crate::Result<Vec<Tensor>> {
        match self.get(i)? {
            IValue::List(l) => l
                .items()
                .iter()
                .map(|v| v.as_tensor().cloned())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(i, "Tensor[]")),
            IValue::Tuple(t) => t
                .items()
                .iter()
                .map(|v| v.as_tensor().cloned())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(i, "Tensor[]")),
            _ => Err(self.bad(i, "Tensor[]")),
        }
    }

    /// A `Tensor?[]` argument (as `aten::index` takes).
    pub fn opt_tensor_list(&self, i: usize) -> crate::Result<Vec<Option<Tensor>>> {
        match self.get(i)? {
            IValue::List(l) => l
                .items()
                .iter()
                .map(|v| match v {
                    IValue::None => Some(None),
                    IValue::Tensor(t) => Some(Some(t.clone())),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(i, "Tensor?[]")),
            _ => Err(self.bad(i, "Tensor?[]")),
        }
    }

    /// A `ScalarType` argument (an int in TorchScript).
    pub fn dtype(&self, i: usize) -> crate::Result<DType> {
        let n = self.int(i)?;
        DType::from_scalar_type(n).ok_or_else(|| self.bad(i, "ScalarType"))
    }
    pub fn opt_dtype(&self, i: usize) -> crate::Result<Option<DType>> {
        if self.is_none(i) {
            return Ok(None);
        }
        self.dtype(i).map(Some)
    }

    /// Finish an out= overload (`sort.values`, `max.dim_max`): write each tensor of `result` (one
    /// tensor, or a tuple of them) into the out tensors at `first..` and return those, as
    /// PyTorch returns its `out` arguments. tsrun cannot resize a caller's tensor in place, so an
    /// out tensor must already have the result's shape, and its dtype.
    pub fn write_outs(&self, first: usize, result: IValue) -> crate::Result<IValue> {
        let results: Vec<Tensor> = match result {
            IValue::Tensor(t) => vec![t],
            IValue::Tuple(t) => t
                .items()
                .iter()
                .map(|v| v.as_tensor().cloned())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Error::Module(format!("{}: non-tensor result", self.op)))?,
            other => {
                return Err(Error::Module(format!(
                    "{}: cannot write a {} result to out=",
                    self.op,
                    other.kind_name()
                )))
            }
        };
        let mut outs = Vec::with_capacity(results.len());
        for (k, r) in results.iter().enumerate() {
            let out = self.tensor(first + k)?;
            if out.shape() != r.shape() || out.dtype() != r.dtype() {
                return Err(Error::Module(format!(
                    "{}: out tensor {k} is {:?} {}, the result is {:?} {} (tsrun does not resize \
                     out= tensors)",
                    self.op,
                    out.shape(),
                    out.dtype(),
                    r.shape(),
                    r.dtype()
                )));
            }
            // PyTorch's out= ops refuse an out tensor that partially overlaps an input.
            for input in self.values.iter().take(first) {
                if let IValue::Tensor(t) = input {
                    out.check_no_partial_overlap(t)?;
                }
            }
            out.copy_from(r)?;
            outs.push(IValue::Tensor(out));
        }
        Ok(match outs.len() {
            1 => outs.pop().unwrap_or_default(),
            _ => IValue::Tuple(crate::values::Tuple::new(outs)),
        })
    }
}
