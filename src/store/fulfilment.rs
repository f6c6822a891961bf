//! Fulfilment: card keys (import, exactly-once delivery) and the `paid -> delivered` step.

use crate::store::sql;
use serde::Serialize;

use crate::args;
use crate::clock::Millis;
use crate::domain::OrderStatus;
use crate::domain::catalog::SkuKind;
use crate::domain::ids::{OrderNo, Sku};
use crate::error::{Error, Result};
use crate::store::batch::Batch;
use crate::store::dialect::DbKind;
use crate::store::events::{self, Cause};
use crate::store::{Db, Tx, col, new_id};
use crate::vault::Vault;

/// Keys written per import transaction: bounds the transaction and lets a progress display move.
pub const IMPORT_BATCH_MAX: usize = 500;
/// Keys accepted in one admin API call.
pub const IMPORT_API_MAX: usize = 10_000;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ImportCount {
    pub imported: i64,
    pub duplicates: i64,
}

/// The setting that holds the keys secret's check value.
const KEYS_CHECK_SETTING: &str = "keys_check";
/// Stored keys read per round when a database without a check value is first given a secret.
const VERIFY_PAGE_MAX: i64 = 1_000;

/// The answer to a keys secret that is not the one this database's keys were sealed with.
fn secret_mismatch(detail: &str) -> Error {
    Error::conflict(
        "keys_secret_mismatch",
        format!(
            "the keys secret is not the one this database's card keys were imported under ({detail}); \
             use the original --keys-secret"
        ),
    )
}

/// Makes sure `vault`'s secret is the one this database's card keys are sealed with: its check
/// value must be the stored one. A database with no check value yet gets this secret's, but only
/// after every key already stored opened under it. Several instances or imports starting at
/// once with different secrets: one check value wins, the others are refused.
pub async fn verify_keys_secret(db: &Db, vault: &Vault) -> Result<()> {
    if let Some(stored) = stored_check(db).await? {
        return if vault.matches_check(&stored) { Ok(()) } else { Err(secret_mismatch("its check value differs")) };
    }
    let unreadable = unreadable_keys(db, vault, 1, "").await?;
    if !unreadable.is_empty() {
        return Err(secret_mismatch("a stored key does not decrypt under it"));
    }
    let value = crate::store::settings::get_or_init(db, KEYS_CHECK_SETTING, || vault.check_value().to_string()).await?;
    if vault.matches_check(&value) { Ok(()) } else { Err(secret_mismatch("its check value differs")) }
}

/// Whether the database holds any card key.
pub async fn keys_stored(db: &Db) -> Result<bool> {
    let any: Option<String> =
        sql::query_scalar("SELECT id FROM card_keys LIMIT 1").fetch_optional(db.read_pool()).await?;
    Ok(any.is_some())
}

/// Whether a check value is stored, and whether it is `vault`'s (for `kassa check`).
pub async fn keys_check_matches(db: &Db, vault: &Vault) -> Result<Option<bool>> {
    Ok(stored_check(db).await?.map(|v| vault.matches_check(&v)))
}

/// The keys secret's check value as stored, if one is (for a backup's manifest: it names the
/// secret the keys are sealed with without holding it).
pub async fn keys_check_value(db: &Db) -> Result<Option<String>> {
    stored_check(db).await
}

/// The keys secret's check value as stored, if one is.
async fn stored_check(db: &Db) -> Result<Option<String>> {
    sql::query_scalar("SELECT value FROM settings WHERE name = $1")
        .bind(KEYS_CHECK_SETTING)
        .fetch_optional(db.read_pool())
        .await
}

/// Stored keys that do not decrypt under `vault` (id, SKU, order if delivered), at most `limit`.
/// Reads every key whose id sorts after `after` (`""`: every key), a page at a time.
pub async fn unreadable_keys(
    db: &Db,
    vault: &Vault,
    limit: usize,
    after: &str,
) -> Result<Vec<(String, String, Option<String>)>> {
    let mut found = Vec::new();
    let mut after = after.to_string();
    loop {
        let rows =
            sql::query("SELECT id, sku, order_no, nonce, ciphertext FROM card_keys WHERE id > $1 ORDER BY id LIMIT $2")
                .bind(&after)
                .bind(VERIFY_PAGE_MAX)
                .fetch_all(db.read_pool())
                .await?;
        for r in &rows {
            let (id, sku): (String, String) = (col(r, "id")?, col(r, "sku")?);
            if vault.open(&sku, &col::<Vec<u8>>(r, "nonce")?, &col::<Vec<u8>>(r, "ciphertext")?).is_err() {
                found.push((id.clone(), sku, col(r, "order_no")?));
                if found.len() >= limit {
                    return Ok(found);
                }
            }
            after = id;
        }
        if i64::try_from(rows.len()).unwrap_or(0) < VERIFY_PAGE_MAX {
            return Ok(found);
        }
    }
}

/// Imports one batch of keys for a digital SKU: encrypted, de-duplicated within the SKU (also
/// within the batch), and added to its stock in the same transaction. Refused when the vault's
/// secret is not the one the database's keys are sealed with ([`verify_keys_secret`]).
pub async fn import_keys(db: &Db, vault: &Vault, sku: &Sku, keys: &[String], now: Millis) -> Result<ImportCount> {
    verify_keys_secret(db, vault).await?;
    let mut sealed = Vec::with_capacity(keys.len());
    let mut seen = std::collections::HashSet::new();
    let mut count = ImportCount::default();
    for key in keys {
        let key = crate::domain::catalog::valid_key(key)?;
        let fp = vault.fingerprint(sku, key);
        if !seen.insert(fp.clone()) {
            count.duplicates += 1;
            continue;
        }
        let (nonce, ct) = vault.seal(sku, key).map_err(|e| Error::internal(e.to_string()))?;
        sealed.push((fp, nonce, ct));
    }
    let lock = db.for_update();
    let inserted = crate::write_tx!(db, |tx| {
        let kind: String = sql::query_scalar(&format!("SELECT kind FROM skus WHERE sku = $1{lock}"))
            .bind(sku)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| Error::not_found("SKU"))?;
        let kind = SkuKind::parse(&kind).ok_or_else(|| Error::internal("unknown SKU kind"))?;
        crate::domain::catalog::may_import_keys(kind)?;
        let mut inserted: i64 = 0;
        for (fp, nonce, ct) in &sealed {
            let done = sql::query(
                "INSERT INTO card_keys (id, sku, fingerprint, nonce, ciphertext, status, created_at) \
                 VALUES ($1, $2, $3, $4, $5, 'available', $6) ON CONFLICT (sku, fingerprint) DO NOTHING",
            )
            .bind(new_id())
            .bind(sku)
            .bind(fp)
            .bind(nonce)
            .bind(ct)
            .bind(now)
            .execute(&mut **tx)
            .await?;
            inserted += i64::try_from(done.rows_affected()).unwrap_or(0);
        }
        sql::query("UPDATE skus SET on_hand = on_hand + $1, updated_at = $2 WHERE sku = $3")
            .bind(inserted)
            .bind(now)
            .bind(sku)
            .execute(&mut **tx)
            .await?;
        Ok(inserted)
    })?;
    count.duplicates += i64::try_from(sealed.len()).unwrap_or(0) - inserted;
    count.imported = inserted;
    Ok(count)
}

use crate::domain::shipping::Logistics;
use crate::store::lines::{OrderLine, order_lines};

/// After `-> paid`: hands out the card keys of digital lines (exactly once: each key row moves
/// from available to this order line under the order lock) and, when nothing physical remains to
/// ship, moves the order on to `delivered`.
pub(super) async fn after_paid(tx: &mut Tx<'_>, order_no: &str, cause: Cause<'_>) -> Result<()> {
    let lines = order_lines(tx, order_no).await?;
    let mut batch = Batch::new();
    let digital_only = add_key_delivery(&mut batch, tx.kind(), order_no, &lines, cause.at);
    if digital_only {
        let cause = Cause { trigger: KEYS_DELIVERED, notification_id: None, ..cause };
        events::add_order_status(tx, &mut batch, order_no, OrderStatus::Paid, OrderStatus::Delivered, cause).await?;
        add_delivered_digitally(&mut batch, order_no, cause.at);
    }
    // Physical goods only: nothing to send.
    if batch.is_empty() {
        return Ok(());
    }
    batch.run_checked(tx).await?;
    if digital_only {
        count_digital_delivery();
    }
    Ok(())
}

/// The trigger of a digital order's `paid -> delivered`.
pub(super) const KEYS_DELIVERED: &str = "keys_delivered";

/// Adds to `batch` the hand-out of each digital line's card keys, the oldest unsold first: one
/// statement a line, which must move exactly the line's quantity of keys from available to the
/// line. A line that holds keys already takes none, and a SKU with fewer unsold keys than the
/// line (which its stock accounting makes impossible) hands out too few: either way the count
/// fails the batch, and the payment with it. On PostgreSQL a key another transaction has
/// claimed is skipped. Returns whether every line is digital (nothing is left to ship).
pub(super) fn add_key_delivery(
    batch: &mut Batch,
    kind: DbKind,
    order_no: &str,
    lines: &[OrderLine],
    at: Millis,
) -> bool {
    let mut physical = false;
    for line in lines {
        if line.kind != "digital" {
            physical = true;
            continue;
        }
        let sql = key_delivery_sql(kind);
        let what = format!(
            "order {order_no} line {}: SKU {} has fewer unsold keys than its stock says, or the line holds keys already",
            line.line_no, line.sku
        );
        let quantity = u64::try_from(line.quantity).unwrap_or(0);
        batch.expect(&sql, args![order_no, line.line_no, at, line.sku.as_str(), line.quantity], quantity, what);
    }
    !physical
}

/// The hand-out of a digital line's keys: line `$2` of order `$1` at `$3` takes `$5` of SKU `$4`'s
/// unsold keys, the oldest first, unless it holds keys already.
pub fn key_delivery_sql(kind: DbKind) -> String {
    let oldest = kind.claimed(
        "id",
        "SELECT id FROM card_keys WHERE sku = $4 AND status = 'available' ORDER BY created_at, id LIMIT $5",
    );
    format!(
        "UPDATE card_keys SET status = 'delivered', order_no = $1, line_no = $2, delivered_at = $3 \
         WHERE status = 'available' AND {oldest} \
         AND NOT EXISTS (SELECT 1 FROM card_keys WHERE order_no = $1 AND line_no = $2)"
    )
}

/// Adds the rest of a digital order's delivery after its `paid -> delivered`: the shipping report
/// (a virtual delivery, for a mini-program payment).
pub(super) fn add_delivered_digitally(batch: &mut Batch, order_no: &str, at: Millis) {
    crate::store::shipping::add_report(batch, order_no, &Logistics::Virtual, at);
}

/// Counts a digital order delivered, once its batch has run.
pub(super) fn count_digital_delivery() {
    metrics::counter!("kassa_deliveries_total", "kind" => "digital").increment(1);
}

/// Admin: a physical order has shipped (`paid -> delivered`), as `logistics` describes it (the
/// shipping report to WeChat, for a mini-program payment).
pub async fn mark_delivered(db: &Db, order_no: &OrderNo, logistics: &Logistics, now: Millis) -> Result<()> {
    let lock = db.for_update();
    crate::write_tx!(db, |tx| {
        let status: String = sql::query_scalar(&format!("SELECT status FROM orders WHERE order_no = $1{lock}"))
            .bind(order_no)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| Error::not_found("order"))?;
        let status = OrderStatus::parse(&status).ok_or_else(|| Error::internal("unknown order status"))?;
        crate::domain::decide::may_mark_shipped(status)?;
        let cause = Cause { trigger: "shipped", notification_id: None, at: now };
        let mut batch = crate::store::batch::Batch::new();
        events::add_order_status(tx, &mut batch, order_no, OrderStatus::Paid, OrderStatus::Delivered, cause).await?;
        crate::store::shipping::add_report(&mut batch, order_no, logistics, now);
        batch.run_checked(tx).await
    })?;
    metrics::counter!("kassa_deliveries_total", "kind" => "physical").increment(1);
    Ok(())
}

/// The delivered keys of an order, as its buyer and admins see them.
#[derive(Debug, Default)]
pub struct OrderKeys {
    /// (line number, key), decrypted.
    pub keys: Vec<(i64, String)>,
    /// (line number, how many) of delivered keys that could not be decrypted.
    pub unreadable: Vec<(i64, i64)>,
    /// (line number, how many) of delivered keys held back from the buyer while a complaint or
    /// dispute about the order's payment is open.
    pub held: Vec<(i64, i64)>,
}

impl OrderKeys {
    pub fn unreadable_on(&self, line_no: i64) -> i64 {
        self.unreadable.iter().filter(|(n, _)| *n == line_no).map(|(_, c)| c).sum()
    }

    pub fn unreadable_total(&self) -> i64 {
        self.unreadable.iter().map(|(_, c)| c).sum()
    }

    pub fn held_on(&self, line_no: i64) -> i64 {
        self.held.iter().filter(|(n, _)| *n == line_no).map(|(_, c)| c).sum()
    }

    pub fn held_total(&self) -> i64 {
        self.held.iter().map(|(_, c)| c).sum()
    }

    /// The same keys, held back: none shown, each line's count kept.
    pub fn held_back(self) -> OrderKeys {
        let mut held: Vec<(i64, i64)> = Vec::new();
        for (line_no, _) in &self.keys {
            match held.iter_mut().find(|(n, _)| n == line_no) {
                Some((_, c)) => *c += 1,
                None => held.push((*line_no, 1)),
            }
        }
        OrderKeys { keys: Vec::new(), unreadable: self.unreadable, held }
    }
}

/// The delivered keys of an order, decrypted (for the buyer and admins only). A key that does not
/// decrypt (no secret configured, or not the secret it was sealed with) is counted, not shown: the
/// order stays readable, and an alert tells the operator.
pub async fn order_keys(db: &Db, vault: Option<&Vault>, order_no: &OrderNo, now: Millis) -> Result<OrderKeys> {
    let rows = sql::query(
        "SELECT line_no, sku, nonce, ciphertext FROM card_keys WHERE order_no = $1 ORDER BY line_no, delivered_at, id",
    )
    .bind(order_no)
    .fetch_all(db.read_pool())
    .await?;
    let mut out = OrderKeys::default();
    for r in &rows {
        let (line_no, sku): (i64, String) = (col(r, "line_no")?, col(r, "sku")?);
        let (nonce, ciphertext): (Vec<u8>, Vec<u8>) = (col(r, "nonce")?, col(r, "ciphertext")?);
        let opened = vault.map(|v| v.open(&sku, &nonce, &ciphertext));
        match opened {
            Some(Ok(key)) => out.keys.push((line_no, key)),
            _ => match out.unreadable.iter_mut().find(|(n, _)| *n == line_no) {
                Some((_, c)) => *c += 1,
                None => out.unreadable.push((line_no, 1)),
            },
        }
    }
    if out.unreadable_total() > 0 {
        let why = if vault.is_some() {
            "do not decrypt under the configured keys secret"
        } else {
            "cannot be read: no keys secret is configured"
        };
        let details = format!("{} delivered key(s) of order {order_no} {why}", out.unreadable_total());
        crate::write_tx!(db, |tx| {
            events::raise_alert(
                tx,
                "key_unreadable",
                events::Severity::Critical,
                order_no,
                Some(order_no),
                &details,
                now,
            )
            .await
        })?;
    }
    Ok(out)
}
