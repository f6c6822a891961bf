//! The published contract against the served API: Schemathesis (`st`) generates requests from
//! `/openapi.json` — valid ones and ones that break it — with a buyer's and the admin's
//! credentials, and runs every check on the answers (tests/schemathesis/schemathesis.toml). Any
//! finding fails the test. Needs `KASSA_SCHEMATHESIS` (the path of `st`) when the tests are built;
//! `.ci/run` installs it.

use std::time::Duration;

use crate::common::*;

/// Runs Schemathesis against a kassa on `backend` with a catalog, a paid order and a pending one
/// in it, and fails on any finding.
async fn schemathesis_finds_nothing(backend: Backend) {
    let t =
        TestApp::spawn_with(backend, Opts { allowed_return_origins: vec!["https://shop.example"], ..Opts::default() })
            .await;
    t.create_sku("MUG", "Mug", 8900, 1_000).await;
    let (status, _) = t
        .admin_post(
            "/api/v1/admin/skus",
            serde_json::json!({"sku": "GIFT", "name": "Gift card", "price_minor": 5000, "currency": "CNY", "kind": "digital"}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED);
    let (_, _, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    // The buyer Schemathesis acts as, with an order of its own.
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("MUG", 2)]).await;
    let (status, order) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{order}");
    let order_no = order["order_no"].as_str().unwrap_or_default().to_string();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis/schemathesis.toml");
    let spec = t.url("/openapi.json");
    // Schemathesis keeps a cache where it runs: somewhere of the test's own.
    let workdir = tempfile::tempdir().unwrap();
    let cwd = workdir.path().to_path_buf();
    let st = std::env::var("KASSA_SCHEMATHESIS")
        .ok()
        .or(option_env!("KASSA_SCHEMATHESIS").map(String::from))
        .expect("KASSA_SCHEMATHESIS: the path of Schemathesis' st");
    let out = tokio::time::timeout(
        Duration::from_secs(900),
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(st)
                .current_dir(cwd)
                .args(["--config-file", config, "run", &spec, "--checks", "all", "--no-color"])
                .env("KASSA_ST_BUYER_TOKEN", buyer)
                .env("KASSA_ST_ADMIN_TOKEN", ADMIN)
                .env("KASSA_ST_ORDER_NO", order_no)
                .output()
                .expect("run Schemathesis")
        }),
    )
    .await
    .expect("Schemathesis finished in time")
    .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Schemathesis found what the contract does not say:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("Tested: "), "no operation was tested:\n{report}");
}

#[cfg_attr(
    not(kassa_test_schemathesis),
    ignore = "contract: KASSA_SCHEMATHESIS (the path of Schemathesis' st) was not set when the tests were built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schemathesis_on_sqlite() {
    schemathesis_finds_nothing(Backend::Sqlite).await;
}

#[cfg_attr(
    any(not(kassa_test_pg), not(kassa_test_schemathesis)),
    ignore = "contract on PostgreSQL: KASSA_TEST_DATABASE_URL and KASSA_SCHEMATHESIS were not both set when the tests were built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schemathesis_on_postgres() {
    if let Some(backend) = Backend::postgres() {
        schemathesis_finds_nothing(backend).await;
    }
}

/// Under `CI=true` the contract tests must have been built to run.
#[test]
fn contract_tests_are_built_to_run_in_ci() {
    if std::env::var("CI").is_ok_and(|v| v == "true") && !cfg!(kassa_test_schemathesis) {
        panic!("CI=true but KASSA_SCHEMATHESIS was not set when the tests were built");
    }
}
