//! Which way a buyer pays when the checkout names no channel: decided by the device the request
//! came from (its `User-Agent`) and what the chosen gateway offers. A checkout that names a channel,
//! or a payer that only one channel takes, is never second-guessed.

/// Where the buyer is, as far as paying goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// WeChat's own browser (phone or desktop client): JSAPI works there, H5 does not.
    WeChat,
    /// A phone or tablet browser, or another app's browser (Alipay's included).
    Phone,
    /// Everything else: desktop browsers, servers calling the API.
    Desktop,
}

/// The device a `User-Agent` names (none: a desktop, as a server calling the API is).
pub fn device_of(user_agent: Option<&str>) -> Device {
    let ua = user_agent.unwrap_or_default();
    if ua.contains("MicroMessenger") {
        return Device::WeChat;
    }
    const PHONES: &[&str] =
        &["iPhone", "iPod", "iPad", "Android", "Mobile", "HarmonyOS", "OpenHarmony", "Windows Phone"];
    if PHONES.iter().any(|p| ua.contains(p)) { Device::Phone } else { Device::Desktop }
}

/// The channel of `gateway` for a checkout that named none: by the payer it names first (an
/// `openid` is JSAPI's, a `client_ip` H5's), then by the device — inside WeChat JSAPI (or, with no
/// openid to pay under, Native: WeChat refuses H5 in its own browser), on other phones WeChat H5 or
/// Alipay's mobile web cashier, on desktops WeChat Native or Alipay's page pay. Only channels in
/// `offered` are chosen; otherwise `default`.
pub fn choose(
    gateway: &str,
    offered: &[&'static str],
    default: &'static str,
    device: Device,
    has_openid: bool,
    has_client_ip: bool,
) -> &'static str {
    let wanted: &[&str] = match gateway {
        "wechatpay" if has_openid => &["jsapi"],
        "wechatpay" if has_client_ip => &["h5"],
        "wechatpay" => match device {
            Device::WeChat => &["native"],
            Device::Phone => &["h5"],
            Device::Desktop => &["native"],
        },
        "alipay" => match device {
            Device::WeChat | Device::Phone => &["wap"],
            Device::Desktop => &["page"],
        },
        _ => &[],
    };
    wanted.iter().find_map(|w| offered.iter().find(|o| *o == w).copied()).unwrap_or(default)
}

/// The gateway of a checkout that named none: the shop's default — except inside WeChat's
/// browser, which does not open Alipay's pages: there WeChat Pay when it is configured, and where
/// only Alipay is, a refusal that tells the buyer to open the page in the phone's browser.
pub fn default_gateway<'a>(
    device: Device,
    default: Option<&'a str>,
    configured: &[&'a str],
) -> Result<Option<&'a str>, super::refusal::Refusal> {
    if device != Device::WeChat || default != Some("alipay") {
        return Ok(default);
    }
    if let Some(wechat) = configured.iter().find(|g| **g == "wechatpay") {
        return Ok(Some(*wechat));
    }
    match configured.iter().find(|g| **g != "alipay") {
        Some(other) => Ok(Some(*other)),
        None => Err(super::refusal::Refusal::unprocessable(
            "open_in_browser",
            "Alipay cannot be paid inside WeChat: open this page in the phone's browser (the ⋯ menu, Open in Browser)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_wechat_alipay_is_not_the_default() {
        let both = ["alipay", "wechatpay"];
        assert_eq!(default_gateway(Device::WeChat, Some("alipay"), &both).unwrap(), Some("wechatpay"));
        assert_eq!(default_gateway(Device::Phone, Some("alipay"), &both).unwrap(), Some("alipay"));
        assert_eq!(default_gateway(Device::WeChat, Some("stripe"), &["alipay", "stripe"]).unwrap(), Some("stripe"));
        assert_eq!(default_gateway(Device::WeChat, Some("alipay"), &["alipay", "stripe"]).unwrap(), Some("stripe"));
        assert_eq!(default_gateway(Device::WeChat, Some("alipay"), &["alipay"]).unwrap_err().code, "open_in_browser");
        assert_eq!(default_gateway(Device::WeChat, None, &[]).unwrap(), None);
    }

    const WECHAT_IOS: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 MicroMessenger/8.0.43(0x18002b2c) NetType/WIFI Language/zh_CN";
    const WECHAT_ANDROID: &str = "Mozilla/5.0 (Linux; Android 13; V2203A Build/TP1A.220624.014; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/111.0.5563.116 Mobile Safari/537.36 XWEB/5235 MMWEBSDK/20230805 MMWEBID/2587 MicroMessenger/8.0.42.2460(0x28002A37) WeChat/arm64 Weixin NetType/WIFI Language/zh_CN ABI/arm64";
    const WECHAT_WINDOWS: &str = "Mozilla/5.0 (Windows NT 10.0; WOW64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/81.0.4044.138 Safari/537.36 NetType/WIFI MicroMessenger/7.0.20.1781(0x6700143B) WindowsWechat(0x63090719) XWEB/8461 Flue";
    const SAFARI_IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
    const CHROME_ANDROID: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.6367.82 Mobile Safari/537.36";
    const ALIPAY_APP: &str = "Mozilla/5.0 (Linux; U; Android 12; zh-CN; M2102K1C Build/SKQ1.211006.001) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/69.0.3497.100 UWS/3.22.2.9999 UCBS/3.22.2.9999 Mobile Safari/537.36 NebulaSDK/1.8.100112 Nebula AlipayDefined(nt:WIFI,ws:393|0|2.75) AliApp(AP/10.5.36.8100) AlipayClient/10.5.36.8100 Language/zh-Hans useStatusBar/true isConcaveScreen/true Region/CNAriver/1.0.0";
    const HUAWEI_HARMONY: &str = "Mozilla/5.0 (Phone; OpenHarmony 4.1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/114.0.0.0 Safari/537.36 ArkWeb/4.1.6.1 Mobile HuaweiBrowser/5.0.4.300";
    const CHROME_WINDOWS: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
    const SAFARI_MAC: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4.1 Safari/605.1.15";
    const WECHAT: &[&str] = &["jsapi", "h5", "native"];
    const ALIPAY: &[&str] = &["page", "wap", "qr"];

    #[test]
    fn devices_from_real_user_agents() {
        for ua in [WECHAT_IOS, WECHAT_ANDROID, WECHAT_WINDOWS] {
            assert_eq!(device_of(Some(ua)), Device::WeChat, "{ua}");
        }
        for ua in [SAFARI_IPHONE, CHROME_ANDROID, ALIPAY_APP, HUAWEI_HARMONY] {
            assert_eq!(device_of(Some(ua)), Device::Phone, "{ua}");
        }
        for ua in [CHROME_WINDOWS, SAFARI_MAC, "curl/8.5.0", "reqwest/0.12"] {
            assert_eq!(device_of(Some(ua)), Device::Desktop, "{ua}");
        }
        assert_eq!(device_of(None), Device::Desktop);
    }

    #[test]
    fn channels_by_device_and_payer() {
        let wechat = |ua, openid, ip| choose("wechatpay", WECHAT, "jsapi", device_of(Some(ua)), openid, ip);
        let alipay = |ua| choose("alipay", ALIPAY, "page", device_of(Some(ua)), false, false);
        assert_eq!(wechat(WECHAT_IOS, true, false), "jsapi");
        assert_eq!(wechat(WECHAT_ANDROID, false, false), "native", "no openid: WeChat refuses H5 in its browser");
        assert_eq!(wechat(SAFARI_IPHONE, false, false), "h5");
        assert_eq!(wechat(CHROME_ANDROID, false, true), "h5");
        assert_eq!(wechat(CHROME_WINDOWS, false, false), "native");
        assert_eq!(wechat(CHROME_WINDOWS, true, false), "jsapi", "a payer names its channel");
        assert_eq!(wechat(SAFARI_MAC, false, true), "h5");
        assert_eq!(alipay(SAFARI_IPHONE), "wap");
        assert_eq!(alipay(ALIPAY_APP), "wap");
        assert_eq!(alipay(HUAWEI_HARMONY), "wap");
        assert_eq!(alipay(SAFARI_MAC), "page");
        assert_eq!(alipay(CHROME_WINDOWS), "page");
        // What a gateway does not offer is never chosen; other gateways keep their default.
        assert_eq!(choose("alipay", &["page"], "page", Device::Phone, false, false), "page");
        assert_eq!(choose("stripe", &["checkout"], "checkout", Device::Phone, false, false), "checkout");
        assert_eq!(choose("sandbox", &["form"], "form", Device::WeChat, true, false), "form");
    }
}
