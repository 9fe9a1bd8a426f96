//! The element types fmha computes on: `f32`, [`F16`] and [`Bf16`].
//!
//! Rust has no 16-bit float in std, so `F16` and `Bf16` are the IEEE binary16
//! and bfloat16 bit patterns with conversions to and from `f32` (round to
//! nearest, ties to even). They have the layout of `u16`, so buffers from
//! other crates (`half::f16`, ...) can be reinterpreted as these.

/// The dtype of a tensor, as the C API names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    Bf16,
    F32,
}

impl DType {
    pub(crate) fn raw(self) -> fmha_sys::fmha_dtype {
        match self {
            DType::F16 => fmha_sys::FMHA_DTYPE_F16,
            DType::Bf16 => fmha_sys::FMHA_DTYPE_BF16,
            DType::F32 => fmha_sys::FMHA_DTYPE_F32,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for super::F16 {}
    impl Sealed for super::Bf16 {}
}

/// An element type fmha accepts: `f32`, [`F16`] or [`Bf16`]. Sealed.
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    const DTYPE: DType;
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
}

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
    fn bf16_conversions() {
        assert_eq!(Bf16::from_f32(1.0).0, 0x3f80);
        assert_eq!(Bf16::from_f32(1.0 + 2f32.powi(-8)).0, 0x3f80); // tie, to even
        assert_eq!(Bf16::from_f32(1.0 + 3.0 * 2f32.powi(-8)).0, 0x3f82);
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
        assert_eq!(Bf16(0xc040).to_f32(), -3.0);
    }
}
