//! The element types fmha computes on: `f32`, [`F16`] and [`Bf16`], and for
//! inputs only (fmha 0.3) the OCP 8-bit floats [`F8E4M3`] and [`F8E5M2`].
//!
//! Rust has no 16-bit or 8-bit float in std, so these are the IEEE binary16,
//! bfloat16 and OCP FP8 bit patterns with conversions to and from `f32`
//! (round to nearest, ties to even). They have the layout of `u16` / `u8`,
//! so buffers from other crates (`half::f16`, `float8::F8E4M3`, ...) can be
//! reinterpreted as these.
//!
//! [`OutputElement`] is the subset fmha writes (`o`) and takes as a bias:
//! `f32`, `F16`, `Bf16`.

/// The dtype of a tensor, as the C API names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    Bf16,
    F32,
    F8E4M3,
    F8E5M2,
}

impl DType {
    pub(crate) fn raw(self) -> fmha_sys::fmha_dtype {
        match self {
            DType::F16 => fmha_sys::FMHA_DTYPE_F16,
            DType::Bf16 => fmha_sys::FMHA_DTYPE_BF16,
            DType::F32 => fmha_sys::FMHA_DTYPE_F32,
            DType::F8E4M3 => fmha_sys::FMHA_DTYPE_F8E4M3,
            DType::F8E5M2 => fmha_sys::FMHA_DTYPE_F8E5M2,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for super::F16 {}
    impl Sealed for super::Bf16 {}
    impl Sealed for super::F8E4M3 {}
    impl Sealed for super::F8E5M2 {}
}

/// An element type fmha reads: `f32`, [`F16`], [`Bf16`], and for K/V (and q
/// with FP8 K/V) [`F8E4M3`] and [`F8E5M2`]. Which combinations a forward
/// takes is the C library's rule (fmha.h, "inference numerics"): q, k, v of
/// one 16/32-bit type, or FP8 k = v under an `F16`, `Bf16` or FP8 q. Sealed.
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    const DTYPE: DType;
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
}

/// An element type fmha writes and takes as a bias: `f32`, [`F16`] or
/// [`Bf16`] (never FP8). Sealed.
pub trait OutputElement: Element {}
impl OutputElement for f32 {}
impl OutputElement for F16 {}
impl OutputElement for Bf16 {}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn from_f32(x: f32) -> f32 {
        x
    }
    fn to_f32(self) -> f32 {
        self
    }
}

/// IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct F16(pub u16);

/// bfloat16: the upper 16 bits of an `f32` (8 exponent, 7 mantissa bits).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bf16(pub u16);

/// Rounds `value`'s low `shift` bits away, to nearest, ties to even.
fn round_shift(value: u32, shift: u32) -> u32 {
    let kept = value >> shift;
    let rest = value & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if rest > half || (rest == half && kept & 1 == 1) {
        kept + 1
    } else {
        kept
    }
}

impl Element for F16 {
    const DTYPE: DType = DType::F16;

    fn from_f32(x: f32) -> F16 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exp = ((bits >> 23) & 0xff) as i32;
        let man = bits & 0x7f_ffff;
        if exp == 0xff {
            // Infinity stays infinite; NaN stays a (quiet) NaN.
            return F16(sign | 0x7c00 | if man != 0 { 0x200 } else { 0 });
        }
        let e = exp - 127 + 15; // binary16's biased exponent
        if e >= 0x1f {
            return F16(sign | 0x7c00); // overflow
        }
        if e <= 0 {
            // Subnormal: value = r * 2^-24 with r = (1.man) * 2^(e - 14 + 23).
            if e < -10 {
                return F16(sign); // below half the smallest subnormal
            }
            let r = round_shift(man | 0x80_0000, (14 - e) as u32);
            return F16(sign | r as u16);
        }
        // A mantissa carry rolls into the exponent, up to infinity: correct.
        let r = round_shift(((e as u32) << 23) | man, 13);
        F16(sign | r as u16)
    }

    fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let man = h & 0x3ff;
        let magnitude = match exp {
            0 => man as f32 * f32::from_bits(0x3380_0000), // man * 2^-24, exact
            0x1f => f32::from_bits(0x7f80_0000 | (man << 13)),
            _ => f32::from_bits(((exp + 112) << 23) | (man << 13)),
        };
        f32::from_bits(sign | magnitude.to_bits())
    }
}

impl Element for Bf16 {
    const DTYPE: DType = DType::Bf16;

    fn from_f32(x: f32) -> Bf16 {
        let bits = x.to_bits();
        if x.is_nan() {
            return Bf16(((bits >> 16) | 0x40) as u16); // keep it a quiet NaN
        }
        Bf16(round_shift(bits, 16) as u16)
    }

    fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

/// OCP FP8 E4M3 (1 sign, 4 exponent, 3 mantissa bits; bias 7): no infinity,
/// NaN is `S.1111.111` only, largest finite 448. torch's and ml_dtypes'
/// `float8_e4m3fn`. `from_f32` rounds to nearest even; past 464 (half an
/// ulp over 448) and for +-inf it gives NaN, as those libraries do.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct F8E4M3(pub u8);

/// OCP FP8 E5M2 (1 sign, 5 exponent, 2 mantissa bits; bias 15): IEEE-like
/// with infinities and NaNs, largest finite 57344. `from_f32` rounds to
/// nearest even, overflowing to infinity.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct F8E5M2(pub u8);

/// An FP8 format: mantissa bits and exponent bias.
struct Fp8 {
    man_bits: u32,
    bias: i32,
}

impl Fp8 {
    /// The magnitude bits (no sign) of a finite |x| rounded to nearest even;
    /// may carry past the largest finite value (the caller decides what
    /// that is).
    fn round(&self, x: f32) -> u32 {
        let bits = x.to_bits() & 0x7fff_ffff;
        let exp = ((bits >> 23) & 0xff) as i32; // f32's biased exponent
        let man = bits & 0x7f_ffff;
        let e = exp - 127 + self.bias; // the format's biased exponent
        if e <= 0 {
            // Subnormal: |x| = r * 2^(1 - bias - man_bits).
            let shift = (23 - self.man_bits) as i32 + 1 - e;
            if exp == 0 || shift > 24 {
                return 0; // f32 subnormals and anything below half the smallest subnormal
            }
            return round_shift(man | 0x80_0000, shift as u32);
        }
        round_shift(((e as u32) << 23) | man, 23 - self.man_bits)
    }

    fn to_f32(&self, b: u8) -> f32 {
        let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
        let exp = ((b & 0x7f) >> self.man_bits) as i32;
        let man = (b & ((1 << self.man_bits) - 1)) as f32;
        let unit = 2f32.powi(-(self.man_bits as i32));
        if exp == 0 {
            sign * man * unit * 2f32.powi(1 - self.bias) // exact: a small power of two times man
        } else {
            sign * (1.0 + man * unit) * 2f32.powi(exp - self.bias)
        }
    }
}

const E4M3: Fp8 = Fp8 {
    man_bits: 3,
    bias: 7,
};
const E5M2: Fp8 = Fp8 {
    man_bits: 2,
    bias: 15,
};

impl Element for F8E4M3 {
    const DTYPE: DType = DType::F8E4M3;

    fn from_f32(x: f32) -> F8E4M3 {
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        if !x.is_finite() {
            return F8E4M3(sign | 0x7f);
        }
        let r = E4M3.round(x);
        // 0x7f is NaN: 448 (0x7e) is the largest finite value.
        F8E4M3(sign | if r > 0x7e { 0x7f } else { r as u8 })
    }

    fn to_f32(self) -> f32 {
        if self.0 & 0x7f == 0x7f {
            return f32::NAN;
        }
        E4M3.to_f32(self.0)
    }
}

impl Element for F8E5M2 {
    const DTYPE: DType = DType::F8E5M2;

    fn from_f32(x: f32) -> F8E5M2 {
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        if x.is_nan() {
            return F8E5M2(sign | 0x7e);
        }
        if x.is_infinite() {
            return F8E5M2(sign | 0x7c);
        }
        let r = E5M2.round(x);
        F8E5M2(sign | if r >= 0x7c { 0x7c } else { r as u8 }) // overflow: infinity
    }

    fn to_f32(self) -> f32 {
        match self.0 & 0x7f {
            0x7c => {
                if self.0 & 0x80 != 0 {
                    f32::NEG_INFINITY
                } else {
                    f32::INFINITY
                }
            }
            0x7d..=0x7f => f32::NAN,
            _ => E5M2.to_f32(self.0),
        }
    }
}

impl From<F8E4M3> for f32 {
    fn from(x: F8E4M3) -> f32 {
        x.to_f32()
    }
}

impl From<F8E5M2> for f32 {
    fn from(x: F8E5M2) -> f32 {
        x.to_f32()
    }
}

impl From<F16> for f32 {
    fn from(x: F16) -> f32 {
        x.to_f32()
    }
}

impl From<Bf16> for f32 {
    fn from(x: Bf16) -> f32 {
        x.to_f32()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trips_every_finite_value() {
        for bits in 0..=u16::MAX {
            let h = F16(bits);
            let x = h.to_f32();
            if x.is_nan() {
                assert!(F16::from_f32(x).to_f32().is_nan());
            } else {
                assert_eq!(F16::from_f32(x), h, "{bits:#06x} -> {x}");
            }
        }
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        assert_eq!(F16::from_f32(1.0).0, 0x3c00);
        assert_eq!(F16::from_f32(1.0 + 2f32.powi(-11)).0, 0x3c00); // tie, to even
        assert_eq!(F16::from_f32(1.0 + 3.0 * 2f32.powi(-11)).0, 0x3c02); // tie, to even
        assert_eq!(F16::from_f32(65504.0).0, 0x7bff);
        assert_eq!(F16::from_f32(65520.0).0, 0x7c00); // rounds up to infinity
        assert_eq!(F16::from_f32(2f32.powi(-24)).0, 0x0001);
        assert_eq!(F16::from_f32(2f32.powi(-25)).0, 0x0000); // tie, to even (zero)
        assert_eq!(F16::from_f32(-2.0).0, 0xc000);
    }

    #[test]
    fn fp8_round_trips_every_value() {
        for b in 0..=u8::MAX {
            let x = F8E4M3(b).to_f32();
            if x.is_nan() {
                assert_eq!(b & 0x7f, 0x7f, "{b:#04x}");
            } else {
                assert_eq!(F8E4M3::from_f32(x), F8E4M3(b), "{b:#04x} -> {x}");
            }
            let y = F8E5M2(b).to_f32();
            if y.is_nan() {
                assert!(F8E5M2::from_f32(y).to_f32().is_nan());
            } else {
                assert_eq!(F8E5M2::from_f32(y), F8E5M2(b), "{b:#04x} -> {y}");
            }
        }
    }

    #[test]
    fn fp8_values_and_rounding() {
        assert_eq!(F8E4M3(0x7e).to_f32(), 448.0);
        assert_eq!(F8E4M3(0x01).to_f32(), 2f32.powi(-9));
        assert_eq!(F8E4M3(0x38).to_f32(), 1.0);
        assert_eq!(F8E4M3::from_f32(1.0 + 2f32.powi(-4)).0, 0x38); // tie, to even
        assert_eq!(F8E4M3::from_f32(1.0 + 3.0 * 2f32.powi(-4)).0, 0x3a); // tie, to even
        assert_eq!(F8E4M3::from_f32(460.0).0, 0x7e); // rounds to 448
        assert!(F8E4M3::from_f32(500.0).to_f32().is_nan()); // no infinity
        assert_eq!(F8E4M3::from_f32(-2.0).0, 0xc0);
        assert_eq!(F8E5M2(0x7b).to_f32(), 57344.0);
        assert_eq!(F8E5M2(0x01).to_f32(), 2f32.powi(-16));
        assert_eq!(F8E5M2(0x3c).to_f32(), 1.0);
        assert_eq!(F8E5M2::from_f32(1.0 + 2f32.powi(-3)).0, 0x3c); // tie, to even
        assert_eq!(F8E5M2::from_f32(1e6).to_f32(), f32::INFINITY);
        assert_eq!(F8E5M2::from_f32(f32::NEG_INFINITY).0, 0xfc);
        assert_eq!(F8E5M2::from_f32(2f32.powi(-18)).0, 0x00); // below half the smallest subnormal
    }

    #[test]
    fn bf16_conversions() {
        assert_eq!(Bf16::from_f32(1.0).0, 0x3f80);
        assert_eq!(Bf16::from_f32(1.0 + 2f32.powi(-8)).0, 0x3f80); // tie, to even
        assert_eq!(Bf16::from_f32(1.0 + 3.0 * 2f32.powi(-8)).0, 0x3f82);
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
        assert_eq!(Bf16(0xc040).to_f32(), -3.0);
    }
}
