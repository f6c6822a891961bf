//! Statement reconciliation against the real gateways' statements, from local fakes serving files in
//! the gateways' own formats: WeChat Pay's trade bill, Alipay's GBK zip and Stripe's balance
//! transactions page by page, each downloaded, checked and matched to kassa's records.

use serde_json::json;

use crate::common::{Backend, Opts, Shop};
use crate::on_both;
use crate::statements::findings;

/// kassa with the three real gateways pointed at their fakes, its clock held still (every record
/// of the test falls on one day, whenever it runs).
pub(crate) async fn world(backend: Backend) -> Shop {
    Shop::start(backend, Opts { manual_clock: true, ..Default::default() }, 50).await
}

impl Shop {
    /// The day kassa's clock is in at `offset` (the gateway's).
    pub(crate) fn today(&self, offset: time::UtcOffset) -> time::Date {
        time::OffsetDateTime::from_unix_timestamp(self.t.now_ms() / 1000).unwrap().to_offset(offset).date()
    }

    /// Reconciles `gateway`'s statement of `day` (the daily job's run of one day).
    pub(crate) async fn run_day(&self, gateway: &str, day: time::Date) -> kassa::workers::statements::DayRun {
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
    assert_eq!(w.refund(&a, "R1", 1_000).await["status"], "succeeded");
    assert_eq!(w.refund(&dd, "R2", 100).await["status"], "succeeded");
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
    let run = w.run_day("wechatpay", day).await;
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
    let run = w.run_day("wechatpay", day).await;
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
    let run = w.run_day("wechatpay", day).await;
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
    let again = w.run_day("wechatpay", day).await;
    assert_eq!((again.changes.opened, again.changes.closed), (0, 0), "{again:?}");
    assert_eq!(run_findings(&again), run_findings(&run));
    // A day WeChat has no bill for (nothing traded) is an empty day.
    let empty = w.run_day("wechatpay", day.previous_day().unwrap()).await;
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
    assert_eq!(w.refund(&a, "R1", 1_000).await["status"], "succeeded");
    let rows = vec![
        (alipay_row("2026120122001400000000000001", &a_ref, None, 8_888, 53), false, 8_888, 53),
        (alipay_row("2026120122001400000000000002", &b_ref, None, 8_000, 48), false, 8_000, 48),
        (alipay_row("2026120122001400000000000009", "KSNOTOURS_1", None, 100, 1), false, 100, 1),
        (alipay_row("2026120122001400000000000001", &a_ref, Some("R1"), 1_000, 6), true, 1_000, 6),
    ];
    let zip = alipay_zip(&d, &rows);
    // A ZIP cut short is a finding; a link that expired is fetched again later.
    w.alipay.ledger.lock().unwrap().alipay_bills.insert(d.clone(), zip[..zip.len() / 2].to_vec());
    let run = w.run_day("alipay", day).await;
    assert_eq!(run.result, "unreadable", "{run:?}");
    w.alipay.ledger.lock().unwrap().alipay_bills.insert(d.clone(), zip);
    w.alipay.ledger.lock().unwrap().alipay_links_expired = true;
    let run = w.run_day("alipay", day).await;
    assert_eq!(run.result, "waiting", "{run:?}");
    assert!(run.detail.as_deref().unwrap_or_default().contains("expired"), "{run:?}");
    w.alipay.ledger.lock().unwrap().alipay_links_expired = false;
    let run = w.run_day("alipay", day).await;
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
    let empty = w.run_day("alipay", day.previous_day().unwrap()).await;
    assert_eq!((empty.result.as_str(), empty.view.unwrap().findings.len()), ("reconciled", 0));
}

on_both!(stripes_balance_transactions_are_read_page_by_page_and_reconciled, stripe_day);
async fn stripe_day(backend: Backend) {
    let w = world(backend).await;
    let day = w.today(time::UtcOffset::UTC);
    let (a, _) = w.paid("stripe").await;
    let (b, b_ref) = w.paid("stripe").await;
    let (c, c_ref) = w.paid("stripe").await;
    assert_eq!(w.refund(&a, "R1", 1_000).await["status"], "succeeded");
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
    let run = w.run_day("stripe", day).await;
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

/// A dispute's movement in Stripe's balance: `adjustment`, reported as `category`, `amount`
/// signed, with the dispute as its source.
fn dispute_movement(category: &str, amount: i64, fee: i64, dispute: &serde_json::Value) -> serde_json::Value {
    let mut bt = crate::fakes::balance_transaction("adjustment", amount, fee, dispute.clone());
    bt["reporting_category"] = json!(category);
    if fee != 0 {
        bt["fee_details"] =
            json!([{"amount": fee, "currency": "cny", "description": "Dispute fee", "type": "stripe_fee"}]);
    }
    bt
}

on_both!(a_stripe_disputes_withdrawal_and_reinstatement_are_reconciled_against_its_case, stripe_disputes);
async fn stripe_disputes(backend: Backend) {
    use crate::fakes::FakeStripe;
    let w = world(backend).await;
    let day = w.today(time::UtcOffset::UTC);
    let (_, a_ref) = w.paid("stripe").await;
    let (b, b_ref) = w.paid("stripe").await;
    let intent = |r: &str| w.stripe.session_for(r).expect("session").txn_id;
    // A's dispute: kassa hears of it, then of it won. B's: not heard of yet.
    let known = w.stripe.open_dispute(&intent(&a_ref), 8_888, 7 * 86_400);
    let created = known["created"].as_i64().unwrap();
    let opened = FakeStripe::case_event("charge.dispute.created", &known, created);
    assert_eq!(w.stripe.send_event(&opened).await.0, 200);
    let won = w.stripe.set_dispute_status(known["id"].as_str().unwrap(), "won");
    assert_eq!(w.stripe.send_event(&FakeStripe::case_event("charge.dispute.closed", &won, created + 10)).await.0, 200);
    let unheard = w.stripe.open_dispute(&intent(&b_ref), 8_888, 7 * 86_400);
    let unheard_id = unheard["id"].as_str().unwrap();
    {
        let mut l = w.stripe.ledger.lock().unwrap();
        l.stripe_balance.push(dispute_movement("dispute", -8_888, 1_500, &known));
        l.stripe_balance.push(dispute_movement("dispute_reversal", 8_888, -1_500, &won));
        l.stripe_balance.push(dispute_movement("dispute", -8_888, 1_500, &unheard));
        l.stripe_page_max = Some(2);
    }
    let run = w.run_day("stripe", day).await;
    assert_eq!(run.result, "reconciled", "{run:?}");
    let state = |kind: &str, subject: &str, order: &str, state: &str| {
        (kind.to_string(), subject.to_string(), order.to_string(), state.to_string())
    };
    assert_eq!(run_findings(&run), vec![state("dispute_case_missing", unheard_id, "", "open")]);
    let missing = &run.view.as_ref().unwrap().findings[0];
    assert!(missing.theirs.contains("took 88.88 CNY, charged a dispute fee of 15.00 CNY"), "{missing:?}");
    let view = run.view.as_ref().unwrap();
    let (g, k) = (&view.gateway_totals, &view.kassa_totals);
    assert_eq!((g.count, k.count), (2, 2), "disputes are not payments: {view:?}");
    assert_eq!((g.disputes_minor, g.reinstated_minor, g.dispute_fees_minor), (2 * 8_888, 8_888, 1_500));
    assert_eq!((k.disputes_minor, k.reinstated_minor, k.dispute_fees_minor), (8_888, 8_888, 0));
    assert_eq!(g.fees_minor, k.fees_minor, "the dispute fees are kept apart: {view:?}");
    let net = g.gross_minor - g.refunds_minor - g.fees_minor - 2 * 8_888 + 8_888 - 1_500;
    assert_eq!(g.net_minor, net);
    let report =
        w.t.http
            .get(w.t.url(&format!("/api/v1/admin/statements/stripe/{}/report.csv", view.day)))
            .bearer_auth(crate::common::ADMIN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("totals,stripe,") && l.contains(",gateway,") && l.ends_with(",177.76,88.88,15.00")),
        "{report}"
    );
    assert!(
        report.lines().any(|l| l.starts_with("finding,stripe,") && l.contains(",dispute_case_missing,")),
        "{report}"
    );
    let (browser, cookie, _) = crate::pages::console(&w.t).await;
    let page = w.t.url(&format!("/admin/statements/stripe/{}", view.day));
    let html = browser.get(page).header("cookie", cookie).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("<th>Disputes</th>") && html.contains("<td>177.76 CNY</td><td>88.88 CNY</td>"), "{html}");
    assert!(html.contains("dispute_case_missing"), "{html}");

    // The dispute comes (the backstop poll): the day run again finds nothing missing, and counts it.
    let (status, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "stripe"})).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let again = w.run_day("stripe", day).await;
    assert_eq!(run_findings(&again), vec![state("dispute_case_missing", unheard_id, "", "closed")]);
    assert_eq!(again.changes.closed, 1);
    let k = &again.view.as_ref().unwrap().kassa_totals;
    assert_eq!((k.disputes_minor, k.reinstated_minor, k.dispute_fees_minor), (2 * 8_888, 8_888, 1_500));
    assert_eq!(k.net_minor, again.view.as_ref().unwrap().gateway_totals.net_minor);

    // Lost after all (kassa's case says so), its money given back: a finding on the order.
    w.advance(1_000);
    let lost = w.stripe.set_dispute_status(unheard_id, "lost");
    let (status, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "stripe"})).await;
    assert_eq!((status, &body["polled"][0]["updated"]), (reqwest::StatusCode::OK, &json!(1)), "{body}");
    w.stripe.ledger.lock().unwrap().stripe_balance.push(dispute_movement("dispute_reversal", 8_888, 0, &lost));
    let last = w.run_day("stripe", day).await;
    let subject = format!("{unheard_id}:reinstatement");
    assert!(run_findings(&last).contains(&state("dispute_reinstated_not_won", &subject, &b, "open")), "{last:?}");
}

on_both!(a_refund_made_on_the_desk_is_reconciled_in_wechats_bill_like_any_other, wechat_desk_refund);
async fn wechat_desk_refund(backend: Backend) {
    let w = world(backend).await;
    let day = w.today(beijing());
    let d = kassa::workers::statements::format_day(day);
    let (a, a_ref) = w.paid("wechatpay").await;
    let complaint = w.wechat.open_complaint(&a_ref, w.t.now_ms() / 1000 - 3_600);
    let cid = complaint["complaint_id"].as_str().unwrap().to_string();
    let (url, headers, body) = w.wechat.complaint_notification(&cid, "COMPLAINT.CREATE", "CREATE_COMPLAINT");
    assert_eq!(crate::fakes::FakeWechat::deliver(&url, headers, body).await.0, 204);
    let cases = w.t.admin_get("/api/v1/admin/cases").await;
    let id = cases["items"][0]["id"].as_str().expect("the complaint's case").to_string();
    let (status, made) =
        w.t.admin_post(&format!("/api/v1/admin/cases/{id}/refund"), json!({"amount_minor": 500})).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{made}");
    let refund_no = made["refund_no"].as_str().unwrap().to_string();
    assert_eq!(refund_no, format!("case-{id}-500"));
    w.t.app.refunder.step().await.unwrap();
    let order = w.t.order(&a).await;
    assert_eq!(order["refunds"][0]["status"], "succeeded", "{order}");
    let rows = vec![
        wechat_payment(&d, &a_ref, "4200000001", 8_888, "CNY", 53),
        wechat_refund_row(&d, &a_ref, &refund_no, 500, -3),
    ];
    w.wechat.publish_bill(&d, &wechat_bill(&rows, rows.len()), None);
    let run = w.run_day("wechatpay", day).await;
    assert_eq!((run.result.as_str(), run_findings(&run)), ("reconciled", vec![]), "{run:?}");
    let view = run.view.as_ref().unwrap();
    assert_eq!((view.kassa_totals.refunds_minor, view.gateway_totals.refunds_minor), (500, 500));
    assert_eq!(w.t.order(&a).await["refunds"][0]["fee_minor"], -3, "the statement's fee kept on the desk's refund");
}

on_both!(a_refund_made_on_the_desk_is_reconciled_in_alipays_bill_like_any_other, alipay_desk_refund);
async fn alipay_desk_refund(backend: Backend) {
    let w = world(backend).await;
    let day = w.today(beijing());
    let d = kassa::workers::statements::format_day(day);
    let (a, a_ref) = w.paid("alipay").await;
    let complaint = w.alipay.open_complaint(Some(&a_ref), w.t.now_ms() / 1000 - 3_600);
    let (_, push) = w.alipay.complaint_push(complaint["complain_event_id"].as_str().unwrap());
    assert_eq!(w.alipay.deliver(&push).await.0, 200);
    let cases = w.t.admin_get("/api/v1/admin/cases").await;
    let id = cases["items"][0]["id"].as_str().expect("the complaint's case").to_string();
    let (status, made) =
        w.t.admin_post(&format!("/api/v1/admin/cases/{id}/refund"), json!({"amount_minor": 500})).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{made}");
    let refund_no = made["refund_no"].as_str().unwrap().to_string();
    assert_eq!(refund_no, format!("case-{id}-500"));
    w.t.app.refunder.step().await.unwrap();
    assert_eq!(w.t.order(&a).await["refunds"][0]["status"], "succeeded");
    let rows = vec![
        (alipay_row("2026120122001400000000000001", &a_ref, None, 8_888, 53), false, 8_888, 53),
        (alipay_row("2026120122001400000000000001", &a_ref, Some(&refund_no), 500, 3), true, 500, 3),
    ];
    w.alipay.ledger.lock().unwrap().alipay_bills.insert(d.clone(), alipay_zip(&d, &rows));
    let run = w.run_day("alipay", day).await;
    assert_eq!((run.result.as_str(), run_findings(&run)), ("reconciled", vec![]), "{run:?}");
    let view = run.view.as_ref().unwrap();
    assert_eq!((view.kassa_totals.refunds_minor, view.gateway_totals.refunds_minor), (500, 500));
}
