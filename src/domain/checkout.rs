//! Confirm's rules: the basket re-priced from today's catalog (the preview's total is never
//! trusted), a total the chosen gateway takes, and a zero total completed without any gateway.

use serde_json::json;

use super::refusal::Refusal;
use super::{Currency, Money};

/// The gateway name of a zero-total order's attempt: no gateway is involved.
pub const FREE_GATEWAY: &str = "free";

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
    /// The SKU's cap on units per order, if it has one.
    pub max_per_order: Option<i64>,
    /// The SKU's own hold, in seconds, when shorter than the shop's default is wanted.
    pub hold_seconds: Option<i64>,
    /// The SKU's stock as it stands (units held by pending orders included).
    pub on_hand: i64,
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
    /// The line's share of the order's discount (minor units).
    pub discount_minor: i64,
}

/// What confirm places: the lines at today's prices, the total, and who takes the payment.
#[derive(Debug, Clone)]
pub struct Pricing {
    pub lines: Vec<PricedLine>,
    pub total: Money,
    /// What a promotion took off the lines (minor units).
    pub discount_minor: i64,
    /// A zero total: paid at once, with [`FREE_GATEWAY`] as the attempt's gateway and channel.
    pub free: bool,
}

impl Pricing {
    /// The attempt's gateway and channel: the buyer's choice, or [`FREE_GATEWAY`] for a zero total.
    pub fn payer<'a>(&self, gateway: &'a str, channel: &'a str) -> (&'a str, &'a str) {
        if self.free { (FREE_GATEWAY, FREE_GATEWAY) } else { (gateway, channel) }
    }

    /// Takes a discount of `total_minor` off, `per_line` its share of each line: each line keeps
    /// its share, the total is the lines less the discount, and a total of zero is paid at once.
    pub fn apply_discount(&mut self, total_minor: i64, per_line: &[i64]) -> Result<(), Refusal> {
        if per_line.len() != self.lines.len()
            || total_minor > self.total.amount_minor()
            || per_line.iter().sum::<i64>() != total_minor
        {
            return Err(Refusal::unprocessable("promotion_not_applicable", "the discount does not fit the order"));
        }
        for (line, share) in self.lines.iter_mut().zip(per_line) {
            line.discount_minor = *share;
        }
        self.discount_minor = total_minor;
        self.total = Money::new(self.total.amount_minor() - total_minor, self.total.currency())?;
        self.free = self.total.amount_minor() == 0;
        Ok(())
    }

    /// What the gateway shows the buyer: the first line's name, and how many more.
    pub fn subject(&self) -> String {
        subject(self.lines.iter().map(|l| l.name.as_str()))
    }
}

/// Re-prices a basket for confirm. Refused if it is empty, if any price or currency moved since
/// it was quoted (`price_changed`, with each moved line), if the total does not add up, or if the
/// chosen gateway does not take its currency (`accepted`: `None` for any; a zero total needs none).
pub fn price(
    lines: &[QuotedLine],
    limits: &OrderLimits,
    gateway: &str,
    accepted: Option<&[Currency]>,
) -> Result<Pricing, Refusal> {
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
    limits.check(lines)?;
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
            discount_minor: 0,
        });
    }
    let free = total.amount_minor() == 0;
    if !free {
        check_currency(gateway, total.currency(), accepted)?;
    }
    Ok(Pricing { lines: priced, total, discount_minor: 0, free })
}

/// Whether the gateway takes an amount in `currency` (`accepted`: `None` for any).
pub fn check_currency(gateway: &str, currency: Currency, accepted: Option<&[Currency]>) -> Result<(), Refusal> {
    match accepted {
        Some(accepted) if !accepted.contains(&currency) => {
            Err(Refusal::unprocessable("unsupported_currency", format!("gateway {gateway} does not take {currency}")))
        }
        _ => Ok(()),
    }
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

/// How long an order of `lines` holds its stock: the shortest of the shop's default and each
/// line's SKU hold.
pub fn hold_ms(default_ms: i64, lines: &[QuotedLine]) -> i64 {
    lines.iter().filter_map(|l| l.hold_seconds).map(|s| s.saturating_mul(1000)).fold(default_ms, i64::min)
}

/// Longest hold, shop-wide or of one SKU: a week, so a hold in milliseconds never overflows.
pub const HOLD_SECONDS_MAX: i64 = 7 * 24 * 3600;

/// A SKU's own limits: at most `max_per_order` units in one order, stock held for `hold_seconds`
/// when that is shorter than the shop's default (flash sales). `None`: no limit of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SkuLimits {
    pub max_per_order: Option<i64>,
    pub hold_seconds: Option<i64>,
}

impl SkuLimits {
    /// Refused unless each limit set is within its range.
    pub fn check(&self) -> Result<(), Refusal> {
        if self.max_per_order.is_some_and(|m| !(1..=super::basket::LINE_QUANTITY_MAX).contains(&m)) {
            return Err(Refusal::unprocessable(
                "invalid_limit",
                format!("max_per_order must be between 1 and {}", super::basket::LINE_QUANTITY_MAX),
            ));
        }
        if self.hold_seconds.is_some_and(|h| !(1..=HOLD_SECONDS_MAX).contains(&h)) {
            return Err(Refusal::unprocessable(
                "invalid_limit",
                format!("hold_seconds must be between 1 and {HOLD_SECONDS_MAX}"),
            ));
        }
        Ok(())
    }
}

/// The shop's limits on one order, so that no one order holds a SKU's whole stock for the hold
/// time (hoarding). A SKU's own `max_per_order` replaces [`OrderLimits::default_max_per_order`]
/// and [`OrderLimits::stock_share_percent`] for its line; [`OrderLimits::units_per_order`] counts
/// every line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderLimits {
    /// Units of one SKU in one order, for a SKU with no `max_per_order` of its own; 0: no limit.
    pub default_max_per_order: i64,
    /// Units in one order, all lines together; 0: no limit.
    pub units_per_order: i64,
    /// Share of a SKU's stock one order may hold, in percent (rounded up, at least one unit), for a
    /// SKU with no `max_per_order` of its own; 100: no limit.
    pub stock_share_percent: i64,
}

/// Units of one SKU in one order by default.
pub const DEFAULT_MAX_PER_ORDER: i64 = 20;
/// Units in one order by default.
pub const UNITS_PER_ORDER_DEFAULT: i64 = 100;
/// Share of a SKU's stock one order may hold by default, in percent.
pub const STOCK_SHARE_PERCENT_DEFAULT: i64 = 50;

impl Default for OrderLimits {
    fn default() -> Self {
        OrderLimits {
            default_max_per_order: DEFAULT_MAX_PER_ORDER,
            units_per_order: UNITS_PER_ORDER_DEFAULT,
            stock_share_percent: STOCK_SHARE_PERCENT_DEFAULT,
        }
    }
}

impl OrderLimits {
    /// No limit beyond each SKU's own.
    pub const NONE: OrderLimits =
        OrderLimits { default_max_per_order: 0, units_per_order: 0, stock_share_percent: 100 };

    /// Most units of a line's SKU one order may hold: its own `max_per_order`, or the least of
    /// the default and the share of `on_hand`. `None`: no limit.
    pub fn line_max(&self, max_per_order: Option<i64>, on_hand: i64) -> Option<i64> {
        if max_per_order.is_some() {
            return max_per_order;
        }
        let default = (self.default_max_per_order > 0).then_some(self.default_max_per_order);
        let share = (self.stock_share_percent < 100).then(|| {
            let share = on_hand.max(0).saturating_mul(self.stock_share_percent.max(1)).saturating_add(99) / 100;
            share.max(1)
        });
        match (default, share) {
            (Some(d), Some(s)) => Some(d.min(s)),
            (d, s) => d.or(s),
        }
    }

    /// Each line within its SKU's limit, and the order within the units per order: else
    /// `quantity_limit`, naming the SKU and its limit (or the order's).
    pub fn check(&self, lines: &[QuotedLine]) -> Result<(), Refusal> {
        for l in lines {
            super::basket::check_line_limit(&l.sku, l.quantity, self.line_max(l.max_per_order, l.on_hand))?;
        }
        let units = lines.iter().map(|l| l.quantity).fold(0_i64, i64::saturating_add);
        if self.units_per_order > 0 && units > self.units_per_order {
            let max = self.units_per_order;
            return Err(Refusal::unprocessable(
                "quantity_limit",
                format!("at most {max} units may be bought in one order"),
            )
            .with_details(json!({"units": units, "max_units": max})));
        }
        Ok(())
    }

    /// Refused unless each limit is within its range.
    pub fn validate(&self) -> Result<(), String> {
        let max = super::basket::LINE_QUANTITY_MAX;
        if !(0..=max).contains(&self.default_max_per_order) {
            return Err(format!("--default-max-per-order must be between 0 (no limit) and {max}"));
        }
        if !(0..=max.saturating_mul(super::basket::BASKET_LINES_MAX)).contains(&self.units_per_order) {
            return Err(format!(
                "--max-units-per-order must be between 0 (no limit) and {}",
                max.saturating_mul(super::basket::BASKET_LINES_MAX)
            ));
        }
        if !(1..=100).contains(&self.stock_share_percent) {
            return Err("--max-stock-share-percent must be between 1 and 100 (no limit)".to_string());
        }
        Ok(())
    }
}

/// A SKU's price as the shop sets it: a price of zero gives goods away, so it is taken only when
/// the shop says so (`free`); and `free` with a price is a contradiction.
pub fn check_price(price_minor: i64, free: bool) -> Result<(), Refusal> {
    match (price_minor, free) {
        (p, _) if p < 0 => Err(Refusal::unprocessable("invalid_amount", "price must not be negative")),
        (0, false) => Err(Refusal::unprocessable(
            "free_not_confirmed",
            "a price of 0 gives the goods away: send \"free\": true to mean it",
        )),
        (p, true) if p > 0 => {
            Err(Refusal::unprocessable("free_not_confirmed", "\"free\": true goes with a price of 0 only"))
        }
        _ => Ok(()),
    }
}

/// Unpaid orders one buyer session may have open at once, unless configured otherwise.
pub const OPEN_ORDERS_PER_SESSION_DEFAULT: u32 = 3;

/// A buyer with `open` unpaid orders places another: refused at `max` (a buyer holding stock in
/// order after order is hoarding it).
pub fn check_open_orders(open: i64, max: u32) -> Result<(), Refusal> {
    if open < i64::from(max) {
        return Ok(());
    }
    Err(Refusal::new(
        super::refusal::RefusalKind::TooMany,
        "too_many_open_orders",
        format!("this buyer already has {open} unpaid orders; pay or cancel one first (at most {max})"),
    )
    .with_details(json!({"open": open, "max": max})))
}

/// The hold on a SKU's stock in `sku` for `requested` units found `available` left: the order is
/// not placed (nothing is held for it).
pub fn out_of_stock(sku: &str, requested: i64, available: i64) -> Refusal {
    Refusal::conflict("out_of_stock", format!("not enough stock for {sku}"))
        .with_details(json!({"sku": sku, "requested": requested, "available": available.max(0)}))
}

/// A confirm repeated with an `Idempotency-Key` the buyer used before: it answers that key's order
/// only when it names the same basket (`key_basket`, recorded with the key); a key sent again for
/// another basket is a mistake in the shop's client, never a second order.
pub fn may_replay_key(key_basket: &str, basket: &str) -> Result<(), Refusal> {
    if key_basket == basket {
        return Ok(());
    }
    Err(Refusal::unprocessable("idempotency_key_reused", "this Idempotency-Key was used for another basket"))
}

/// How long a confirm holds stock for payment unless the shop configures otherwise, in seconds.
pub const HOLD_SECONDS_DEFAULT: u64 = 900;

/// When the stock held at confirm is released if the order is not paid.
pub fn hold_expires_at(now_ms: i64, hold_ms: i64) -> i64 {
    now_ms.saturating_add(hold_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_answers_only_for_the_basket_it_was_first_sent_with() {
        assert!(may_replay_key("b1", "b1").is_ok());
        assert_eq!(may_replay_key("b1", "b2").unwrap_err().code, "idempotency_key_reused");
    }

    #[test]
    fn out_of_stock_never_shows_a_negative_availability() {
        let r = out_of_stock("TEA", 3, -2);
        assert_eq!((r.code, r.kind), ("out_of_stock", super::super::refusal::RefusalKind::Conflict));
        assert_eq!(r.details, Some(json!({"sku": "TEA", "requested": 3, "available": 0})));
    }

    #[test]
    fn a_zero_price_is_taken_only_when_the_shop_says_free() {
        assert!(check_price(1, false).is_ok());
        assert!(check_price(0, true).is_ok());
        assert_eq!(check_price(0, false).unwrap_err().code, "free_not_confirmed");
        assert_eq!(check_price(100, true).unwrap_err().code, "free_not_confirmed");
        assert_eq!(check_price(-1, false).unwrap_err().code, "invalid_amount");
    }

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
            max_per_order: None,
            hold_seconds: None,
            on_hand: 1000,
        }
    }

    #[test]
    fn a_gateway_takes_the_currencies_it_lists() {
        let (cny, eur) = (Currency::parse("CNY").unwrap(), Currency::parse("EUR").unwrap());
        assert!(check_currency("alipay", cny, Some(&[cny])).is_ok());
        assert!(check_currency("sandbox", eur, None).is_ok());
        let refused = check_currency("alipay", eur, Some(&[cny])).unwrap_err();
        assert_eq!(
            (refused.code, refused.message.as_str()),
            ("unsupported_currency", "gateway alipay does not take EUR")
        );
    }

    #[test]
    fn a_line_over_its_skus_limit_is_refused_with_the_limit() {
        let mut limited = quoted("LAMP", 990, 990, "CNY");
        limited.max_per_order = Some(1);
        let r = price(&[quoted("A", 150, 150, "CNY"), limited.clone()], &OrderLimits::default(), "sandbox", None)
            .unwrap_err();
        assert_eq!((r.code, r.kind), ("quantity_limit", crate::domain::refusal::RefusalKind::Unprocessable));
        assert_eq!(r.details.unwrap(), json!({"sku": "LAMP", "max": 1}));
        limited.max_per_order = Some(2);
        assert!(
            price(&[limited], &OrderLimits::default(), "sandbox", None).is_ok(),
            "a line at its limit is within it"
        );
    }

    #[test]
    fn no_one_order_holds_a_skus_whole_stock_by_default() {
        let limits = OrderLimits::default();
        let line = |quantity: i64, on_hand: i64, own: Option<i64>| QuotedLine {
            quantity,
            on_hand,
            max_per_order: own,
            ..quoted("GPU", 100, 100, "CNY")
        };
        // Half the stock, rounded up, at least one unit; and the default cap.
        assert!(limits.check(&[line(1, 1, None)]).is_ok());
        assert!(limits.check(&[line(2, 3, None)]).is_ok());
        assert!(limits.check(&[line(3, 5, None)]).is_ok());
        let r = limits.check(&[line(4, 5, None)]).unwrap_err();
        assert_eq!((r.code, r.details.unwrap()), ("quantity_limit", json!({"sku": "GPU", "max": 3})));
        assert!(limits.check(&[line(20, 1000, None)]).is_ok());
        assert_eq!(limits.check(&[line(21, 1000, None)]).unwrap_err().code, "quantity_limit");
        // A SKU's own limit replaces both.
        assert!(limits.check(&[line(50, 50, Some(50))]).is_ok());
        // The order as a whole.
        let big: Vec<QuotedLine> =
            (0..6).map(|i| QuotedLine { sku: format!("S{i}"), ..line(20, 1000, None) }).collect();
        let r = limits.check(&big).unwrap_err();
        assert_eq!(r.details.unwrap(), json!({"units": 120, "max_units": 100}));
        assert!(OrderLimits::NONE.check(&big).is_ok());
        assert!(OrderLimits::NONE.check(&[line(10, 10, None)]).is_ok());
        assert!(OrderLimits::default().validate().is_ok() && OrderLimits::NONE.validate().is_ok());
        assert!(OrderLimits { stock_share_percent: 0, ..limits }.validate().is_err());
        assert!(OrderLimits { default_max_per_order: -1, ..limits }.validate().is_err());
    }

    #[test]
    fn an_order_holds_for_the_shortest_of_its_lines() {
        let mut flash = quoted("FLASH", 990, 990, "CNY");
        flash.hold_seconds = Some(120);
        let mut slow = quoted("SLOW", 10, 10, "CNY");
        slow.hold_seconds = Some(3600);
        assert_eq!(hold_ms(900_000, &[quoted("A", 1, 1, "CNY")]), 900_000);
        assert_eq!(hold_ms(900_000, &[quoted("A", 1, 1, "CNY"), flash.clone(), slow.clone()]), 120_000);
        assert_eq!(hold_ms(900_000, &[slow]), 900_000, "a SKU's hold never lengthens the shop's");
    }

    #[test]
    fn sku_limits_stay_in_range() {
        assert!(SkuLimits::default().check().is_ok());
        assert!(SkuLimits { max_per_order: Some(1), hold_seconds: Some(HOLD_SECONDS_MAX) }.check().is_ok());
        for bad in [
            SkuLimits { max_per_order: Some(0), hold_seconds: None },
            SkuLimits { max_per_order: Some(crate::domain::basket::LINE_QUANTITY_MAX + 1), hold_seconds: None },
            SkuLimits { max_per_order: None, hold_seconds: Some(0) },
            SkuLimits { max_per_order: None, hold_seconds: Some(HOLD_SECONDS_MAX + 1) },
        ] {
            assert_eq!(bad.check().unwrap_err().code, "invalid_limit", "{bad:?}");
        }
    }

    #[test]
    fn open_orders_are_capped_per_buyer() {
        assert!(check_open_orders(2, 3).is_ok());
        let r = check_open_orders(3, 3).unwrap_err();
        assert_eq!((r.code, r.kind), ("too_many_open_orders", crate::domain::refusal::RefusalKind::TooMany));
        assert_eq!(r.details.unwrap()["max"], 3);
    }

    #[test]
    fn prices_at_todays_catalog() {
        let p = price(
            &[quoted("A", 150, 150, "EUR"), quoted("B", 50, 50, "EUR")],
            &OrderLimits::default(),
            "sandbox",
            None,
        )
        .unwrap();
        assert_eq!(p.total.amount_minor(), 400);
        assert!(!p.free);
        assert_eq!(p.payer("sandbox", "web"), ("sandbox", "web"));
        assert_eq!(p.subject(), "A name and 1 more");
    }

    #[test]
    fn a_moved_price_is_refused_with_the_lines() {
        let r = price(
            &[quoted("A", 150, 150, "EUR"), quoted("B", 50, 60, "EUR")],
            &OrderLimits::default(),
            "sandbox",
            None,
        )
        .unwrap_err();
        assert_eq!(r.code, "price_changed");
        assert_eq!(r.details.unwrap()["lines"][0]["sku"], "B");
        let mut moved = quoted("C", 50, 50, "EUR");
        moved.currency = "CNY".into();
        assert_eq!(price(&[moved], &OrderLimits::default(), "sandbox", None).unwrap_err().code, "price_changed");
    }

    #[test]
    fn empty_baskets_and_foreign_currencies_are_refused() {
        assert_eq!(price(&[], &OrderLimits::default(), "sandbox", None).unwrap_err().code, "basket_empty");
        let cny = [Currency::parse("CNY").unwrap()];
        assert_eq!(
            price(&[quoted("A", 150, 150, "EUR")], &OrderLimits::default(), "alipay", Some(&cny)).unwrap_err().code,
            "unsupported_currency"
        );
        // A zero total needs no gateway, so any currency will do.
        let free = price(&[quoted("A", 0, 0, "EUR")], &OrderLimits::default(), "alipay", Some(&cny)).unwrap();
        assert!(free.free);
        assert_eq!(free.payer("alipay", "page"), (FREE_GATEWAY, FREE_GATEWAY));
        assert_eq!(
            price(&[quoted("A", i64::MAX, i64::MAX, "EUR")], &OrderLimits::default(), "s", None).unwrap_err().code,
            "amount_overflow"
        );
    }

    #[test]
    fn subjects_and_keys() {
        assert_eq!(subject([].into_iter()), "order");
        assert_eq!(subject(["Tea"].into_iter()), "Tea");
        assert_eq!(subject(["Tea", "Cup", "Pot"].into_iter()), "Tea and 2 more");
        assert_eq!(hold_expires_at(i64::MAX - 1, 10), i64::MAX);
    }
}
