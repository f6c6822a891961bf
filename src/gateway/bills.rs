//! Gateways' statement files (GATEWAYS-2.md C) read into `domain::statement::Statement`. Each
//! parser is strict about the columns it uses (found by their header names, never by position)
//! and tolerant of columns it does not; a file it cannot read is an error naming the line, never a
//! silent skip, and no input makes it panic.
//!
//! WeChat's bill is split on commas by hand rather than read with the `csv` crate: WeChat writes
//! no CSV quoting (a `"` inside `商户数据包` is data, and commas in values are replaced before
//! writing), so a CSV reader's quote handling would misread exactly the rows it should pass through.

use std::collections::HashMap;

use crate::domain::statement::{Declared, LineKind, STATEMENT_LINES_MAX, Statement, StatementLine, parse_decimal};

/// Why a statement file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BillError {
    #[error("the file's hash does not match the one the gateway gave")]
    HashMismatch,
    #[error("line {line}: {why}")]
    Unreadable { line: usize, why: String },
}

fn unreadable(line: usize, why: impl Into<String>) -> BillError {
    BillError::Unreadable { line, why: why.into() }
}

/// Whether `bytes` hash to `hex` under SHA-1 (WeChat's `hash_value`), compared in constant time.
pub fn sha1_matches(bytes: &[u8], hex_value: &str) -> bool {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, bytes);
    let ours = hex::encode(digest.as_ref());
    let theirs = hex_value.trim().to_ascii_lowercase();
    aws_lc_rs::constant_time::verify_slices_are_equal(ours.as_bytes(), theirs.as_bytes()).is_ok()
}

/// One value of a WeChat bill: its one leading backtick (a text marker) stripped, trimmed.
fn wechat_value(raw: &str) -> &str {
    let t = raw.trim();
    t.strip_prefix('`').unwrap_or(t).trim()
}

/// The columns a WeChat trade bill must have for kassa to read it (the `ALL` bill and its
/// variants; an older layout's `总金额` stands for `订单金额`).
const WECHAT_COLUMNS: [&str; 10] = [
    "微信订单号",
    "商户订单号",
    "交易状态",
    "货币种类",
    "商户退款单号",
    "退款金额",
    "手续费",
    "订单金额",
    "微信退款单号",
    "交易时间",
];

/// Reads a WeChat Pay v3 trade bill (`bill_type=ALL`): the detail header, one row per payment
/// (`SUCCESS`) or refund (`REFUND`, `REVOKED`), then the summary header and its row.
pub fn parse_wechat_trade_bill(bytes: &[u8]) -> Result<Statement, BillError> {
    let text = std::str::from_utf8(bytes).map_err(|e| unreadable(0, format!("not UTF-8: {e}")))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).enumerate().peekable();
    let (_, header) = lines.next().ok_or_else(|| unreadable(1, "empty file"))?;
    let names: Vec<&str> = header.split(',').map(wechat_value).collect();
    let column: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let find = |name: &str| -> Option<usize> {
        column.get(name).copied().or_else(|| match name {
            "订单金额" => column.get("总金额").copied(),
            _ => None,
        })
    };
    let mut at = HashMap::new();
    for name in WECHAT_COLUMNS {
        at.insert(name, find(name).ok_or_else(|| unreadable(1, format!("no column {name}")))?);
    }
    let mut statement = Statement::default();
    for (i, raw) in lines.by_ref() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        if wechat_value(raw.split(',').next().unwrap_or_default()) == "总交易单数" {
            let summary = raw.split(',').map(wechat_value).collect::<Vec<_>>();
            let (_, values) = lines
                .by_ref()
                .find(|(_, l)| !l.trim().is_empty())
                .ok_or_else(|| unreadable(n, "summary without values"))?;
            statement.declared = Some(wechat_summary(&summary, values, n + 1)?);
            break;
        }
        if statement.lines.len() >= STATEMENT_LINES_MAX {
            return Err(unreadable(n, format!("more than {STATEMENT_LINES_MAX} lines")));
        }
        let values: Vec<&str> = raw.split(',').map(wechat_value).collect();
        if values.len() < names.len() {
            return Err(unreadable(n, format!("{} values for {} columns", values.len(), names.len())));
        }
        let get = |name: &str| values[at[name]];
        let amount =
            |name: &str| parse_decimal(get(name)).ok_or_else(|| unreadable(n, format!("{name} is not an amount")));
        let fee = amount("手续费")?;
        let currency = match get("货币种类") {
            "CNY" | "" => "CNY".to_string(),
            other if other.len() == 3 && other.bytes().all(|b| b.is_ascii_uppercase()) => other.to_string(),
            other => return Err(unreadable(n, format!("currency {other:?}"))),
        };
        let merchant_ref = get("商户订单号").to_string();
        if merchant_ref.is_empty() {
            return Err(unreadable(n, "no 商户订单号"));
        }
        let line = match get("交易状态") {
            "SUCCESS" => StatementLine {
                kind: LineKind::Payment,
                merchant_ref,
                gateway_txn_id: get("微信订单号").to_string(),
                refund_no: None,
                amount_minor: amount("订单金额")?,
                fee_minor: fee,
                currency,
            },
            "REFUND" | "REVOKED" => StatementLine {
                kind: LineKind::Refund,
                merchant_ref,
                gateway_txn_id: get("微信退款单号").to_string(),
                refund_no: Some(get("商户退款单号").to_string()).filter(|r| !r.is_empty()),
                amount_minor: amount("退款金额")?,
                fee_minor: fee,
                currency,
            },
            other => return Err(unreadable(n, format!("交易状态 {other:?}"))),
        };
        if line.amount_minor < 0 {
            return Err(unreadable(n, "a negative amount"));
        }
        statement.lines.push(line);
    }
    if statement.declared.is_none() {
        return Err(unreadable(0, "no summary: the file is cut short"));
    }
    Ok(statement)
}

/// The summary row, read by its header's names.
fn wechat_summary(names: &[&str], values: &str, n: usize) -> Result<Declared, BillError> {
    let values: Vec<&str> = values.split(',').map(wechat_value).collect();
    let get = |name: &str| -> Result<&str, BillError> {
        let i =
            names.iter().position(|c| *c == name).ok_or_else(|| unreadable(n, format!("summary without {name}")))?;
        values.get(i).copied().ok_or_else(|| unreadable(n, format!("summary without a value for {name}")))
    };
    let amount =
        |name: &str| parse_decimal(get(name)?).ok_or_else(|| unreadable(n, format!("summary {name} is not an amount")));
    let count = get("总交易单数")?.parse::<i64>().map_err(|_| unreadable(n, "总交易单数 is not a count"))?;
    let gross = match get("订单总金额") {
        Ok(_) => amount("订单总金额")?,
        Err(_) => amount("应结订单总金额")?,
    };
    // A SUCCESS-only bill has no refund column: nothing was refunded in it.
    let refunds = if names.contains(&"申请退款总金额") { amount("申请退款总金额")? } else { 0 };
    Ok(Declared { count, gross_minor: gross, refunds_minor: refunds, fees_minor: amount("手续费总金额")? })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注";
    const SUMMARY: &str =
        "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额";

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
        assert!(
            parse_wechat_trade_bill(no_column.as_bytes()).unwrap_err().to_string().contains("no column 商户订单号")
        );
        let odd_state = sample_bill().replace("`NATIVE,`SUCCESS", "`NATIVE,`CLOSED");
        assert!(parse_wechat_trade_bill(odd_state.as_bytes()).is_err());
        assert!(parse_wechat_trade_bill(&[0xff, 0xfe, 0x00]).is_err());
        assert!(parse_wechat_trade_bill(b"").is_err());
    }

    #[test]
    fn the_hash_is_checked() {
        let bill = sample_bill();
        let digest =
            hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, bill.as_bytes()));
        assert!(sha1_matches(bill.as_bytes(), &digest.to_uppercase()));
        assert!(!sha1_matches(format!("{bill} ").as_bytes(), &digest));
        assert!(!sha1_matches(bill.as_bytes(), "00"));
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
    }
}
