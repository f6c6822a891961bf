#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)] // shares of a generated history, never money
//! `kassa bench seed`: a shop's history, so that what is measured on an empty database can be
//! measured again two years in. It writes settled orders spread over `--days` (paid and shipped,
//! card keys delivered, expired, cancelled, refunded, some paid and waiting to be shipped) with
//! everything a real purchase leaves behind: buyer sessions, frozen baskets, lines, reservations,
//! payment attempts, applied notifications, the status log, delivered webhook messages, refunds and
//! idempotency keys — of these, what retention prunes only as far back as its defaults keep them. The rows are the ones
//! kassa writes, so `kassa check` holds on the result; a test proves it on both databases.
//!
//! PostgreSQL is written with `COPY … (FORMAT binary)`, one transaction per batch; SQLite with
//! prepared inserts, one transaction per batch. Foreign keys are checked on both, as always.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;

use super::seed_rows::{
    ATTEMPTS, BASKET_LINES, BASKETS, CARD_KEYS, EVENTS, IDEMPOTENCY, NOTIFICATIONS, NULL_INT, NULL_TEXT, ORDER_LINES,
    ORDERS, OUTBOX, REFUNDS, RESERVATIONS, Rows, SESSIONS, Sink, TABLES, V, i, t,
};

use kassa::clock::{Clock as _, SystemClock};
use kassa::domain::ids::new_order_no;
use kassa::store::Db;
use kassa::vault::Vault;

/// Orders written per transaction.
pub const SEED_BATCH: u64 = 5_000;
/// Most orders one run writes.
pub const SEED_ORDERS_MAX: u64 = 100_000_000;
/// Physical SKUs of the history (`HIST-P-00` …).
const PHYSICAL_SKUS: usize = 40;
/// Card-key SKUs of the history (`HIST-D-00` …), seeded when a keys secret is given.
const DIGITAL_SKUS: usize = 10;
/// Unsold card keys left on each digital SKU.
const UNSOLD_KEYS_PER_SKU: usize = 20;
/// Units on hand of each physical SKU after the history.
const PHYSICAL_ON_HAND: i64 = 100_000;
/// What retention keeps at its defaults, and so what a history holds: notification bodies of the
/// last 180 days, webhook messages delivered in the last 90, idempotency keys of the last 30.
const BODY_KEPT_MS: i64 = 180 * DAY_MS;
const MESSAGES_KEPT_MS: i64 = 90 * DAY_MS;
const KEYS_KEPT_MS: i64 = 30 * DAY_MS;
const DAY_MS: i64 = 86_400_000;
const MINUTE_MS: i64 = 60_000;

#[derive(Debug, Clone, clap::Args)]
pub struct SeedArgs {
    #[command(flatten)]
    pub common: kassa::config::CommonArgs,
    #[command(flatten)]
    pub keys: kassa::config::KeysArgs,
    /// Orders to write
    #[arg(long)]
    pub orders: u64,
    /// Days of history the orders are spread over, ending a day ago
    #[arg(long, default_value_t = 730)]
    pub days: u32,
    /// Seed of the generator: the same seed writes the same mix (ids and order numbers differ)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What a seed run wrote.
#[derive(Debug, Default, serde::Serialize)]
pub struct Seeded {
    pub orders: u64,
    pub by_status: BTreeMap<&'static str, u64>,
    pub rows: u64,
    pub seconds: f64,
    pub orders_per_s: f64,
    pub card_keys: bool,
}

/// What becomes of a generated order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Expired,
    Cancelled,
    /// Paid, its goods not shipped yet.
    Paid,
    Delivered,
    /// Delivered, then refunded in full.
    Refunded,
}

impl Fate {
    fn pick(rng: &mut StdRng) -> Fate {
        match rng.random_range(0..100) {
            0..10 => Fate::Expired,
            10..13 => Fate::Cancelled,
            13..15 => Fate::Paid,
            15..18 => Fate::Refunded,
            _ => Fate::Delivered,
        }
    }
    fn status(self) -> &'static str {
        match self {
            Fate::Expired => "expired",
            Fate::Cancelled => "cancelled",
            Fate::Paid => "paid",
            Fate::Delivered => "delivered",
            Fate::Refunded => "refunded",
        }
    }
}

/// Gateways and channels in the shares a Chinese shop with some foreign buyers sees.
const CHANNELS: [(&str, &str, u32); 6] = [
    ("alipay", "page", 25),
    ("alipay", "wap", 20),
    ("wechatpay", "native", 15),
    ("wechatpay", "jsapi", 15),
    ("wechatpay", "h5", 5),
    ("stripe", "checkout", 20),
];

struct Sku {
    sku: String,
    digital: bool,
    price_minor: i64,
}

struct Generator {
    rng: StdRng,
    skus: Vec<Sku>,
    vault: Option<Vault>,
    /// Units sold per SKU index.
    sold: Vec<i64>,
    now: i64,
    start: i64,
    span: i64,
    total: u64,
    by_status: BTreeMap<&'static str, u64>,
}

fn id_at(at: i64) -> String {
    let ms = u64::try_from(at).unwrap_or(0);
    uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, ms / 1000, ((ms % 1000) * 1_000_000) as u32))
        .to_string()
}

fn rfc3339(at: i64) -> String {
    jiff::Timestamp::from_millisecond(at).map(|t| t.to_string()).unwrap_or_default()
}

impl Generator {
    fn hex(&mut self, bytes: usize) -> String {
        (0..bytes).map(|_| format!("{:02x}", self.rng.random::<u8>())).collect()
    }

    /// The rows of orders `from..to`; order `n` belongs to buyer session `n / 2`.
    fn batch(&mut self, from: u64, to: u64) -> anyhow::Result<Rows> {
        let mut rows: Rows = vec![Vec::new(); TABLES.len()];
        let mut session = String::new();
        for n in from..to {
            let created = self.start + (self.span as f64 * n as f64 / self.total as f64) as i64;
            if n.is_multiple_of(2) || session.is_empty() {
                session = id_at(created - MINUTE_MS);
                let (token, csrf) = (self.hex(32), self.hex(32));
                rows[SESSIONS].push(vec![t(&session), t(token), t(csrf), i(created - MINUTE_MS)]);
            }
            self.order(&mut rows, n, &session, created)?;
        }
        Ok(rows)
    }

    fn order(&mut self, rows: &mut Rows, n: u64, session: &str, created: i64) -> anyhow::Result<()> {
        let fate = Fate::pick(&mut self.rng);
        *self.by_status.entry(fate.status()).or_default() += 1;
        let order_no = new_order_no(created).to_string();
        let basket = id_at(created - 30_000);
        let hold_expires = created + 15 * MINUTE_MS;
        let digital = self.vault.is_some() && self.rng.random_range(0..100) < 40;
        let kinds: Vec<usize> = (0..self.skus.len()).filter(|k| self.skus[*k].digital == digital).collect();
        let line_count = match self.rng.random_range(0..100) {
            0..80 => 1,
            80..95 => 2,
            _ => 3,
        };
        let mut picked: Vec<usize> = Vec::new();
        while picked.len() < line_count {
            let k = kinds[self.rng.random_range(0..kinds.len())];
            if !picked.contains(&k) {
                picked.push(k);
            }
        }
        let paid = matches!(fate, Fate::Paid | Fate::Delivered | Fate::Refunded);
        let mut total = 0;
        let mut lines = Vec::new();
        for (line_no, k) in picked.iter().enumerate() {
            let quantity = if self.rng.random_range(0..10) == 0 { 2 } else { 1 };
            let sku = &self.skus[*k];
            total += sku.price_minor * quantity;
            lines.push((line_no as i64 + 1, *k, quantity));
            rows[BASKET_LINES].push(vec![t(&basket), t(&sku.sku), i(quantity), i(sku.price_minor), t("CNY")]);
            rows[ORDER_LINES].push(vec![
                t(&order_no),
                i(line_no as i64 + 1),
                t(&sku.sku),
                t(&sku.sku),
                t(if sku.digital { "digital" } else { "physical" }),
                i(sku.price_minor),
                i(quantity),
                i(sku.price_minor * quantity),
            ]);
        }
        let (gateway, channel) = self.channel();
        let attempt = format!("{order_no}_1");
        let paid_at = created + self.rng.random_range(5_000..120_000);
        let ended = match fate {
            Fate::Expired => hold_expires,
            Fate::Cancelled => created + self.rng.random_range(10_000..600_000),
            Fate::Paid => paid_at,
            Fate::Delivered if digital => paid_at,
            Fate::Delivered => paid_at + self.rng.random_range(MINUTE_MS..2 * DAY_MS),
            Fate::Refunded => paid_at + self.rng.random_range(DAY_MS..7 * DAY_MS),
        };
        for (line_no, k, quantity) in &lines {
            let status = if paid { "consumed" } else { "released" };
            rows[RESERVATIONS].push(vec![
                t(&order_no),
                t(&self.skus[*k].sku),
                i(*quantity),
                t(status),
                i(hold_expires),
                i(if paid { paid_at } else { ended }),
            ]);
            if paid {
                self.sold[*k] += quantity;
                if self.skus[*k].digital {
                    self.keys(rows, &order_no, *line_no, *k, *quantity, paid_at)?;
                }
            }
        }
        rows[BASKETS].push(vec![t(&basket), t(session), t("frozen"), t(&order_no), i(created - 30_000), i(created)]);
        if n % 2 == 1 && created >= self.now - KEYS_KEPT_MS {
            rows[IDEMPOTENCY].push(vec![t(session), t(format!("idem-{n}")), t(&basket), t(&order_no), i(created)]);
        }
        let reference = n.is_multiple_of(2).then(|| format!("shop-{n}"));
        let metadata = json!({ "customer": format!("c{}", n / 2) }).to_string();
        rows[ORDERS].push(vec![
            t(&order_no),
            t(session),
            t(&basket),
            t(fate.status()),
            i(total),
            t("CNY"),
            if paid { i(total) } else { NULL_INT },
            if paid { t("CNY") } else { NULL_TEXT },
            t(gateway),
            i(hold_expires),
            i(created),
            i(ended),
            if paid { t(&attempt) } else { NULL_TEXT },
            if fate == Fate::Refunded { t("delivered") } else { NULL_TEXT },
            V::Text(reference.clone()),
            t(&metadata),
            i(1),
        ]);
        let attempt_status = match fate {
            Fate::Expired => "expired",
            Fate::Cancelled => "cancelled",
            _ => "succeeded",
        };
        let txn = paid.then(|| format!("txn_{}", self.hex(12)));
        rows[ATTEMPTS].push(vec![
            t(&attempt),
            t(&order_no),
            i(1),
            t(gateway),
            t(channel),
            t(attempt_status),
            i(total),
            t("CNY"),
            V::Text(txn.clone()),
            i(created),
            i(if paid { paid_at } else { ended }),
            if paid { i(total) } else { NULL_INT },
        ]);
        let order = OrderRef { order_no: &order_no, attempt: &attempt, gateway, total, reference };
        let mut log = Log { rows, order_no: &order_no };
        log.event("order", &order_no, None, "pending_payment", "checkout", None, created);
        log.event("attempt", &attempt, None, "created", "checkout", None, created);
        match fate {
            Fate::Expired | Fate::Cancelled => {
                let (to, trigger) =
                    if fate == Fate::Expired { ("expired", "hold_expired") } else { ("cancelled", "cancel") };
                log.event("attempt", &attempt, Some("created"), to, trigger, None, ended);
                log.event("order", &order_no, Some("pending_payment"), to, trigger, None, ended);
                self.message(log.rows, &order, &format!("order.{to}"), to, ended);
            }
            Fate::Paid | Fate::Delivered | Fate::Refunded => {
                let notification = self.notification(log.rows, &order, txn.as_deref().unwrap_or_default(), paid_at);
                log.event(
                    "attempt",
                    &attempt,
                    Some("created"),
                    "succeeded",
                    "payment_succeeded",
                    Some(&notification),
                    paid_at,
                );
                log.event(
                    "order",
                    &order_no,
                    Some("pending_payment"),
                    "paid",
                    "payment_succeeded",
                    Some(&notification),
                    paid_at,
                );
                self.message(log.rows, &order, "order.paid", "paid", paid_at);
                if !digital {
                    self.message(log.rows, &order, "fulfilment.requested", "paid", paid_at);
                }
                if fate != Fate::Paid {
                    let (delivered_at, trigger) =
                        if digital { (paid_at, "keys_delivered") } else { (ended, "shipped") };
                    let delivered_at =
                        if fate == Fate::Refunded && !digital { paid_at + MINUTE_MS } else { delivered_at };
                    log.event("order", &order_no, Some("paid"), "delivered", trigger, None, delivered_at);
                    self.message(log.rows, &order, "order.delivered", "delivered", delivered_at);
                }
                if fate == Fate::Refunded {
                    self.refund(&mut log, &order, ended);
                }
            }
        }
        Ok(())
    }

    fn channel(&mut self) -> (&'static str, &'static str) {
        let mut roll = self.rng.random_range(0..100);
        for (gateway, channel, share) in CHANNELS {
            if roll < share {
                return (gateway, channel);
            }
            roll -= share;
        }
        ("alipay", "page")
    }

    /// The card keys a paid digital line received.
    fn keys(
        &mut self,
        rows: &mut Rows,
        order_no: &str,
        line_no: i64,
        k: usize,
        quantity: i64,
        at: i64,
    ) -> anyhow::Result<()> {
        let Some(vault) = &self.vault else { return Ok(()) };
        let sku = &self.skus[k].sku;
        for q in 0..quantity {
            let key = format!("{order_no}-{line_no}-{q}");
            let (nonce, ciphertext) = vault.seal(sku, &key).map_err(|e| anyhow::anyhow!("sealing a card key: {e}"))?;
            rows[CARD_KEYS].push(vec![
                t(id_at(at - DAY_MS)),
                t(sku),
                t(vault.fingerprint(sku, &key)),
                V::Bytes(nonce),
                V::Bytes(ciphertext),
                t("delivered"),
                t(order_no),
                i(line_no),
                i(at),
                i(at - DAY_MS),
            ]);
        }
        Ok(())
    }

    /// The gateway's payment notification, applied; its body emptied when retention would have.
    fn notification(&mut self, rows: &mut Rows, order: &OrderRef<'_>, txn: &str, at: i64) -> String {
        let id = id_at(at);
        let event = format!("evt_{}", self.hex(12));
        let body =
            json!({ "out_trade_no": order.attempt, "trade_no": txn, "total_amount": order.total, "event_id": event })
                .to_string();
        let pruned = at < self.now - BODY_KEPT_MS;
        rows[NOTIFICATIONS].push(vec![
            t(&id),
            t(order.gateway),
            t(&event),
            t(&event),
            t("applied"),
            t(order.attempt),
            t(order.order_no),
            V::Bytes(if pruned { Vec::new() } else { body.clone().into_bytes() }),
            i(at),
            if pruned { i(at + BODY_KEPT_MS) } else { NULL_INT },
            i(body.len() as i64),
        ]);
        id
    }

    /// A delivered webhook message about the order.
    fn message(&mut self, rows: &mut Rows, order: &OrderRef<'_>, topic: &str, status: &str, at: i64) {
        let payload = json!({
            "order_no": order.order_no, "status": status, "total_minor": order.total, "currency": "CNY",
            "at": rfc3339(at), "merchant_reference": order.reference, "attempt_ref": order.attempt,
            "gateway": order.gateway,
        });
        self.outbox(rows, order.order_no, topic, payload.to_string(), at);
    }

    fn outbox(&mut self, rows: &mut Rows, order_no: &str, topic: &str, payload: String, at: i64) {
        let delivered = at + self.rng.random_range(50..2_000);
        if delivered < self.now - MESSAGES_KEPT_MS {
            return;
        }
        rows[OUTBOX].push(vec![
            t(id_at(at)),
            t(order_no),
            t(topic),
            t(payload),
            t("delivered"),
            i(1),
            i(at),
            i(0),
            i(at),
            i(delivered),
        ]);
    }

    /// A full refund asked by the shop at `at`, sent to the gateway and gone through.
    fn refund(&mut self, log: &mut Log<'_>, order: &OrderRef<'_>, at: i64) {
        let refund_no = format!("RF{}", &order.order_no[2..]);
        let done = at + self.rng.random_range(MINUTE_MS..DAY_MS);
        log.rows[REFUNDS].push(vec![
            t(&refund_no),
            t(order.order_no),
            t(order.attempt),
            i(order.total),
            t("CNY"),
            t("the buyer asked"),
            t("merchant"),
            t("succeeded"),
            t(format!("gr_{}", self.hex(8))),
            i(1),
            i(at),
            i(0),
            i(at),
            i(done),
        ]);
        log.event("order", order.order_no, Some("delivered"), "refunding", "refund_requested", None, at);
        log.event("refund", &refund_no, None, "requested", "refund_requested", None, at);
        log.event("refund", &refund_no, Some("requested"), "processing", "sent_to_gateway", None, at + 1_000);
        log.event("refund", &refund_no, Some("processing"), "succeeded", "refund_succeeded", None, done);
        log.event("order", order.order_no, Some("refunding"), "refunded", "refunds_settled", None, done);
        for (status, when) in [("requested", at), ("succeeded", done)] {
            let payload = json!({
                "refund_no": refund_no, "order_no": order.order_no, "status": status, "amount_minor": order.total,
                "currency": "CNY", "kind": "merchant", "at": rfc3339(when),
            });
            self.outbox(log.rows, order.order_no, &format!("refund.{status}"), payload.to_string(), when);
        }
        self.message(log.rows, order, "order.refunding", "refunding", at);
        self.message(log.rows, order, "order.refunded", "refunded", done);
    }
}

struct OrderRef<'a> {
    order_no: &'a str,
    attempt: &'a str,
    gateway: &'a str,
    total: i64,
    reference: Option<String>,
}

/// Appends status-log rows of one order.
struct Log<'a> {
    rows: &'a mut Rows,
    order_no: &'a str,
}

impl Log<'_> {
    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        entity: &str,
        id: &str,
        from: Option<&str>,
        to: &str,
        trigger: &str,
        notification: Option<&str>,
        at: i64,
    ) {
        self.rows[EVENTS].push(vec![
            t(self.order_no),
            t(entity),
            t(id),
            V::Text(from.map(str::to_string)),
            t(to),
            t(trigger),
            V::Text(notification.map(str::to_string)),
            i(at),
        ]);
    }
}

/// Writes the history `args` asks for into its database (migrated first).
pub async fn run(args: &SeedArgs) -> anyhow::Result<Seeded> {
    anyhow::ensure!((1..=SEED_ORDERS_MAX).contains(&args.orders), "--orders must be 1 to {SEED_ORDERS_MAX}");
    anyhow::ensure!(args.days >= 1, "--days must be at least 1");
    let started = std::time::Instant::now();
    let (url, max, engine) = kassa::config::Settings::resolve_common(&args.common)?;
    let vault = kassa::config::Settings::resolve_keys_secret(&args.common, &args.keys)?
        .map(|s| Vault::from_hex(&s))
        .transpose()
        .map_err(|e| anyhow::anyhow!("the keys secret: {e}"))?;
    let db = Db::connect_with(&url, max, engine).await?;
    db.migrate().await?;
    if let Some(vault) = &vault {
        kassa::store::fulfilment::verify_keys_secret(&db, vault).await?;
    }
    let kind = db.kind();
    db.close().await;
    let now = SystemClock.now_ms();
    let end = now - DAY_MS;
    let span = i64::from(args.days) * DAY_MS;
    let mut skus: Vec<Sku> = (0..PHYSICAL_SKUS)
        .map(|n| Sku { sku: format!("HIST-P-{n:02}"), digital: false, price_minor: 990 + 500 * n as i64 })
        .collect();
    if vault.is_some() {
        skus.extend((0..DIGITAL_SKUS).map(|n| Sku {
            sku: format!("HIST-D-{n:02}"),
            digital: true,
            price_minor: 3_000 + 1_000 * n as i64,
        }));
    }
    let mut sink = Sink::open(&url, kind).await?;
    let created = end - span - DAY_MS;
    let insert_sku = "INSERT INTO skus (sku, name, kind, price_minor, currency, on_hand, reserved, sold, created_at, updated_at) \
                      VALUES ($1, $1, $2, $3, 'CNY', $4, 0, 0, $5, $5)";
    let inserts: Vec<(&str, Vec<V>)> = skus
        .iter()
        .map(|s| {
            let (kind, on_hand) =
                if s.digital { ("digital", UNSOLD_KEYS_PER_SKU as i64) } else { ("physical", PHYSICAL_ON_HAND) };
            (insert_sku, vec![t(&s.sku), t(kind), i(s.price_minor), i(on_hand), i(created)])
        })
        .collect();
    sink.run(&inserts).await?;
    let mut generator = Generator {
        rng: StdRng::seed_from_u64(args.seed),
        sold: vec![0; skus.len()],
        skus,
        vault,
        now,
        start: end - span,
        span,
        total: args.orders,
        by_status: BTreeMap::new(),
    };
    let mut written = 0;
    let mut from = 0;
    while from < args.orders {
        let to = (from + SEED_BATCH).min(args.orders);
        let rows = generator.batch(from, to)?;
        written += rows.iter().map(|t| t.len() as u64).sum::<u64>();
        sink.write(&rows).await?;
        from = to;
    }
    // What the history sold, and the card keys still on sale.
    let sold: Vec<(&str, Vec<V>)> = generator
        .skus
        .iter()
        .zip(&generator.sold)
        .map(|(sku, sold)| ("UPDATE skus SET sold = $1 WHERE sku = $2", vec![i(*sold), t(&sku.sku)]))
        .collect();
    sink.run(&sold).await?;
    // Where retention's pruning of delivered messages has reached.
    let pruned_before = (now - MESSAGES_KEPT_MS).to_string();
    sink.run(&[(
        "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        vec![t(kassa::store::retention::MESSAGES_PRUNED_BEFORE), t(pruned_before)],
    )])
    .await?;
    let unsold = generator.unsold_keys(end)?;
    written += unsold.iter().map(|t| t.len() as u64).sum::<u64>();
    sink.write(&unsold).await?;
    // The history is consistent as written (a test runs the full check on it): a later
    // `kassa check` reads what changed after it; `kassa check --full` reads it all.
    let through: Vec<(&str, Vec<V>)> = vec![(
        "INSERT INTO settings (name, value) SELECT $1, CAST(COALESCE(MAX(id), 0) AS TEXT) FROM status_events WHERE 1 = 1 \
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        vec![t(kassa::store::check::CHECKED_THROUGH)],
    )];
    sink.run(&through).await?;
    if generator.vault.is_some() {
        // Its card keys were sealed with the secret given: a later `kassa check` given it
        // decrypts the keys made after the history.
        sink.run(&[(
            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            vec![t(kassa::store::check_keys::KEYS_CHECKED_FROM), t(now.to_string())],
        )])
        .await?;
    }
    if let Sink::Postgres(client) = &sink {
        // What autovacuum has long done in a live shop two years in: the planner's statistics, so
        // that what runs next is planned for the history it finds, and the visibility map and
        // hint bits, so that an index-only scan reads no table page and the first reader of a row
        // does not rewrite its page. Without them a benchmark on day 700 measures the first
        // vacuum of the whole history (retention's round of sessions, say, read 388,000 order
        // pages in 8 s at ten million orders) instead of the shop.
        client.batch_execute("VACUUM (ANALYZE)").await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Seeded {
        orders: args.orders,
        by_status: generator.by_status,
        rows: written,
        seconds,
        orders_per_s: args.orders as f64 / seconds,
        card_keys: generator.vault.is_some(),
    })
}

impl Generator {
    /// Keys on sale on each digital SKU: what its `on_hand` counts.
    fn unsold_keys(&mut self, at: i64) -> anyhow::Result<Rows> {
        let mut rows: Rows = vec![Vec::new(); TABLES.len()];
        let Some(vault) = &self.vault else { return Ok(rows) };
        for sku in self.skus.iter().filter(|s| s.digital) {
            for q in 0..UNSOLD_KEYS_PER_SKU {
                let key = format!("{}-unsold-{q}", sku.sku);
                let (nonce, ciphertext) =
                    vault.seal(&sku.sku, &key).map_err(|e| anyhow::anyhow!("sealing a card key: {e}"))?;
                rows[CARD_KEYS].push(vec![
                    t(id_at(at)),
                    t(&sku.sku),
                    t(vault.fingerprint(&sku.sku, &key)),
                    V::Bytes(nonce),
                    V::Bytes(ciphertext),
                    t("available"),
                    NULL_TEXT,
                    NULL_INT,
                    NULL_INT,
                    i(at),
                ]);
            }
        }
        Ok(rows)
    }
}
