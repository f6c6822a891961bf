//! The `[gateways.wechatpay]` section of the config file (the adapter is `wechatpay`).

use std::path::PathBuf;

use serde::Deserialize;

use super::keys::Secret;

/// The `[gateways.wechatpay]` section of the config file; key and certificate values are PEM file paths.
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
    /// Subscribe messages to mini-program buyers when their order is paid and delivered (needs
    /// `mini_program_secret`).
    #[serde(default)]
    pub subscribe: Option<super::wechat_subscribe_config::SubscribeConfig>,
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
