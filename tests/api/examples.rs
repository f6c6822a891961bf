//! The shop examples in `examples/` against a real kassa (SQLite, the sandbox gateway): each
//! generates its typed client from the served `/openapi.json` (so a contract change that breaks a
//! client breaks the example), places an order from the shop's server with its reference and
//! metadata, the buyer pays, kassa's webhooks reach the shop, which verifies them, marks its order
//! paid and then fulfilled, and refuses a forged one. Needs `scripts/examples-setup.sh` and
//! `KASSA_EXAMPLES=1` when the tests are built.

use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, Running, SHOP_KEY, TestApp, WEBHOOK_SECRET, s};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `program args` in `dir` to its end; panics with its output unless it succeeds.
fn run(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An example shop's process (stopped when this goes out of scope) and its address.
struct Shop {
    process: Running,
    base: String,
}

impl Shop {
    fn start(mut command: Command, port: u16, kassa: &str, scratch: &Path) -> Shop {
        command
            .env("KASSA_URL", kassa)
            .env("SHOP_KEY", SHOP_KEY)
            .env("WEBHOOK_SECRET", WEBHOOK_SECRET)
            .env("PORT", port.to_string());
        let process = Running::start(command, scratch, "shop", "shop listening");
        Shop { process, base: format!("http://127.0.0.1:{port}") }
    }

    fn output(&self) -> String {
        format!("{}{}", self.process.out(), self.process.err())
    }
}

/// A kassa whose webhook is the shop's on `port`; its `/openapi.json` written to `scratch`.
async fn kassa_for(port: u16, scratch: &Path) -> (TestApp, PathBuf) {
    let t = TestApp::spawn_with(
        Backend::Sqlite,
        Opts { webhook_url: Some(format!("http://127.0.0.1:{port}/kassa-events")), ..Opts::default() },
    )
    .await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let spec = t.http.get(t.url("/openapi.json")).send().await.unwrap().text().await.unwrap();
    let path = scratch.join("openapi.json");
    std::fs::write(&path, spec).unwrap();
    (t, path)
}

/// A purchase through the shop: ordered, paid at the sandbox, and the shop's order fulfilled from
/// kassa's webhooks; a forged webhook refused.
async fn purchase_through(t: &TestApp, shop: &Shop) {
    let http = reqwest::Client::new();
    let r = http.post(format!("{}/buy", shop.base)).json(&json!({"sku": "MUG", "quantity": 1})).send().await.unwrap();
    let status = r.status();
    let placed: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(status, StatusCode::CREATED, "{placed}\n{}", shop.output());
    assert_eq!(placed["payment"]["type"], "form", "the buyer is sent to kassa's hand-off: {placed}");
    let (order, order_no) = (s(&placed["order"]), s(&placed["kassa_order_no"]));
    let kassa_order = t.order(&order_no).await;
    assert_eq!(kassa_order["merchant_reference"], order, "the shop's reference is on kassa's order");
    assert!(kassa_order["metadata"]["shop"].is_string(), "{kassa_order}");
    // The buyer pays; kassa sends order.paid, then fulfilment.requested.
    t.complete(&s(&placed["attempt_ref"]), "succeeded", 1).await;
    t.settle().await;
    t.app.relay.clone().unwrap().step().await.unwrap();
    let mine: Value = http.get(format!("{}/orders/{order}", shop.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(mine["status"], "fulfilled", "{mine}\n{}", shop.output());
    assert_eq!(
        t.count("SELECT COUNT(*) FROM outbox WHERE status = 'delivered'").await,
        2,
        "the shop acknowledged both"
    );
    // A forged message is refused.
    let forged = http
        .post(format!("{}/kassa-events", shop.base))
        .header("Kassa-Signature", "t=1,v1=00")
        .header("Kassa-Event-Id", "forged")
        .body(r#"{"topic":"order.paid","data":{}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::BAD_REQUEST);
}

#[cfg_attr(
    not(kassa_test_examples),
    ignore = "the examples need scripts/examples-setup.sh and KASSA_EXAMPLES=1 when the tests are built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_shop_example_sells_and_is_told_by_webhook() {
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let port = crate::fleet::free_port();
    let (t, spec) = kassa_for(port, scratch.path()).await;
    let venv = root().join("target/examples-venv/bin");
    let client = scratch.path().join("kassa_client");
    run(
        scratch.path(),
        venv.join("openapi-python-client").to_str().unwrap(),
        &["generate", "--path", spec.to_str().unwrap(), "--output-path", client.to_str().unwrap(), "--meta", "none"],
    );
    let mut command = Command::new(venv.join("python"));
    command.arg(root().join("examples/python-shop/shop.py")).env("PYTHONPATH", scratch.path());
    let shop = Shop::start(command, port, &t.base, scratch.path());
    purchase_through(&t, &shop).await;
}

#[cfg_attr(
    not(kassa_test_examples),
    ignore = "the examples need scripts/examples-setup.sh and KASSA_EXAMPLES=1 when the tests are built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_node_shop_example_sells_and_is_told_by_webhook() {
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let port = crate::fleet::free_port();
    let (t, spec) = kassa_for(port, scratch.path()).await;
    // The example's own commands (package.json), the types from this kassa's document.
    let example = root().join("examples/node-shop");
    run(&example, "npx", &["openapi-typescript", spec.to_str().unwrap(), "-o", "src/kassa.d.ts"]);
    run(&example, "npx", &["tsc"]);
    let mut command = Command::new("node");
    command.arg(example.join("dist/shop.js"));
    let shop = Shop::start(command, port, &t.base, scratch.path());
    purchase_through(&t, &shop).await;
}

/// Under `CI=true` the examples must have been built to run.
#[test]
fn the_examples_are_built_to_run_in_ci() {
    if std::env::var("CI").is_ok_and(|v| v == "true") && !cfg!(kassa_test_examples) {
        panic!("CI=true but KASSA_EXAMPLES was not set (scripts/examples-setup.sh) when the tests were built");
    }
}
