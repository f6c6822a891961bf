//! `kassa cases`: the complaints desk's commands.

use std::sync::Arc;

use clap::Subcommand;
use kassa::config::ServeArgs;

#[derive(Subcommand)]
pub(crate) enum CasesCommand {
    /// The URL WeChat Pay sends complaint notifications to (one per merchant): show it, set it
    /// (kassa's own /notify/wechatpay under the public base URL unless one is given) or delete it.
    /// Exit 0 when done, 1 when WeChat Pay refused or could not be reached, 2 when it cannot run
    WechatNotifyUrl {
        /// show: print the registered URL (or that none is) and kassa's own; set: register the URL
        /// (https, at most 256 characters; POST when none is registered, PUT otherwise); delete:
        /// remove it
        #[arg(value_enum)]
        action: NotifyUrlAction,
        /// The URL to set; kassa's own when left out
        url: Option<String>,
        #[command(flatten)]
        serve: ServeArgs,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum NotifyUrlAction {
    Show,
    Set,
    Delete,
}

/// `kassa cases wechat-notify-url`: the outer error when it cannot run (no configuration, no
/// database, WeChat Pay not configured), the inner one when WeChat Pay refused or was not reached.
pub(crate) async fn wechat_notify_url(
    action: NotifyUrlAction,
    url: Option<&str>,
    args: &ServeArgs,
) -> anyhow::Result<Result<(), kassa::error::Error>> {
    use kassa::usecase::cases as uc;
    let (settings, db, clock, gateways) = super::open_gateways(args).await?;
    let provider = kassa::gateway::wechat_complaints::PROVIDER;
    if gateways.get(provider).is_none() {
        db.close().await;
        anyhow::bail!("WeChat Pay is not configured here ([gateways.wechatpay])");
    }
    let public_url = settings.public_url.clone().unwrap_or_else(|| format!("http://{}", settings.listen));
    let links = Arc::new(kassa::app::link_signer(&db, None).await?);
    let cx = kassa::app::usecase_context(&settings, &db, &clock, &gateways, &public_url, None, links);
    if url.is_some() && !matches!(action, NotifyUrlAction::Set) {
        db.close().await;
        anyhow::bail!("a URL goes with set only");
    }
    let done = match action {
        NotifyUrlAction::Show => uc::notify_url(&cx, provider).await.map(|u| {
            println!("registered  {}", u.registered.as_deref().unwrap_or("(none)"));
            println!("kassa       {}", u.kassa_url);
        }),
        NotifyUrlAction::Set => uc::register_notify_url(&cx, provider, url).await.map(|u| {
            println!("registered  {}", u.registered.as_deref().unwrap_or_default());
        }),
        NotifyUrlAction::Delete => uc::delete_notify_url(&cx, provider).await.map(|removed| {
            println!("{}", if removed { "removed" } else { "none was registered" });
        }),
    };
    db.close().await;
    Ok(done)
}
