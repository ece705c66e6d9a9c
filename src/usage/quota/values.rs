//! Reading the values quota answers carry (spec `engines.md` §3.4): numbers or numeric
//! strings, trimmed text, instants as RFC 3339 or Unix seconds, exact decimal amounts
//! ([`Decimal`]), and the `Authorization: Bearer` header most adapters send.

use serde_json::Value;

/// The `Authorization: Bearer <token>` header.
pub(super) fn bearer(token: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {token}"))
}

pub(super) fn num(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
}

pub(super) fn int(v: Option<&Value>) -> Option<i64> {
    num(v).filter(|f| f.is_finite()).map(|f| f as i64)
}

pub(super) fn text(v: Option<&Value>) -> Option<String> {
    v?.as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// An RFC 3339 string or Unix seconds → RFC 3339 UTC.
pub(super) fn instant(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => s
            .parse::<jiff::Timestamp>()
            .ok()
            .map(|t| crate::util::rfc3339(t.as_millisecond())),
        Value::Number(_) => int(v)
            .filter(|s| *s > 0)
            .map(|s| crate::util::rfc3339(s.saturating_mul(1000))),
        _ => None,
    }
}

/// An exact decimal: `mantissa × 10^-scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Decimal {
    mantissa: i128,
    scale: u32,
}

impl Decimal {
    pub(super) fn parse(s: &str) -> Option<Decimal> {
        let s = s.trim();
        let (num, exp) = match s.find(['e', 'E']) {
            Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
            None => (s, 0),
        };
        let (neg, digits) = match num.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, num.strip_prefix('+').unwrap_or(num)),
        };
        let (int_part, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int_part.is_empty() && frac.is_empty() {
            return None;
        }
        if !int_part
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let mut mantissa: i128 = 0;
        for b in int_part.bytes().chain(frac.bytes()) {
            mantissa = mantissa.checked_mul(10)?.checked_add((b - b'0') as i128)?;
        }
        let mut scale = frac.len() as i64 - exp as i64;
        if mantissa == 0 {
            // Zero at any exponent: `0e2147483647` would otherwise loop 2^31 times.
            scale = scale.clamp(0, 36);
        }
        while scale < 0 {
            mantissa = mantissa.checked_mul(10)?;
            scale += 1;
        }
        if scale > 36 {
            return None;
        }
        Some(Decimal {
            mantissa: if neg { -mantissa } else { mantissa },
            scale: scale as u32,
        })
    }

    pub(super) fn of(v: &Value) -> Option<Decimal> {
        match v {
            // serde_json prints an f64 as its shortest round-trip decimal, which is the
            // literal the upstream sent for ordinary amounts.
            Value::Number(n) => Decimal::parse(&n.to_string()),
            Value::String(s) => Decimal::parse(s),
            _ => None,
        }
    }

    fn rescale(self, scale: u32) -> Option<Decimal> {
        let mut m = self.mantissa;
        for _ in self.scale..scale {
            m = m.checked_mul(10)?;
        }
        Some(Decimal { mantissa: m, scale })
    }

    pub(super) fn sub(self, o: Decimal) -> Option<Decimal> {
        let scale = self.scale.max(o.scale);
        let (a, b) = (self.rescale(scale)?, o.rescale(scale)?);
        Some(Decimal {
            mantissa: a.mantissa.checked_sub(b.mantissa)?,
            scale,
        })
    }

    pub(super) fn render(self) -> String {
        let neg = self.mantissa < 0;
        let digits = self.mantissa.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let (int_part, frac) = if digits.len() > scale {
            let (a, b) = digits.split_at(digits.len() - scale);
            (a.to_owned(), b.to_owned())
        } else {
            ("0".to_owned(), format!("{digits:0>scale$}"))
        };
        let frac = frac.trim_end_matches('0');
        let body = if frac.is_empty() {
            int_part
        } else {
            format!("{int_part}.{frac}")
        };
        if neg && body != "0" {
            format!("-{body}")
        } else {
            body
        }
    }
}
