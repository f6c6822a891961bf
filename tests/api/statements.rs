//! Statement reconciliation against the sandbox's own statements, on both databases: every kind of
//! disagreement the sandbox can be made to show, both sides' totals, fees on orders and exports,
//! idempotent re-runs that close what no longer holds and keep what an operator resolved, a
//! payment straddling midnight, and the daily job's schedule.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{ADMIN, Backend, Opts, TestApp, s};
use crate::on_both;
use kassa::store::sql;

const DAY_MS: i64 = 86_400_000;

/// Moves the test's clock to `hours` after the next UTC midnight; answers that day.
fn to_next_day(t: &TestApp, hours: i64) -> String {
    let clock = t.clock.as_ref().expect("manual clock");
    let now = t.now_ms();
    let midnight = (now.div_euclid(DAY_MS) + 1) * DAY_MS;
    clock.advance_ms(midnight + hours * 3_600_000 - now);
    day_of(midnight)
}

fn day_of(ms: i64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp(ms / 1000).unwrap();
    kassa::workers::statements::format_day(at.date())
}

async fn paid(t: &TestApp, sku: &str) -> (String, String) {
    let (_, order_no, attempt_ref) = t.pending_order(&[(sku, 1)]).await;
    let (status, body) = t.complete(&attempt_ref, "succeeded", 1).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    t.settle().await;
    (order_no, attempt_ref)
}

/// Changes the sandbox's books behind kassa's back.
async fn sandbox_exec(t: &TestApp, sql_text: &str, values: Vec<sql::Arg>) {
    sql::query(sql_text).bind_all(values).execute(t.sandbox_records().read_pool()).await.expect("sandbox write");
}

async fn run(t: &TestApp, gateway: &str, day: &str) -> (StatusCode, Value) {
    t.admin_post(&format!("/api/v1/admin/statements/{gateway}/{day}/run"), json!({})).await
}

/// `(kind, subject, order_no, state)` of a day's findings.
pub(crate) fn findings(day: &Value) -> Vec<(String, String, String, String)> {
    let mut found: Vec<_> = day["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| (s(&f["kind"]), s(&f["subject"]), s(&f["order_no"]), s(&f["state"])))
        .collect();
    found.sort();
    found
}

on_both!(a_days_statement_is_matched_line_by_line_and_re_runs_are_idempotent, every_kind);
async fn every_kind(backend: Backend) {
    let t = TestApp::spawn_with(backend, Opts { manual_clock: true, ..Default::default() }).await;
    let day = to_next_day(&t, 2);
    t.create_sku("LAMP", "Lamp", 1000, 50).await;
    let (a, a_ref) = paid(&t, "LAMP").await;
    let (b, b_ref) = paid(&t, "LAMP").await;
    let (c, c_ref) = paid(&t, "LAMP").await;
    let (x, x_ref) = paid(&t, "LAMP").await;
    // Paid at the sandbox, never heard of by kassa.
    let (_, e, e_ref) = t.pending_order(&[("LAMP", 1)]).await;
    let now = t.now_ms();
    sandbox_exec(
        &t,
        "UPDATE sandbox_payments SET status = 'succeeded', txn_id = 'T-E', updated_at = $1 WHERE attempt_ref = $2",
        kassa::args![now, e_ref.as_str()],
    )
    .await;
    for (no, amount) in [("R1", 300), ("R2", 200)] {
        let (status, body) = t
            .admin_post(&format!("/api/v1/admin/orders/{a}/refunds"), json!({"refund_no": no, "amount_minor": amount}))
            .await;
        assert!(status.is_success(), "{body}");
    }
    t.app.refunder.step().await.unwrap();
    t.settle().await;
    let order = t.order(&a).await;
    assert!(order["refunds"].as_array().unwrap().iter().all(|r| r["status"] == "succeeded"), "{order}");
    // What the sandbox's books say differently.
    sandbox_exec(
        &t,
        "UPDATE sandbox_payments SET amount_minor = 1100 WHERE attempt_ref = $1",
        kassa::args![b_ref.as_str()],
    )
    .await;
    sandbox_exec(
        &t,
        "UPDATE sandbox_payments SET currency = 'USD' WHERE attempt_ref = $1",
        kassa::args![x_ref.as_str()],
    )
    .await;
    sandbox_exec(&t, "DELETE FROM sandbox_payments WHERE attempt_ref = $1", kassa::args![c_ref.as_str()]).await;
    sandbox_exec(&t, "DELETE FROM sandbox_refunds WHERE refund_no = 'R2'", vec![]).await;
    sandbox_exec(
        &t,
        "INSERT INTO sandbox_refunds (refund_no, attempt_ref, amount_minor, event_id, created_at) \
         VALUES ('RF-CONSOLE', $1, 100, 'evt-console', $2)",
        kassa::args![a_ref.as_str(), now],
    )
    .await;

    // A day to come has no statement yet.
    let tomorrow = day_of(t.now_ms() + DAY_MS);
    let (status, body) = run(&t, "sandbox", &tomorrow).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "day_not_over".into()), "{body}");
    t.clock.as_ref().unwrap().advance_ms(DAY_MS);
    let (status, body) = run(&t, "sandbox", &day).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"], "reconciled", "{body}");
    assert_eq!(body["changes"]["opened"], 6, "{body}");
    let view = &body["view"];
    let open = |kind: &str, subject: &str, order: &str| (kind.into(), subject.into(), order.into(), "open".into());
    assert_eq!(
        findings(view),
        vec![
            open("amount_differs", &b_ref, &b),
            open("currency_differs", &x_ref, &x),
            open("paid_at_gateway_only", &e_ref, &e),
            open("paid_in_kassa_only", &c_ref, &c),
            open("refund_at_gateway_only", "RF-CONSOLE", &a),
            open("refund_in_kassa_only", "R2", &a),
        ]
    );
    // Both sides' totals: the sandbox charges 0.6 % and returns it on refunds.
    let (g, k) = (&view["gateway_totals"], &view["kassa_totals"]);
    assert_eq!(
        (g["count"].as_i64(), g["gross_minor"].as_i64(), g["refunds_minor"].as_i64()),
        (Some(4), Some(4100), Some(400))
    );
    assert_eq!(g["fees_minor"], 6 + 7 + 6 + 6 - 2 - 1, "{view}");
    assert_eq!(g["net_minor"], 4100 - 400 - 22);
    assert_eq!(
        (k["count"].as_i64(), k["gross_minor"].as_i64(), k["refunds_minor"].as_i64()),
        (Some(4), Some(4000), Some(500))
    );
    assert_eq!(k["fees_minor"], 6 + 7 + 6 - 2, "kassa's fees are those of its own matched records: {view}");
    assert_eq!(view["currency"], "CNY");

    // Fees on the order and in the exports.
    let order = t.order(&a).await;
    assert_eq!(order["attempts"][0]["fee_minor"], 6, "{order}");
    let r1 = order["refunds"].as_array().unwrap().iter().find(|r| r["refund_no"] == "R1").unwrap().clone();
    assert_eq!(r1["fee_minor"], -2, "{order}");
    let buyer_view = t.return_status(&a_ref).await;
    assert!(!buyer_view.to_string().contains("fee_minor"), "the buyer never sees fees: {buyer_view}");
    let csv =
        t.http.get(t.url("/api/v1/admin/orders.csv")).bearer_auth(ADMIN).send().await.unwrap().text().await.unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",fee,contact_email,contact_phone,discount,promotion_code"), "{csv}");
    assert!(csv.lines().any(|l| l.starts_with(&a) && l.ends_with(",0.06,,,0.00,")), "{csv}");
    let csv =
        t.http.get(t.url("/api/v1/admin/refunds.csv")).bearer_auth(ADMIN).send().await.unwrap().text().await.unwrap();
    assert!(csv.lines().any(|l| l.starts_with("R1,") && l.ends_with(",-0.02")), "{csv}");

    // Alerts: one per finding, money ones critical.
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'statement_discrepancy'").await, 6);
    assert_eq!(
        t.count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'statement_discrepancy' AND severity = 'critical'"
        )
        .await,
        6
    );

    // Re-running changes nothing and duplicates nothing.
    let (_, body) = run(&t, "sandbox", &day).await;
    assert_eq!(body["changes"], json!({"opened": 0, "closed": 0}), "{body}");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM statement_findings").await, 6);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'statement_discrepancy'").await, 6);

    // An operator resolves one; a bad note or an unknown finding is refused.
    let id = view["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "paid_at_gateway_only").unwrap()["id"]
        .as_i64()
        .unwrap();
    let (status, body) =
        t.admin_post(&format!("/api/v1/admin/statement-findings/{id}/resolve"), json!({"note": "  "})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_note".into()));
    let (status, _) = t.admin_post("/api/v1/admin/statement-findings/999999/resolve", json!({"note": "x"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = t
        .admin_post(
            &format!("/api/v1/admin/statement-findings/{id}/resolve"),
            json!({"note": "refunded at the gateway"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((s(&body["state"]), s(&body["note"])), ("resolved".into(), "refunded at the gateway".into()));

    // The sandbox's amount is put right: that finding closes; the resolved one stays resolved.
    sandbox_exec(
        &t,
        "UPDATE sandbox_payments SET amount_minor = 1000 WHERE attempt_ref = $1",
        kassa::args![b_ref.as_str()],
    )
    .await;
    let (_, body) = run(&t, "sandbox", &day).await;
    assert_eq!(body["changes"], json!({"opened": 0, "closed": 1}), "{body}");
    let states: Vec<(String, String)> =
        findings(&body["view"]).into_iter().map(|(k, _, _, state)| (k, state)).collect();
    assert!(states.contains(&("amount_differs".into(), "closed".into())), "{states:?}");
    assert!(states.contains(&("paid_at_gateway_only".into(), "resolved".into())), "{states:?}");

    // The day through the API, as CSV, and in the list; refusals for what names no day.
    let stored = t.admin_get(&format!("/api/v1/admin/statements/sandbox/{day}")).await;
    assert_eq!(findings(&stored), findings(&body["view"]));
    let report = t
        .http
        .get(t.url(&format!("/api/v1/admin/statements/sandbox/{day}/report.csv")))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(report.starts_with("section,gateway,day,side_or_kind"), "{report}");
    assert_eq!(report.lines().filter(|l| l.starts_with("totals,")).count(), 2, "{report}");
    assert_eq!(report.lines().filter(|l| l.starts_with("finding,")).count(), 6, "{report}");
    assert!(report.contains("resolved,refunded at the gateway"), "{report}");
    let list = t.admin_get("/api/v1/admin/statements").await;
    assert_eq!(list["days"][0]["day"], day.as_str(), "{list}");
    assert_eq!(list["days"][0]["open_findings"], 4, "{list}");
    for path in ["/api/v1/admin/statements/sandbox/2026-02-30", "/api/v1/admin/statements/nowhere/2026-01-01"] {
        let r = t.http.get(t.url(path)).bearer_auth(ADMIN).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let (status, _) = run(&t, "nowhere", &day).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    t.assert_clean().await;
}

on_both!(a_payment_across_midnight_belongs_to_the_gateways_day, midnight);
async fn midnight(backend: Backend) {
    let t = TestApp::spawn_with(backend, Opts { manual_clock: true, ..Default::default() }).await;
    let first = to_next_day(&t, 20);
    t.create_sku("LAMP", "Lamp", 1000, 50).await;
    // kassa hears of the payment a second after midnight; the sandbox took it a second before.
    let second = to_next_day(&t, 0);
    t.clock.as_ref().unwrap().advance_ms(1000);
    let (_, m_ref) = paid(&t, "LAMP").await;
    let before_midnight = t.now_ms() - 2000;
    sandbox_exec(
        &t,
        "UPDATE sandbox_payments SET updated_at = $1 WHERE attempt_ref = $2",
        kassa::args![before_midnight, m_ref.as_str()],
    )
    .await;
    // The sandbox's day so far can be reconciled before it is over (the demo's); the daily job
    // runs it again once it is.
    let (status, body) = run(&t, "sandbox", &second).await;
    assert_eq!((status, s(&body["result"])), (StatusCode::OK, "reconciled".into()), "{body}");
    // The daily job: nothing before 10:00 Beijing time (02:00 UTC), then the sandbox's previous day.
    to_next_day(&t, 1);
    assert!(t.app.statements.step().await.unwrap().is_empty());
    t.clock.as_ref().unwrap().advance_ms(2 * 3_600_000);
    let runs = t.app.statements.step().await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!((runs[0].gateway.as_str(), runs[0].day.as_str()), ("sandbox", second.as_str()));
    let day = runs[0].view.clone().unwrap();
    assert_eq!(day.findings.len(), 1, "{day:?}");
    assert_eq!((day.findings[0].kind.as_str(), day.findings[0].state.as_str()), ("paid_in_kassa_only", "open"));
    assert!(t.app.statements.step().await.unwrap().is_empty(), "a reconciled day is not run again");

    // The gateway's day shows it: the other day's finding closes.
    let (status, body) = run(&t, "sandbox", &first).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["view"]["findings"], json!([]), "{body}");
    assert_eq!(body["changes"]["closed"], 1, "{body}");
    assert_eq!(body["view"]["kassa_totals"]["count"], 1, "{body}");
    // Re-running the later day no longer counts it there.
    let (_, body) = run(&t, "sandbox", &second).await;
    assert_eq!(
        findings(&body["view"]),
        vec![(
            "paid_in_kassa_only".into(),
            m_ref.clone(),
            s(&body["view"]["findings"][0]["order_no"]),
            "closed".into()
        )]
    );
    assert_eq!(body["view"]["kassa_totals"]["count"], 0, "{body}");
    assert_eq!(body["changes"], json!({"opened": 0, "closed": 0}), "{body}");
    assert_eq!(body["view"]["currency"], "CNY", "an empty statement's day is in kassa's payments' currency: {body}");
}

/// `kassa` run as a command against the test's database, the sandbox mounted.
fn kassa_cli(t: &TestApp, args: &[&str]) -> (i32, String, String) {
    let out = crate::common::kassa_command()
        .args(args)
        .args(["--database-url", &t.database_url, "--data-dir", &t.data_dir(), "--sandbox"])
        .env("CI", "")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

on_both!(a_day_is_reconciled_from_the_command_line_and_the_console, cli_and_console);
async fn cli_and_console(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("LAMP", "Lamp", 1000, 50).await;
    let (a, _) = paid(&t, "LAMP").await;
    let (_, b_ref) = paid(&t, "LAMP").await;
    let today = day_of(t.now_ms());
    let args = ["reconcile", "--statement", "--gateway", "sandbox", "--date", today.as_str()];
    let (code, stdout, stderr) = kassa_cli(&t, &args);
    assert_eq!(code, 0, "a day that agrees: {stdout}{stderr}");
    assert!(stdout.contains("sandbox statement of") && stdout.contains("0 open"), "{stdout}");
    assert!(stdout.contains("20.00 CNY") && stdout.contains("0.12 CNY"), "totals as money: {stdout}");
    // The sandbox loses a payment: exit 1, the finding named, as text and as JSON.
    sandbox_exec(&t, "DELETE FROM sandbox_payments WHERE attempt_ref = $1", kassa::args![b_ref.as_str()]).await;
    let (code, stdout, _) = kassa_cli(&t, &args);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains(&format!("paid_in_kassa_only {b_ref}")), "{stdout}");
    let json_args = [&args[..], &["--json"]].concat();
    let (code, stdout, _) = kassa_cli(&t, &json_args);
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["result"], "reconciled");
    assert_eq!(report["view"]["findings"][0]["kind"], "paid_in_kassa_only", "{report}");
    assert_eq!(report["changes"], json!({"opened": 0, "closed": 0}), "the second run of the day: {report}");
    // Refusals: an unknown gateway, a date that is not one.
    let (code, _, stderr) = kassa_cli(&t, &["reconcile", "--statement", "--gateway", "nowhere", "--date", &today]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not configured here"), "{stderr}");
    let (code, _, stderr) = kassa_cli(&t, &["reconcile", "--statement", "--gateway", "sandbox", "--date", "3/12/2026"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("YYYY-MM-DD"), "{stderr}");

    // The console: the list, the day with both sides and its findings linked to their orders,
    // resolving one with a note, running the day again, and refusals shown on the page.
    let (browser, cookie, csrf) = crate::pages::console(&t).await;
    let get = |path: String| {
        let (browser, cookie, url) = (browser.clone(), cookie.clone(), t.url(&path));
        async move { browser.get(url).header("cookie", cookie).send().await.unwrap().text().await.unwrap() }
    };
    let post = |path: String, form: Vec<(&'static str, String)>| {
        let (browser, cookie, url) = (browser.clone(), cookie.clone(), t.url(&path));
        async move {
            let r = browser.post(url).header("cookie", cookie).form(&form).send().await.unwrap();
            let location = r.headers().get("location").map(|l| l.to_str().unwrap().to_string()).unwrap_or_default();
            (r.status(), location)
        }
    };
    let page = get("/admin/statements".into()).await;
    assert!(page.contains(&format!("/admin/statements/sandbox/{today}")), "{page}");
    let html = get(format!("/admin/statements/sandbox/{today}")).await;
    assert!(html.contains("id=\"totals\"") && html.contains("Gateway") && html.contains("Report (CSV)"), "{html}");
    assert!(html.contains("data-kind=\"paid_in_kassa_only\""), "{html}");
    let b = b_ref.trim_end_matches("_1");
    assert!(html.contains(&format!("href=\"/admin/orders/{b}\"")), "findings link to their orders: {html}");
    // The report link works with the console's sign-in (its cookie never reaches /api/), plain
    // and for Excel (a UTF-8 byte-order mark first).
    let href =
        |id: &str| html.split(&format!("id=\"{id}\" href=\"")).nth(1).unwrap().split('"').next().unwrap().to_string();
    for (id, bom) in [("report", false), ("report-excel", true)] {
        let link = href(id);
        assert!(link.starts_with("/admin/"), "{link}");
        let r = browser.get(t.url(&link.replace("&amp;", "&"))).header("cookie", &cookie).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{link}");
        assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
        let body = r.bytes().await.unwrap();
        assert_eq!(body.starts_with("\u{feff}".as_bytes()), bom, "{link}");
        assert!(String::from_utf8_lossy(&body).contains("paid_in_kassa_only"), "{link}");
    }
    let r = browser.get(t.url(&href("report"))).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "signed out: to the sign-in page");
    let id = html.split("/admin/statement-findings/").nth(1).unwrap().split('/').next().unwrap().to_string();
    let (status, location) = post(
        format!("/admin/statement-findings/{id}/resolve"),
        vec![("csrf", csrf.clone()), ("gateway", "sandbox".into()), ("day", today.clone()), ("note", " ".into())],
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        location.starts_with(&format!("/admin/statements/sandbox/{today}?error=")),
        "a note is required: {location}"
    );
    assert!(get(location).await.contains("a note is 1-500 printable characters"));
    let note = "the buyer paid again; refunded by hand";
    let (status, location) = post(
        format!("/admin/statement-findings/{id}/resolve"),
        vec![("csrf", csrf.clone()), ("note", note.to_string())],
    )
    .await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/admin/statements/sandbox/{today}?done=resolved")));
    let html = get(format!("/admin/statements/sandbox/{today}?done=resolved")).await;
    assert!(html.contains(note) && html.contains("pill resolved") && html.contains("Finding resolved."), "{html}");
    let (status, location) = post(format!("/admin/statements/sandbox/{today}/run"), vec![("csrf", csrf.clone())]).await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/admin/statements/sandbox/{today}?done=run")));
    let tomorrow = day_of(t.now_ms() + DAY_MS);
    let (status, location) = post(
        "/admin/statements/run".into(),
        vec![("csrf", csrf.clone()), ("gateway", "sandbox".into()), ("day", tomorrow.clone())],
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.starts_with("/admin/statements?error="), "{location}");
    let html = get(location).await;
    assert!(html.contains("is not over yet"), "{html}");
    // Without the form's token nothing is done.
    let (status, _) = post(format!("/admin/statements/sandbox/{today}/run"), vec![("csrf", "forged".into())]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The order's fee shows on its page.
    let html = get(format!("/admin/orders/{a}")).await;
    assert!(html.contains("0.06 CNY"), "{html}");
}

on_both!(a_days_totals_show_the_promotion_discounts_behind_kassas_payments, discounts);

async fn discounts(backend: Backend) {
    let t = TestApp::spawn_with(backend, Opts { manual_clock: true, ..Default::default() }).await;
    let day = to_next_day(&t, 2);
    t.create_sku("LAMP", "Lamp", 1000, 50).await;
    let (status, _) = t
        .admin_post("/api/v1/admin/promotions", json!({"name": "Quarter", "code": "QUARTER", "percent_off": 25}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("LAMP", 2)]).await;
    let (status, placed) =
        t.checkout_with(&buyer, &basket, &json!({"gateway": "sandbox", "promotion_code": "QUARTER"})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let (status, body) = t.complete(&s(&placed["attempt_ref"]), "succeeded", 1).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    t.settle().await;
    paid(&t, "LAMP").await;
    t.clock.as_ref().unwrap().advance_ms(DAY_MS);
    let (status, body) = run(&t, "sandbox", &day).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view = &body["view"];
    assert_eq!(findings(view), vec![], "the gateway charged what kassa asked for: {view}");
    // 2,000 less 500 off, and 1,000: the gateway saw 2,500; kassa knows 500 was given off.
    let (g, k) = (&view["gateway_totals"], &view["kassa_totals"]);
    assert_eq!((g["gross_minor"].as_i64(), g["discounts_minor"].as_i64()), (Some(2_500), Some(0)), "{view}");
    assert_eq!((k["gross_minor"].as_i64(), k["discounts_minor"].as_i64()), (Some(2_500), Some(500)), "{view}");
    assert_eq!(k["net_minor"], g["net_minor"], "a discount is not money moved: {view}");
    let report = t
        .http
        .get(t.url(&format!("/api/v1/admin/statements/sandbox/{day}/report.csv")))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(report.lines().next().unwrap().ends_with(",note,discounts,disputes,reinstated,dispute_fees"), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("totals,sandbox,") && l.contains(",kassa,") && l.ends_with(",5.00,0.00,0.00,0.00")),
        "{report}"
    );
    assert!(
        report.lines().any(|l| l.starts_with("totals,sandbox,")
            && l.contains(",gateway,")
            && l.ends_with(",0.00,0.00,0.00,0.00")),
        "{report}"
    );
    let args = ["reconcile", "--statement", "--gateway", "sandbox", "--date", day.as_str()];
    let (code, stdout, stderr) = kassa_cli(&t, &args);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("discounts  5.00 CNY given off"), "{stdout}");
    let (browser, cookie, _) = crate::pages::console(&t).await;
    let url = t.url(&format!("/admin/statements/sandbox/{day}"));
    let html = browser.get(url).header("cookie", cookie).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("<th>Discounts</th>") && html.contains("<td>5.00 CNY</td></tr>"), "{html}");
    t.assert_clean().await;
}
