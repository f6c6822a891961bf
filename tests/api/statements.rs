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
fn findings(day: &Value) -> Vec<(String, String, String, String)> {
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
    assert!(csv.lines().next().unwrap().ends_with(",fee"), "{csv}");
    assert!(csv.lines().any(|l| l.starts_with(&a) && l.ends_with(",0.06")), "{csv}");
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

// ------------------------------------------------------------------------------------------------
// The real gateways' statements, from local fakes serving files in the gateways' own formats.

use crate::fakes::{FakeAlipay, FakeStripe, FakeWechat};
use kassa::gateway::config::GatewaysFile;

pub(crate) struct World {
    pub(crate) t: TestApp,
    pub(crate) alipay: FakeAlipay,
    pub(crate) wechat: FakeWechat,
    pub(crate) stripe: FakeStripe,
}

/// kassa with the three real gateways pointed at their fakes, its clock held still (every record
/// of the test falls on one day, whenever it runs).
pub(crate) async fn world(backend: Backend) -> World {
    let (alipay, wechat, stripe) = (FakeAlipay::start().await, FakeWechat::start().await, FakeStripe::start().await);
    let gateways =
        GatewaysFile { alipay: Some(alipay.config()), wechatpay: Some(wechat.config()), stripe: Some(stripe.config()) };
    let t = TestApp::spawn_with(backend, Opts { gateways, manual_clock: true, ..Default::default() }).await;
    *stripe.webhook_url.lock().unwrap() = t.url("/notify/stripe");
    t.create_sku("TEA", "Longjing tea", 8_888, 50).await;
    World { t, alipay, wechat, stripe }
}

impl World {
    /// A paid order at `gateway`: (order_no, attempt_ref).
    pub(crate) async fn paid(&self, gateway: &str) -> (String, String) {
        let buyer = self.t.buyer().await;
        let basket = self.t.basket(&buyer, &[("TEA", 1)]).await;
        let body = match gateway {
            "wechatpay" => json!({"gateway": "wechatpay", "channel": "native"}),
            "alipay" => json!({"gateway": "alipay", "channel": "qr"}),
            other => json!({"gateway": other}),
        };
        let r = self
            .t
            .http
            .post(self.t.url(&format!("/api/v1/baskets/{basket}/checkout")))
            .bearer_auth(&buyer)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        let placed: Value = r.json().await.unwrap();
        let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
        let reply = match gateway {
            "wechatpay" => self.wechat.pay(&attempt_ref, true).await,
            "alipay" => self.alipay.pay(&attempt_ref, true).await.1,
            _ => self.stripe.pay(&attempt_ref, true).await,
        };
        assert!(reply.is_some_and(|(status, _)| status < 300), "notified");
        assert_eq!(self.t.status(&order_no).await, "paid");
        (order_no, attempt_ref)
    }

    async fn refund(&self, order_no: &str, refund_no: &str, amount: i64) {
        let (status, body) = self
            .t
            .admin_post(
                &format!("/api/v1/admin/orders/{order_no}/refunds"),
                json!({"refund_no": refund_no, "amount_minor": amount}),
            )
            .await;
        assert!(status.is_success(), "{body}");
        self.t.app.refunder.step().await.unwrap();
        let order = self.t.order(order_no).await;
        let refund = order["refunds"].as_array().unwrap().iter().find(|r| r["refund_no"] == refund_no).unwrap().clone();
        assert_eq!(refund["status"], "succeeded", "{order}");
    }

    /// The day kassa's clock is in at `offset` (the gateway's).
    pub(crate) fn today(&self, offset: time::UtcOffset) -> time::Date {
        time::OffsetDateTime::from_unix_timestamp(self.t.now_ms() / 1000).unwrap().to_offset(offset).date()
    }

    pub(crate) async fn run(&self, gateway: &str, day: time::Date) -> kassa::workers::statements::DayRun {
        let g = self.t.app.state.gateways.get(gateway).expect("gateway").clone();
        kassa::workers::statements::run_day(&self.t.app.state.db, g.as_ref(), day, 1, &self.t.app.state.clock)
            .await
            .expect("run")
    }
}

/// `(kind, subject, order_no, state)` of a run's findings.
pub(crate) fn run_findings(run: &kassa::workers::statements::DayRun) -> Vec<(String, String, String, String)> {
    let view = serde_json::to_value(run.view.as_ref().expect("stored")).unwrap();
    findings(&view)
}

pub(crate) fn beijing() -> time::UtcOffset {
    time::UtcOffset::from_hms(8, 0, 0).unwrap()
}

const WECHAT_HEADER: &str = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注";
const WECHAT_SUMMARY: &str =
    "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额";

fn yuan(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", minor.abs() / 100, minor.abs() % 100)
}

/// A WeChat trade-bill payment row (every value behind a backtick, the fee with five decimals).
pub(crate) fn wechat_payment(
    day: &str,
    out_trade_no: &str,
    txn: &str,
    amount: i64,
    currency: &str,
    fee: i64,
) -> String {
    let y = yuan(amount);
    format!(
        "`{day} 10:00:00,`wxd930ea5d5a258f4f,`1900000001,`0,`,`{txn},`{out_trade_no},`oUpF8uMuAJO_M2pxb1Q9zNjWeS6o,`NATIVE,`SUCCESS,`OTHERS,`{currency},`{y},`0.00,`0,`0,`0.00,`0.00,`,`,`Longjing tea,`,`{}000,`0.60%,`{y},`0.00,`",
        yuan(fee)
    )
}

pub(crate) fn wechat_refund_row(day: &str, out_trade_no: &str, refund_no: &str, amount: i64, fee: i64) -> String {
    let y = yuan(amount);
    format!(
        "`{day} 12:00:00,`wxd930ea5d5a258f4f,`1900000001,`0,`,`4200000000000000000000000000,`{out_trade_no},`oUpF8uMuAJO_M2pxb1Q9zNjWeS6o,`NATIVE,`REFUND,`OTHERS,`CNY,`0.00,`0.00,`503{:026},`{refund_no},`{y},`0.00,`ORIGINAL,`SUCCESS,`Longjing tea,`,`{}000,`0.60%,`0.00,`{y},`",
        amount,
        yuan(fee)
    )
}

/// A whole bill: header, rows, and the summary (its count as given), CRLF after every line.
pub(crate) fn wechat_bill(rows: &[String], count: usize) -> String {
    let mut gross = 0;
    let mut refunds = 0;
    let mut fees = 0;
    for r in rows {
        let v: Vec<&str> = r.split(',').map(|x| x.trim_start_matches('`')).collect();
        let minor = |x: &str| -> i64 {
            let negative = x.starts_with('-');
            let (w, f) = x.trim_start_matches('-').split_once('.').unwrap();
            let m = w.parse::<i64>().unwrap() * 100 + f[..2].parse::<i64>().unwrap();
            if negative { -m } else { m }
        };
        gross += minor(v[24]);
        refunds += minor(v[25]);
        fees += minor(v[22]);
    }
    let mut text = format!("{WECHAT_HEADER}\r\n");
    for r in rows {
        text.push_str(r);
        text.push_str("\r\n");
    }
    text.push_str(&format!(
        "{WECHAT_SUMMARY}\r\n`{count},`{},`{},`0.00,`{}000,`{},`{}\r\n",
        yuan(gross),
        yuan(refunds),
        yuan(fees),
        yuan(gross),
        yuan(refunds)
    ));
    text
}

on_both!(wechat_pays_trade_bill_is_downloaded_checked_and_reconciled, wechat_bill_day);
async fn wechat_bill_day(backend: Backend) {
    let w = world(backend).await;
    let day = w.today(beijing());
    let d = kassa::workers::statements::format_day(day);
    let (a, a_ref) = w.paid("wechatpay").await;
    let (b, b_ref) = w.paid("wechatpay").await;
    let (c, c_ref) = w.paid("wechatpay").await;
    let (dd, d_ref) = w.paid("wechatpay").await;
    let (e, e_ref) = w.paid("wechatpay").await;
    w.refund(&a, "R1", 1_000).await;
    w.refund(&dd, "R2", 100).await;
    let rows = vec![
        wechat_payment(&d, &a_ref, "4200000001", 8_888, "CNY", 53),
        wechat_payment(&d, &b_ref, "4200000002", 8_000, "CNY", 48),
        wechat_payment(&d, &d_ref, "4200000004", 8_888, "CNY", 53),
        wechat_payment(&d, &d_ref, "4200000004", 8_888, "CNY", 53),
        wechat_payment(&d, &e_ref, "4200000005", 8_888, "USD", 53),
        wechat_payment(&d, "KSUNKNOWN0000000000000000_1", "4200000009", 500, "CNY", 3),
        wechat_refund_row(&d, &a_ref, "R1", 1_000, -6),
        wechat_refund_row(&d, &b_ref, "RF-CONSOLE", 500, -3),
    ];
    // A file that fails its hash is a finding, never read.
    w.wechat.publish_bill(&d, &wechat_bill(&rows, rows.len() + 1), Some("0000000000000000000000000000000000000000"));
    let run = w.run("wechatpay", day).await;
    assert_eq!(run.result, "unreadable", "{run:?}");
    assert!(run.detail.as_deref().unwrap_or_default().contains("SHA-1"), "{run:?}");
    assert_eq!(run_findings(&run), vec![("statement_unreadable".into(), "file".into(), String::new(), "open".into())]);
    assert_eq!(
        w.t.count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'statement_discrepancy' AND severity = 'critical'"
        )
        .await,
        1
    );
    // Not generated yet: waiting, tried again later.
    w.wechat.ledger.lock().unwrap().wechat_bill_errors.insert(d.clone(), "STATEMENT_CREATING");
    let run = w.run("wechatpay", day).await;
    assert_eq!(run.result, "waiting", "{run:?}");
    // The real file, with every kind of disagreement planted (its summary miscounts by one), and
    // the fund-flow bill, whose summary misstates its expense.
    w.wechat.publish_bill(&d, &wechat_bill(&rows, rows.len() + 1), None);
    w.wechat.publish_fundflow(
        &d,
        "记账时间,微信支付业务单号,资金流水单号,业务名称,业务类型,收支类型,收支金额(元),账户结余(元),资金变更提交申请人,备注,业务凭证号\r\n\
         `2026-12-01 10:00:00,`4200000001,`1000000001,`交易,`交易,`收入,`88.88,`88.88,`system,`,`\r\n\
         `2026-12-01 12:00:00,`503000000001,`1000000002,`退款,`退款,`支出,`10.00,`78.88,`1900000001API,`,`\r\n\
         资金流水总笔数,收入笔数,收入金额,支出笔数,支出金额\r\n`2,`1,`88.88,`1,`10.01\r\n",
    );
    let run = w.run("wechatpay", day).await;
    assert_eq!(run.result, "reconciled", "{run:?}");
    let open = |kind: &str, subject: &str, order: &str| (kind.into(), subject.into(), order.into(), "open".into());
    assert_eq!(
        run_findings(&run),
        vec![
            open("amount_differs", &b_ref, &b),
            open("currency_differs", &e_ref, &e),
            open("duplicate", &d_ref, &dd),
            open("paid_at_gateway_only", "KSUNKNOWN0000000000000000_1", ""),
            open("paid_in_kassa_only", &c_ref, &c),
            open("refund_at_gateway_only", "RF-CONSOLE", &b),
            open("refund_in_kassa_only", "R2", &dd),
            ("statement_unreadable".into(), "file".into(), String::new(), "closed".into()),
            open("summary_differs", "count", ""),
            open("summary_differs", "fundflow.expense", ""),
        ]
    );
    let view = run.view.as_ref().unwrap();
    assert_eq!(view.gateway_totals.count, 6);
    assert_eq!(view.gateway_totals.fees_minor, 53 + 48 + 53 + 53 + 53 + 3 - 6 - 3);
    assert_eq!((view.kassa_totals.count, view.kassa_totals.gross_minor), (5, 5 * 8_888));
    assert_eq!(view.kassa_totals.refunds_minor, 1_100);
    assert_eq!(w.t.order(&a).await["attempts"][0]["fee_minor"], 53);
    assert!(w.wechat.ledger.lock().unwrap().bad_signatures == 0);
    // Again: the same findings, none new.
    let again = w.run("wechatpay", day).await;
    assert_eq!((again.changes.opened, again.changes.closed), (0, 0), "{again:?}");
    assert_eq!(run_findings(&again), run_findings(&run));
    // A day WeChat has no bill for (nothing traded) is an empty day.
    let empty = w.run("wechatpay", day.previous_day().unwrap()).await;
    assert_eq!((empty.result.as_str(), empty.view.unwrap().findings.len()), ("reconciled", 0));
    let _ = (&w.alipay, &w.stripe);
}

/// An Alipay detail row: TABs after the values Alipay puts them after, a refund's amounts negative.
fn alipay_row(trade_no: &str, out_trade_no: &str, refund_no: Option<&str>, amount: i64, fee: i64) -> String {
    let (kind, amount, fee, batch) = match refund_no {
        None => ("交易", yuan(amount), yuan(-fee), String::new()),
        Some(no) => ("退款", yuan(-amount), yuan(fee), no.to_string()),
    };
    format!(
        "{trade_no}\t,{out_trade_no}\t,{kind}\t,龙井茶,2026-12-01 10:06:24,2026-12-01 10:06:33,\t,\t,\t,\t,*王(138****1234)\t,{amount},{amount},0.00,0.00,0.00,0.00,0.00,,0.00\t,0.00,{batch}\t,{fee},0.00,"
    )
}

/// Alipay's ZIP for `day`: the detail file with its footer totals, the summary with its `合计`,
/// both GBK, the members named in GBK without the UTF-8 flag.
fn alipay_zip(day: &str, rows: &[(String, bool, i64, i64)]) -> Vec<u8> {
    use std::io::Write as _;
    let compact = day.replace('-', "");
    let (mut trades, mut trade_sum, mut refunds, mut refund_sum, mut fees) = (0, 0, 0, 0, 0);
    for (_, refund, amount, fee) in rows {
        if *refund {
            refunds += 1;
            refund_sum += amount;
            fees -= fee;
        } else {
            trades += 1;
            trade_sum += amount;
            fees += fee;
        }
    }
    let mut detail = format!(
        "#支付宝业务明细查询\r\n#账号：[20881021462251350156]\r\n#起始日期：[{day} 00:00:00]   终止日期：[{day} 23:59:59]\r\n#-----------------------------------------业务明细列表----------------------------------------\r\n支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,门店编号,门店名称,操作员,终端号,对方账户,订单金额（元）,商家实收（元）,支付宝红包（元）,集分宝（元）,支付宝优惠（元）,商家优惠（元）,券核销金额（元）,券名称,商家红包消费金额（元）,卡消费金额（元）,退款批次号/请求号,服务费（元）,分润（元）,备注\r\n"
    );
    for (row, ..) in rows {
        detail.push_str(row);
        detail.push_str("\r\n");
    }
    detail.push_str(&format!(
        "#-----------------------------------------业务明细列表结束------------------------------------\r\n#交易合计：{trades}笔，商家实收共{}元，商家优惠共0.00元\r\n#退款合计：{refunds}笔，商家实收退款共{}元，商家优惠退款共0.00元\r\n#导出时间：[{day} 05:46:49]\r\n",
        yuan(trade_sum),
        yuan(-refund_sum)
    ));
    let summary = format!(
        "#支付宝业务汇总查询\r\n#账号：[20881021462251350156]\r\n#起始日期：[{day} 00:00:00]   终止日期：[{day} 23:59:59]\r\n#-----------------------------------------业务汇总列表----------------------------------------\r\n门店编号,门店名称,交易订单总笔数,退款订单总笔数,订单金额（元）,商家实收（元）,支付宝优惠（元）,商家优惠（元）,卡消费金额（元）,服务费（元）,分润（元）,实收净额（元）\r\n合计,,{trades},{refunds},{0},{0},0.00,0.00,0.00,{1},0.00,{0}\r\n#----------------------------------------业务汇总列表结束-------------------------------------\r\n",
        yuan(trade_sum - refund_sum),
        yuan(-fees)
    );
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, text) in [
        (format!("20881021462251350156_{compact}_业务明细.csv"), detail),
        (format!("20881021462251350156_{compact}_业务明细(汇总).csv"), summary),
    ] {
        let (name, _, _) = encoding_rs::GBK.encode(&name);
        w.start_file_with_options(options.name(&name)).unwrap();
        w.write_all(&encoding_rs::GBK.encode(&text).0).unwrap();
    }
    w.finish().unwrap().into_inner()
}

on_both!(alipays_gbk_zip_bill_is_downloaded_and_reconciled, alipay_bill_day);
async fn alipay_bill_day(backend: Backend) {
    let w = world(backend).await;
    let day = w.today(beijing());
    let d = kassa::workers::statements::format_day(day);
    let (a, a_ref) = w.paid("alipay").await;
    let (b, b_ref) = w.paid("alipay").await;
    let (c, c_ref) = w.paid("alipay").await;
    w.refund(&a, "R1", 1_000).await;
    let rows = vec![
        (alipay_row("2026120122001400000000000001", &a_ref, None, 8_888, 53), false, 8_888, 53),
        (alipay_row("2026120122001400000000000002", &b_ref, None, 8_000, 48), false, 8_000, 48),
        (alipay_row("2026120122001400000000000009", "KSNOTOURS_1", None, 100, 1), false, 100, 1),
        (alipay_row("2026120122001400000000000001", &a_ref, Some("R1"), 1_000, 6), true, 1_000, 6),
    ];
    let zip = alipay_zip(&d, &rows);
    // A ZIP cut short is a finding; a link that expired is fetched again later.
    w.alipay.ledger.lock().unwrap().alipay_bills.insert(d.clone(), zip[..zip.len() / 2].to_vec());
    let run = w.run("alipay", day).await;
    assert_eq!(run.result, "unreadable", "{run:?}");
    w.alipay.ledger.lock().unwrap().alipay_bills.insert(d.clone(), zip);
    w.alipay.ledger.lock().unwrap().alipay_links_expired = true;
    let run = w.run("alipay", day).await;
    assert_eq!(run.result, "waiting", "{run:?}");
    assert!(run.detail.as_deref().unwrap_or_default().contains("expired"), "{run:?}");
    w.alipay.ledger.lock().unwrap().alipay_links_expired = false;
    let run = w.run("alipay", day).await;
    assert_eq!(run.result, "reconciled", "{run:?}");
    let open = |kind: &str, subject: &str, order: &str| (kind.into(), subject.into(), order.into(), "open".into());
    assert_eq!(
        run_findings(&run),
        vec![
            open("amount_differs", &b_ref, &b),
            open("paid_at_gateway_only", "KSNOTOURS_1", ""),
            open("paid_in_kassa_only", &c_ref, &c),
            ("statement_unreadable".into(), "file".into(), String::new(), "closed".into()),
        ]
    );
    let view = run.view.as_ref().unwrap();
    assert_eq!((view.gateway_totals.count, view.gateway_totals.gross_minor), (3, 8_888 + 8_000 + 100));
    assert_eq!((view.gateway_totals.refunds_minor, view.gateway_totals.fees_minor), (1_000, 53 + 48 + 1 - 6));
    assert_eq!(w.t.order(&a).await["refunds"][0]["fee_minor"], -6);
    // A day Alipay has no bill for is an empty day.
    let empty = w.run("alipay", day.previous_day().unwrap()).await;
    assert_eq!((empty.result.as_str(), empty.view.unwrap().findings.len()), ("reconciled", 0));
}

on_both!(stripes_balance_transactions_are_read_page_by_page_and_reconciled, stripe_day);
async fn stripe_day(backend: Backend) {
    let w = world(backend).await;
    let day = w.today(time::UtcOffset::UTC);
    let (a, _) = w.paid("stripe").await;
    let (b, b_ref) = w.paid("stripe").await;
    let (c, c_ref) = w.paid("stripe").await;
    w.refund(&a, "R1", 1_000).await;
    {
        let mut l = w.stripe.ledger.lock().unwrap();
        let intent_of =
            |l: &crate::fakes::Ledger, r: &str| l.trades.values().find(|t| t.out_trade_no == r).unwrap().txn_id.clone();
        let (b_pi, c_pi) = (intent_of(&l, &b_ref), intent_of(&l, &c_ref));
        // The charge of B captured less; C's never reached the balance; a charge kassa never made;
        // a payout, which is not a trade.
        for bt in l.stripe_balance.iter_mut() {
            if bt["source"]["payment_intent"] == b_pi.as_str() && bt["type"] == "charge" {
                bt["source"]["amount"] = json!(8_000);
            }
        }
        l.stripe_balance.retain(|bt| !(bt["type"] == "charge" && bt["source"]["payment_intent"] == c_pi.as_str()));
        let foreign = json!({"id": "ch_foreign", "object": "charge", "amount": 100, "currency": "cny",
                             "payment_intent": "pi_foreign", "metadata": {}});
        l.stripe_balance.push(crate::fakes::balance_transaction("charge", 100, 33, foreign));
        l.stripe_balance.push(crate::fakes::balance_transaction(
            "payout",
            -5_000,
            0,
            json!({"id": "po_1", "object": "payout"}),
        ));
        l.stripe_page_max = Some(2);
    }
    let run = w.run("stripe", day).await;
    assert_eq!(run.result, "reconciled", "{run:?}");
    assert!(w.stripe.ledger.lock().unwrap().stripe_pages >= 3, "read page by page");
    let open = |kind: &str, subject: &str, order: &str| (kind.into(), subject.into(), order.into(), "open".into());
    assert_eq!(
        run_findings(&run),
        vec![
            open("amount_differs", &b_ref, &b),
            open("paid_at_gateway_only", "pi_foreign", ""),
            open("paid_in_kassa_only", &c_ref, &c),
        ]
    );
    let view = run.view.as_ref().unwrap();
    let fee = |amount: i64| amount * 29 / 1000 + 30;
    assert_eq!((view.gateway_totals.count, view.gateway_totals.refunds_minor), (3, 1_000));
    assert_eq!(view.gateway_totals.fees_minor, fee(8_888) * 2 + 33);
    assert_eq!(view.kassa_totals.fees_minor, fee(8_888) * 2, "{view:?}");
    assert_eq!(w.t.order(&a).await["attempts"][0]["fee_minor"], fee(8_888));
    assert_eq!(w.t.order(&a).await["refunds"][0]["fee_minor"], 0);
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
