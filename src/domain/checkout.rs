//! Confirm's rules: the basket re-priced from today's catalog (the preview's total is never
//! trusted), a total the chosen gateway takes, and a zero total completed without any gateway.

use serde_json::json;

use super::refusal::Refusal;
use super::{Currency, Money};

/// Longest `Idempotency-Key` accepted.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 128;

/// The gateway name of a zero-total order's attempt: no gateway is involved.
pub const FREE_GATEWAY: &str = "free";

/// An `Idempotency-Key` header: 1-128 printable characters.
pub fn check_idempotency_key(key: &str) -> Result<(), Refusal> {
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_LEN_MAX || key.chars().any(char::is_control) {
        return Err(Refusal::new(
            super::refusal::RefusalKind::Malformed,
            "invalid_idempotency_key",
            "Idempotency-Key must be 1-128 printable characters",
        ));
    }
    Ok(())
}

/// A basket line as read under the basket's lock: what the buyer was quoted and today's catalog.
#[derive(Debug, Clone)]
pub struct QuotedLine {
    pub sku: String,
    pub name: String,
    pub kind: String,
    pub quantity: i64,
    pub quoted_unit_minor: i64,
    pub quoted_currency: String,
    pub price_minor: i64,
    pub currency: String,
}

/// A line of the order about to be placed.
#[derive(Debug, Clone)]
pub struct PricedLine {
    pub sku: String,
    pub name: String,
    pub kind: String,
    pub quantity: i64,
    pub unit: Money,
    pub line_total: Money,
}

/// What confirm places: the lines at today's prices, the total, and who takes the payment.
#[derive(Debug, Clone)]
pub struct Pricing {
    pub lines: Vec<PricedLine>,
    pub total: Money,
    /// A zero total: paid at once, with [`FREE_GATEWAY`] as the attempt's gateway and channel.
    pub free: bool,
}

impl Pricing {
    /// The attempt's gateway and channel: the buyer's choice, or [`FREE_GATEWAY`] for a zero total.
    pub fn payer<'a>(&self, gateway: &'a str, channel: &'a str) -> (&'a str, &'a str) {
        if self.free { (FREE_GATEWAY, FREE_GATEWAY) } else { (gateway, channel) }
    }

    /// What the gateway shows the buyer: the first line's name, and how many more.
    pub fn subject(&self) -> String {
        subject(self.lines.iter().map(|l| l.name.as_str()))
    }
}

/// Re-prices a basket for confirm. Refused if it is empty, if any price or currency moved since
/// it was quoted (`price_changed`, with each moved line), if the total does not add up, or if the
/// chosen gateway does not take its currency (`accepted`: `None` for any; a zero total needs none).
pub fn price(lines: &[QuotedLine], gateway: &str, accepted: Option<&[Currency]>) -> Result<Pricing, Refusal> {
    let Some(first) = lines.first() else {
        return Err(Refusal::unprocessable("basket_empty", "the basket has no lines"));
    };
    let changed: Vec<_> = lines
        .iter()
        .filter(|l| l.price_minor != l.quoted_unit_minor || l.currency != l.quoted_currency)
        .map(|l| json!({"sku": l.sku, "quoted_minor": l.quoted_unit_minor, "price_minor": l.price_minor, "currency": l.currency}))
        .collect();
    if !changed.is_empty() {
        return Err(Refusal::conflict(
            "price_changed",
            "prices changed since the basket was quoted; review and confirm again",
        )
        .with_details(json!({"lines": changed})));
    }
    let mut priced = Vec::with_capacity(lines.len());
    let mut total = Money::zero(Currency::parse(&first.currency)?);
    for l in lines {
        let unit = Money::new(l.price_minor, Currency::parse(&l.currency)?)?;
        let line_total = unit.checked_mul(l.quantity)?;
        total = total.checked_add(line_total)?;
        priced.push(PricedLine {
            sku: l.sku.clone(),
            name: l.name.clone(),
            kind: l.kind.clone(),
            quantity: l.quantity,
            unit,
            line_total,
        });
    }
    let free = total.amount_minor() == 0;
    if let Some(accepted) = accepted
        && !free
        && !accepted.contains(&total.currency())
    {
        return Err(Refusal::unprocessable(
            "unsupported_currency",
            format!("gateway {gateway} does not take {}", total.currency()),
        ));
    }
    Ok(Pricing { lines: priced, total, free })
}

/// An order's subject from its line names in order: "Tea", "Tea and 2 more", or "order".
pub fn subject<'a>(mut names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let more = names.len().saturating_sub(1);
    match names.next() {
        None => "order".to_string(),
        Some(first) if more == 0 => first.to_string(),
        Some(first) => format!("{first} and {more} more"),
    }
}

/// When the stock held at confirm is released if the order is not paid.
pub fn hold_expires_at(now_ms: i64, hold_ms: i64) -> i64 {
    now_ms.saturating_add(hold_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(sku: &str, quoted: i64, price: i64, currency: &str) -> QuotedLine {
        QuotedLine {
            sku: sku.into(),
            name: format!("{sku} name"),
            kind: "physical".into(),
            quantity: 2,
            quoted_unit_minor: quoted,
            quoted_currency: currency.into(),
            price_minor: price,
            currency: currency.into(),
        }
    }

    #[test]
    fn prices_at_todays_catalog() {
        let p = price(&[quoted("A", 150, 150, "EUR"), quoted("B", 50, 50, "EUR")], "sandbox", None).unwrap();
        assert_eq!(p.total.amount_minor(), 400);
        assert!(!p.free);
        assert_eq!(p.payer("sandbox", "web"), ("sandbox", "web"));
        assert_eq!(p.subject(), "A name and 1 more");
    }

    #[test]
    fn a_moved_price_is_refused_with_the_lines() {
        let r = price(&[quoted("A", 150, 150, "EUR"), quoted("B", 50, 60, "EUR")], "sandbox", None).unwrap_err();
        assert_eq!(r.code, "price_changed");
        assert_eq!(r.details.unwrap()["lines"][0]["sku"], "B");
        let mut moved = quoted("C", 50, 50, "EUR");
        moved.currency = "CNY".into();
        assert_eq!(price(&[moved], "sandbox", None).unwrap_err().code, "price_changed");
    }

    #[test]
    fn empty_baskets_and_foreign_currencies_are_refused() {
        assert_eq!(price(&[], "sandbox", None).unwrap_err().code, "basket_empty");
        let cny = [Currency::parse("CNY").unwrap()];
        assert_eq!(
            price(&[quoted("A", 150, 150, "EUR")], "alipay", Some(&cny)).unwrap_err().code,
            "unsupported_currency"
        );
        // A zero total needs no gateway, so any currency will do.
        let free = price(&[quoted("A", 0, 0, "EUR")], "alipay", Some(&cny)).unwrap();
        assert!(free.free);
        assert_eq!(free.payer("alipay", "page"), (FREE_GATEWAY, FREE_GATEWAY));
        assert_eq!(price(&[quoted("A", i64::MAX, i64::MAX, "EUR")], "s", None).unwrap_err().code, "amount_overflow");
    }

    #[test]
    fn subjects_and_keys() {
        assert_eq!(subject([].into_iter()), "order");
        assert_eq!(subject(["Tea"].into_iter()), "Tea");
        assert_eq!(subject(["Tea", "Cup", "Pot"].into_iter()), "Tea and 2 more");
        assert!(check_idempotency_key("k-1").is_ok());
        assert!(check_idempotency_key("").is_err());
        assert!(check_idempotency_key(&"k".repeat(IDEMPOTENCY_KEY_LEN_MAX + 1)).is_err());
        assert!(check_idempotency_key("a\nb").is_err());
        assert_eq!(hold_expires_at(i64::MAX - 1, 10), i64::MAX);
    }
}
