//! The `[gateways.*]` sections of the config file and the adapters built from them. Key and
//! certificate values are PEM file paths, relative to the config file; secrets never appear in
//! `Debug` output.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use serde::Deserialize;

use super::Gateway;

/// A secret string from the config: redacted in `Debug`.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GatewaysFile {
    pub alipay: Option<AlipayConfig>,
    pub wechatpay: Option<WechatPayConfig>,
    pub stripe: Option<StripeConfig>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AlipayConfig {
    pub app_id: String,
    /// The receiving account (`seller_id`) notifications must name.
    pub seller_id: String,
    pub app_private_key_file: PathBuf,
    pub alipay_public_key_file: PathBuf,
    #[serde(default = "alipay_default_url")]
    pub gateway_url: String,
}

fn alipay_default_url() -> String {
    "https://openapi.alipay.com/gateway.do".to_string()
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WechatPayConfig {
    pub mchid: String,
    pub appid: String,
    pub merchant_serial_no: String,
    pub merchant_private_key_file: PathBuf,
    /// WeChat Pay public key (`PUB_KEY_ID_…` mode) …
    pub platform_public_key_file: Option<PathBuf>,
    /// … or a platform certificate.
    pub platform_cert_file: Option<PathBuf>,
    /// The `Wechatpay-Serial` WeChat signs with: the public key's `PUB_KEY_ID_…`; with a
    /// certificate alone, read from it when absent.
    pub platform_serial: Option<String>,
    /// Download the platform certificates (`/v3/certificates`) hourly and when a notification is
    /// signed under an unknown certificate serial, so a rotation needs nothing done by hand.
    #[serde(default = "yes")]
    pub download_certificates: bool,
    pub api_v3_key: Secret,
    #[serde(default = "wechat_default_url")]
    pub api_base_url: String,
    /// The mini program's AppSecret (`appid` being the mini program's): turns on shipping reports
    /// (发货信息录入) of JSAPI payments, without which WeChat holds their funds.
    #[serde(default)]
    pub mini_program_secret: Option<Secret>,
    /// Where the mini-program server API answers (`stable_token`, `upload_shipping_info`).
    #[serde(default = "wechat_open_default_url")]
    pub open_api_base_url: String,
}

fn wechat_open_default_url() -> String {
    "https://api.weixin.qq.com".to_string()
}

fn yes() -> bool {
    true
}

fn wechat_default_url() -> String {
    "https://api.mch.weixin.qq.com".to_string()
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StripeConfig {
    pub secret_key: Secret,
    pub webhook_secret: Secret,
    /// Further endpoint secrets accepted while one is being rotated.
    #[serde(default)]
    pub previous_webhook_secrets: Vec<Secret>,
    #[serde(default = "stripe_default_url")]
    pub api_base_url: String,
}

fn stripe_default_url() -> String {
    "https://api.stripe.com".to_string()
}

impl GatewaysFile {
    /// Makes every key path absolute against the config file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(a) = self.alipay.as_mut() {
            fix(&mut a.app_private_key_file);
            fix(&mut a.alipay_public_key_file);
        }
        if let Some(w) = self.wechatpay.as_mut() {
            fix(&mut w.merchant_private_key_file);
            w.platform_public_key_file.iter_mut().for_each(fix);
            w.platform_cert_file.iter_mut().for_each(fix);
        }
    }

    /// The configured gateway names, in preference order for the default.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.alipay.is_some() {
            names.push(super::alipay::NAME);
        }
        if self.wechatpay.is_some() {
            names.push(super::wechatpay::NAME);
        }
        if self.stripe.is_some() {
            names.push(super::stripe::NAME);
        }
        names
    }

    /// Builds the adapters, loading and checking every key file now so a bad file stops start-up.
    pub fn build(&self, public_url: &str) -> anyhow::Result<Vec<Arc<dyn Gateway>>> {
        let base = public_url.trim_end_matches('/');
        let mut out: Vec<Arc<dyn Gateway>> = Vec::new();
        if let Some(c) = &self.alipay {
            let notify = format!("{base}/notify/{}", super::alipay::NAME);
            out.push(Arc::new(super::alipay::Alipay::new(c, notify).context("[gateways.alipay]")?));
        }
        if let Some(c) = &self.wechatpay {
            let notify = format!("{base}/notify/{}", super::wechatpay::NAME);
            out.push(Arc::new(super::wechatpay::WechatPay::new(c, notify).context("[gateways.wechatpay]")?));
        }
        if let Some(c) = &self.stripe {
            out.push(Arc::new(super::stripe::Stripe::new(c).context("[gateways.stripe]")?));
        }
        Ok(out)
    }
}
