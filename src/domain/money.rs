//! Money: integer minor units plus an ISO-4217 currency. No floats anywhere.

use std::fmt;

/// An ISO-4217 alphabetic currency code together with its minor-unit exponent.
///
/// Only currencies kassa knows are accepted, so a typo (`"UDS"`) is an error at the edge instead of
/// an order that no gateway can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency(&'static str);

/// The currencies kassa accepts, with their minor-unit exponents (ISO 4217).
const KNOWN_CURRENCIES: &[(&str, u8)] = &[
    ("CNY", 2),
    ("USD", 2),
    ("EUR", 2),
    ("GBP", 2),
    ("HKD", 2),
    ("JPY", 0),
    ("KRW", 0),
    ("SGD", 2),
    ("AUD", 2),
    ("CAD", 2),
    ("CHF", 2),
    ("TWD", 2),
];

impl Currency {
    /// Renminbi, the currency of Alipay and WeChat Pay.
    pub const CNY: Currency = Currency("CNY");

    /// Every currency kassa accepts, CNY first.
    pub fn known() -> impl Iterator<Item = &'static str> {
        KNOWN_CURRENCIES.iter().map(|(c, _)| *c)
    }

    /// Parses an upper-case ISO-4217 code such as `CNY`.
    pub fn parse(code: &str) -> Result<Self, MoneyError> {
        KNOWN_CURRENCIES
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(c, _)| Currency(c))
            .ok_or_else(|| MoneyError::UnknownCurrency(code.chars().take(8).collect()))
    }

    pub fn code(self) -> &'static str {
        self.0
    }

    /// Number of decimal places of the minor unit (2 for CNY, 0 for JPY).
    pub fn exponent(self) -> u8 {
        KNOWN_CURRENCIES.iter().find(|(c, _)| *c == self.0).map(|(_, e)| *e).unwrap_or(2)
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("unknown currency {0:?}")]
    UnknownCurrency(String),
    #[error("amount must not be negative")]
    Negative,
    #[error("amount overflows")]
    Overflow,
    #[error("currencies differ: {0} and {1}")]
    CurrencyMismatch(Currency, Currency),
}

/// A non-negative amount of money in minor units (fen, cents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Money {
    amount_minor: i64,
    currency: Currency,
}

impl Money {
    pub fn new(amount_minor: i64, currency: Currency) -> Result<Self, MoneyError> {
        if amount_minor < 0 {
            return Err(MoneyError::Negative);
        }
        Ok(Money { amount_minor, currency })
    }

    pub fn zero(currency: Currency) -> Self {
        Money { amount_minor: 0, currency }
    }

    pub fn amount_minor(self) -> i64 {
        self.amount_minor
    }

    pub fn currency(self) -> Currency {
        self.currency
    }

    pub fn checked_add(self, other: Money) -> Result<Money, MoneyError> {
        if self.currency != other.currency {
            return Err(MoneyError::CurrencyMismatch(self.currency, other.currency));
        }
        let amount_minor = self.amount_minor.checked_add(other.amount_minor).ok_or(MoneyError::Overflow)?;
        Ok(Money { amount_minor, currency: self.currency })
    }

    /// Unit price times quantity, refusing overflow.
    pub fn checked_mul(self, quantity: i64) -> Result<Money, MoneyError> {
        if quantity < 0 {
            return Err(MoneyError::Negative);
        }
        let amount_minor = self.amount_minor.checked_mul(quantity).ok_or(MoneyError::Overflow)?;
        Ok(Money { amount_minor, currency: self.currency })
    }

    /// Renders the amount in major units with the currency's exponent, e.g. `12.34 CNY`.
    /// Integer arithmetic only.
    pub fn display_major(self) -> String {
        format!("{} {}", self.decimal(), self.currency)
    }

    /// The amount in major units without the currency, as gateways and exports write it (`12.34`,
    /// `500` for a currency without minor units).
    pub fn decimal(self) -> String {
        let exp = u32::from(self.currency.exponent());
        if exp == 0 {
            return self.amount_minor.to_string();
        }
        let div = 10_i64.pow(exp);
        let sign = if self.amount_minor < 0 { "-" } else { "" };
        let abs = self.amount_minor.unsigned_abs();
        let div = div.unsigned_abs();
        format!("{sign}{}.{:0width$}", abs / div, abs % div, width = exp as usize)
    }
}

impl Money {
    /// Parses a gateway's decimal amount (`12.34`, `12.3`, `12`) exactly, without floats. More
    /// fraction digits than the currency has, signs, exponents and spaces are refused.
    pub fn parse_decimal(text: &str, currency: Currency) -> Option<Money> {
        let exp = usize::from(currency.exponent());
        let (whole, frac) = match text.split_once('.') {
            Some((w, f)) if exp > 0 && !f.is_empty() && f.len() <= exp => (w, f),
            Some(_) => return None,
            None => (text, ""),
        };
        if whole.is_empty() || whole.len() > 15 || !whole.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let padded = format!("{frac:0<exp$}");
        let minor: i64 = format!("{whole}{padded}").parse().ok()?;
        Money::new(minor, currency).ok()
    }
}

/// Stored minor units of a stored currency code in major units without the currency (`12.34`), as
/// forms and exports take them; a row that no longer parses is shown raw rather than hidden.
pub fn decimal_minor(amount_minor: i64, currency: &str) -> String {
    signed(amount_minor, currency, Money::decimal).unwrap_or_else(|| amount_minor.to_string())
}

/// `render` of the amount's size, with a minus sign when it is negative (a fee returned, a net
/// below zero); `None` when the currency does not parse.
fn signed(amount_minor: i64, currency: &str, render: fn(Money) -> String) -> Option<String> {
    let c = Currency::parse(currency).ok()?;
    let size = Money::new(amount_minor.checked_abs()?, c).ok()?;
    Some(if amount_minor < 0 { format!("-{}", render(size)) } else { render(size) })
}

/// Renders stored minor units and a stored currency code for people (`12.34 CNY`); a row that no
/// longer parses is shown raw rather than hidden.
pub fn format_minor(amount_minor: i64, currency: &str) -> String {
    signed(amount_minor, currency, Money::display_major).unwrap_or_else(|| format!("{amount_minor} {currency}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cny() -> Currency {
        Currency::parse("CNY").unwrap()
    }

    #[test]
    fn negative_amounts_read_as_money_with_a_sign() {
        assert_eq!(decimal_minor(-2, "CNY"), "-0.02");
        assert_eq!(format_minor(-1250, "CNY"), "-12.50 CNY");
        assert_eq!(format_minor(7, "JPY"), "7 JPY");
        assert_eq!(decimal_minor(i64::MIN, "CNY"), i64::MIN.to_string());
    }

    #[test]
    fn parses_known_and_rejects_unknown_currencies() {
        assert_eq!(cny().code(), "CNY");
        assert_eq!(Currency::parse("JPY").unwrap().exponent(), 0);
        assert!(Currency::parse("cny").is_err());
        assert!(Currency::parse("XXX").is_err());
        assert!(Currency::parse("").is_err());
    }

    #[test]
    fn refuses_negative_overflow_and_mixed_currencies() {
        assert_eq!(Money::new(-1, cny()), Err(MoneyError::Negative));
        let big = Money::new(i64::MAX, cny()).unwrap();
        assert_eq!(big.checked_add(Money::new(1, cny()).unwrap()), Err(MoneyError::Overflow));
        assert_eq!(big.checked_mul(2), Err(MoneyError::Overflow));
        let usd = Money::new(1, Currency::parse("USD").unwrap()).unwrap();
        assert!(matches!(Money::new(1, cny()).unwrap().checked_add(usd), Err(MoneyError::CurrencyMismatch(_, _))));
    }

    #[test]
    fn displays_major_units_without_floats() {
        assert_eq!(Money::new(1234, cny()).unwrap().display_major(), "12.34 CNY");
        assert_eq!(Money::new(5, cny()).unwrap().display_major(), "0.05 CNY");
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(Money::new(500, jpy).unwrap().display_major(), "500 JPY");
        assert_eq!(format_minor(1234, "CNY"), "12.34 CNY");
        assert_eq!(format_minor(7, "XXX"), "7 XXX");
    }

    #[test]
    fn gateway_decimals_round_trip_exactly() {
        let m = Money::parse_decimal("88.88", cny()).unwrap();
        assert_eq!(m.amount_minor(), 8888);
        assert_eq!(m.decimal(), "88.88");
        assert_eq!(Money::parse_decimal("0.5", cny()).unwrap().amount_minor(), 50);
        assert_eq!(Money::parse_decimal("12", cny()).unwrap().amount_minor(), 1200);
        for bad in ["", "1.", ".5", "1.234", "-1", "+1", "1e3", " 1", "1,00", "1.2.3", "9999999999999999"] {
            assert!(Money::parse_decimal(bad, cny()).is_none(), "{bad:?}");
        }
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(Money::parse_decimal("500", jpy).unwrap().amount_minor(), 500);
        assert!(Money::parse_decimal("500.0", jpy).is_none());
    }

    proptest! {
        #[test]
        fn decimal_round_trips(a in 0_i64..=999_999_999_999_999) {
            let m = Money::new(a, cny()).unwrap();
            prop_assert_eq!(Money::parse_decimal(&m.decimal(), cny()), Some(m));
        }

        #[test]
        fn addition_is_exact_or_refused(a in 0_i64..=i64::MAX, b in 0_i64..=i64::MAX) {
            let sum = Money::new(a, cny()).unwrap().checked_add(Money::new(b, cny()).unwrap());
            match a.checked_add(b) {
                Some(s) => prop_assert_eq!(sum.unwrap().amount_minor(), s),
                None => prop_assert_eq!(sum, Err(MoneyError::Overflow)),
            }
        }
    }
}
