//! E-mail to the buyer: the messages a lookup and the operator ask for, and each message composed
//! when it is sent (from the order as it is then, in the buyer's language, a text and an HTML
//! part). The worker ([`crate::workers::mail`]) hands the composed message to the SMTP server.

use askama::Template;

use super::Context;
use crate::domain::contact::{self, Email};
use crate::domain::ids::OrderNo;
use crate::domain::mail::MailKind;
use crate::domain::money::format_minor;
use crate::error::{Error, Result};
use crate::store::lookup::{self as lookups, Viewer};
use crate::store::mail::{self, Mail};
use crate::store::{fulfilment, views};

/// What the shop chose about e-mail beyond the server to send through.
#[derive(Debug, Clone, Default)]
pub struct MailPolicy {
    /// Card keys written into the *delivered* message (default: only the link to the order).
    pub keys_inline: bool,
}

/// The refusal of a message asked for while e-mail is off.
fn mail_off() -> Error {
    Error::conflict("mail_off", "e-mail is not configured on this server ([email] in the configuration file)")
}

/// Whether e-mail is on; refused when it is not.
pub fn require_mail(cx: &Context) -> Result<()> {
    cx.mail.as_ref().map(drop).ok_or_else(mail_off)
}

/// Keeps a new link to `order_no` and the message that sends it to `email`, together.
pub async fn send_link(cx: &Context, order_no: &OrderNo, email: &Email, lang: Option<&str>) -> Result<()> {
    require_mail(cx)?;
    let now = cx.now_ms();
    let id = crate::vault::LinkSigner::new_link_id();
    let expires_at = contact::link_expires_at(now, cx.link_hours);
    mail::add_link_mail(&cx.db, &id, order_no, email.as_str(), lang.unwrap_or("en"), expires_at, now).await
}

/// Keeps a test message to `to` (the operator's *Send test message*); its id.
pub async fn send_test(cx: &Context, to: &str, lang: &str) -> Result<String> {
    require_mail(cx)?;
    let to = Email::parse(to).map_err(|_| Error::unprocessable("invalid_recipient", "to is not an e-mail address"))?;
    mail::add_test_mail(&cx.db, to.as_str(), lang, cx.now_ms()).await
}

/// A message ready for the SMTP server.
#[derive(Debug, Clone)]
pub struct Composed {
    /// The `Message-ID`: the same on every try of one message.
    pub message_id: String,
    pub to: String,
    pub subject: String,
    pub text: String,
    pub html: String,
}

/// What one message says, for both of its parts.
struct Body<'a> {
    lang: &'a str,
    w: &'a Words,
    heading: String,
    lead: &'a str,
    order_no: &'a str,
    lines: &'a [(String, i64, String)],
    /// What a promotion code took off (its code and the amount), if the order used one.
    discount: Option<(&'a str, String)>,
    total: &'a str,
    link: &'a str,
    link_until: &'a str,
    keys: &'a [String],
}

#[derive(Template)]
#[template(path = "mail/order.html")]
struct MailHtml<'a> {
    b: &'a Body<'a>,
}

#[derive(Template)]
#[template(path = "mail/order.txt")]
struct MailText<'a> {
    b: &'a Body<'a>,
}

impl Body<'_> {
    /// The message to `to` with the subject `subject`: its text and HTML parts.
    fn composed(&self, message_id: String, to: &str, subject: String) -> Result<Composed> {
        let render = |e: askama::Error| Error::internal(e.to_string());
        Ok(Composed {
            message_id,
            to: to.to_string(),
            subject,
            text: MailText { b: self }.render().map_err(render)?,
            html: MailHtml { b: self }.render().map_err(render)?,
        })
    }
}

/// The words of a message in one language.
pub struct Words {
    subject_paid: &'static str,
    subject_delivered: &'static str,
    subject_refunded: &'static str,
    subject_link: &'static str,
    subject_test: &'static str,
    lead_paid: &'static str,
    lead_delivered: &'static str,
    lead_delivered_keys: &'static str,
    lead_refunded: &'static str,
    lead_link: &'static str,
    lead_test: &'static str,
    pub order: &'static str,
    pub total: &'static str,
    pub discount: &'static str,
    pub view: &'static str,
    pub valid_until: &'static str,
    pub keys: &'static str,
    pub keep_safe: &'static str,
    pub not_you: &'static str,
}

const EN: Words = Words {
    subject_paid: "Order {no}: payment received",
    subject_delivered: "Order {no}: delivered",
    subject_refunded: "Order {no}: refunded",
    subject_link: "Your link to order {no}",
    subject_test: "Test message from the shop",
    lead_paid: "We have received your payment. We will write again when your order is delivered.",
    lead_delivered: "Your order has been delivered.",
    lead_delivered_keys: "Your order has been delivered. Open the link below to see your keys.",
    lead_refunded: "Your order has been refunded. The money goes back the way you paid.",
    lead_link: "You asked for a link to your order. It opens the order once and shows your keys.",
    lead_test: "This is a test message: e-mail from the shop reaches this address.",
    order: "Order",
    total: "Total",
    discount: "Discount",
    view: "View your order",
    valid_until: "The link works once, until",
    keys: "Your keys",
    keep_safe: "Keep them safe: anyone who has them can use them.",
    not_you: "If you did not ask for this, you can ignore this message.",
};

const ZH: Words = Words {
    subject_paid: "订单 {no}：已收到付款",
    subject_delivered: "订单 {no}：已发货",
    subject_refunded: "订单 {no}：已退款",
    subject_link: "订单 {no} 的查看链接",
    subject_test: "商店的测试邮件",
    lead_paid: "我们已收到您的付款。订单发货后会再通知您。",
    lead_delivered: "您的订单已发货。",
    lead_delivered_keys: "您的订单已发货。请打开下面的链接查看卡密。",
    lead_refunded: "您的订单已退款，款项将按原支付方式退回。",
    lead_link: "您申请了订单的查看链接。链接只能打开一次，打开后显示卡密。",
    lead_test: "这是一封测试邮件：商店的邮件可以送达此地址。",
    order: "订单",
    total: "合计",
    discount: "优惠",
    view: "查看订单",
    valid_until: "链接仅可使用一次，有效期至",
    keys: "您的卡密",
    keep_safe: "请妥善保管：任何人拿到卡密都可以使用。",
    not_you: "如果这不是您本人的操作，请忽略此邮件。",
};

/// The words of language `lang` (`zh…` Chinese, anything else English).
pub fn words(lang: &str) -> &'static Words {
    if lang.starts_with("zh") { &ZH } else { &EN }
}

/// A time for the message: UTC, to the minute.
fn mail_time(ms: i64) -> String {
    let t = crate::clock::rfc3339(ms);
    format!("{} {} UTC", t.get(..10).unwrap_or_default(), t.get(11..16).unwrap_or_default())
}

/// Composes claimed message `m` from its order as it is now: the link it carries (made at its
/// first try and the same on every other), the lines and total, and — for a *delivered* message
/// when the shop turned it on — the card keys, whose reveal is logged.
pub async fn compose(cx: &Context, m: &Mail) -> Result<Composed> {
    let kind = MailKind::parse(&m.kind).ok_or_else(|| Error::internal("unknown mail kind"))?;
    let w = words(&m.lang);
    let message_id = format!("<{}@kassa>", m.id);
    let Some(order_no) = m.order_no.as_deref().filter(|_| kind.has_link()).map(OrderNo::stored) else {
        let body = Body {
            lang: &m.lang,
            w,
            heading: w.subject_test.to_string(),
            lead: w.lead_test,
            order_no: "",
            lines: &[],
            discount: None,
            total: "",
            link: "",
            link_until: "",
            keys: &[],
        };
        return body.composed(message_id, &m.recipient, w.subject_test.to_string());
    };
    let now = cx.now_ms();
    let (link_id, expires_at) =
        mail::link_of(&cx.db, m, &order_no, contact::link_expires_at(now, cx.link_hours), now).await?;
    let token = cx.links.sign(order_no.as_str(), contact::LINK_PURPOSE, &link_id, expires_at);
    let link = format!("{}/lookup/open/{token}", cx.public_url.trim_end_matches('/'));
    let order = views::get_order(&cx.db, &order_no, false).await?;
    let lines: Vec<(String, i64, String)> = order
        .lines
        .iter()
        .map(|l| (l.name.clone(), l.quantity, format_minor(l.line_total_minor, &order.currency)))
        .collect();
    let keys = match (kind, cx.mail.as_ref().is_some_and(|p| p.keys_inline)) {
        (MailKind::Delivered, true) => {
            let mut keys = fulfilment::order_keys(&cx.db, cx.vault.as_deref(), &order_no, now).await?;
            if !keys.keys.is_empty() && crate::store::cases::keys_held(&cx.db, order_no.as_str()).await? {
                keys = keys.held_back();
            }
            let shown: Vec<String> = keys.keys.into_iter().map(|(_, k)| k).collect();
            if !shown.is_empty() {
                let viewer = Viewer {
                    addr: None,
                    user_agent: Some(format!("e-mail to {}", Email::stored(m.recipient.clone()).masked())),
                };
                let n = i64::try_from(shown.len()).unwrap_or(i64::MAX);
                lookups::record_reveal(&cx.db, &order_no, "email", n, &viewer, now).await?;
            }
            shown
        }
        _ => Vec::new(),
    };
    let has_keys = lookups::has_keys(&cx.db, &order_no).await?;
    let (subject, lead) = match kind {
        MailKind::Paid => (w.subject_paid, w.lead_paid),
        MailKind::Delivered if has_keys && keys.is_empty() => (w.subject_delivered, w.lead_delivered_keys),
        MailKind::Delivered => (w.subject_delivered, w.lead_delivered),
        MailKind::Refunded => (w.subject_refunded, w.lead_refunded),
        MailKind::LookupLink | MailKind::Test => (w.subject_link, w.lead_link),
    };
    let subject = subject.replace("{no}", order_no.as_str());
    let total = format_minor(order.total_minor, &order.currency);
    let until = mail_time(expires_at);
    let body = Body {
        lang: &m.lang,
        w,
        heading: subject.clone(),
        lead,
        order_no: order_no.as_str(),
        lines: &lines,
        discount: order
            .promotion_code
            .as_deref()
            .map(|code| (code, format!("-{}", format_minor(order.discount_minor, &order.currency)))),
        total: &total,
        link: &link,
        link_until: &until,
        keys: &keys,
    };
    body.composed(message_id, &m.recipient, subject)
}
