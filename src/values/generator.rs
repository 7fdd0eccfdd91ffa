//! PyTorch's CPU random generator: an mt19937 (from `rand_mt`) seeded like `torch.manual_seed`,
//! with the uniform and normal draws its distribution kernels (`ops/random.rs`) build on. A value
//! module, as TorchScript code holds generators as values (`torch.Generator(seed=...)`, the
//! `Generator` IValue) besides the call context's default one (`ops/args.rs`).

use parking_lot::Mutex;
use std::sync::Arc;

/// A generator shared by reference, as TorchScript's `Generator` values and the call context's
/// default generator are.
pub type SharedGenerator = Arc<Mutex<Generator>>;

/// The random generator behind `torch.manual_seed`, dropout and `rand*` ops. Equal generators
/// have the same seed and state, so draw the same from here on.
#[derive(Clone, PartialEq)]
pub struct Generator {
    seed: u64,
    /// The mt19937 core (`rand_mt`'s reference Mersenne Twister: `init_genrand` seeding and the
    /// same tempering as PyTorch's `mt19937`); boxed, as its state is 2.5 KB.
    core: Box<rand_mt::Mt>,
    /// Box-Muller's second sample, cached as PyTorch's generator does.
    next_double_normal: Option<f64>,
}

impl Generator {
    /// PyTorch's default CPU seed.
    pub const DEFAULT_SEED: u64 = 67280421310721;

    pub fn new(seed: u64) -> Generator {
        Generator {
            seed,
            // PyTorch's mt19937 takes the low 32 bits of the seed.
            core: Box::new(rand_mt::Mt::new(seed as u32)),
            next_double_normal: None,
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Reset to `seed` (`torch.manual_seed`).
    pub fn manual_seed(&mut self, seed: u64) {
        *self = Generator::new(seed);
    }

    /// Reseed from a nondeterministic source and return the new seed (`Generator.seed()`): 64
    /// random bits, as PyTorch's `getNonDeterministicRandom` reads for CPU generators.
    pub fn reseed_nondeterministic(&mut self) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        // std's `RandomState` keys come from the operating system's random source
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        let seed = h.finish();
        self.manual_seed(seed);
        seed
    }

    /// 32 random bits (`CPUGeneratorImpl::random`).
    pub fn random_u32(&mut self) -> u32 {
        self.core.next_u32()
    }

    /// 64 random bits: the first draw is the high word (`CPUGeneratorImpl::random64`).
    pub fn random_u64(&mut self) -> u64 {
        let hi = self.random_u32() as u64;
        let lo = self.random_u32() as u64;
        (hi << 32) | lo
    }

    /// `uniform_real_distribution<double>(0, 1)`: 53 random bits.
    pub fn uniform_f64(&mut self) -> f64 {
        let v = self.random_u64() & ((1u64 << 53) - 1);
        v as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `uniform_real_distribution<T>(0, 1)` for a type with `digits` mantissa bits (< 32).
    pub fn uniform_bits(&mut self, digits: u32) -> f64 {
        let v = self.random_u32() & ((1u32 << digits) - 1);
        v as f64 / (1u64 << digits) as f64
    }

    /// `normal_distribution<double>`: Box-Muller with the second sample cached.
    pub fn normal_f64(&mut self) -> f64 {
        if let Some(v) = self.next_double_normal.take() {
            return v;
        }
        let u1 = self.uniform_f64();
        let u2 = self.uniform_f64();
        let r = (-2.0 * (-u2).ln_1p()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u1;
        self.next_double_normal = Some(r * theta.sin());
        r * theta.cos()
    }
}
