//! `[gateways.wechatpay.subscribe]`: the mini program's subscribe-message templates the shop
//! chose in the WeChat console, and the fact of kassa's each of their fields carries, checked at
//! start (docs/gateways/wechat-subscribe.md).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::domain::subscribe::{self, Fact, FieldKind, SubscribeKind};

/// `[gateways.wechatpay.subscribe]`: the templates the shop chose in the WeChat console and the
/// fact each of their fields carries (`thing3 = "items"`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SubscribeConfig {
    /// The template sent when an order is paid.
    pub paid_template: Option<String>,
    #[serde(default)]
    pub paid_fields: BTreeMap<String, String>,
    /// The template sent when an order is delivered.
    pub delivered_template: Option<String>,
    #[serde(default)]
    pub delivered_fields: BTreeMap<String, String>,
    /// The mini program's page a message opens; `{order_no}` is replaced (none: the card opens
    /// nothing).
    pub page: Option<String>,
    /// `formal` (default), `trial` or `developer`: which version of the mini program opens.
    pub state: Option<String>,
}

/// One template, checked: its id and what each field carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub id: String,
    pub fields: Vec<(String, FieldKind, Fact)>,
}

/// `[gateways.wechatpay.subscribe]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub paid: Option<Template>,
    pub delivered: Option<Template>,
    pub page: Option<String>,
    pub state: &'static str,
}

impl Subscribe {
    pub fn template(&self, kind: SubscribeKind) -> Option<&Template> {
        match kind {
            SubscribeKind::Paid => self.paid.as_ref(),
            SubscribeKind::Delivered => self.delivered.as_ref(),
        }
    }
}

fn template(name: &str, id: Option<&String>, fields: &BTreeMap<String, String>) -> Result<Option<Template>, String> {
    let Some(id) = id.filter(|t| !t.trim().is_empty()) else {
        return if fields.is_empty() { Ok(None) } else { Err(format!("{name}_fields without {name}_template")) };
    };
    if fields.is_empty() {
        return Err(format!("{name}_template needs {name}_fields (a template field = one of {})", Fact::NAMES));
    }
    let fields = fields
        .iter()
        .map(|(key, fact)| subscribe::check_field(key, fact).map(|(kind, fact)| (key.clone(), kind, fact)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{name}_fields: {e}"))?;
    Ok(Some(Template { id: id.trim().to_string(), fields }))
}

impl SubscribeConfig {
    /// The section checked; the error says what to change.
    pub fn checked(&self) -> Result<Subscribe, String> {
        let state = match self.state.as_deref().unwrap_or("formal") {
            "formal" => "formal",
            "trial" => "trial",
            "developer" => "developer",
            other => return Err(format!("state {other:?}: use formal, trial or developer")),
        };
        if self.page.as_ref().is_some_and(|p| p.chars().count() > subscribe::PAGE_LEN_MAX) {
            return Err(format!("page is at most {} characters", subscribe::PAGE_LEN_MAX));
        }
        let paid = template("paid", self.paid_template.as_ref(), &self.paid_fields)?;
        let delivered = template("delivered", self.delivered_template.as_ref(), &self.delivered_fields)?;
        if paid.is_none() && delivered.is_none() {
            return Err("name paid_template or delivered_template, with its fields".into());
        }
        Ok(Subscribe { paid, delivered, page: self.page.clone(), state })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn config() -> SubscribeConfig {
        SubscribeConfig {
            paid_template: Some("TPL-PAID".into()),
            paid_fields: [
                ("character_string1", "order_no"),
                ("amount2", "amount"),
                ("thing3", "items"),
                ("phrase4", "status"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            page: Some("pages/order?no={order_no}".into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_section_is_checked() {
        let s = config().checked().unwrap();
        assert_eq!((s.state, s.delivered.is_none()), ("formal", true));
        assert!(SubscribeConfig::default().checked().is_err(), "no template");
        let mut c = config();
        c.paid_fields.insert("thing9".into(), "order_no".into());
        assert!(c.checked().unwrap_err().contains("thing9"));
        let c = SubscribeConfig { state: Some("beta".into()), ..config() };
        assert!(c.checked().is_err());
        let c = SubscribeConfig { delivered_fields: config().paid_fields, ..config() };
        assert!(c.checked().unwrap_err().contains("delivered_template"));
    }

    #[test]
    fn the_section_reads_as_documented() {
        let text = r#"
            paid_template = "TPL-1"
            page = "pages/order/detail?order_no={order_no}"
            [paid_fields]
            character_string1 = "order_no"
            amount2 = "amount"
            [delivered_fields]
        "#;
        let c: SubscribeConfig = toml::from_str(text).unwrap();
        let s = c.checked().unwrap();
        assert_eq!(s.paid.unwrap().fields.len(), 2);
        assert!(toml::from_str::<SubscribeConfig>("paid_templat = \"x\"").is_err(), "unknown keys refused");
    }
}
