//! Shipping reports to WeChat (`domain::shipping`, docs/gateways/wechat-shipping.md): sends each queued report of a
//! delivered mini-program order, outside any transaction, and records WeChat's answer: reported,
//! tried again later (busy, the token renewed, the payment not indexed yet, no answer) or given up
//! and alerted (refused, or out of tries).

use crate::clock::SharedClock;
use crate::domain::shipping::{self, Answer};
use crate::error::Result;
use crate::gateway::wechat_shipping::{Report, ShippingApi};
use crate::store::Db;
use crate::store::shipping::{self as queue, Finish};

/// Reports sent per step.
const SHIPPING_BATCH_MAX: i64 = 50;
/// How long a claimed report is this instance's to send.
const SHIPPING_LEASE_MS: i64 = 60_000;
/// The first pause before a report is sent again, doubled at each try up to
/// [`SHIPPING_RETRY_MS_MAX`]: its tries span about two hours.
const SHIPPING_RETRY_FIRST_MS: i64 = 5_000;
const SHIPPING_RETRY_MS_MAX: i64 = 30 * 60_000;
/// Longest piece of WeChat's message kept with a failed try.
const ERRMSG_CHARS_MAX: usize = 200;

pub struct Shipper {
    db: Db,
    clock: SharedClock,
    api: ShippingApi,
}

impl Shipper {
    pub fn new(db: Db, clock: SharedClock, api: ShippingApi) -> Shipper {
        Shipper { db, clock, api }
    }

    /// The mini program whose payments are reported.
    pub fn appid(&self) -> &str {
        self.api.appid()
    }

    /// Sends every due report once; returns how many were tried.
    pub async fn step(&self) -> Result<usize> {
        let due = queue::claim(&self.db, self.clock.now_ms(), SHIPPING_LEASE_MS, SHIPPING_BATCH_MAX).await?;
        for r in &due {
            let tries = r.tries + 1;
            let item_desc = shipping::item_desc(r.lines.iter().map(|(name, quantity)| (name.as_str(), *quantity)));
            let outcome = match r.payer_appid.as_deref() {
                Some(appid) if appid != self.api.appid() => Err((
                    Some(Answer::Refused),
                    format!("paid under app id {appid}, not the configured mini program's"),
                )),
                _ => {
                    let report = Report {
                        out_trade_no: &r.attempt_ref,
                        payer_openid: &r.payer_openid,
                        logistics: &r.logistics,
                        item_desc: &item_desc,
                        now: self.clock.now_ms(),
                    };
                    match self.api.report(&report).await {
                        Ok(answer) if answer.answer == Answer::Done => Ok(()),
                        Ok(answer) => {
                            let message: String = answer.errmsg.chars().take(ERRMSG_CHARS_MAX).collect();
                            Err((Some(answer.answer), format!("errcode {} ({message})", answer.errcode)))
                        }
                        Err(e) => Err((None, e.to_string())),
                    }
                }
            };
            let now = self.clock.now_ms();
            let finish = match outcome {
                Ok(()) => Finish::Reported,
                Err((answer, error)) if shipping::try_again(answer, tries) => {
                    let wait = super::doubling_backoff_ms(SHIPPING_RETRY_FIRST_MS, tries - 1, SHIPPING_RETRY_MS_MAX);
                    tracing::warn!(order_no = %r.order_no, tries, %error, "shipping report to be sent again");
                    Finish::Retry { next_at: now.saturating_add(wait), error }
                }
                Err((_, error)) => Finish::Failed { error },
            };
            queue::finish(&self.db, &r.order_no, &finish, tries, now).await?;
        }
        Ok(due.len())
    }
}
