//! The OpenRouter quota adapter (`openrouter`, spec `engines.md` §3.4): `GET
//! /api/v1/credits` with the service's key; the balance in USD is `data.total_credits −
//! data.total_usage`, computed as an exact decimal.

use super::http::get_json;
use super::values::{bearer, Decimal};
use super::{QuotaError, Reading};
use serde_json::Value;
use std::time::Instant;
use wuu_protocol::QuotaBalance;

/// Reads the prepaid credits at `base` with `key` before `deadline`.
pub(super) fn read(base: &str, key: &str, deadline: Instant) -> Result<Reading, QuotaError> {
    let v = get_json(&format!("{base}/api/v1/credits"), &[bearer(key)], deadline)?;
    parse_openrouter(&v)
}

/// OpenRouter `GET /api/v1/credits` → `{data: {total_credits, total_usage}}`.
pub fn parse_openrouter(v: &Value) -> Result<Reading, QuotaError> {
    let data = v.get("data").ok_or(QuotaError::InvalidResponse)?;
    let credits = data
        .get("total_credits")
        .and_then(Decimal::of)
        .ok_or(QuotaError::InvalidResponse)?;
    let usage = data
        .get("total_usage")
        .and_then(Decimal::of)
        .ok_or(QuotaError::InvalidResponse)?;
    let left = credits.sub(usage).ok_or(QuotaError::InvalidResponse)?;
    Ok(Reading {
        kind: "balance",
        balances: vec![QuotaBalance {
            currency: "USD".into(),
            amount: left.render(),
        }],
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decimals_are_exact() {
        let d = |s: &str| Decimal::parse(s).unwrap();
        assert_eq!(d("100.5").sub(d("25.75")).unwrap().render(), "74.75");
        assert_eq!(d("0.3").sub(d("0.1")).unwrap().render(), "0.2");
        assert_eq!(d("1").sub(d("1.000")).unwrap().render(), "0");
        assert_eq!(d("5").sub(d("7.25")).unwrap().render(), "-2.25");
        assert_eq!(d("1e-3").render(), "0.001");
        assert_eq!(d("1.5E2").render(), "150");
        assert!(Decimal::parse("abc").is_none());
        assert!(Decimal::parse("").is_none());
        assert!(Decimal::parse("1e99999").is_none());
        // A zero with a huge exponent (provider bytes) is zero, at once.
        assert_eq!(d("0e2147483647").render(), "0");
        assert_eq!(d("-0.0e-2147483648").render(), "0");
        let r = parse_openrouter(&json!({"data": {"total_credits": 10.1, "total_usage": 0.2}}))
            .unwrap();
        assert_eq!(r.balances[0].amount, "9.9");
        assert_eq!(r.balances[0].currency, "USD");
        assert!(parse_openrouter(&json!({"data": {}})).is_err());
    }
}
