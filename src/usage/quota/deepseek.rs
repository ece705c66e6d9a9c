//! The DeepSeek quota adapter (`deepseek`, spec `engines.md` §3.4): `GET /user/balance`
//! with the service's key; one balance per `balance_infos[{currency, total_balance}]`,
//! currencies kept apart.

use super::http::get_json;
use super::values::{bearer, text, Decimal};
use super::{QuotaError, Reading};
use serde_json::Value;
use std::time::Instant;
use wuu_protocol::QuotaBalance;

/// Reads the prepaid balance at `base` with `key` before `deadline`.
pub(super) fn read(base: &str, key: &str, deadline: Instant) -> Result<Reading, QuotaError> {
    let v = get_json(&format!("{base}/user/balance"), &[bearer(key)], deadline)?;
    parse_deepseek(&v)
}

/// DeepSeek `GET /user/balance` → `{balance_infos: [{currency, total_balance}]}`.
pub fn parse_deepseek(v: &Value) -> Result<Reading, QuotaError> {
    let infos = v
        .get("balance_infos")
        .and_then(Value::as_array)
        .ok_or(QuotaError::InvalidResponse)?;
    let mut balances = Vec::new();
    for i in infos {
        let (Some(currency), Some(amount)) = (
            text(i.get("currency")),
            i.get("total_balance").and_then(Decimal::of),
        ) else {
            continue;
        };
        balances.push(QuotaBalance {
            currency,
            amount: amount.render(),
        });
    }
    Ok(Reading {
        kind: "balance",
        balances,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deepseek_keeps_currencies_apart() {
        let r = parse_deepseek(&json!({"is_available": true, "balance_infos": [
            {"currency": "CNY", "total_balance": "110.00", "granted_balance": "10.00"},
            {"currency": "USD", "total_balance": "3.50"}]}))
        .unwrap();
        assert_eq!(r.balances.len(), 2);
        assert_eq!(r.balances[0].amount, "110");
        assert_eq!(r.balances[1].currency, "USD");
        assert_eq!(r.balances[1].amount, "3.5");
    }
}
