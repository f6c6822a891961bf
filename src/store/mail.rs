//! E-mail to the buyer, kept as an outbox of its own (`mail_messages`): written with the fact it
//! tells, claimed by the mail worker under a lease, finished with its outcome.

use crate::args;
use crate::clock::Millis;
use crate::domain::OrderStatus;
use crate::domain::ids::OrderNo;
use crate::domain::mail::{self, MailKind, MailStatus, Next};
use crate::error::Result;
use crate::store::batch::Batch;
use crate::store::sql;
use crate::store::{Db, col, new_id};

/// Adds the message of an order's change `from -> to` ([`mail::mail_of_change`]) to `batch`: only
/// for an order placed with an address while e-mail was on. A *delivered* supersedes a *paid* of
/// the same order not yet sent.
pub(super) fn add_change_mail(batch: &mut Batch, order_no: &str, from: OrderStatus, to: OrderStatus, now: Millis) {
    let Some(kind) = mail::mail_of_change(from, to) else { return };
    if kind == MailKind::Delivered {
        batch.add(
            "UPDATE mail_messages SET status = 'superseded' WHERE order_no = $1 AND kind = 'paid' \
             AND status = 'pending' AND lease_until <= $2",
            args![order_no, now],
        );
    }
    batch.add(
        "INSERT INTO mail_messages (id, order_no, kind, recipient, lang, status, next_attempt_at, created_at) \
         SELECT $1, o.order_no, $2, o.contact_email, COALESCE(o.lang, 'en'), 'pending', $3, $3 FROM orders o \
         WHERE o.order_no = $4 AND o.mail_enabled = 1 AND o.contact_email IS NOT NULL",
        args![new_id(), kind.as_str(), now, order_no],
    );
}

/// Keeps link `link_id` to `order_no` and the message that sends it to `recipient`, together.
pub async fn add_link_mail(
    db: &Db,
    link_id: &str,
    order_no: &OrderNo,
    recipient: &str,
    lang: &str,
    expires_at: Millis,
    now: Millis,
) -> Result<()> {
    crate::write_tx!(db, |tx| {
        let mut batch = Batch::new();
        batch.expect(
            "INSERT INTO lookup_links (id, order_no, purpose, created_at, expires_at) VALUES ($1, $2, 'order', $3, $4)",
            args![link_id, order_no, now, expires_at],
            1,
            "link insert",
        );
        batch.expect(
            "INSERT INTO mail_messages (id, order_no, kind, recipient, lang, link_id, status, next_attempt_at, created_at) \
             VALUES ($1, $2, 'lookup_link', $3, $4, $5, 'pending', $6, $6)",
            args![new_id(), order_no, recipient, lang, link_id, now],
            1,
            "mail insert",
        );
        batch.run(tx).await.map(drop)
    })
}

/// Keeps a test message to `recipient`; its id.
pub async fn add_test_mail(db: &Db, recipient: &str, lang: &str, now: Millis) -> Result<String> {
    let id = new_id();
    crate::write_tx!(db, |tx| {
        sql::query(
            "INSERT INTO mail_messages (id, kind, recipient, lang, status, next_attempt_at, created_at) \
             VALUES ($1, 'test', $2, $3, 'pending', $4, $4)",
        )
        .bind(&id)
        .bind(recipient)
        .bind(lang)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map(drop)
    })?;
    Ok(id)
}

/// A message as the worker and the console read it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Mail {
    pub id: String,
    pub order_no: Option<String>,
    /// `paid`, `delivered`, `refunded`, `lookup_link` or `test`.
    pub kind: String,
    pub recipient: String,
    pub lang: String,
    #[serde(skip)]
    pub link_id: Option<String>,
    /// `pending`, `sent`, `failed` or `superseded`.
    pub status: String,
    pub tries: i64,
    pub last_error: Option<String>,
    #[serde(skip)]
    pub created_ms: Millis,
    pub created_at: String,
    pub sent_at: Option<String>,
    pub next_attempt_at: Option<String>,
}

const MAIL_COLUMNS: &str =
    "id, order_no, kind, recipient, lang, link_id, status, tries, last_error, created_at, sent_at, next_attempt_at";

fn mail_of(r: &sql::Row) -> Result<Mail> {
    let status: String = col(r, "status")?;
    let next: Millis = col(r, "next_attempt_at")?;
    Ok(Mail {
        id: col(r, "id")?,
        order_no: col(r, "order_no")?,
        kind: col(r, "kind")?,
        recipient: col(r, "recipient")?,
        lang: col(r, "lang")?,
        link_id: col(r, "link_id")?,
        tries: col(r, "tries")?,
        last_error: col(r, "last_error")?,
        created_ms: col(r, "created_at")?,
        created_at: crate::clock::rfc3339(col(r, "created_at")?),
        sent_at: col::<Option<Millis>>(r, "sent_at")?.map(crate::clock::rfc3339),
        next_attempt_at: (status == MailStatus::Pending.as_str()).then(|| crate::clock::rfc3339(next)),
        status,
    })
}

/// Claims up to `limit` due messages for `lease_ms`, oldest first.
pub async fn claim(db: &Db, now: Millis, lease_ms: i64, limit: i64) -> Result<Vec<Mail>> {
    let due = db.kind().claimed(
        "id",
        "SELECT id FROM mail_messages WHERE status = 'pending' \
         AND next_attempt_at <= $2 AND lease_until <= $2 ORDER BY created_at, id LIMIT $3",
    );
    crate::write_tx!(db, |tx| {
        let rows =
            sql::query(&format!("UPDATE mail_messages SET lease_until = $1 WHERE {due} RETURNING {MAIL_COLUMNS}"))
                .bind(now.saturating_add(lease_ms))
                .bind(now)
                .bind(limit)
                .fetch_all(&mut **tx)
                .await?;
        let mut mails = rows.iter().map(mail_of).collect::<Result<Vec<_>>>()?;
        mails.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(mails)
    })
}

/// The link a message about an order carries: the one it was written with, else one made for it
/// at its first try (its id the message's, so every try of the message carries the same link).
/// Returns the link's id and expiry.
pub async fn link_of(
    db: &Db,
    m: &Mail,
    order_no: &OrderNo,
    expires_at: Millis,
    now: Millis,
) -> Result<(String, Millis)> {
    let link_id = m.link_id.clone().unwrap_or_else(|| m.id.replace('-', ""));
    crate::write_tx!(db, |tx| {
        sql::query(
            "INSERT INTO lookup_links (id, order_no, purpose, created_at, expires_at) VALUES ($1, $2, 'order', $3, $4) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&link_id)
        .bind(order_no)
        .bind(now)
        .bind(expires_at)
        .execute(&mut **tx)
        .await?;
        sql::query("UPDATE mail_messages SET link_id = $1 WHERE id = $2 AND link_id IS NULL")
            .bind(&link_id)
            .bind(&m.id)
            .execute(&mut **tx)
            .await?;
        let expires: Millis = sql::query_scalar("SELECT expires_at FROM lookup_links WHERE id = $1")
            .bind(&link_id)
            .fetch_one(&mut **tx)
            .await?;
        Ok((link_id.clone(), expires))
    })
}

/// Records try number `tries` of message `id`, as [`mail::after_try`] decided.
pub async fn finish(db: &Db, id: &str, next: &Next, tries: i64, now: Millis) -> Result<()> {
    let (status, error, next_at) = match next {
        Next::Sent => (MailStatus::Sent, None, now),
        Next::Retry { after_ms, error } => (MailStatus::Pending, Some(error.as_str()), now.saturating_add(*after_ms)),
        Next::GiveUp { error } => (MailStatus::Failed, Some(error.as_str()), now),
    };
    crate::write_tx!(db, |tx| {
        sql::query(
            "UPDATE mail_messages SET status = $1, tries = $2, next_attempt_at = $3, lease_until = 0, last_error = $4, \
             sent_at = CASE WHEN $1 = 'sent' THEN $5 ELSE sent_at END WHERE id = $6",
        )
        .bind(status.as_str())
        .bind(tries)
        .bind(next_at)
        .bind(error)
        .bind(now)
        .bind(id)
        .execute(&mut **tx)
        .await
        .map(drop)
    })?;
    let result = match status {
        MailStatus::Pending => "retry",
        other => other.as_str(),
    };
    metrics::counter!("kassa_mail_tries_total", "result" => result).increment(1);
    Ok(())
}

/// Most messages one page of the list holds.
pub const MAIL_PAGE_MAX: i64 = 200;

/// The newest messages, `status` only when named, older than the message `before` when named.
pub async fn list(db: &Db, status: Option<MailStatus>, before: Option<&str>, limit: i64) -> Result<Vec<Mail>> {
    let limit = limit.clamp(1, MAIL_PAGE_MAX);
    let sql = format!(
        "SELECT {MAIL_COLUMNS} FROM mail_messages WHERE ($1 = '' OR status = $1) AND ($2 = '' OR id < $2) \
         ORDER BY id DESC LIMIT $3"
    );
    sql::query(&sql)
        .bind(status.map_or("", MailStatus::as_str))
        .bind(before.unwrap_or_default())
        .bind(limit)
        .fetch_all(db.read_pool())
        .await?
        .iter()
        .map(mail_of)
        .collect()
}

/// The messages about one order, oldest first.
pub async fn of_order(db: &Db, order_no: &OrderNo) -> Result<Vec<Mail>> {
    sql::query(&format!("SELECT {MAIL_COLUMNS} FROM mail_messages WHERE order_no = $1 ORDER BY id"))
        .bind(order_no)
        .fetch_all(db.read_pool())
        .await?
        .iter()
        .map(mail_of)
        .collect()
}
