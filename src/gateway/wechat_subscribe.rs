//! Subscribe messages of the mini program (`/cgi-bin/message/subscribe/send`,
//! docs/gateways/wechat-subscribe.md): the `[gateways.wechatpay.subscribe]` section, and the send,
//! through the mini program's access token the shipping reports use. What to send and what each
//! answer means is `domain::subscribe`'s; the token travels in the URL, so no URL or token reaches
//! a log line or an error message.

use serde_json::{Value, json};

use super::GatewayError;
use super::wechat_shipping::ShippingApi;
pub use super::wechat_subscribe_config::{Subscribe, SubscribeConfig, Template};
use crate::clock::Millis;
use crate::domain::subscribe::{self, Answer};

/// One message to send.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    pub touser: &'a str,
    pub template: &'a Template,
    pub page: Option<String>,
    pub state: &'static str,
    pub facts: subscribe::Facts<'a>,
    pub now: Millis,
}

/// WeChat's answer to one send: its meaning, and its code and message for the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub answer: Answer,
    pub errcode: i64,
    pub errmsg: String,
}

/// The request body of `m`.
pub fn body(m: &Message<'_>) -> Value {
    let data: serde_json::Map<String, Value> = m
        .template
        .fields
        .iter()
        .map(|(key, kind, fact)| (key.clone(), json!({"value": subscribe::value(*kind, *fact, &m.facts)})))
        .collect();
    let mut body = json!({
        "touser": m.touser,
        "template_id": m.template.id,
        "data": data,
        "miniprogram_state": m.state,
        "lang": "zh_CN",
    });
    if let Some(page) = &m.page {
        body["page"] = json!(page.replace("{order_no}", m.facts.order_no));
    }
    body
}

/// Sends `m`. An answer that the token is stale gets a new token and one more try.
pub async fn send(api: &ShippingApi, m: &Message<'_>) -> Result<Sent, GatewayError> {
    let body = body(m);
    let mut force = false;
    loop {
        let (errcode, errmsg) = api.post_with_token("/cgi-bin/message/subscribe/send", &body, m.now, force).await?;
        let answer = subscribe::classify(errcode);
        if answer == Answer::TokenStale && !force {
            force = true;
            continue;
        }
        return Ok(Sent { answer, errcode, errmsg });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::subscribe::SubscribeKind;

    fn config() -> SubscribeConfig {
        super::super::wechat_subscribe_config::tests::config()
    }

    #[test]
    fn the_body_carries_each_field_and_the_page() {
        let s = config().checked().unwrap();
        let facts = subscribe::Facts {
            order_no: "KS1",
            total_minor: 500,
            currency: "CNY",
            subject: "Game key",
            at_beijing: "2026-12-06 21:40",
            kind: SubscribeKind::Paid,
        };
        let m = Message {
            touser: "o-1",
            template: s.paid.as_ref().unwrap(),
            page: s.page.clone(),
            state: s.state,
            facts,
            now: 0,
        };
        let b = body(&m);
        assert_eq!(b["data"]["amount2"]["value"], "¥5.00");
        assert_eq!(b["data"]["phrase4"]["value"], "已支付");
        assert_eq!(b["page"], "pages/order?no=KS1");
        assert_eq!((b["touser"].as_str(), b["template_id"].as_str()), (Some("o-1"), Some("TPL-PAID")));
    }
}
