//! `[email]`: the SMTP server kassa sends the buyer's e-mail through, and how.
//!
//! ```toml
//! [email]
//! host = "smtp.example.com"
//! port = 587               # default: 587 for starttls, 465 for tls, 25 for none
//! tls = "starttls"         # starttls (default), tls (implicit, port 465) or none (loopback only)
//! user = "shop@example.com"
//! password = "…"           # or KASSA_EMAIL_PASSWORD
//! from = "Example Shop <shop@example.com>"
//! reply_to = "support@example.com"
//! keys_inline = false      # card keys written into the "delivered" message (default: the link only)
//! ```

use anyhow::Context as _;

use crate::domain::contact::{LINK_HOURS_DEFAULT, LINK_HOURS_MAX};
use serde::Deserialize;

/// How long one SMTP exchange may take unless configured otherwise.
pub const SMTP_TIMEOUT_SECONDS_DEFAULT: u64 = 20;
/// Longest an SMTP exchange may be configured to take.
pub const SMTP_TIMEOUT_SECONDS_MAX: u64 = 300;

/// The `[email]` section as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailFile {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub tls: Option<String>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub from: Option<String>,
    pub reply_to: Option<String>,
    pub keys_inline: Option<bool>,
    pub timeout_seconds: Option<u64>,
}

pub use crate::workers::mail::{EmailSettings, TlsMode};

/// `--lookup-link-hours`, checked: 1 to [`LINK_HOURS_MAX`] (default [`LINK_HOURS_DEFAULT`]).
pub fn link_hours(given: Option<u64>) -> anyhow::Result<u64> {
    let hours = given.unwrap_or(LINK_HOURS_DEFAULT);
    if !(1..=LINK_HOURS_MAX).contains(&hours) {
        anyhow::bail!("--lookup-link-hours must be between 1 and {LINK_HOURS_MAX}");
    }
    Ok(hours)
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback())
}

/// `[email]` checked; `None` when there is no such section. The password may come from
/// `KASSA_EMAIL_PASSWORD` instead of the file.
pub fn resolve(file: Option<&EmailFile>, password_env: Option<String>) -> anyhow::Result<Option<EmailSettings>> {
    let Some(file) = file else { return Ok(None) };
    let host = file.host.clone().filter(|h| !h.trim().is_empty()).context("[email] needs host")?;
    let tls = match file.tls.as_deref().unwrap_or("starttls") {
        "starttls" => TlsMode::StartTls,
        "tls" => TlsMode::Tls,
        "none" => TlsMode::None,
        other => anyhow::bail!("[email] tls {other:?}: use starttls, tls or none"),
    };
    if tls == TlsMode::None && !is_loopback(&host) {
        anyhow::bail!(
            "[email] tls = \"none\" only to a server on this machine (localhost): the password and the keys would cross the network in clear"
        );
    }
    let port = file.port.unwrap_or(match tls {
        TlsMode::StartTls => 587,
        TlsMode::Tls => 465,
        TlsMode::None => 25,
    });
    let from = file.from.as_deref().context("[email] needs from (\"Shop <shop@example.com>\")")?;
    let from = from.parse().with_context(|| format!("[email] from {from:?} is not an address"))?;
    let reply_to = match file.reply_to.as_deref() {
        None => None,
        Some(r) => Some(r.parse().with_context(|| format!("[email] reply_to {r:?} is not an address"))?),
    };
    let password = password_env.filter(|p| !p.is_empty()).or(file.password.clone());
    if file.user.is_some() != password.is_some() {
        anyhow::bail!("[email] user and password go together (the password may be in KASSA_EMAIL_PASSWORD)");
    }
    let timeout_s = file.timeout_seconds.unwrap_or(SMTP_TIMEOUT_SECONDS_DEFAULT);
    if !(1..=SMTP_TIMEOUT_SECONDS_MAX).contains(&timeout_s) {
        anyhow::bail!("[email] timeout_seconds must be between 1 and {SMTP_TIMEOUT_SECONDS_MAX}");
    }
    Ok(Some(EmailSettings {
        host,
        port,
        tls,
        user: file.user.clone(),
        password,
        from,
        reply_to,
        keys_inline: file.keys_inline.unwrap_or(false),
        timeout: std::time::Duration::from_secs(timeout_s),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(host: &str, tls: Option<&str>) -> EmailFile {
        EmailFile {
            host: Some(host.into()),
            tls: tls.map(str::to_string),
            from: Some("Shop <shop@example.com>".into()),
            ..Default::default()
        }
    }

    #[test]
    fn email_settings_are_checked() {
        assert!(resolve(None, None).unwrap().is_none());
        let s = resolve(Some(&file("smtp.example.com", None)), None).unwrap().unwrap();
        assert_eq!((s.port, s.tls, s.keys_inline), (587, TlsMode::StartTls, false));
        assert_eq!(resolve(Some(&file("smtp.example.com", Some("tls"))), None).unwrap().unwrap().port, 465);
        let refused = resolve(Some(&file("smtp.example.com", Some("none"))), None).unwrap_err();
        assert!(refused.to_string().contains("only to a server on this machine"), "{refused}");
        assert!(resolve(Some(&file("127.0.0.1", Some("none"))), None).unwrap().is_some());
        assert!(resolve(Some(&file("localhost", Some("ssl"))), None).is_err());
        let mut f = file("smtp.example.com", None);
        f.user = Some("u".into());
        assert!(resolve(Some(&f), None).is_err(), "a user without a password");
        let s = resolve(Some(&f), Some("pw".into())).unwrap().unwrap();
        assert!(!format!("{s:?}").contains("pw"), "the password is not in Debug");
        f.from = Some("not an address".into());
        assert!(resolve(Some(&f), Some("pw".into())).is_err());
    }
}
