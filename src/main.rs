//! The `kassa` binary: `serve`, `check`, `migrate`.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use kassa::app::{App, Workers};
use kassa::clock::SystemClock;
use kassa::config::{CommonArgs, ServeArgs, Settings};
use kassa::store::{Db, check};

#[derive(Parser)]
#[command(name = "kassa", version, about = "Self-hosted payment order engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service
    Serve(ServeArgs),
    /// Verify the invariants on a database; exit 0 when all hold, 1 on a violation, 2 when it cannot run
    Check(CommonArgs),
    /// Apply migrations
    Migrate(CommonArgs),
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // Structured JSON when not on a terminal (log collectors), readable text otherwise.
    if std::io::stderr().is_terminal() {
        builder.init();
    } else {
        builder.json().with_current_span(true).init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kassa: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => match serve(&args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kassa: {e:#}");
                    ExitCode::FAILURE
                }
            },
            Command::Check(args) => run_check(&args).await,
            Command::Migrate(args) => match migrate(&args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kassa: {e:#}");
                    ExitCode::FAILURE
                }
            },
        }
    })
}

async fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let settings = Settings::resolve(args)?;
    std::fs::create_dir_all(&settings.data_dir)?;
    let listener = tokio::net::TcpListener::bind(settings.listen).await?;
    let app = App::start(&settings, Arc::new(SystemClock), listener, Workers::Run).await?;
    println!("kassa listening on http://{}", app.addr);
    if settings.demo {
        println!("storefront: {}/", app.public_url);
    }
    if let Some(token) = &app.generated_admin_token {
        println!("admin token: {token}");
    }
    tokio::signal::ctrl_c().await?;
    tracing::info!("shutting down");
    app.stop().await;
    Ok(())
}

async fn migrate(args: &CommonArgs) -> anyhow::Result<()> {
    let (url, max) = Settings::resolve_common(args)?;
    let db = Db::connect(&url, max).await?;
    db.migrate().await?;
    println!("migrations applied");
    Ok(())
}

async fn run_check(args: &CommonArgs) -> ExitCode {
    let result = async {
        let (url, max) = Settings::resolve_common(args)?;
        let db = Db::connect(&url, max).await?;
        anyhow::Ok(check::run(&db).await?)
    }
    .await;
    match result {
        Ok(violations) if violations.is_empty() => {
            println!("ok: invariants I1 I2 I5 I6 I7 hold");
            ExitCode::SUCCESS
        }
        Ok(violations) => {
            for v in &violations {
                println!("{v}");
            }
            println!("{} violation(s)", violations.len());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("kassa check: cannot run: {e:#}");
            ExitCode::from(2)
        }
    }
}
