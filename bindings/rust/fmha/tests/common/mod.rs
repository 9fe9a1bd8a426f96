//! Test data shared by the crate's integration tests.
#![allow(dead_code)] // each test binary uses its own part

use fmha::Element;

/// xorshift64*: deterministic test data without a crates registry.
pub struct Rng(pub u64);

impl Rng {
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    pub fn vec<T: Element>(&mut self, n: usize) -> Vec<T> {
        (0..n).map(|_| T::from_f32(self.normal() as f32)).collect()
    }

    /// Factors in [0.25, 4], none equal to 1.
    pub fn factors(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| 2f64.powf(self.uniform() * 4.0 - 2.0) as f32)
            .collect()
    }
}
