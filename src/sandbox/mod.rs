//! The built-in sandbox gateway: a real form-based gateway simulator living in the same binary.
//! It keeps its own records (`sandbox_*` tables; on SQLite in a file of their own, see
//! [`Db::open_sandbox`]), signs its notifications with its own Ed25519 key,
//! verifies the merchant's HMAC-signed requests, delivers notifications with retries and backoff
//! until acknowledged, and has a fault switch that ignores merchant closes.
//!
//! Mounted only with `--demo` or `--sandbox`: its `complete` call lets anyone mark a payment made.

pub mod protocol;
mod recorder;

use recorder::{
    Delivery, Queue, Queued, Registration, coalesce, enqueue, insert_payments, mark_delivered, paid_event, submit,
};

use crate::store::sql;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::json;

use crate::args;
use crate::clock::{Millis, SharedClock};
use crate::domain::event::{CloseOutcome, PaymentState, RefundAnswer, RefundState};
use crate::domain::event::{Outcome, VerifiedEvent};
use crate::domain::statement::{LineKind, STATEMENT_LINES_MAX, Statement, StatementLine};
use crate::domain::{Currency, Money};
use crate::error::{Error, Result};
use crate::store::batch::Batch;
use crate::store::{Db, col, new_id, settings};
use protocol::{SIGNATURE_HEADER, verify_fields};

/// Most notification copies one `complete` call may ask for.
pub const COPIES_MAX: u32 = 20;
/// Longest delay a `complete` call may ask for.
pub const DELAY_MS_MAX: u64 = 600_000;
/// Delivery tries before a notification is given up (dead).
pub const DELIVERY_TRIES_MAX: i64 = 15;
/// How long a claimed delivery is reserved for the instance sending it.
const DELIVERY_LEASE_MS: i64 = 15_000;
/// Deliveries claimed per worker step.
const DELIVERY_BATCH_MAX: i64 = 32;
/// Timeout of one notification POST.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Notification POSTs in flight at once. Completions can come faster than the shop applies their
/// notifications; with a task per notification, every waiting POST held a connection and a whole
/// request's state of its own (a flood once reached 815 MB of RSS). Instead this many senders take
/// deliveries from a queue, in order; a queued delivery is a few hundred bytes.
pub const SENDS_MAX: usize = 64;
/// Most acknowledged deliveries recorded by one write ([`Sandbox::record_delivered`]).
const ACKS_MAX: usize = 64;
/// Most payments registered by one write ([`Sandbox::register`]).
const REGISTRATIONS_MAX: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxOutcome {
    Succeeded,
    Failed,
    Cancelled,
}

impl SandboxOutcome {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "succeeded" => Some(SandboxOutcome::Succeeded),
            "failed" => Some(SandboxOutcome::Failed),
            "cancelled" => Some(SandboxOutcome::Cancelled),
            _ => None,
        }
    }

    fn status(self) -> &'static str {
        match self {
            SandboxOutcome::Succeeded => "succeeded",
            SandboxOutcome::Failed => "failed",
            SandboxOutcome::Cancelled => "cancelled",
        }
    }

    fn event_type(self) -> &'static str {
        match self {
            SandboxOutcome::Succeeded => "payment.succeeded",
            SandboxOutcome::Failed => "payment.failed",
            SandboxOutcome::Cancelled => "payment.cancelled",
        }
    }
}

pub struct Sandbox {
    db: Db,
    clock: SharedClock,
    merchant_id: String,
    merchant_secret: Vec<u8>,
    signing_key: Ed25519KeyPair,
    ignore_close: bool,
    http: reqwest::Client,
    /// Deliveries to send right away, taken by [`SENDS_MAX`] senders.
    outbound: tokio::sync::mpsc::UnboundedSender<Delivery>,
    /// Acknowledged deliveries (their ids) to record, taken by one recorder ([`coalesce`]).
    acks: Queue<String>,
    /// Payments to register, taken by one recorder ([`coalesce`]).
    registrations: Queue<Registration>,
}

/// A payment as the sandbox knows it.
#[derive(Debug, Clone)]
pub struct SandboxPayment {
    pub attempt_ref: String,
    pub amount: Money,
    pub subject: String,
    pub return_url: String,
    pub status: String,
    pub closed: bool,
}

/// The sandbox payment's outcome after the buyer finished.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Completed {
    pub attempt_ref: String,
    pub status: String,
    pub event_id: String,
    pub copies: u32,
}

impl Sandbox {
    /// Loads the sandbox's keys from kassa's database, creating them on first start (shared by
    /// every instance of a fleet); the sandbox keeps its records in `records`
    /// ([`Db::open_sandbox`]).
    pub async fn init(keys: &Db, records: Db, clock: SharedClock, ignore_close: bool) -> Result<Arc<Sandbox>> {
        let pkcs8 = settings::get_or_init(keys, "sandbox.signing_key_pkcs8", || {
            Ed25519KeyPair::generate_pkcs8(&aws_lc_rs::rand::SystemRandom::new())
                .map(|doc| B64.encode(doc.as_ref()))
                .unwrap_or_default()
        })
        .await?;
        let signing_key = B64
            .decode(pkcs8)
            .ok()
            .and_then(|der| Ed25519KeyPair::from_pkcs8(&der).ok())
            .ok_or_else(|| Error::internal("sandbox signing key is unreadable"))?;
        let secret =
            settings::get_or_init(keys, "sandbox.merchant_secret", crate::domain::ids::new_secret_token).await?;
        let http = reqwest::Client::builder()
            .timeout(DELIVERY_TIMEOUT)
            .build()
            .map_err(|e| Error::internal(format!("http client: {e}")))?;
        let (outbound, queue) = tokio::sync::mpsc::unbounded_channel();
        // The recorders hold the records' database only: dropping the sandbox closes their
        // queues and ends them.
        let (acks, acked) = tokio::sync::mpsc::unbounded_channel();
        let at = clock.clone();
        tokio::spawn(coalesce(records.clone(), acked, ACKS_MAX, move |db, ids| mark_delivered(db, ids, at.now_ms())));
        let (registrations, registered) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(coalesce(records.clone(), registered, REGISTRATIONS_MAX, insert_payments));
        let sandbox = Arc::new(Sandbox {
            db: records,
            clock,
            merchant_id: "kassa-demo-merchant".to_string(),
            merchant_secret: secret.into_bytes(),
            signing_key,
            ignore_close,
            http,
            outbound,
            acks,
            registrations,
        });
        let queue = Arc::new(tokio::sync::Mutex::new(queue));
        for _ in 0..SENDS_MAX {
            // The senders hold the sandbox weakly: dropping it closes the queue and ends them.
            let (me, queue) = (Arc::downgrade(&sandbox), Arc::clone(&queue));
            tokio::spawn(async move {
                loop {
                    let Some(d) = queue.lock().await.recv().await else { return };
                    let Some(me) = me.upgrade() else { return };
                    if let Err(e) = me.send_claimed(&d.id, &d.body, &d.url, 0).await {
                        tracing::warn!(error = %e, "sandbox delivery failed; will retry");
                    }
                }
            });
        }
        Ok(sandbox)
    }

    pub fn merchant_id(&self) -> &str {
        &self.merchant_id
    }

    pub fn merchant_key(&self) -> aws_lc_rs::hmac::Key {
        aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &self.merchant_secret)
    }

    pub fn public_key(&self) -> Vec<u8> {
        self.signing_key.public_key().as_ref().to_vec()
    }

    /// Records a payment the merchant asked for (signed form fields). Idempotent.
    pub async fn register(&self, fields: &BTreeMap<String, String>) -> Result<String> {
        if !verify_fields(&self.merchant_key(), fields) {
            return Err(Error::invalid("invalid_signature", "merchant signature does not verify"));
        }
        let get = |k: &str| {
            fields.get(k).cloned().ok_or_else(|| Error::invalid("invalid_request", format!("missing field {k}")))
        };
        if get("merchant_id")? != self.merchant_id {
            return Err(Error::invalid("merchant_mismatch", "unknown merchant"));
        }
        let attempt_ref = get("attempt_ref")?;
        let amount_minor: i64 =
            get("amount_minor")?.parse().map_err(|_| Error::invalid("invalid_amount", "bad amount"))?;
        let amount = Money::new(amount_minor, Currency::parse(&get("currency")?)?)?;
        let expires_at: i64 =
            get("expires_at")?.parse().map_err(|_| Error::invalid("invalid_request", "bad expires_at"))?;
        let now = self.clock.now_ms();
        let registration = Registration {
            attempt_ref: attempt_ref.clone(),
            merchant_id: self.merchant_id.clone(),
            amount,
            subject: get("subject")?,
            notify_url: get("notify_url")?,
            return_url: get("return_url")?,
            expires_at_ms: expires_at.saturating_mul(1000),
            now,
        };
        // Written together with the registrations made meanwhile: one statement and one commit
        // for many under load, as a gateway's own servers would batch them.
        submit(&self.registrations, registration, "the sandbox's payment recorder")
            .await
            .map_err(|e| Error::internal(format!("registering a sandbox payment: {e}")))?;
        Ok(attempt_ref)
    }

    pub async fn payment(&self, attempt_ref: &str) -> Result<SandboxPayment> {
        let r = sql::query(
                    "SELECT attempt_ref, amount_minor, currency, subject, return_url, status, closed FROM sandbox_payments WHERE attempt_ref = $1",
                )
                .bind(attempt_ref).fetch_optional(self.db.read_pool())
            .await?
            .ok_or_else(|| Error::not_found("sandbox payment"))?;
        Ok(SandboxPayment {
            attempt_ref: col(&r, "attempt_ref")?,
            amount: Money::new(col(&r, "amount_minor")?, Currency::parse(&col::<String>(&r, "currency")?)?)?,
            subject: col(&r, "subject")?,
            return_url: col(&r, "return_url")?,
            status: col(&r, "status")?,
            closed: col::<i64>(&r, "closed")? != 0,
        })
    }

    /// The buyer finishes at the gateway. Sends `copies` signed notifications after `delay_ms`.
    pub async fn complete(
        self: &Arc<Self>,
        attempt_ref: &str,
        outcome: SandboxOutcome,
        copies: u32,
        delay_ms: u64,
    ) -> Result<Completed> {
        if !(1..=COPIES_MAX).contains(&copies) || delay_ms > DELAY_MS_MAX {
            return Err(Error::unprocessable(
                "invalid_request",
                format!("copies must be 1-{COPIES_MAX}, delay_ms at most {DELAY_MS_MAX}"),
            ));
        }
        let now = self.clock.now_ms();
        let lock = self.db.for_update();
        let delay = i64::try_from(delay_ms).unwrap_or(0);
        let (me, reference) = (Arc::clone(self), attempt_ref.to_string());
        let (event_id, ids) = self.db.on_writer(async move {
            let (me, attempt_ref) = (&me, reference.as_str());
            crate::write_tx!(me.db, |tx| {
                let p = sql::query(&format!(
                        "SELECT status, closed, event_id, txn_id, amount_minor, currency, notify_url FROM sandbox_payments WHERE attempt_ref = $1{lock}"
                    ))
                    .bind(attempt_ref)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or_else(|| Error::not_found("sandbox payment"))?;
                let status: String = col(&p, "status")?;
                let closed = col::<i64>(&p, "closed")? != 0;
                // The payment's change and its notifications: one round trip on PostgreSQL.
                let mut batch = Batch::new();
                let (event_id, txn_id) = if status == "open" {
                    if closed && !me.ignore_close {
                        return Err(Error::conflict("payment_closed", "the merchant closed this payment"));
                    }
                    let event_id = format!("evt_{}", uuid::Uuid::now_v7().simple());
                    let txn_id =
                        (outcome == SandboxOutcome::Succeeded).then(|| format!("txn_{}", uuid::Uuid::now_v7().simple()));
                    batch.expect(
                        "UPDATE sandbox_payments SET status = $1, event_id = $2, txn_id = $3, updated_at = $4 WHERE attempt_ref = $5",
                        args![outcome.status(), &event_id, txn_id.as_deref(), now, attempt_ref],
                        1,
                        "the sandbox payment changed under its lock",
                    );
                    (event_id, txn_id)
                } else if status == outcome.status() {
                    // Same outcome again: send the same event again (a duplicate, as gateways do).
                    (col::<Option<String>>(&p, "event_id")?.unwrap_or_default(), col(&p, "txn_id")?)
                } else {
                    return Err(Error::conflict("payment_final", format!("the payment already {status}")));
                };
                let body = json!({
                    "event_id": event_id,
                    "event_type": outcome.event_type(),
                    "merchant_id": me.merchant_id,
                    "attempt_ref": attempt_ref,
                    "txn_id": txn_id,
                    "amount_minor": col::<i64>(&p, "amount_minor")?,
                    "currency": col::<String>(&p, "currency")?,
                    "created_at": now / 1000,
                })
                .to_string();
                let notify_url: String = col(&p, "notify_url")?;
                let queued = Queued { attempt_ref, event_id: &event_id, body: &body, notify_url: &notify_url };
                let ids = enqueue(&mut batch, &queued, copies, now.saturating_add(delay), now);
                batch.run_checked_by_commit(tx).await?;
                Ok((event_id, ids))
            })
        })
        .await??;
        self.send_soon(ids, delay_ms);
        Ok(Completed { attempt_ref: attempt_ref.to_string(), status: outcome.status().to_string(), event_id, copies })
    }

    /// Queues notifications to be sent right away by the senders (in parallel, [`SENDS_MAX`] at a
    /// time); the delivery worker retries whatever fails. The deliveries were written already
    /// leased to this instance, so the first try needs no claim of its own (one write less per
    /// notification). Should a queue outlast the lease, the worker may send one again: a
    /// duplicate, which gateways send anyway and kassa ignores.
    fn send_soon(self: &Arc<Self>, deliveries: Vec<Delivery>, delay_ms: u64) {
        let outbound = self.outbound.clone();
        // Sending fails only once the sandbox is being dropped; the delivery worker of the next
        // start sends what was left.
        let queue = move || deliveries.into_iter().for_each(|d| drop(outbound.send(d)));
        if delay_ms == 0 {
            queue();
        } else {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                queue();
            });
        }
    }

    /// The merchant refunds (part of) a paid payment. Idempotent on `refund_no`; never more than
    /// was paid. The result is notified (`refund.succeeded`).
    pub async fn refund(self: &Arc<Self>, attempt_ref: &str, refund_no: &str, amount: Money) -> Result<RefundAnswer> {
        let now = self.clock.now_ms();
        let lock = self.db.for_update();
        let gateway_refund_id = format!(
            "rfd_{}",
            hex::encode(&aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, refund_no.as_bytes()).as_ref()[..12])
        );
        let rejected = |reason: &str| Ok((RefundAnswer::Rejected { reason: reason.to_string() }, Vec::new()));
        let (answer, ids) = crate::write_tx!(self.db, |tx| {
            let Some(p) = sql::query(&format!(
                "SELECT status, amount_minor, currency, notify_url FROM sandbox_payments WHERE attempt_ref = $1{lock}"
            ))
            .bind(attempt_ref)
            .fetch_optional(&mut **tx)
            .await?
            else {
                return rejected("no such payment");
            };
            let existing: Option<String> =
                sql::query_scalar("SELECT attempt_ref FROM sandbox_refunds WHERE refund_no = $1")
                    .bind(refund_no)
                    .fetch_optional(&mut **tx)
                    .await?;
            match existing {
                // The same refund number again refunds nothing more.
                Some(a) if a == attempt_ref => {
                    return Ok((RefundAnswer::Accepted { gateway_refund_id: gateway_refund_id.clone() }, Vec::new()));
                }
                Some(_) => return rejected("refund number used for another payment"),
                None => {}
            }
            if col::<String>(&p, "status")? != "succeeded" {
                return rejected("the payment was not made");
            }
            if col::<String>(&p, "currency")? != amount.currency().code() {
                return rejected("currency differs from the payment");
            }
            let refunded: i64 = sql::query_scalar(
                "SELECT CAST(COALESCE(SUM(amount_minor), 0) AS BIGINT) FROM sandbox_refunds WHERE attempt_ref = $1",
            )
            .bind(attempt_ref)
            .fetch_one(&mut **tx)
            .await?;
            if refunded.saturating_add(amount.amount_minor()) > col::<i64>(&p, "amount_minor")? {
                return rejected("refunds would exceed the payment");
            }
            let event_id = format!("evt_{}", uuid::Uuid::now_v7().simple());
            let mut batch = Batch::new();
            batch.expect(
                "INSERT INTO sandbox_refunds (refund_no, attempt_ref, amount_minor, event_id, created_at) VALUES ($1, $2, $3, $4, $5)",
                args![refund_no, attempt_ref, amount.amount_minor(), &event_id, now],
                1,
                "the sandbox refund was not recorded",
            );
            let body = json!({
                "event_id": event_id,
                "event_type": "refund.succeeded",
                "merchant_id": self.merchant_id,
                "attempt_ref": attempt_ref,
                "refund_no": refund_no,
                "amount_minor": amount.amount_minor(),
                "currency": amount.currency().code(),
                "created_at": now / 1000,
            })
            .to_string();
            let notify_url: String = col(&p, "notify_url")?;
            let queued = Queued { attempt_ref, event_id: &event_id, body: &body, notify_url: &notify_url };
            let ids = enqueue(&mut batch, &queued, 1, now, now);
            batch.run_checked_by_commit(tx).await?;
            Ok((RefundAnswer::Accepted { gateway_refund_id: gateway_refund_id.clone() }, ids))
        })?;
        self.send_soon(ids, 0);
        Ok(answer)
    }

    /// The merchant closes a payment. A paid one answers with the payment instead.
    pub async fn close(&self, attempt_ref: &str) -> Result<CloseOutcome> {
        let now = self.clock.now_ms();
        let lock = self.db.for_update();
        crate::write_tx!(self.db, |tx| {
            let Some(p) = sql::query(&format!(
                    "SELECT status, closed, event_id, txn_id, amount_minor, currency FROM sandbox_payments WHERE attempt_ref = $1{lock}"
                ))
                .bind(attempt_ref)
                .fetch_optional(&mut **tx)
                .await?
                else {
                    return Ok(CloseOutcome::NotFound);
                };
            if col::<String>(&p, "status")? == "succeeded" {
                return Ok(CloseOutcome::AlreadyPaid(paid_event(&p, attempt_ref, "close")?));
            }
            sql::query("UPDATE sandbox_payments SET closed = 1, updated_at = $1 WHERE attempt_ref = $2")
                .bind(now)
                .bind(attempt_ref)
                .execute(&mut **tx)
                .await?;
            Ok(CloseOutcome::Closed)
        })
    }

    /// The merchant asks what became of a payment (active query).
    pub async fn query(&self, attempt_ref: &str) -> Result<PaymentState> {
        let row = sql::query(
                    "SELECT status, closed, event_id, txn_id, amount_minor, currency FROM sandbox_payments WHERE attempt_ref = $1",
                )
                .bind(attempt_ref).fetch_optional(self.db.read_pool())
            .await?;
        let Some(p) = row else {
            return Ok(PaymentState::NotFound);
        };
        Ok(match (col::<String>(&p, "status")?.as_str(), col::<i64>(&p, "closed")? != 0) {
            ("succeeded", _) => PaymentState::Paid(paid_event(&p, attempt_ref, "query")?),
            ("open", false) => PaymentState::Pending,
            ("failed", _) => PaymentState::Failed,
            _ => PaymentState::Closed,
        })
    }

    /// The sandbox's statement of the instants `[from, to)`: its payments that succeeded and its
    /// refunds made then, each with the sandbox's fee (0.6 %, rounded half up; a refund returns
    /// its share), as a real gateway's daily file has them.
    pub async fn statement(&self, from: Millis, to: Millis) -> Result<Statement> {
        let payments = sql::query(
            "SELECT attempt_ref, txn_id, amount_minor, currency FROM sandbox_payments \
             WHERE status = 'succeeded' AND updated_at >= $1 AND updated_at < $2 ORDER BY updated_at, attempt_ref",
        )
        .bind(from)
        .bind(to)
        .fetch_all(self.db.read_pool())
        .await?;
        let refunds = sql::query(
            "SELECT r.refund_no, r.attempt_ref, r.amount_minor, r.event_id, p.currency FROM sandbox_refunds r \
             JOIN sandbox_payments p ON p.attempt_ref = r.attempt_ref \
             WHERE r.created_at >= $1 AND r.created_at < $2 ORDER BY r.created_at, r.refund_no",
        )
        .bind(from)
        .bind(to)
        .fetch_all(self.db.read_pool())
        .await?;
        let mut lines = Vec::with_capacity(payments.len() + refunds.len());
        for p in &payments {
            let amount: i64 = col(p, "amount_minor")?;
            lines.push(StatementLine {
                kind: LineKind::Payment,
                merchant_ref: col(p, "attempt_ref")?,
                gateway_txn_id: col::<Option<String>>(p, "txn_id")?.unwrap_or_default(),
                refund_no: None,
                amount_minor: amount,
                fee_minor: sandbox_fee(amount),
                currency: col(p, "currency")?,
            });
        }
        for r in &refunds {
            let amount: i64 = col(r, "amount_minor")?;
            lines.push(StatementLine {
                kind: LineKind::Refund,
                merchant_ref: col(r, "attempt_ref")?,
                gateway_txn_id: col(r, "event_id")?,
                refund_no: Some(col(r, "refund_no")?),
                amount_minor: amount,
                fee_minor: -sandbox_fee(amount),
                currency: col(r, "currency")?,
            });
        }
        if lines.len() > STATEMENT_LINES_MAX {
            return Err(Error::internal(format!("the sandbox's statement has more than {STATEMENT_LINES_MAX} lines")));
        }
        Ok(Statement { lines, ..Statement::default() })
    }

    /// The merchant asks what became of a refund.
    pub async fn query_refund(&self, attempt_ref: &str, refund_no: &str) -> Result<RefundState> {
        let found: Option<String> = sql::query_scalar("SELECT attempt_ref FROM sandbox_refunds WHERE refund_no = $1")
            .bind(refund_no)
            .fetch_optional(self.db.read_pool())
            .await?;
        Ok(match found {
            Some(a) if a == attempt_ref => RefundState::Succeeded,
            _ => RefundState::NotFound,
        })
    }

    /// Sends one pending notification if it is due and not claimed by someone else.
    pub async fn deliver(&self, id: &str) -> Result<()> {
        let now = self.clock.now_ms();
        let claimed = crate::write_tx!(self.db, |tx| {
            let done = sql::query(
                    "UPDATE sandbox_deliveries SET lease_until = $1 WHERE id = $2 AND status = 'pending' AND lease_until <= $3",
                )
                .bind(now.saturating_add(DELIVERY_LEASE_MS))
                .bind(id)
                .bind(now)
                .execute(&mut **tx)
                .await?;
            if done.rows_affected() != 1 {
                return Ok(None);
            }
            let r = sql::query("SELECT body, notify_url, tries FROM sandbox_deliveries WHERE id = $1")
                .bind(id)
                .fetch_one(&mut **tx)
                .await?;
            Ok(Some((col::<String>(&r, "body")?, col::<String>(&r, "notify_url")?, col::<i64>(&r, "tries")?)))
        })?;
        let Some((body, url, tries)) = claimed else {
            return Ok(());
        };
        self.send_claimed(id, &body, &url, tries).await
    }

    /// Sends a delivery this instance holds the lease of, and records the answer.
    async fn send_claimed(&self, id: &str, body: &str, url: &str, tries: i64) -> Result<()> {
        let Err(error) = self.post(url, body).await else {
            return self.record_delivered(id).await;
        };
        let now = self.clock.now_ms();
        let tries = tries + 1;
        let (status, next_at) = if tries >= DELIVERY_TRIES_MAX {
            ("dead", now)
        } else {
            ("pending", now.saturating_add(crate::domain::retry::retry_backoff_ms(tries)))
        };
        let (db, id, last_error) = (self.db.clone(), id.to_string(), error.clone());
        self.db
            .on_writer(async move {
                db.write_one(|| {
                    sql::query(
                        "UPDATE sandbox_deliveries SET status = $1, tries = $2, next_at = $3, lease_until = 0, last_error = $4 WHERE id = $5",
                    )
                    .bind(status)
                    .bind(tries)
                    .bind(next_at)
                    .bind(&last_error)
                    .bind(&id)
                })
                .await
            })
            .await??;
        Err(Error::internal(format!("notification not acknowledged: {error}")))
    }

    /// Records an acknowledged delivery, together with the others acknowledged meanwhile (one
    /// write for many: a delivery's record is one write of its own per notification otherwise).
    /// Returns once it is recorded. Should the process stop first, the delivery stays leased and
    /// is sent again when the lease ends: a duplicate, which kassa acknowledges and ignores.
    async fn record_delivered(&self, id: &str) -> Result<()> {
        submit(&self.acks, id.to_string(), "the sandbox's delivery recorder")
            .await
            .map_err(|e| Error::internal(format!("recording a delivered notification: {e}")))
    }

    /// The signature header value for a notification body, signed now.
    pub fn sign_notification(&self, body: &[u8]) -> String {
        let t = self.clock.now_ms() / 1000;
        let mut message = format!("{t}.").into_bytes();
        message.extend_from_slice(body);
        let sig = B64.encode(self.signing_key.sign(&message).as_ref());
        format!("t={t},v1={sig}")
    }

    async fn post(&self, url: &str, body: &str) -> std::result::Result<(), String> {
        let response = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header(SIGNATURE_HEADER, self.sign_notification(body.as_bytes()))
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        if response.status().is_success() { Ok(()) } else { Err(format!("answered {}", response.status())) }
    }

    /// One pass of the delivery worker: sends every due notification. Returns how many it tried.
    pub async fn deliver_step(self: &Arc<Self>) -> Result<usize> {
        let now = self.clock.now_ms();
        let ids: Vec<String> = sql::query_scalar(
            "SELECT id FROM sandbox_deliveries WHERE status = 'pending' AND next_at <= $1 AND lease_until <= $1 ORDER BY next_at LIMIT $2",
        )
        .bind(now)
        .bind(DELIVERY_BATCH_MAX)
        .fetch_all(self.db.read_pool())
        .await?;
        let mut set = tokio::task::JoinSet::new();
        for id in ids.clone() {
            let me = Arc::clone(self);
            set.spawn(async move { me.deliver(&id).await });
        }
        while let Some(done) = set.join_next().await {
            if let Ok(Err(e)) = done {
                tracing::debug!(error = %e, "sandbox delivery will be retried");
            }
        }
        Ok(ids.len())
    }

    /// The database holding the sandbox's records (for tests and tools).
    pub fn records(&self) -> &Db {
        &self.db
    }

    /// Deliveries not yet acknowledged (for tests and the operator).
    pub async fn pending_deliveries(&self) -> Result<i64> {
        sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_deliveries WHERE status = 'pending'")
            .fetch_one(self.db.read_pool())
            .await
    }
}

/// The sandbox's fee on an amount: 0.6 %, rounded half up.
pub fn sandbox_fee(amount_minor: i64) -> i64 {
    amount_minor.saturating_mul(6).saturating_add(500) / 1000
}
