//! The statement files' readers, on real layouts and damaged ones.

use super::*;

const HEADER: &str = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注";
const SUMMARY: &str = "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额";

/// A day as WeChat writes it: UTF-8 without BOM, CRLF after every line, every detail value
/// behind a backtick, a payment, a second payment, and a refund of the first.
pub fn sample_bill() -> String {
    let rows = [
        "`2026-12-01 10:06:33,`wx8888888888888888,`1900000001,`0,`,`4200002001202612011234567890,`KS1_1,`oUpF8uMuAJO_M2pxb1Q9zNjWeS6o,`JSAPI,`SUCCESS,`OTHERS,`CNY,`60.00,`0.00,`0,`0,`0.00,`0.00,`,`,`会员月卡，一个月,`,`0.32000,`0.54%,`60.00,`0.00,`",
        "`2026-12-01 11:20:00,`wx8888888888888888,`1900000001,`0,`,`4200002001202612011234567891,`KS2_1,`oAbC,`NATIVE,`SUCCESS,`CFT,`CNY,`20.00,`0.00,`0,`0,`0.00,`0.00,`,`,`Tea,`,`0.11000,`0.54%,`20.00,`0.00,`",
        "`2026-12-01 15:00:00,`wx8888888888888888,`1900000001,`0,`,`4200002001202612011234567890,`KS1_1,`oUpF8uMuAJO_M2pxb1Q9zNjWeS6o,`JSAPI,`REFUND,`OTHERS,`CNY,`0.00,`0.00,`50300020012026120112345678901,`RF-1,`50.00,`0.00,`ORIGINAL,`SUCCESS,`会员月卡，一个月,`,`-0.27000,`0.54%,`0.00,`50.00,`",
    ];
    let mut out = format!("{HEADER}\r\n");
    for r in rows {
        out.push_str(r);
        out.push_str("\r\n");
    }
    out.push_str(&format!("{SUMMARY}\r\n`3,`80.00,`50.00,`0.00,`0.16000,`80.00,`50.00\r\n"));
    out
}

#[test]
fn a_trade_bill_reads_as_wechat_writes_it() {
    let s = parse_wechat_trade_bill(sample_bill().as_bytes()).unwrap();
    assert_eq!(s.lines.len(), 3);
    assert_eq!(
        s.lines[0],
        StatementLine {
            kind: LineKind::Payment,
            merchant_ref: "KS1_1".into(),
            gateway_txn_id: "4200002001202612011234567890".into(),
            refund_no: None,
            amount_minor: 6000,
            fee_minor: 32,
            currency: "CNY".into(),
        }
    );
    assert_eq!(s.lines[2].kind, LineKind::Refund);
    assert_eq!(s.lines[2].refund_no.as_deref(), Some("RF-1"));
    assert_eq!((s.lines[2].amount_minor, s.lines[2].fee_minor), (5000, -27));
    assert_eq!(s.declared, Some(Declared { count: 3, gross_minor: 8000, refunds_minor: 5000, fees_minor: 16 }));
    // LF line ends read the same; a BOM is tolerated.
    let lf = sample_bill().replace("\r\n", "\n");
    assert_eq!(parse_wechat_trade_bill(lf.as_bytes()).unwrap(), s);
    assert_eq!(parse_wechat_trade_bill(format!("\u{feff}{}", sample_bill()).as_bytes()).unwrap(), s);
}

#[test]
fn columns_are_found_by_name_and_unknown_ones_ignored() {
    // Columns in another order, one more at the end: the same statement.
    let bill = sample_bill();
    let mut out = String::new();
    for line in bill.split("\r\n").filter(|l| !l.is_empty()) {
        let mut cells: Vec<&str> = line.split(',').collect();
        if cells.len() == 27 {
            cells.swap(5, 6);
            cells.push(if line.starts_with('`') { "`x" } else { "新列" });
        }
        out.push_str(&cells.join(","));
        out.push_str("\r\n");
    }
    assert_eq!(parse_wechat_trade_bill(out.as_bytes()).unwrap(), parse_wechat_trade_bill(bill.as_bytes()).unwrap());
}

#[test]
fn a_file_that_cannot_be_read_says_where() {
    let no_summary = sample_bill().split("总交易单数").next().unwrap().to_string();
    assert!(matches!(parse_wechat_trade_bill(no_summary.as_bytes()), Err(BillError::Unreadable { .. })));
    let bad_amount = sample_bill().replace("`60.00,`0.00,`", "`6O.00,`0.00,`");
    assert_eq!(
        parse_wechat_trade_bill(bad_amount.as_bytes()),
        Err(BillError::Unreadable { line: 2, why: "订单金额 is not an amount".into() })
    );
    let no_column = sample_bill().replacen("商户订单号", "商户单号", 1);
    assert!(parse_wechat_trade_bill(no_column.as_bytes()).unwrap_err().to_string().contains("no column 商户订单号"));
    let odd_state = sample_bill().replace("`NATIVE,`SUCCESS", "`NATIVE,`CLOSED");
    assert!(parse_wechat_trade_bill(odd_state.as_bytes()).is_err());
    assert!(parse_wechat_trade_bill(&[0xff, 0xfe, 0x00]).is_err());
    assert!(parse_wechat_trade_bill(b"").is_err());
}

#[test]
fn the_hash_is_checked() {
    let bill = sample_bill();
    let digest = hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, bill.as_bytes()));
    assert!(sha1_matches(bill.as_bytes(), &digest.to_uppercase()));
    assert!(!sha1_matches(format!("{bill} ").as_bytes(), &digest));
    assert!(!sha1_matches(bill.as_bytes(), "00"));
}

pub const ALIPAY_DETAIL: &str = "#支付宝业务明细查询\r
#账号：[20881021462251350156]\r
#起始日期：[2026年12月01日 00:00:00]   终止日期：[2026年12月02日 00:00:00]\r
#-----------------------------------------业务明细列表----------------------------------------\r
支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,门店编号,门店名称,操作员,终端号,对方账户,订单金额（元）,商家实收（元）,支付宝红包（元）,集分宝（元）,支付宝优惠（元）,商家优惠（元）,券核销金额（元）,券名称,商家红包消费金额（元）,卡消费金额（元）,退款批次号/请求号,服务费（元）,分润（元）,备注\r
2026120122001419931441931972\t,KS1_1\t,交易\t,会员月卡,2026-12-01 10:06:24,2026-12-01 10:06:33,\t,\t,\t,\t,*王(138****1234)\t,60.00,60.00,0.00,0.00,0.00,0.00,0.00,,0.00\t,0.00,\t,-0.36,0.00,\r
2026120122001419931441931973\t,KS2_1\t,交易\t,茶,2026-12-01 11:00:00,2026-12-01 11:00:09,\t,\t,\t,\t,*津水(602***@qq.com)\t,20.00,20.00,0.00,0.00,0.00,0.00,0.00,,0.00\t,0.00,\t,-0.12,0.00,\r
2026120122001419931441931972\t,KS1_1\t,退款\t,会员月卡,2026-12-01 10:06:24,2026-12-01 15:00:00,\t,\t,\t,\t,*王(138****1234)\t,-10.00,-10.00,0.00,0.00,0.00,0.00,0.00,,0.00\t,0.00,RF1\t,0.06,0.00,\r
#-----------------------------------------业务明细列表结束------------------------------------\r
#交易合计：2笔，商家实收共80.00元，商家优惠共0.00元\r
#退款合计：1笔，商家实收退款共-10.00元，商家优惠退款共0.00元\r
#导出时间：[2026年12月02日 05:46:49]\r
";

pub const ALIPAY_SUMMARY: &str = "#支付宝业务汇总查询\r
#账号：[20881021462251350156]\r
#起始日期：[2026年12月01日 00:00:00]   终止日期：[2026年12月02日 00:00:00]\r
#-----------------------------------------业务汇总列表----------------------------------------\r
门店编号,门店名称,交易订单总笔数,退款订单总笔数,订单金额（元）,商家实收（元）,支付宝优惠（元）,商家优惠（元）,卡消费金额（元）,服务费（元）,分润（元）,实收净额（元）\r
,,2,1,70.00,70.00,0.00,0.00,0.00,-0.42,0.00,69.58\r
合计,,2,1,70.00,70.00,0.00,0.00,0.00,-0.42,0.00,69.58\r
#----------------------------------------业务汇总列表结束-------------------------------------\r
#导出时间：[2026年12月02日 05:46:49]\r
";

/// Alipay's ZIP: DEFLATE members named in GBK without the UTF-8 flag, GBK contents.
pub fn alipay_zip(detail: &str, summary: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, text) in [
        ("20881021462251350156_20261201_业务明细.csv", detail),
        ("20881021462251350156_20261201_业务明细(汇总).csv", summary),
    ] {
        let (name, _, _) = encoding_rs::GBK.encode(name);
        w.start_file_with_options(options.name(&name)).unwrap();
        w.write_all(&encoding_rs::GBK.encode(text).0).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn an_alipay_bill_is_read_from_its_gbk_zip() {
    let zip = alipay_zip(ALIPAY_DETAIL, ALIPAY_SUMMARY);
    let st = parse_alipay_bill_zip(&zip).unwrap();
    assert_eq!(st.lines.len(), 3);
    assert_eq!(
        st.lines[0],
        StatementLine {
            kind: LineKind::Payment,
            merchant_ref: "KS1_1".into(),
            gateway_txn_id: "2026120122001419931441931972".into(),
            refund_no: None,
            amount_minor: 6000,
            fee_minor: 36,
            currency: "CNY".into(),
        }
    );
    assert_eq!(
        (st.lines[2].kind, st.lines[2].refund_no.as_deref(), st.lines[2].amount_minor, st.lines[2].fee_minor),
        (LineKind::Refund, Some("RF1"), 1000, -6)
    );
    assert_eq!(st.declared, Some(Declared { count: 3, gross_minor: 8000, refunds_minor: 1000, fees_minor: 42 }));
    // A summary that disagrees is what the matcher reports, not a reading error.
    let short = ALIPAY_DETAIL.replace("#交易合计：2笔，商家实收共80.00", "#交易合计：2笔，商家实收共81.00");
    assert_eq!(parse_alipay_bill_zip(&alipay_zip(&short, ALIPAY_SUMMARY)).unwrap().declared.unwrap().gross_minor, 8100);
}

#[test]
fn an_alipay_bill_that_cannot_be_read_says_why() {
    let cut = ALIPAY_DETAIL.split("#------").take(2).collect::<Vec<_>>().join("#------");
    assert!(parse_alipay_bill_zip(&alipay_zip(&cut, ALIPAY_SUMMARY)).unwrap_err().to_string().contains("cut short"));
    let odd = ALIPAY_DETAIL.replacen("交易\t", "转账\t", 1);
    assert!(parse_alipay_bill_zip(&alipay_zip(&odd, ALIPAY_SUMMARY)).unwrap_err().to_string().contains("业务类型"));
    let no_total = ALIPAY_SUMMARY.replace("合计,", "小计,");
    assert!(parse_alipay_bill_zip(&alipay_zip(ALIPAY_DETAIL, &no_total)).unwrap_err().to_string().contains("合计"));
    let wrong_file = ALIPAY_SUMMARY;
    assert!(parse_alipay_bill_zip(&alipay_zip(wrong_file, ALIPAY_SUMMARY)).is_err());
    assert!(
        parse_alipay_bill_zip(b"<html>\xe4\xb8\x8b\xe8\xbd\xbd\xe8\xb6\x85\xe6\x97\xb6</html>")
            .unwrap_err()
            .to_string()
            .contains("not a ZIP")
    );
}

pub const FUNDFLOW: &str = "记账时间,微信支付业务单号,资金流水单号,业务名称,业务类型,收支类型,收支金额(元),账户结余(元),资金变更提交申请人,备注,业务凭证号\r
`2026-12-01 10:06:33,`4200002001202612011234567890,`1000000001,`交易,`交易,`收入,`60.00,`60.00,`system,`,`\r
`2026-12-01 10:06:33,`4200002001202612011234567890,`1000000002,`扣除交易手续费,`扣除交易手续费,`支出,`0.32,`59.68,`system,`,`\r
`2026-12-01 15:00:00,`50300000000000000000000000001,`1000000003,`退款,`退款,`支出,`10.00,`49.68,`1900000001API,`,`\r
资金流水总笔数,收入笔数,收入金额,支出笔数,支出金额\r
`3,`1,`60.00,`2,`10.32\r
";

#[test]
fn a_fund_flow_bill_is_checked_against_its_summary() {
    let checks = parse_wechat_fundflow_bill(FUNDFLOW.as_bytes()).unwrap();
    assert!(checks.iter().all(|(_, said, summed)| said == summed), "{checks:?}");
    assert_eq!(checks[4], ("fundflow.expense".to_string(), 1032, 1032));
    let off = FUNDFLOW.replace("`3,`1,`60.00,`2,`10.32", "`3,`1,`60.00,`2,`10.33");
    let checks = parse_wechat_fundflow_bill(off.as_bytes()).unwrap();
    assert_eq!(checks[4], ("fundflow.expense".to_string(), 1033, 1032));
    let v2 = FUNDFLOW.replace("收支金额(元)", "收支金额（元）");
    assert!(parse_wechat_fundflow_bill(v2.as_bytes()).is_ok());
    let cut = FUNDFLOW.split("资金流水总笔数").next().unwrap();
    assert!(parse_wechat_fundflow_bill(cut.as_bytes()).unwrap_err().to_string().contains("cut short"));
}

proptest::proptest! {
    #[test]
    fn no_file_makes_the_parser_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2048)) {
        let _ = parse_wechat_trade_bill(&bytes);
    }

    /// A real bill with any one byte changed, cut short or with text spliced in: read or
    /// refused, never a panic.
    #[test]
    fn no_damaged_bill_makes_the_parser_panic(at in 0usize..2000, byte in proptest::num::u8::ANY, cut in proptest::bool::ANY) {
        let mut bytes = sample_bill().into_bytes();
        let at = at % bytes.len();
        if cut { bytes.truncate(at) } else { bytes[at] = byte }
        let _ = parse_wechat_trade_bill(&bytes);
    }

    #[test]
    fn no_damaged_fund_flow_bill_makes_the_parser_panic(at in 0usize..2000, byte in proptest::num::u8::ANY, cut in proptest::bool::ANY) {
        let mut bytes = FUNDFLOW.as_bytes().to_vec();
        let at = at % bytes.len();
        if cut { bytes.truncate(at) } else { bytes[at] = byte }
        let _ = parse_wechat_fundflow_bill(&bytes);
    }

    #[test]
    fn no_file_makes_the_alipay_parser_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2048)) {
        let _ = parse_alipay_bill_zip(&bytes);
    }

    /// A real ZIP with any one byte changed or cut short, and a detail file damaged inside a
    /// sound ZIP: read or refused, never a panic.
    #[test]
    fn no_damaged_alipay_bill_makes_the_parser_panic(at in 0usize..4000, byte in proptest::num::u8::ANY, cut in proptest::bool::ANY) {
        let mut zip = alipay_zip(ALIPAY_DETAIL, ALIPAY_SUMMARY);
        let i = at % zip.len();
        if cut { zip.truncate(i) } else { zip[i] = byte }
        let _ = parse_alipay_bill_zip(&zip);
        let mut text = encoding_rs::GBK.encode(ALIPAY_DETAIL).0.into_owned();
        let i = at % text.len();
        if cut { text.truncate(i) } else { text[i] = byte }
        let damaged = encoding_rs::GB18030.decode(&text).0.into_owned();
        let _ = parse_alipay_bill_zip(&alipay_zip(&damaged, ALIPAY_SUMMARY));
    }
}
