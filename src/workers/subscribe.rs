//! Subscribe messages to mini-program buyers: claims the due ones, fills each template's fields
//! from the order, sends it through the mini program's access token, and records WeChat's answer
//! as `domain::subscribe` reads it — sent; refused for want of consent (kept, not tried again);
//! tried again with backoff; given up with an alert.

use crate::clock::{Millis, SharedClock, rfc3339};
use crate::domain::checkout::subject;
use crate::domain::subscribe::{self as rules, Answer, SUBSCRIBE_BATCH_MAX, SUBSCRIBE_TRIES_MAX};
use crate::error::Result;
use crate::gateway::wechat_shipping::ShippingApi;
use crate::gateway::wechat_subscribe::{self, Message, Subscribe};
use crate::store::events::{self, Severity};
use crate::store::subscribe::{self, Due, Finish};
use crate::store::{Db, views};

/// How long a claimed message is the worker's before another may take it.
const SUBSCRIBE_LEASE_MS: i64 = 60_000;

pub struct Notifier {
    pub db: Db,
    pub clock: SharedClock,
    api: ShippingApi,
    subscribe: Subscribe,
}

/// `at` as WeChat's fields write a time: `YYYY-MM-DD HH:MM`, Beijing time.
fn beijing(at: Millis) -> String {
    let t = rfc3339(at.saturating_add(8 * 3_600_000));
    format!("{} {}", t.get(..10).unwrap_or_default(), t.get(11..16).unwrap_or_default())
}

impl Notifier {
    pub fn new(db: Db, clock: SharedClock, api: ShippingApi, subscribe: Subscribe) -> Notifier {
        Notifier { db, clock, api, subscribe }
    }

    /// The mini program whose buyers get the messages.
    pub fn appid(&self) -> &str {
        self.api.appid()
    }

    /// The kinds of message configured.
    pub fn kinds(&self) -> Vec<rules::SubscribeKind> {
        [rules::SubscribeKind::Paid, rules::SubscribeKind::Delivered]
            .into_iter()
            .filter(|k| self.subscribe.template(*k).is_some())
            .collect()
    }

    /// A failure of try `tries`: another try later, or given up at the last.
    fn retry_or_give_up(&self, tries: i64, errcode: Option<i64>, error: String) -> Finish {
        if tries >= SUBSCRIBE_TRIES_MAX {
            Finish::GiveUp { errcode, error }
        } else {
            Finish::Retry { next_at: self.clock.now_ms().saturating_add(rules::backoff_ms(tries)), errcode, error }
        }
    }

    async fn try_one(&self, m: &Due, tries: i64) -> Result<Finish> {
        let Some(template) = self.subscribe.template(m.kind) else {
            return Ok(Finish::GiveUp { errcode: None, error: "no template is configured for it any more".into() });
        };
        let order = views::get_order(&self.db, &m.order_no, false).await?;
        let subject = subject(order.lines.iter().map(|l| l.name.as_str()));
        let at = beijing(m.at);
        let facts = rules::Facts {
            order_no: &order.order_no,
            total_minor: order.total_minor,
            currency: &order.currency,
            subject: &subject,
            at_beijing: &at,
            kind: m.kind,
        };
        let message = Message {
            touser: &m.openid,
            template,
            page: self.subscribe.page.clone(),
            state: self.subscribe.state,
            facts,
            now: self.clock.now_ms(),
        };
        Ok(match wechat_subscribe::send(&self.api, &message).await {
            Err(e) => self.retry_or_give_up(tries, None, e.to_string()),
            Ok(sent) => match sent.answer {
                Answer::Sent => Finish::Sent,
                Answer::NoConsent => Finish::Refused { errcode: sent.errcode, errmsg: sent.errmsg },
                Answer::Refused => Finish::GiveUp { errcode: Some(sent.errcode), error: sent.errmsg },
                Answer::TokenStale | Answer::Retry => self.retry_or_give_up(tries, Some(sent.errcode), sent.errmsg),
            },
        })
    }

    /// Sends every due message once; returns how many were tried.
    pub async fn step(&self) -> Result<usize> {
        let due = subscribe::claim(&self.db, self.clock.now_ms(), SUBSCRIBE_LEASE_MS, SUBSCRIBE_BATCH_MAX).await?;
        for m in &due {
            let tries = m.tries + 1;
            let finish = self.try_one(m, tries).await?;
            let now = self.clock.now_ms();
            subscribe::finish(&self.db, m, tries, &finish, now).await?;
            if let Finish::GiveUp { error, .. } = &finish {
                let details = format!(
                    "the {} message of order {} was given up after {tries} tries: {error}",
                    m.kind.as_str(),
                    m.order_no
                );
                tracing::warn!(order_no = %m.order_no, "{details}");
                crate::write_tx!(self.db, |tx| {
                    events::raise_alert(
                        tx,
                        "subscribe_failed",
                        Severity::Warning,
                        &m.id,
                        Some(&m.order_no),
                        &details,
                        now,
                    )
                    .await
                })?;
            }
        }
        Ok(due.len())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_written_in_beijing() {
        assert_eq!(super::beijing(1_764_554_821_000), "2025-12-01 10:07");
    }
}
