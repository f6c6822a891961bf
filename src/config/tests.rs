//! The settings' resolution: flags over the file over the defaults, and what is refused.

use super::*;
use crate::http::protection::DAY_MS;

#[test]
fn the_default_settings_are_what_nothing_resolves_to() {
    let mut resolved = Settings::resolve(&ServeArgs::default()).unwrap();
    resolved.engine = EngineConfig::default();
    assert_eq!(format!("{:?}", Settings::default()), format!("{resolved:?}"));
}

#[test]
fn command_line_beats_file_beats_default() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kassa.toml");
    std::fs::write(&file, "hold_seconds = 60\nlisten = \"127.0.0.1:9000\"\ndemo = true\n").unwrap();
    let mut args = ServeArgs::default();
    args.common.config = Some(file);
    args.hold_seconds = Some(5);
    let s = Settings::resolve(&args).unwrap();
    assert_eq!(s.hold_seconds, 5);
    assert_eq!(s.listen.port(), 9000);
    assert!(s.demo && s.sandbox);
    assert_eq!(s.sweep_interval_ms, DEFAULT_SWEEP_INTERVAL_MS);
    assert!(s.database_url.starts_with("sqlite://./kassa-data"));
    assert_eq!(s.refund_policy.window_days, None);
}

#[test]
fn the_refund_window_is_off_unless_set() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kassa.toml");
    std::fs::write(&file, "refund_window_days = 90\n").unwrap();
    let mut args = ServeArgs::default();
    args.common.config = Some(file);
    assert_eq!(Settings::resolve(&args).unwrap().refund_policy.window_days, Some(90));
    args.refund_window_days = Some(30);
    assert_eq!(Settings::resolve(&args).unwrap().refund_policy.window_days, Some(30));
    args.refund_window_days = Some(0);
    assert!(Settings::resolve(&args).is_err());
}

#[test]
fn time_zones_are_names_or_offsets() {
    let mut args = ServeArgs {
        time_zone: Some("Asia/Shanghai".into()),
        statement_time_zone: Some("Europe/Berlin".into()),
        ..Default::default()
    };
    let s = Settings::resolve(&args).unwrap();
    assert_eq!(s.time_zone.iana_name(), Some("Asia/Shanghai"));
    assert_eq!(s.statement_schedule.unwrap().zone.iana_name(), Some("Europe/Berlin"));
    args.time_zone = Some("Mars/Olympus".into());
    let refused = Settings::resolve(&args).unwrap_err().to_string();
    assert!(refused.contains("--time-zone") && refused.contains("Asia/Shanghai"), "{refused}");
}

#[test]
fn protection_defaults_guard_a_public_storefront_and_can_be_set() {
    let s = Settings::resolve(&ServeArgs::default()).unwrap();
    let p = &s.protection;
    assert_eq!(p.max_open_orders_per_session, 3);
    assert_eq!(p.rate_limits, Some(RateLimits::default()));
    assert!(p.trusted_proxies.iter().any(|n| n.contains(&std::net::IpAddr::from([127, 0, 0, 1]))));
    assert_eq!(p.retention.notification_body_ms, 180 * DAY_MS);
    assert_eq!(p.client_address_header, ClientAddressHeader::XForwardedFor);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kassa.toml");
    std::fs::write(
        &file,
        "rate_limits = \"on\"\nrate_confirms_per_minute = 5\ntrusted_proxies = \"10.0.0.0/8, 192.0.2.1\"\n\
         max_open_orders_per_session = 0\nnotification_body_days = 30\nclient_address_header = \"Forwarded\"\n",
    )
    .unwrap();
    let mut args = ServeArgs::default();
    args.common.config = Some(file);
    let p = Settings::resolve(&args).unwrap().protection;
    assert_eq!(p.rate_limits.map(|r| r.confirms_per_minute), Some(5));
    assert_eq!(p.trusted_proxies.len(), 2);
    assert_eq!(p.client_address_header, ClientAddressHeader::Forwarded);
    assert_eq!(p.max_open_orders_per_session, 0);
    assert_eq!(p.retention.notification_body_ms, 30 * DAY_MS);
    args.protection.rate_limits = Some("off".into());
    assert_eq!(Settings::resolve(&args).unwrap().protection.rate_limits, None);
    for bad in [
        ProtectionArgs { rate_limits: Some("maybe".into()), ..Default::default() },
        ProtectionArgs { rate_sessions_per_minute: Some(0), ..Default::default() },
        ProtectionArgs { trusted_proxies: Some("10.0.0.0/33".into()), ..Default::default() },
        ProtectionArgs { shop_api_key: Some("short".into()), ..Default::default() },
        ProtectionArgs { client_address_header: Some("x-client-ip".into()), ..Default::default() },
        ProtectionArgs { captcha_verify_url: Some("https://v.example/siteverify".into()), ..Default::default() },
        ProtectionArgs { max_connections: Some(0), ..Default::default() },
        ProtectionArgs { retention_days: Some(0), ..Default::default() },
    ] {
        let args = ServeArgs { protection: bad.clone(), ..Default::default() };
        assert!(Settings::resolve(&args).is_err(), "{bad:?}");
    }
}

#[test]
fn the_sandbox_is_refused_where_real_money_is_taken_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kassa.toml");
    std::fs::write(&file, "[gateways.stripe]\nsecret_key = \"sk_test_x\"\nwebhook_secret = \"whsec_x\"\n").unwrap();
    let demo = |config: Option<PathBuf>, public_url: Option<&str>, i_know: bool| ServeArgs {
        common: CommonArgs { config, ..Default::default() },
        demo: true,
        public_url: public_url.map(str::to_string),
        sandbox_in_production_i_know: i_know,
        ..Default::default()
    };
    for local in [None, Some("http://127.0.0.1:8080"), Some("http://localhost:9000/"), Some("http://[::1]:8080")] {
        let s = Settings::resolve(&demo(None, local, false)).unwrap();
        assert!(s.sandbox && !s.sandbox_in_production, "{local:?}");
    }
    for (config, url) in
        [(Some(file.clone()), None), (None, Some("https://shop.example")), (None, Some("http://10.0.0.5:8080"))]
    {
        let err = Settings::resolve(&demo(config.clone(), url, false)).unwrap_err().to_string();
        assert!(err.contains("--sandbox-in-production-i-know"), "{err}");
        let s = Settings::resolve(&demo(config, url, true)).unwrap();
        assert!(s.sandbox_in_production);
    }
    // Listening on the network with no public URL: reached from it.
    let open = ServeArgs { listen: Some("0.0.0.0:8080".into()), ..demo(None, None, false) };
    assert!(Settings::resolve(&open).is_err());
    // A real gateway alone is production as usual.
    let args = ServeArgs { common: CommonArgs { config: Some(file), ..Default::default() }, ..Default::default() };
    assert!(!Settings::resolve(&args).unwrap().sandbox);
}

#[test]
fn a_short_admin_token_is_refused_and_a_host_name_listens() {
    let args = ServeArgs { admin_token: Some("x".repeat(31)), ..Default::default() };
    assert!(Settings::resolve(&args).unwrap_err().to_string().contains("openssl rand -hex 32"));
    let args =
        ServeArgs { admin_token: Some("x".repeat(32)), listen: Some("localhost:8080".into()), ..Default::default() };
    let s = Settings::resolve(&args).unwrap();
    assert!(s.listen.ip().is_loopback() && s.listen.port() == 8080);
}

#[test]
fn refuses_unknown_keys_and_bad_values() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kassa.toml");
    std::fs::write(&file, "hold_secs = 60\n").unwrap();
    let mut args = ServeArgs::default();
    args.common.config = Some(file);
    assert!(Settings::resolve(&args).is_err());
    let args = ServeArgs { listen: Some("nowhere".into()), ..Default::default() };
    assert!(Settings::resolve(&args).is_err());
}

#[test]
fn the_case_due_margin_is_hours_within_bounds() {
    let mut args = ServeArgs::default();
    assert_eq!(Settings::resolve(&args).unwrap().case_due_margin_ms, crate::domain::case::DUE_MARGIN_MS_DEFAULT);
    args.case_due_margin_hours = Some(24);
    assert_eq!(Settings::resolve(&args).unwrap().case_due_margin_ms, 24 * 3_600_000);
    for refused in [0, 73] {
        args.case_due_margin_hours = Some(refused);
        let e = Settings::resolve(&args).unwrap_err().to_string();
        assert!(e.contains("--case-due-margin-hours"), "{e}");
    }
}
