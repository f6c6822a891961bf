//! The mail worker: claims due messages ([`crate::store::mail`]), composes each from its order
//! ([`crate::usecase::mail::compose`]), hands it to the SMTP server, and records the outcome as
//! the domain decides ([`crate::domain::mail::after_try`]): sent, tried again with backoff, or
//! given up with an alert. A server that cannot be reached or refuses raises an alert too.
//!
//! A message's `Message-ID` is its row's id: when kassa stops between the server's acceptance and
//! the record of it, the message goes again as the same message, which mail clients show once.

use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport as _, Message, Tokio1Executor};

use crate::domain::mail::{self as rules, MAIL_BATCH_MAX, Next, Outcome};
use crate::error::{Error, Result};
use crate::store::events::{self, Severity};
use crate::store::mail;
use crate::usecase::Context;
use crate::usecase::mail::{Composed, compose};

/// How the connection to the SMTP server is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Plain, upgraded with STARTTLS (required).
    StartTls,
    /// TLS from the first byte.
    Tls,
    /// No TLS: only to a server on this machine.
    None,
}

/// `[email]`, checked.
#[derive(Clone)]
pub struct EmailSettings {
    pub host: String,
    pub port: u16,
    pub tls: TlsMode,
    pub user: Option<String>,
    pub password: Option<String>,
    pub from: lettre::message::Mailbox,
    pub reply_to: Option<lettre::message::Mailbox>,
    pub keys_inline: bool,
    pub timeout: std::time::Duration,
}

impl std::fmt::Debug for EmailSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("from", &self.from.to_string())
            .finish_non_exhaustive()
    }
}

/// How long a claimed message is the worker's before another may take it.
const MAIL_LEASE_MS: i64 = 120_000;

pub struct Mailer {
    pub cx: Context,
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    reply_to: Option<Mailbox>,
    /// Where the server is, for alerts and logs (never the credentials).
    server: String,
}

/// The SMTP transport `[email]` describes.
pub fn transport(s: &EmailSettings) -> Result<AsyncSmtpTransport<Tokio1Executor>> {
    let builder = match s.tls {
        TlsMode::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&s.host),
        TlsMode::StartTls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&s.host),
        TlsMode::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&s.host)),
    }
    .map_err(|e| Error::internal(format!("[email] {}: {e}", s.host)))?;
    let builder = builder.port(s.port).timeout(Some(s.timeout));
    let builder = match (&s.user, &s.password) {
        (Some(user), Some(password)) => builder.credentials(Credentials::new(user.clone(), password.clone())),
        _ => builder,
    };
    Ok(builder.build())
}

/// Whether the SMTP server answers (and takes the credentials): `kassa serve --check-config`.
pub async fn test_connection(s: &EmailSettings) -> Result<()> {
    match transport(s)?.test_connection().await {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::internal(format!("the SMTP server {}:{} did not answer", s.host, s.port))),
        Err(e) => Err(Error::internal(format!("the SMTP server {}:{}: {e}", s.host, s.port))),
    }
}

impl Mailer {
    pub fn new(cx: Context, s: &EmailSettings) -> Result<Mailer> {
        Ok(Mailer {
            cx,
            transport: transport(s)?,
            from: s.from.clone(),
            reply_to: s.reply_to.clone(),
            server: format!("{}:{}", s.host, s.port),
        })
    }

    fn message(&self, c: &Composed) -> std::result::Result<Message, String> {
        let to: Mailbox = c.to.parse().map_err(|e| format!("recipient: {e}"))?;
        let mut builder = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(c.subject.clone())
            .message_id(Some(c.message_id.clone()));
        if let Some(r) = &self.reply_to {
            builder = builder.reply_to(r.clone());
        }
        builder
            .multipart(MultiPart::alternative_plain_html(c.text.clone(), c.html.clone()))
            .map_err(|e| format!("message: {e}"))
    }

    /// Sends every due message once; returns how many were tried.
    pub async fn step(&self) -> Result<usize> {
        let now = self.cx.now_ms();
        let mails = mail::claim(&self.cx.db, now, MAIL_LEASE_MS, MAIL_BATCH_MAX).await?;
        let mut unreachable = None;
        for m in &mails {
            if let Some(stale) = rules::before_try(now - m.created_ms) {
                mail::finish(&self.cx.db, &m.id, &stale, m.tries, now).await?;
                continue;
            }
            let outcome = match compose(&self.cx, m).await {
                Err(e) => Outcome::Permanent(format!("could not be composed: {e}")),
                Ok(c) => match self.message(&c) {
                    Err(e) => Outcome::Permanent(e),
                    Ok(message) => match self.transport.send(message).await {
                        Ok(_) => Outcome::Sent,
                        Err(e) if e.is_permanent() => Outcome::Permanent(format!("refused: {e}")),
                        Err(e) => {
                            unreachable = Some(e.to_string());
                            Outcome::Transient(format!("not sent: {e}"))
                        }
                    },
                },
            };
            let tries = m.tries + 1;
            let now = self.cx.now_ms();
            let next = rules::after_try(outcome, tries, now - m.created_ms);
            let next = match next {
                Next::Retry { after_ms, error } => Next::Retry { after_ms, error: rules::kept_error(&error) },
                Next::GiveUp { error } => Next::GiveUp { error: rules::kept_error(&error) },
                Next::Sent => Next::Sent,
            };
            mail::finish(&self.cx.db, &m.id, &next, tries, now).await?;
            if let Next::GiveUp { error } = &next {
                let details = format!("e-mail {} ({}) gave up after {tries} tries: {error}", m.id, m.kind);
                tracing::warn!(id = %m.id, kind = %m.kind, "{details}");
                crate::write_tx!(self.cx.db, |tx| {
                    events::raise_alert(
                        tx,
                        "mail_failed",
                        Severity::Warning,
                        &m.id,
                        m.order_no.as_deref(),
                        &details,
                        now,
                    )
                    .await
                })?;
            }
        }
        if let Some(error) = unreachable {
            let details =
                format!("the SMTP server {} did not take messages: {}", self.server, rules::kept_error(&error));
            let now = self.cx.now_ms();
            crate::write_tx!(self.cx.db, |tx| {
                events::raise_alert(tx, "mail_unreachable", Severity::Critical, &self.server, None, &details, now).await
            })?;
        }
        Ok(mails.len())
    }
}
