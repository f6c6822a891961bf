//! The `[gateways.*]` sections of the config file and the adapters built from them. Each section's
//! type lives with its adapter (re-exported here); key and certificate values are PEM file paths,
//! relative to the config file; secrets never appear in `Debug` output.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use serde::Deserialize;

use super::Gateway;
use super::alipay::{self, Alipay};
use super::stripe::{self, Stripe};
use super::wechatpay::{self, WechatPay};

pub use super::alipay::AlipayConfig;
pub use super::keys::Secret;
pub use super::stripe::StripeConfig;
pub use super::wechatpay::WechatPayConfig;

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GatewaysFile {
    pub alipay: Option<AlipayConfig>,
    pub wechatpay: Option<WechatPayConfig>,
    pub stripe: Option<StripeConfig>,
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
            names.push(alipay::NAME);
        }
        if self.wechatpay.is_some() {
            names.push(wechatpay::NAME);
        }
        if self.stripe.is_some() {
            names.push(stripe::NAME);
        }
        names
    }

    /// Builds the adapters, loading and checking every key file now so a bad file stops start-up.
    pub fn build(&self, public_url: &str) -> anyhow::Result<Vec<Arc<dyn Gateway>>> {
        let base = public_url.trim_end_matches('/');
        let mut out: Vec<Arc<dyn Gateway>> = Vec::new();
        if let Some(c) = &self.alipay {
            let notify = format!("{base}/notify/{}", alipay::NAME);
            out.push(Arc::new(Alipay::new(c, notify).context("[gateways.alipay]")?));
        }
        if let Some(c) = &self.wechatpay {
            let notify = format!("{base}/notify/{}", wechatpay::NAME);
            out.push(Arc::new(WechatPay::new(c, notify).context("[gateways.wechatpay]")?));
        }
        if let Some(c) = &self.stripe {
            out.push(Arc::new(Stripe::new(c).context("[gateways.stripe]")?));
        }
        Ok(out)
    }
}
