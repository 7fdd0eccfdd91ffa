//! `torch.quasirandom.SobolEngine`'s operators, as ATen's SobolEngineOps.cpp computes them: the
//! state of direction numbers (`_sobol_engine_initialize_state_`, from Joe and Kuo's table for
//! up to 21201 dimensions), Owen scrambling of it (`_sobol_engine_scramble_`), and drawing and
//! fast-forwarding the Gray-code sequence (`_sobol_engine_draw`, `_sobol_engine_ff_`).
//!
//! The table is sobol_directions.bin, recovered from PyTorch's own state by
//! fixtures/gen_sobol_table.py (which documents the format and checks every row).

use super::kernels::{
    check_size, invalid_argument, not_implemented_for, rank_mismatch, shape_mismatch,
    unsupported_feature, value_err,
};
use super::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};

type R = crate::Result<IValue>;

/// Bits of every direction number (`MAXBIT`).
const MAXBIT: usize = 30;
/// Dimensions the table covers (`MAXDIM`).
const MAXDIM: usize = 21201;
/// PyTorch's `RECIPD`, the float `1 / 2^MAXBIT` results are scaled by.
const RECIPD: f32 = 1.0 / (1u32 << MAXBIT) as f32;

static TABLE: &[u8] = include_bytes!("sobol_directions.bin");

/// The table's bit stream, read least significant bit first.
struct TableBits {
    data: &'static [u8],
    pos: usize,
}

impl TableBits {
    fn take(&mut self, width: usize) -> crate::Result<i64> {
        let mut value = 0i64;
        for i in 0..width {
            let byte = self
                .data
                .get(self.pos / 8)
                .ok_or_else(|| value_err("the Sobol direction table is truncated"))?;
            value |= i64::from((byte >> (self.pos % 8)) & 1) << i;
            self.pos += 1;
        }
        Ok(value)
    }
}

/// The first `dimension` rows of the direction numbers, before the per-column power-of-two
/// scaling: row 0 all ones, row d from its polynomial and initial values by Bratley and Fox's
/// recurrence, as `_sobol_engine_initialize_state_` fills them.
fn direction_rows(dimension: usize) -> crate::Result<Vec<[i64; MAXBIT]>> {
    let header = TABLE
        .get(..12)
        .filter(|h| h.starts_with(b"TSSOBOL1"))
        .ok_or_else(|| value_err("the Sobol direction table has no header"))?;
    let rows = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
    check_size(
        "_sobol_engine_initialize_state_",
        "the number of rows of the Sobol direction table",
        MAXDIM as i64,
        rows as i64,
    )?;
    let mut bits = TableBits {
        data: &TABLE[12..],
        pos: 0,
    };
    let mut out = Vec::with_capacity(dimension);
    out.push([1i64; MAXBIT]);
    for _ in 1..dimension {
        let m = bits.take(5)? as usize;
        if m == 0 || m >= MAXBIT {
            return Err(invalid_argument(
                "_sobol_engine_initialize_state_",
                "a degree in the Sobol direction table",
                format!("must be in [1, {MAXBIT})"),
                m,
            ));
        }
        let p = (1i64 << m) | bits.take(m)?;
        let mut v = [0i64; MAXBIT];
        v[0] = 1;
        for (i, slot) in v.iter_mut().enumerate().take(m).skip(1) {
            *slot = (bits.take(i)? << 1) | 1;
        }
        for j in m..MAXBIT {
            let mut newv = v[j - m];
            let mut pow2 = 1i64;
            for k in 0..m {
                pow2 <<= 1;
                if (p >> (m - 1 - k)) & 1 == 1 {
                    newv ^= pow2 * v[j - k - 1];
                }
            }
            v[j] = newv;
        }
        out.push(v);
    }
    Ok(out)
}

fn check_long(t: &Tensor, what: &str) -> crate::Result<()> {
    if t.dtype() != DType::Int64 {
        return Err(super::kernels::wrong_dtype(
            "_sobol_engine",
            what,
            "int64",
            t.dtype(),
        ));
    }
    Ok(())
}

/// `_sobol_engine_initialize_state_`'s dimension: 1 to 21201, the table's rows.
fn table_dimension(args: &Args<'_>, i: usize) -> crate::Result<usize> {
    let d = args.int(i)?;
    usize::try_from(d)
        .ok()
        .filter(|&d| (1..=MAXDIM).contains(&d))
        .ok_or_else(|| {
            invalid_argument(
                "_sobol_engine_initialize_state_",
                "dimension",
                format!("must be in [1, {MAXDIM}]"),
                d,
            )
        })
}

fn dimension_arg(args: &Args<'_>, i: usize) -> crate::Result<usize> {
    let d = args.int(i)?;
    usize::try_from(d)
        .map_err(|_| invalid_argument(args.op, "dimension", "must be non-negative", d))
}

/// An int64 state [rows, cols] (cols >= MAXBIT), read row-major; `rows` exactly `dimension`
/// (`EXACT`, as the draw and initialization check) or at least it (scrambling reads the first
/// `dimension` rows).
struct State {
    values: Vec<i64>,
    cols: usize,
}

impl State {
    fn read(state: &Tensor, dimension: usize, exact: bool) -> crate::Result<State> {
        check_long(state, "sobolstate")?;
        let shape = state.shape();
        let rows_ok = shape.first().is_some_and(|&r| {
            if exact {
                r == dimension
            } else {
                r >= dimension
            }
        });
        if shape.len() != 2 || !rows_ok || shape[1] < MAXBIT {
            return Err(invalid_argument(
                "_sobol_engine",
                "sobolstate",
                format!(
                    "must have shape [{}{dimension}, at least {MAXBIT}]",
                    if exact { "" } else { "at least " }
                ),
                format!("{shape:?}"),
            ));
        }
        Ok(State {
            values: state.contiguous()?.to_vec::<i64>()?,
            cols: shape[1],
        })
    }

    fn at(&self, d: usize, j: usize) -> i64 {
        self.values[d * self.cols + j]
    }
}

/// The quasi vector: int64 of shape [dimension].
fn quasi_values(quasi: &Tensor, dimension: usize) -> crate::Result<Vec<i64>> {
    check_long(quasi, "quasi")?;
    if quasi.shape() != [dimension] {
        return Err(shape_mismatch(
            "_sobol_engine",
            "quasi",
            &[dimension],
            quasi.shape(),
        ));
    }
    quasi.contiguous()?.to_vec::<i64>()
}

/// `n` draws from `num_generated` must stay within the 2^30 points the 30 direction bits give.
fn check_count(n: i64, num_generated: i64) -> crate::Result<()> {
    if n < 0 {
        return Err(invalid_argument(
            "_sobol_engine",
            "n",
            "must be non-negative",
            n,
        ));
    }
    let limit = 1i64 << MAXBIT;
    if num_generated < 0 || num_generated.checked_add(n).is_none_or(|end| end >= limit) {
        return Err(invalid_argument(
            "_sobol_engine",
            "num_generated + n",
            format!("must be less than {limit} (SobolEngine's most points)"),
            format!("{num_generated} + {n}"),
        ));
    }
    Ok(())
}

/// `rightmost_zero(n)`: the index of the lowest zero bit of `n` (C's `%` for negatives, as
/// PyTorch's loop), the column the Gray-code step XORs in.
fn rightmost_zero(n: i64) -> usize {
    let (mut z, mut y) = (0, n);
    while y % 2 == 1 {
        z += 1;
        y /= 2;
    }
    z
}

/// XOR into `quasi` the state column of each of `n` Gray-code steps from `num_generated`
/// (checked by `check_count`), calling `each` with the running values after every step.
fn advance(
    quasi: &mut [i64],
    state: &State,
    n: i64,
    num_generated: i64,
    mut each: impl FnMut(&[i64]),
) {
    for i in 0..n {
        // below MAXBIT: num_generated + i < 2^MAXBIT - 1
        let l = rightmost_zero(num_generated + i);
        for (j, q) in quasi.iter_mut().enumerate() {
            *q ^= state.at(j, l);
        }
        each(quasi);
    }
}

/// `_sobol_engine_initialize_state_(self, dimension)`: rows `0..dimension` of `self` set to
/// the direction numbers, then every column `j` of all of `self` multiplied by `2^(29 - j)`.
fn initialize_state_(args: &mut Args<'_>) -> R {
    let state = args.tensor(0)?;
    let dimension = table_dimension(args, 1)?;
    let st = State::read(&state, dimension, true)?;
    if st.cols != MAXBIT {
        return Err(invalid_argument(
            "_sobol_engine_draw",
            "sobolstate",
            format!("must have {MAXBIT} columns"),
            format!("{} columns", st.cols),
        ));
    }
    let mut values = st.values;
    for (d, row) in direction_rows(dimension)?.iter().enumerate() {
        values[d * MAXBIT..(d + 1) * MAXBIT].copy_from_slice(row);
    }
    for row in values.chunks_exact_mut(MAXBIT) {
        for (j, v) in row.iter_mut().enumerate() {
            *v = v.wrapping_mul(1i64 << (MAXBIT - 1 - j));
        }
    }
    state.copy_from(&Tensor::from_vec(values, state.shape())?)?;
    Ok(IValue::Tensor(state))
}

/// `_sobol_engine_draw(quasi, n, sobolstate, dimension, num_generated, dtype)`: `n` points of
/// `dimension` coordinates (float32 unless `dtype`; float32 or float64) and the advanced quasi.
fn draw(args: &mut Args<'_>) -> R {
    let quasi = args.tensor(0)?;
    let n = args.int(1)?;
    let state = args.tensor(2)?;
    let dimension = dimension_arg(args, 3)?;
    let num_generated = args.int(4)?;
    let dtype = args.opt_dtype(5)?.unwrap_or(DType::Float32);
    let st = State::read(&state, dimension, true)?;
    let mut wquasi = quasi_values(&quasi, dimension)?;
    check_count(n, num_generated)?;
    if !matches!(dtype, DType::Float32 | DType::Float64) {
        return Err(not_implemented_for("_sobol_engine_draw", dtype));
    }
    let rows = usize::try_from(n)
        .map_err(|_| invalid_argument("_sobol_engine_draw", "n", "must be non-negative", n))?;
    // the result's allocation, checked (size, memory budget) before any drawing
    drop(Tensor::zeros(&[rows, dimension], dtype)?);
    let mut points: Vec<i64> = Vec::with_capacity(rows.saturating_mul(dimension));
    advance(&mut wquasi, &st, n, num_generated, |q| {
        points.extend_from_slice(q)
    });
    let result = if dtype == DType::Float64 {
        let scale = f64::from(RECIPD);
        let v: Vec<f64> = points.iter().map(|&x| x as f64 * scale).collect();
        Tensor::from_vec(v, &[rows, dimension])?
    } else {
        let v: Vec<f32> = points.iter().map(|&x| x as f32 * RECIPD).collect();
        Tensor::from_vec(v, &[rows, dimension])?
    };
    let wquasi = Tensor::from_vec(wquasi, quasi.shape())?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(result),
        IValue::Tensor(wquasi),
    ])))
}

/// `_sobol_engine_ff_(self, n, sobolstate, dimension, num_generated)`: `self` (the quasi
/// vector) advanced `n` steps in place.
fn fast_forward_(args: &mut Args<'_>) -> R {
    let quasi = args.tensor(0)?;
    let n = args.int(1)?;
    let state = args.tensor(2)?;
    let dimension = dimension_arg(args, 3)?;
    let num_generated = args.int(4)?;
    let st = State::read(&state, dimension, true)?;
    let mut q = quasi_values(&quasi, dimension)?;
    check_count(n, num_generated)?;
    advance(&mut q, &st, n, num_generated, |_| {});
    quasi.copy_from(&Tensor::from_vec(q, quasi.shape())?)?;
    Ok(IValue::Tensor(quasi))
}

/// `_sobol_engine_scramble_(self, ltm, dimension)`: Owen scrambling of the state's first
/// `dimension` rows by the int64 matrices `ltm` [dimension, MAXBIT, K] (diagonals taken as 1):
/// bit `29 - p` of entry (d, j) becomes the parity of `ltm_dots[d][p] & state[d][j]` over the
/// low MAXBIT bits, `ltm_dots[d][p]` being row p of matrix d read as a K-bit number.
fn scramble_(args: &mut Args<'_>) -> R {
    let state = args.tensor(0)?;
    let ltm = args.tensor(1)?;
    let dimension = dimension_arg(args, 2)?;
    let State {
        mut values,
        cols: state_cols,
    } = State::read(&state, dimension, false)?;
    if ltm.dtype() != DType::Int64 {
        return Err(unsupported_feature(
            args.op,
            format!(
                "ltm of dtype {} (PyTorch's SobolEngine passes int64)",
                ltm.dtype().name()
            ),
        ));
    }
    let shape = ltm.shape().to_vec();
    let [matrices, rows, cols] = shape[..] else {
        return Err(rank_mismatch(
            args.op,
            "ltm",
            RankRequirement::Exactly(3),
            &shape,
        ));
    };
    // PyTorch reads rows 0..MAXBIT of the first `dimension` matrices unchecked
    if matrices < dimension || rows < MAXBIT || cols == 0 || cols > 63 {
        return Err(invalid_argument(
            args.op,
            "ltm",
            format!("must have shape [>= {dimension}, >= {MAXBIT}, 1..=63]"),
            format!("{shape:?}"),
        ));
    }
    let m = ltm.contiguous()?.to_vec::<i64>()?;
    for d in 0..dimension {
        // ltm_dots[d][p] = sum over k of ltm[d][p][k] * 2^(cols-1-k), the diagonal as 1
        let dots: Vec<i64> = (0..MAXBIT)
            .map(|p| {
                (0..cols).fold(0i64, |acc, k| {
                    let bit = if k == p {
                        1
                    } else {
                        m[(d * rows + p) * cols + k]
                    };
                    acc.wrapping_add(bit.wrapping_mul(1i64 << (cols - 1 - k)))
                })
            })
            .collect();
        for v in &mut values[d * state_cols..d * state_cols + MAXBIT] {
            let vdj = *v;
            let mut t2 = 0i64;
            for (bit, p) in (0..MAXBIT).rev().enumerate() {
                let parity =
                    i64::from((dots[p] & vdj & ((1i64 << MAXBIT) - 1)).count_ones() % 2 == 1);
                t2 += parity << bit;
            }
            *v = t2;
        }
    }
    state.copy_from(&Tensor::from_vec(values, state.shape())?)?;
    Ok(IValue::Tensor(state))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_sobol_engine_initialize_state_", initialize_state_);
    r.add("aten::_sobol_engine_draw", draw);
    r.add("aten::_sobol_engine_ff_", fast_forward_);
    r.add("aten::_sobol_engine_scramble_", scramble_);
}
