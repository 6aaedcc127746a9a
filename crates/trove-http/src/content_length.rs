//! `Content-Length` as a recipient must read it (RFC 9110 §8.6, RFC 9112 §6.3): one valid
//! length, or an error. The proxy reads requests and origin responses through this one
//! function and forwards the single value it found, never the field as it came.
//!
//! - A list of identical values (`3, 3`, or the field sent twice) is the one value: §8.6 lets
//!   a recipient "either reject the message as invalid or replace the duplicated field-values
//!   with a single valid Content-Length field".
//! - Leading zeros are digits (`000003` is 3), and are not passed on.
//! - Differing values, anything but digits, an empty value, or a length past 2^63 − 1 are
//!   invalid (§6.3 ¶5): 400 from a client, 502 from an origin. Lengths of 2^63 and above are
//!   refused though `u64` holds them: implementations that keep lengths in signed 64-bit
//!   integers would read them as negative, and a message framed differently on two sides of
//!   the proxy is the makings of request smuggling.

use http::HeaderValue;

/// The largest length accepted: 2^63 − 1.
pub const MAX_LENGTH: u64 = i64::MAX as u64;

/// Why a `Content-Length` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthError {
    /// Not `1*DIGIT` (a sign, a space inside, an empty value, a non-ASCII byte).
    Invalid,
    /// Values that disagree (`3, 4`).
    Differing,
    /// More than [`MAX_LENGTH`].
    TooLarge,
}

impl LengthError {
    pub fn as_str(self) -> &'static str {
        match self {
            LengthError::Invalid => "invalid Content-Length",
            LengthError::Differing => "differing Content-Length values",
            LengthError::TooLarge => "Content-Length too large",
        }
    }
}

/// One value: `1*DIGIT`, leading zeros allowed, at most [`MAX_LENGTH`].
pub fn parse_value(s: &[u8]) -> Result<u64, LengthError> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return Err(LengthError::Invalid);
    }
    let mut n: u64 = 0;
    for &b in s {
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(b - b'0')))
            .filter(|n| *n <= MAX_LENGTH)
            .ok_or(LengthError::TooLarge)?;
    }
    Ok(n)
}

/// The length the `Content-Length` field lines `values` declare: `None` when there are none.
/// Each line may be a comma-separated list (optional whitespace around each element); all
/// elements of all lines must be one valid length.
pub fn parse_all<'a>(
    values: impl IntoIterator<Item = &'a HeaderValue>,
) -> Result<Option<u64>, LengthError> {
    let mut len = None;
    for v in values {
        for part in v.as_bytes().split(|b| *b == b',') {
            let n = parse_value(part.trim_ascii())?;
            if len.is_some_and(|l| l != n) {
                return Err(LengthError::Differing);
            }
            len = Some(n);
        }
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(lines: &[&str]) -> Result<Option<u64>, LengthError> {
        let values: Vec<HeaderValue> = lines
            .iter()
            .map(|l| HeaderValue::from_str(l).unwrap())
            .collect();
        parse_all(&values)
    }

    #[test]
    fn identical_values_are_one_9110_8_6() {
        assert_eq!(all(&["3, 3"]), Ok(Some(3)));
        assert_eq!(all(&["3", "3"]), Ok(Some(3)));
        assert_eq!(all(&["3,3 ,  3"]), Ok(Some(3)));
        assert_eq!(all(&[]), Ok(None));
    }

    #[test]
    fn differing_values_are_invalid_9112_6_3() {
        assert_eq!(all(&["3, 4"]), Err(LengthError::Differing));
        assert_eq!(all(&["3", "4"]), Err(LengthError::Differing));
    }

    #[test]
    fn leading_zeros_are_digits() {
        assert_eq!(all(&["000003"]), Ok(Some(3)));
        assert_eq!(all(&["0"]), Ok(Some(0)));
        assert_eq!(all(&["00000000000000000000000000042"]), Ok(Some(42)));
        assert_eq!(all(&["3, 003"]), Ok(Some(3)));
    }

    #[test]
    fn only_digits_9110_8_6() {
        for bad in ["", " ", "+3", "-3", "3 3", "0x3", "3;", "3, ", "3,,3", "٣"] {
            let v = HeaderValue::from_bytes(bad.as_bytes()).unwrap();
            assert_eq!(
                parse_all([&v]),
                Err(LengthError::Invalid),
                "{bad:?} is not a length"
            );
        }
    }

    #[test]
    fn lengths_past_2_63_are_refused() {
        assert_eq!(all(&["9223372036854775807"]), Ok(Some(MAX_LENGTH)));
        for big in [
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999999",
        ] {
            assert_eq!(all(&[big]), Err(LengthError::TooLarge), "{big}");
        }
    }
}
