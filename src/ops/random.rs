//! Random number generation. PyTorch's CPU generator is an mt19937; tsrun keeps the same seed
//! interface. (Owner: ops family "random".)

use super::Registry;

/// The random generator behind `torch.manual_seed`, dropout and `rand*` ops.
pub struct Generator {
    seed: u64,
}

impl Generator {
    /// PyTorch's default CPU seed.
    pub const DEFAULT_SEED: u64 = 67280421310721;

    pub fn new(seed: u64) -> Generator {
        Generator { seed }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }
}

pub(crate) fn register(_r: &mut Registry) {}
