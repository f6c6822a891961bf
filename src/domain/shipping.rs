//! Shipping information for WeChat mini-program payments (发货信息录入): a mini program enrolled in
//! WeChat's shipping management has its JSAPI payments held until the shipment is reported. Which
//! orders are reported, how their shipment is described, and what each answer of WeChat's means
//! are decided here; `store::shipping` queues the report with the delivery, and
//! `workers::shipping` sends it.

use super::refusal::Refusal;

/// The gateway and channel whose payments are reported: WeChat Pay JSAPI (mini programs and
/// official accounts; only a configured mini program's app secret turns reporting on).
pub const GATEWAY: &str = "wechatpay";
pub const CHANNEL: &str = "jsapi";

/// Longest `item_desc` WeChat takes, in characters.
pub const ITEM_DESC_CHARS_MAX: usize = 120;
/// Longest tracking number and express company code kassa accepts (WeChat's limits).
pub const TRACKING_NO_CHARS_MAX: usize = 128;
pub const EXPRESS_COMPANY_CHARS_MAX: usize = 128;

/// How an order's goods reached the buyer (`logistics_type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logistics {
    /// 1: by an express company, with its tracking number.
    Express { tracking_no: String, express_company: String },
    /// 2: delivered in the same city by the shop or a courier.
    SameCity,
    /// 3: virtual goods (card keys): nothing travels.
    Virtual,
    /// 4: collected by the buyer.
    Pickup,
}

impl Logistics {
    /// WeChat's `logistics_type`.
    pub fn code(&self) -> i64 {
        match self {
            Logistics::Express { .. } => 1,
            Logistics::SameCity => 2,
            Logistics::Virtual => 3,
            Logistics::Pickup => 4,
        }
    }

    /// Back from what is stored: the code and, for express, the tracking number and company.
    pub fn from_stored(code: i64, tracking_no: Option<String>, express_company: Option<String>) -> Option<Logistics> {
        Some(match code {
            1 => Logistics::Express { tracking_no: tracking_no?, express_company: express_company? },
            2 => Logistics::SameCity,
            3 => Logistics::Virtual,
            4 => Logistics::Pickup,
            _ => return None,
        })
    }

    /// How an admin's *deliver* describes a physical shipment: a tracking number and company make
    /// it an express shipment; without them `mode` names it (`same_city`, the default, or
    /// `pickup`).
    pub fn of_shipment(
        mode: Option<&str>,
        tracking_no: Option<&str>,
        express_company: Option<&str>,
    ) -> Result<Logistics, Refusal> {
        let invalid = |m: &str| Refusal::unprocessable("invalid_shipment", m.to_string());
        let clean = |v: Option<&str>, max: usize, what: &str| -> Result<Option<String>, Refusal> {
            match v.map(str::trim).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) if v.chars().count() > max || v.chars().any(char::is_control) => {
                    Err(invalid(&format!("{what} is at most {max} characters, without control characters")))
                }
                Some(v) => Ok(Some(v.to_string())),
            }
        };
        let tracking_no = clean(tracking_no, TRACKING_NO_CHARS_MAX, "tracking_no")?;
        let express_company = clean(express_company, EXPRESS_COMPANY_CHARS_MAX, "express_company")?;
        match (mode, tracking_no, express_company) {
            (None | Some("express"), Some(tracking_no), Some(express_company)) => {
                Ok(Logistics::Express { tracking_no, express_company })
            }
            (Some("express"), _, _) | (None, Some(_), None) | (None, None, Some(_)) => {
                Err(invalid("an express shipment names both tracking_no and express_company"))
            }
            (None | Some("same_city"), None, None) => Ok(Logistics::SameCity),
            (Some("pickup"), None, None) => Ok(Logistics::Pickup),
            (Some("same_city" | "pickup"), _, _) => {
                Err(invalid("tracking_no and express_company belong to an express shipment"))
            }
            (Some(_), _, _) => Err(invalid("logistics is one of express, same_city, pickup")),
        }
    }
}

/// Whether paying with `gateway`/`channel`, by a known payer, makes a delivered order one to
/// report.
pub fn is_reported(gateway: &str, channel: &str, payer_known: bool) -> bool {
    gateway == GATEWAY && channel == CHANNEL && payer_known
}

/// The `item_desc` of an order's lines (`name*quantity`, joined by `; `), cut to
/// [`ITEM_DESC_CHARS_MAX`] characters with an ellipsis.
pub fn item_desc<'a>(lines: impl IntoIterator<Item = (&'a str, i64)>) -> String {
    let text =
        lines.into_iter().map(|(name, quantity)| format!("{}*{quantity}", name.trim())).collect::<Vec<_>>().join("; ");
    if text.chars().count() <= ITEM_DESC_CHARS_MAX {
        return text;
    }
    let mut cut: String = text.chars().take(ITEM_DESC_CHARS_MAX - 1).collect();
    cut.push('…');
    cut
}

/// What an answer of `upload_shipping_info` (or of the access-token call behind it) means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Recorded: `0`, or already recorded before (`10060002`, `10060003`, `10060023`).
    Done,
    /// The access token is invalid or expired (`40001`, `42001`): fetch a new one and send again.
    TokenExpired,
    /// WeChat is busy (`-1`, `10060012`, `10060019`): send again later.
    Busy,
    /// The payment is not indexed yet (`10060001`): usual for up to about a minute after paying;
    /// send again later, a bounded number of times.
    NotYetKnown,
    /// Anything else: the report as sent can never be accepted.
    Refused,
}

pub fn classify(errcode: i64) -> Answer {
    match errcode {
        0 | 10_060_002 | 10_060_003 | 10_060_023 => Answer::Done,
        40_001 | 42_001 => Answer::TokenExpired,
        -1 | 10_060_012 | 10_060_019 => Answer::Busy,
        10_060_001 => Answer::NotYetKnown,
        _ => Answer::Refused,
    }
}

/// Tries of one report before it is given up and alerted.
pub const TRIES_MAX: i64 = 12;
/// Tries while WeChat does not know the payment yet (about a minute after paying, usually).
pub const NOT_YET_KNOWN_TRIES_MAX: i64 = 8;

/// After a try that ended with `answer` (or with no answer: `None`), whether to try again.
pub fn try_again(answer: Option<Answer>, tries: i64) -> bool {
    match answer {
        Some(Answer::Done | Answer::Refused) => false,
        Some(Answer::NotYetKnown) => tries < NOT_YET_KNOWN_TRIES_MAX,
        Some(Answer::Busy | Answer::TokenExpired) | None => tries < TRIES_MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jsapi_payments_by_a_known_payer_are_reported() {
        assert!(is_reported("wechatpay", "jsapi", true));
        assert!(!is_reported("wechatpay", "jsapi", false));
        assert!(!is_reported("wechatpay", "native", true));
        assert!(!is_reported("wechatpay", "h5", true));
        assert!(!is_reported("alipay", "jsapi", true));
    }

    #[test]
    fn a_shipment_is_described_as_wechat_takes_it() {
        let express = Logistics::of_shipment(None, Some(" SF1234567890 "), Some("SF")).unwrap();
        assert_eq!(express, Logistics::Express { tracking_no: "SF1234567890".into(), express_company: "SF".into() });
        assert_eq!(express.code(), 1);
        assert_eq!(Logistics::of_shipment(None, None, None).unwrap(), Logistics::SameCity);
        assert_eq!(Logistics::of_shipment(Some("pickup"), None, Some("  ")).unwrap(), Logistics::Pickup);
        for (mode, no, company) in [
            (Some("express"), None, None),
            (None, Some("SF1"), None),
            (None, None, Some("SF")),
            (Some("pickup"), Some("SF1"), Some("SF")),
            (Some("drone"), None, None),
            (None, Some("SF\n1"), Some("SF")),
        ] {
            assert_eq!(Logistics::of_shipment(mode, no, company).unwrap_err().code, "invalid_shipment", "{mode:?}");
        }
        let long = "1".repeat(TRACKING_NO_CHARS_MAX + 1);
        assert!(Logistics::of_shipment(None, Some(&long), Some("SF")).is_err());
        for l in [express, Logistics::SameCity, Logistics::Virtual, Logistics::Pickup] {
            let (no, company) = match &l {
                Logistics::Express { tracking_no, express_company } => {
                    (Some(tracking_no.clone()), Some(express_company.clone()))
                }
                _ => (None, None),
            };
            assert_eq!(Logistics::from_stored(l.code(), no, company), Some(l));
        }
        assert_eq!(Logistics::from_stored(1, None, None), None);
        assert_eq!(Logistics::from_stored(9, None, None), None);
    }

    #[test]
    fn the_item_description_fits_wechats_limit() {
        assert_eq!(item_desc([("会员月卡", 1), ("Tea ", 2)]), "会员月卡*1; Tea*2");
        let many: Vec<(&str, i64)> = (0..40).map(|_| ("青瓷杯", 3)).collect();
        let desc = item_desc(many);
        assert_eq!(desc.chars().count(), ITEM_DESC_CHARS_MAX);
        assert!(desc.ends_with('…') && desc.starts_with("青瓷杯*3; "));
    }

    #[test]
    fn each_answer_of_wechat_has_its_meaning() {
        for done in [0, 10_060_002, 10_060_003, 10_060_023] {
            assert_eq!(classify(done), Answer::Done);
        }
        assert_eq!(classify(40_001), Answer::TokenExpired);
        assert_eq!(classify(42_001), Answer::TokenExpired);
        for busy in [-1, 10_060_012, 10_060_019] {
            assert_eq!(classify(busy), Answer::Busy);
        }
        assert_eq!(classify(10_060_001), Answer::NotYetKnown);
        for refused in [10_060_004, 10_060_005, 10_060_014, 10_060_031, 268_485_216, 47_001, 40_013] {
            assert_eq!(classify(refused), Answer::Refused);
        }
        assert!(try_again(Some(Answer::Busy), TRIES_MAX - 1));
        assert!(!try_again(Some(Answer::Busy), TRIES_MAX));
        assert!(try_again(None, 1));
        assert!(try_again(Some(Answer::NotYetKnown), NOT_YET_KNOWN_TRIES_MAX - 1));
        assert!(!try_again(Some(Answer::NotYetKnown), NOT_YET_KNOWN_TRIES_MAX));
        assert!(!try_again(Some(Answer::Refused), 1));
        assert!(!try_again(Some(Answer::Done), 1));
    }
}
