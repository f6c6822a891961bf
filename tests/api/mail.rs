//! E-mail to the buyer, sent through a real SMTP server on loopback (Python's aiosmtpd, writing
//! what it receives into a maildir): the messages as received, the link in them, retries after the
//! server was down, and the same message (its Message-ID) after a crash between send and record.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, TestApp, answer, s};

/// aiosmtpd on a port of its own, keeping what it receives in a maildir.
struct Smtp {
    child: Option<std::process::Child>,
    port: u16,
    maildir: PathBuf,
    _dir: tempfile::TempDir,
}

fn python() -> String {
    std::env::var("KASSA_AIOSMTPD")
        .ok()
        .or(option_env!("KASSA_AIOSMTPD").map(String::from))
        .expect("KASSA_AIOSMTPD: a Python with aiosmtpd")
}

impl Smtp {
    fn start() -> Smtp {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let mut smtp = Smtp { child: None, port, maildir: dir.path().join("maildir"), _dir: dir };
        smtp.restart();
        smtp
    }

    /// Starts the server (again) on its port; waits (bounded) until it answers.
    fn restart(&mut self) {
        let child = std::process::Command::new(python())
            .args([
                "-m",
                "aiosmtpd",
                "-n",
                "-l",
                &format!("127.0.0.1:{}", self.port),
                "-c",
                "aiosmtpd.handlers.Mailbox",
            ])
            .arg(&self.maildir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start aiosmtpd");
        self.child = Some(child);
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("aiosmtpd did not start on port {}", self.port);
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Every message received, oldest first.
    fn messages(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.maildir.join("new")) else { return Vec::new() };
        let mut files: Vec<(std::time::SystemTime, String, PathBuf)> = entries
            .map(|e| e.unwrap())
            .map(|e| {
                (e.metadata().unwrap().modified().unwrap(), e.file_name().to_string_lossy().into_owned(), e.path())
            })
            .collect();
        files.sort();
        files.into_iter().map(|(_, _, path)| std::fs::read_to_string(path).unwrap()).collect()
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        self.stop();
    }
}

fn email_settings(port: u16) -> kassa::workers::mail::EmailSettings {
    kassa::workers::mail::EmailSettings {
        host: "127.0.0.1".into(),
        port,
        tls: kassa::workers::mail::TlsMode::None,
        user: None,
        password: None,
        from: "Example Shop <shop@example.com>".parse().unwrap(),
        reply_to: Some("support@example.com".parse().unwrap()),
        keys_inline: false,
        timeout: Duration::from_secs(5),
    }
}

/// The value of header `name` in a raw message.
fn header(message: &str, name: &str) -> String {
    let prefix = format!("{name}: ");
    message.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_default().trim().to_string()
}

/// A message's quoted-printable parts decoded (soft line breaks joined, `=XX` as its byte).
fn decoded(message: &str) -> String {
    let joined = message.replace("=\r\n", "").replace("=\n", "");
    let mut out = Vec::new();
    let bytes = joined.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'=', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The link to the order a message carries (its text part's).
fn link_in(message: &str) -> String {
    let text = decoded(message);
    let at = text.find("http://").expect("a link");
    text[at..].split_whitespace().next().unwrap().trim_end_matches(['"', '>', '.']).to_string()
}

async fn sku(t: &TestApp) {
    let body = json!({"sku": "GAME", "name": "Game key", "price_minor": 500, "currency": "CNY", "kind": "digital"});
    assert_eq!(t.admin_post("/api/v1/admin/skus", body).await.0, StatusCode::CREATED);
    let keys = json!({"keys": ["KEY-MAIL-0001", "KEY-MAIL-0002", "KEY-MAIL-0003"]});
    assert_eq!(t.admin_post("/api/v1/admin/skus/GAME/keys", keys).await.0, StatusCode::OK);
    t.create_sku("MUG", "Mug", 100, 10).await;
}

/// A paid order of `sku` whose checkout named `email`: its number.
async fn paid_order(t: &TestApp, sku: &str, email: &str) -> String {
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[(sku, 1)]).await;
    let body = json!({"gateway": "sandbox", "contact": {"email": email}});
    let (status, order) = t.checkout_with(&buyer, &basket, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{order}");
    assert_eq!(t.complete(&s(&order["attempt_ref"]), "succeeded", 1).await.0, StatusCode::OK);
    t.settle().await;
    s(&order["order_no"])
}

async fn mail_rows(t: &TestApp, order_no: &str) -> Vec<Value> {
    t.order(order_no).await["mail"].as_array().unwrap().clone()
}

#[cfg_attr(
    not(kassa_test_smtp),
    ignore = "e-mail: KASSA_AIOSMTPD (a Python with aiosmtpd) was not set when the tests were built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mail_on_sqlite() {
    mail_reaches_the_buyer(Backend::Sqlite).await;
}

#[cfg_attr(
    not(all(kassa_test_smtp, kassa_test_pg)),
    ignore = "e-mail on PostgreSQL: KASSA_AIOSMTPD and KASSA_TEST_DATABASE_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mail_on_postgres() {
    if let Some(b) = Backend::postgres() {
        mail_reaches_the_buyer(b).await;
    }
}

async fn mail_reaches_the_buyer(backend: Backend) {
    let mut smtp = Smtp::start();
    let opts = Opts { manual_clock: true, email: Some(email_settings(smtp.port)), ..Opts::default() };
    let t = TestApp::spawn_with(backend, opts).await;
    let mailer = t.app.mailer.clone().expect("a mailer when [email] is configured");
    sku(&t).await;

    // A digital order, paid and delivered at once: one message, the delivered one.
    let order_no = paid_order(&t, "GAME", "Buyer@Example.com").await;
    assert_eq!(t.status(&order_no).await, "delivered");
    assert_eq!(mailer.step().await.unwrap(), 1);
    let received = smtp.messages();
    assert_eq!(received.len(), 1);
    let m = &received[0];
    let rows = mail_rows(&t, &order_no).await;
    let kinds: Vec<(&str, &str)> =
        rows.iter().map(|r| (r["kind"].as_str().unwrap(), r["status"].as_str().unwrap())).collect();
    assert_eq!(kinds, [("paid", "superseded"), ("delivered", "sent")]);
    assert_eq!(header(m, "Message-ID"), format!("<{}@kassa>", s(&rows[1]["id"])));
    assert_eq!(header(m, "Subject"), format!("Order {order_no}: delivered"));
    assert_eq!(header(m, "To"), "buyer@example.com");
    assert_eq!(header(m, "From"), "\"Example Shop\" <shop@example.com>");
    assert_eq!(header(m, "Reply-To"), "support@example.com");
    assert!(m.contains("multipart/alternative") && m.contains("text/plain") && m.contains("text/html"), "{m}");
    assert!(m.contains("Game key") && m.contains("5.00 CNY"), "the lines and the total: {m}");
    assert!(decoded(m).contains("Game key × 1"), "the HTML part, decoded: {m}");
    assert!(!m.contains("KEY-MAIL"), "keys are not sent inline unless the shop says so");
    // The link in the message opens the order; its keys show on the POST.
    let link = link_in(m);
    assert!(link.starts_with(&format!("{}/lookup/open/", t.base)), "{link}");
    let html = t.http.post(&link).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("KEY-MAIL-"), "{html}");

    // A lookup by the contact sends a new link; the answer is the same as for a stranger's.
    let (status, body) = answer(
        t.http
            .post(t.url("/api/v1/lookup"))
            .json(&json!({"order_no": order_no, "email": "BUYER@example.com"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, other) = answer(
        t.http
            .post(t.url("/api/v1/lookup"))
            .json(&json!({"order_no": order_no, "email": "other@example.com"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &other), (StatusCode::ACCEPTED, &body));
    assert_eq!(mailer.step().await.unwrap(), 1, "one link, to the order's own address");
    let received = smtp.messages();
    assert_eq!(header(&received[1], "Subject"), format!("Your link to order {order_no}"));
    assert_ne!(link_in(&received[1]), link, "a new link");

    // The server down: the message waits and is tried again; the operator is told.
    smtp.stop();
    let mug = paid_order(&t, "MUG", "mug@example.com").await;
    assert_eq!(mailer.step().await.unwrap(), 1);
    let row = &mail_rows(&t, &mug).await[0];
    assert_eq!((s(&row["status"]), row["tries"].as_i64()), ("pending".to_string(), Some(1)), "{row}");
    assert!(!s(&row["last_error"]).is_empty());
    let alerts = t.count("SELECT COUNT(*) FROM alerts WHERE kind = 'mail_unreachable'").await;
    assert_eq!(alerts, 1);
    smtp.restart();
    assert_eq!(mailer.step().await.unwrap(), 0, "not before its backoff");
    t.clock.as_ref().unwrap().advance_ms(31_000);
    assert_eq!(mailer.step().await.unwrap(), 1);
    let row = &mail_rows(&t, &mug).await[0];
    assert_eq!((s(&row["kind"]), s(&row["status"]), row["tries"].as_i64()), ("paid".into(), "sent".into(), Some(2)));
    let received = smtp.messages();
    assert_eq!(received.len(), 3);
    assert_eq!(header(&received[2], "Subject"), format!("Order {mug}: payment received"));

    // A crash between the server's acceptance and the record of it: the message goes again, as
    // the same message (its Message-ID and its link).
    kassa::store::sql::query("UPDATE mail_messages SET status = 'pending', sent_at = NULL WHERE id = $1")
        .bind(s(&row["id"]))
        .execute(t.app.state.db.read_pool())
        .await
        .unwrap();
    assert_eq!(mailer.step().await.unwrap(), 1);
    let received = smtp.messages();
    assert_eq!(received.len(), 4);
    assert_eq!(header(&received[3], "Message-ID"), header(&received[2], "Message-ID"));
    assert_eq!(link_in(&received[3]), link_in(&received[2]));

    // An order placed while e-mail was off gets none, even once it is on.
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("MUG", 1)]).await;
    let (_, order) =
        t.checkout_with(&buyer, &basket, &json!({"gateway": "sandbox", "contact": {"email": "old@example.com"}})).await;
    kassa::store::sql::query("UPDATE orders SET mail_enabled = 0 WHERE order_no = $1")
        .bind(s(&order["order_no"]))
        .execute(t.app.state.db.read_pool())
        .await
        .unwrap();
    assert_eq!(t.complete(&s(&order["attempt_ref"]), "succeeded", 1).await.0, StatusCode::OK);
    t.settle().await;
    assert!(mail_rows(&t, &s(&order["order_no"])).await.is_empty());

    // The operator's test message.
    let (status, body) = t.admin_post("/api/v1/admin/mail/test", json!({"to": "ops@example.com"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(mailer.step().await.unwrap(), 1);
    let received = smtp.messages();
    assert_eq!(header(received.last().unwrap(), "Subject"), "Test message from the shop");
    let list = t.admin_get("/api/v1/admin/mail?status=sent").await;
    assert!(list["configured"].as_bool().unwrap());
    assert_eq!(list["items"][0]["kind"], "test");
    t.assert_clean().await;
}

/// With `keys_inline`, the delivered message carries the keys, and that reveal is logged.
#[cfg_attr(
    not(kassa_test_smtp),
    ignore = "e-mail: KASSA_AIOSMTPD (a Python with aiosmtpd) was not set when the tests were built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_inline_when_the_shop_says_so() {
    let smtp = Smtp::start();
    let email = kassa::workers::mail::EmailSettings { keys_inline: true, ..email_settings(smtp.port) };
    let t = TestApp::spawn_with(Backend::Sqlite, Opts { email: Some(email), ..Opts::default() }).await;
    sku(&t).await;
    let order_no = paid_order(&t, "GAME", "keys@example.com").await;
    assert_eq!(t.app.mailer.as_ref().unwrap().step().await.unwrap(), 1);
    let m = decoded(&smtp.messages()[0]);
    assert!(m.contains("KEY-MAIL-000"), "{m}");
    let reveals = t.order(&order_no).await["reveals"].clone();
    let email = reveals.as_array().unwrap().iter().find(|r| r["channel"] == "email").expect("the e-mail's reveal");
    assert_eq!(email["keys"], 1);
    assert_eq!(email["user_agent"], "e-mail to k***@example.com");
    t.assert_clean().await;
}

/// An order placed with a promotion code says what the code took off, before the total.
#[cfg_attr(
    not(kassa_test_smtp),
    ignore = "e-mail: KASSA_AIOSMTPD (a Python with aiosmtpd) was not set when the tests were built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_discounted_order_says_what_its_code_took_off() {
    let smtp = Smtp::start();
    let t =
        TestApp::spawn_with(Backend::Sqlite, Opts { email: Some(email_settings(smtp.port)), ..Opts::default() }).await;
    sku(&t).await;
    let code = json!({"name": "Mugs", "code": "MUG-20", "percent_off": 20, "skus": ["MUG"]});
    assert_eq!(t.admin_post("/api/v1/admin/promotions", code).await.0, StatusCode::CREATED);
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("MUG", 3)]).await;
    let body = json!({"gateway": "sandbox", "contact": {"email": "deal@example.com"}, "promotion_code": "mug-20"});
    let (status, order) = t.checkout_with(&buyer, &basket, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{order}");
    assert_eq!(t.complete(&s(&order["attempt_ref"]), "succeeded", 1).await.0, StatusCode::OK);
    t.settle().await;
    assert_eq!(t.app.mailer.as_ref().unwrap().step().await.unwrap(), 1);
    let m = decoded(&smtp.messages()[0]);
    assert!(m.contains("Discount (MUG-20)") && m.contains("-0.60 CNY") && m.contains("2.40 CNY"), "{m}");
    t.assert_clean().await;
}

/// `serve --check-config` tries the SMTP server of `[email]`.
#[cfg_attr(
    not(kassa_test_smtp),
    ignore = "e-mail: KASSA_AIOSMTPD (a Python with aiosmtpd) was not set when the tests were built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_config_tries_the_smtp_server() {
    let smtp = Smtp::start();
    let dir = tempfile::tempdir().unwrap();
    let config = |port: u16| {
        let path = dir.path().join(format!("kassa-{port}.toml"));
        std::fs::write(
            &path,
            format!(
                "[email]\nhost = \"127.0.0.1\"\nport = {port}\ntls = \"none\"\nfrom = \"Shop <shop@example.com>\"\n"
            ),
        )
        .unwrap();
        path
    };
    let run = |path: PathBuf| {
        crate::common::kassa_command()
            .args(["serve", "--check-config", "--config"])
            .arg(path)
            .args(["--data-dir"])
            .arg(dir.path().join("data"))
            .env("CI", "")
            .output()
            .unwrap()
    };
    let ok = run(config(smtp.port));
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("e-mail ok"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let refused = run(config(closed));
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("[email]"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
