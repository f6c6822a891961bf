//! The buyer's way back to an order: what a lookup reads of the order, the links handed out and
//! used once, and the log of every reveal of an order's card keys.

use crate::args;
use crate::clock::Millis;
use crate::domain::OrderStatus;
use crate::domain::contact::Contact;
use crate::domain::ids::OrderNo;
use crate::error::Result;
use crate::store::batch::Batch;
use crate::store::sql;
use crate::store::{Db, col, new_id};

/// Longest user agent kept with a reveal, in characters (the rest is cut).
pub const USER_AGENT_LEN_MAX: usize = 256;
/// Reveals of one order on one channel to one address and user agent within this time are
/// logged once (a page that polls, a buyer who reloads).
pub const REVEAL_REPEAT_MS: i64 = 60_000;

/// Who an order's keys were shown to.
#[derive(Debug, Clone, Default)]
pub struct Viewer {
    pub addr: Option<String>,
    pub user_agent: Option<String>,
}

impl Viewer {
    pub fn new(addr: Option<std::net::IpAddr>, user_agent: Option<&str>) -> Viewer {
        Viewer {
            addr: addr.map(|a| a.to_string()),
            user_agent: user_agent.map(|u| u.chars().filter(|c| !c.is_control()).take(USER_AGENT_LEN_MAX).collect()),
        }
    }
}

/// What a lookup compares against: the order's contact, its lookup password's hash, its status.
#[derive(Debug, Clone)]
pub struct LookupTarget {
    pub contact: Contact,
    pub lookup_hash: Option<String>,
    pub status: OrderStatus,
    pub lang: Option<String>,
}

/// The order a lookup names, if there is one.
pub async fn target(db: &Db, order_no: &OrderNo) -> Result<Option<LookupTarget>> {
    let row =
        sql::query("SELECT status, contact_email, contact_phone, lookup_hash, lang FROM orders WHERE order_no = $1")
            .bind(order_no)
            .fetch_optional(db.read_pool())
            .await?;
    row.map(|r| {
        Ok(LookupTarget {
            contact: Contact::stored(col(&r, "contact_email")?, col(&r, "contact_phone")?),
            lookup_hash: col(&r, "lookup_hash")?,
            status: col(&r, "status")?,
            lang: col(&r, "lang")?,
        })
    })
    .transpose()
}

/// A link as kept.
#[derive(Debug, Clone)]
pub struct Link {
    pub order_no: OrderNo,
    pub expires_at: Millis,
    pub used_at: Option<Millis>,
}

/// Keeps link `id` to `order_no`, good until `expires_at`.
pub async fn create_link(db: &Db, id: &str, order_no: &OrderNo, expires_at: Millis, now: Millis) -> Result<()> {
    crate::write_tx!(db, |tx| {
        let mut batch = Batch::new();
        batch.expect(
            "INSERT INTO lookup_links (id, order_no, purpose, created_at, expires_at) VALUES ($1, $2, 'order', $3, $4)",
            args![id, order_no, now, expires_at],
            1,
            "link insert",
        );
        batch.run(tx).await.map(drop)
    })
}

/// Link `id`, if kept.
pub async fn link(db: &Db, id: &str) -> Result<Option<Link>> {
    let row = sql::query("SELECT order_no, expires_at, used_at FROM lookup_links WHERE id = $1")
        .bind(id)
        .fetch_optional(db.read_pool())
        .await?;
    row.map(|r| {
        Ok(Link {
            order_no: OrderNo::stored(col::<String>(&r, "order_no")?),
            expires_at: col(&r, "expires_at")?,
            used_at: col(&r, "used_at")?,
        })
    })
    .transpose()
}

/// Uses link `id` up for a reveal of `keys` keys to `viewer`, and logs the reveal, in one
/// transaction. False when the link was used or expired meanwhile (nothing written).
pub async fn use_link(db: &Db, id: &str, order_no: &OrderNo, keys: i64, viewer: &Viewer, now: Millis) -> Result<bool> {
    crate::write_tx!(db, |tx| {
        let used = sql::query(
            "UPDATE lookup_links SET used_at = $1, used_addr = $2, used_agent = $3 \
             WHERE id = $4 AND used_at IS NULL AND expires_at > $1",
        )
        .bind(now)
        .bind(viewer.addr.as_deref())
        .bind(viewer.user_agent.as_deref())
        .bind(id)
        .execute(&mut **tx)
        .await?;
        if used.rows_affected() == 0 {
            return Ok(false);
        }
        let mut batch = Batch::new();
        add_reveal(&mut batch, order_no, "lookup_link", keys, viewer, now);
        batch.run(tx).await?;
        Ok(true)
    })
}

fn add_reveal(batch: &mut Batch, order_no: &OrderNo, channel: &str, keys: i64, viewer: &Viewer, now: Millis) {
    batch.add(
        "INSERT INTO key_reveals (id, order_no, revealed_at, channel, keys, client_addr, user_agent) \
         SELECT $1, $2, $3, $4, $5, $6, $7 WHERE NOT EXISTS (SELECT 1 FROM key_reveals r WHERE r.order_no = $2 \
         AND r.channel = $4 AND r.revealed_at > $8 AND COALESCE(r.client_addr, '') = COALESCE($6, '') \
         AND COALESCE(r.user_agent, '') = COALESCE($7, ''))",
        args![
            new_id(),
            order_no,
            now,
            channel,
            keys,
            viewer.addr.as_deref(),
            viewer.user_agent.as_deref(),
            now - REVEAL_REPEAT_MS
        ],
    );
}

/// Logs that `keys` keys of `order_no` were shown on `channel` to `viewer` (once per
/// [`REVEAL_REPEAT_MS`] for the same viewer and channel).
pub async fn record_reveal(
    db: &Db,
    order_no: &OrderNo,
    channel: &str,
    keys: i64,
    viewer: &Viewer,
    now: Millis,
) -> Result<()> {
    crate::write_tx!(db, |tx| {
        let mut batch = Batch::new();
        add_reveal(&mut batch, order_no, channel, keys, viewer, now);
        batch.run(tx).await.map(drop)
    })
}

/// Whether any card key was delivered to `order_no`.
pub async fn has_keys(db: &Db, order_no: &OrderNo) -> Result<bool> {
    let n: i64 = sql::query_scalar("SELECT COUNT(*) FROM card_keys WHERE order_no = $1")
        .bind(order_no)
        .fetch_one(db.read_pool())
        .await?;
    Ok(n > 0)
}
