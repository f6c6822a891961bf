//! Gateways' statement files (docs/gateways/alipay.md §5, wechatpay.md §8) read into `domain::statement::Statement`. Each
//! parser is strict about the columns it uses (found by their header names, never by position)
//! and tolerant of columns it does not; a file it cannot read is an error naming the line, never a
//! silent skip, and no input makes it panic.
//!
//! WeChat's bill is split on commas by hand rather than read with the `csv` crate: WeChat writes
//! no CSV quoting (a `"` inside `商户数据包` is data, and commas in values are replaced before
//! writing), so a CSV reader's quote handling would misread exactly the rows it should pass through.

use std::collections::HashMap;

use crate::domain::statement::{Declared, LineKind, STATEMENT_LINES_MAX, Statement, StatementLine, parse_decimal};
use crate::gateway::STATEMENT_BYTES_MAX;

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

/// Reads WeChat Pay's fund-flow bill (资金账单, the BASIC account's movements of the day) and
/// checks it against its own summary: the count of rows, of income and of expense rows, and the
/// income and expense totals, each `(subject, declared, summed)`. Amount columns are found with
/// ASCII or full-width parentheses (`收支金额(元)`, `收支金额（元）`).
pub fn parse_wechat_fundflow_bill(bytes: &[u8]) -> Result<Vec<(String, i64, i64)>, BillError> {
    let text = std::str::from_utf8(bytes).map_err(|e| unreadable(0, format!("not UTF-8: {e}")))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).enumerate();
    let (_, header) = lines.next().ok_or_else(|| unreadable(1, "empty file"))?;
    let names: Vec<String> = header.split(',').map(|n| wechat_value(n).replace('（', "(").replace('）', ")")).collect();
    let find =
        |name: &str| names.iter().position(|n| n == name).ok_or_else(|| unreadable(1, format!("no column {name}")));
    let (direction_at, amount_at) = (find("收支类型")?, find("收支金额(元)")?);
    let (mut rows, mut income_rows, mut expense_rows, mut income, mut expense) = (0_i64, 0_i64, 0_i64, 0_i64, 0_i64);
    while let Some((i, raw)) = lines.next() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let values: Vec<&str> = raw.split(',').map(wechat_value).collect();
        if values.first() == Some(&"资金流水总笔数") {
            let (_, said) = lines
                .by_ref()
                .find(|(_, l)| !l.trim().is_empty())
                .ok_or_else(|| unreadable(n, "summary without values"))?;
            let said: Vec<&str> = said.split(',').map(wechat_value).collect();
            let get = |name: &str| -> Result<&str, BillError> {
                let i = values
                    .iter()
                    .position(|c| *c == name)
                    .ok_or_else(|| unreadable(n, format!("summary without {name}")))?;
                said.get(i).copied().ok_or_else(|| unreadable(n + 1, format!("summary without a value for {name}")))
            };
            let count =
                |name: &str| get(name)?.parse::<i64>().map_err(|_| unreadable(n + 1, format!("{name} is not a count")));
            let amount = |name: &str| {
                parse_decimal(get(name)?).ok_or_else(|| unreadable(n + 1, format!("{name} is not an amount")))
            };
            return Ok(vec![
                ("fundflow.count".to_string(), count("资金流水总笔数")?, rows),
                ("fundflow.income_count".to_string(), count("收入笔数")?, income_rows),
                ("fundflow.income".to_string(), amount("收入金额")?, income),
                ("fundflow.expense_count".to_string(), count("支出笔数")?, expense_rows),
                ("fundflow.expense".to_string(), amount("支出金额")?, expense),
            ]);
        }
        if values.len() < names.len() {
            return Err(unreadable(n, format!("{} values for {} columns", values.len(), names.len())));
        }
        if rows >= i64::try_from(STATEMENT_LINES_MAX).unwrap_or(i64::MAX) {
            return Err(unreadable(n, format!("more than {STATEMENT_LINES_MAX} lines")));
        }
        let amount = parse_decimal(values[amount_at]).ok_or_else(|| unreadable(n, "收支金额 is not an amount"))?;
        rows += 1;
        match values[direction_at] {
            "收入" => {
                income_rows += 1;
                income = income.saturating_add(amount);
            }
            "支出" => {
                expense_rows += 1;
                expense = expense.saturating_add(amount);
            }
            other => return Err(unreadable(n, format!("收支类型 {other:?}"))),
        }
    }
    Err(unreadable(0, "no summary: the file is cut short"))
}

/// Most members an Alipay bill ZIP may hold (it has two).
const ZIP_MEMBERS_MAX: usize = 16;

/// The detail and summary members of an Alipay bill ZIP, by the end of their (GBK) names.
const ALIPAY_DETAIL_SUFFIX: &str = "_业务明细.csv";
const ALIPAY_SUMMARY_SUFFIX: &str = "_业务明细(汇总).csv";

/// The columns of Alipay's detail file kassa reads (names end in a full-width `（元）`).
const ALIPAY_COLUMNS: [&str; 6] =
    ["支付宝交易号", "商户订单号", "业务类型", "订单金额（元）", "退款批次号/请求号", "服务费（元）"];

/// GBK text (read as GB18030, its superset), refused when it is not.
fn gbk(bytes: &[u8], what: &str) -> Result<String, BillError> {
    encoding_rs::GB18030
        .decode_without_bom_handling_and_without_replacement(bytes)
        .map(std::borrow::Cow::into_owned)
        .ok_or_else(|| unreadable(0, format!("{what} is not GBK text")))
}

/// One value of an Alipay file: every TAB removed, trimmed.
fn alipay_value(raw: &str) -> String {
    raw.replace('\t', "").trim().to_string()
}

/// Reads Alipay's trade bill (`bill_type=trade`): a ZIP of two GBK files, the detail
/// (`…_业务明细.csv`, one row per payment `交易` or refund `退款`, its footer's totals) and the
/// summary (`…_业务明细(汇总).csv`, its `合计` row's fee total). Members are found by name and
/// confirmed by their first line; each is read at most [`STATEMENT_BYTES_MAX`] bytes far.
pub fn parse_alipay_bill_zip(bytes: &[u8]) -> Result<Statement, BillError> {
    use std::io::Read as _;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| unreadable(0, format!("not a ZIP archive: {e}")))?;
    if archive.len() > ZIP_MEMBERS_MAX {
        return Err(unreadable(0, format!("{} members in the ZIP (at most {ZIP_MEMBERS_MAX})", archive.len())));
    }
    let (mut detail, mut summary) = (None, None);
    for i in 0..archive.len() {
        let mut member = archive.by_index(i).map_err(|e| unreadable(0, format!("ZIP member {i}: {e}")))?;
        let name = gbk(member.name_raw(), "a member's name")?;
        let slot = if name.ends_with(ALIPAY_DETAIL_SUFFIX) {
            &mut detail
        } else if name.ends_with(ALIPAY_SUMMARY_SUFFIX) {
            &mut summary
        } else {
            continue;
        };
        let mut content = Vec::new();
        let limit = u64::try_from(STATEMENT_BYTES_MAX).unwrap_or(u64::MAX);
        (&mut member).take(limit + 1).read_to_end(&mut content).map_err(|e| unreadable(0, format!("{name}: {e}")))?;
        if content.len() > STATEMENT_BYTES_MAX {
            return Err(unreadable(0, format!("{name} is larger than {STATEMENT_BYTES_MAX} bytes")));
        }
        *slot = Some(gbk(&content, &name)?);
    }
    let detail = detail.ok_or_else(|| unreadable(0, format!("no member named …{ALIPAY_DETAIL_SUFFIX}")))?;
    let summary = summary.ok_or_else(|| unreadable(0, format!("no member named …{ALIPAY_SUMMARY_SUFFIX}")))?;
    let mut statement = parse_alipay_detail(&detail)?;
    let fees = parse_alipay_summary_fees(&summary)?;
    if let Some(declared) = statement.declared.as_mut() {
        declared.fees_minor = fees;
    }
    Ok(statement)
}

/// The detail file: `#` lines above the header, rows, the end marker, the footer's totals.
fn parse_alipay_detail(text: &str) -> Result<Statement, BillError> {
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).enumerate();
    match lines.next() {
        Some((_, first)) if first.trim_start_matches('\u{feff}').starts_with("#支付宝业务明细查询") => {}
        _ => return Err(unreadable(1, "not an Alipay detail file (#支付宝业务明细查询)")),
    }
    let (header_n, header) = lines
        .by_ref()
        .find(|(_, l)| !l.starts_with('#') && !l.trim().is_empty())
        .ok_or_else(|| unreadable(0, "no header"))?;
    let names: Vec<String> = header.split(',').map(alipay_value).collect();
    let mut at = HashMap::new();
    for name in ALIPAY_COLUMNS {
        let i = names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| unreadable(header_n + 1, format!("no column {name}")))?;
        at.insert(name, i);
    }
    let mut statement = Statement::default();
    let mut ended = false;
    // A footer's (count, received total).
    type Footer = Option<(i64, i64)>;
    let (mut trades, mut refunds): (Footer, Footer) = (None, None);
    // Per row: the order amount less what the merchant received, so the footer's received totals
    // can be compared with the rows' order amounts.
    let (mut trade_gap, mut refund_gap) = (0_i64, 0_i64);
    let received_at = names.iter().position(|n| n == "商家实收（元）");
    for (i, raw) in lines {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        if raw.starts_with('#') {
            ended = ended || raw.contains("业务明细列表结束");
            if let Some(rest) = raw.strip_prefix("#交易合计：") {
                trades = Some(alipay_footer(rest, n)?);
            } else if let Some(rest) = raw.strip_prefix("#退款合计：") {
                refunds = Some(alipay_footer(rest, n)?);
            }
            continue;
        }
        if ended {
            return Err(unreadable(n, "a row after the end of the list"));
        }
        if statement.lines.len() >= STATEMENT_LINES_MAX {
            return Err(unreadable(n, format!("more than {STATEMENT_LINES_MAX} lines")));
        }
        let values: Vec<String> = raw.split(',').map(alipay_value).collect();
        if values.len() < names.len() {
            return Err(unreadable(n, format!("{} values for {} columns", values.len(), names.len())));
        }
        let get = |name: &str| values[at[name]].as_str();
        let amount = |text: &str, name: &str| {
            parse_decimal(text).ok_or_else(|| unreadable(n, format!("{name} is not an amount")))
        };
        let order_amount = amount(get("订单金额（元）"), "订单金额（元）")?;
        let fee = amount(get("服务费（元）"), "服务费（元）")?.checked_abs().unwrap_or(i64::MAX);
        let received = match received_at {
            Some(r) => amount(&values[r], "商家实收（元）")?,
            None => order_amount,
        };
        let merchant_ref = get("商户订单号").to_string();
        if merchant_ref.is_empty() {
            return Err(unreadable(n, "no 商户订单号"));
        }
        let line = match get("业务类型") {
            "交易" => {
                trade_gap = trade_gap.saturating_add(order_amount.saturating_sub(received));
                StatementLine {
                    kind: LineKind::Payment,
                    merchant_ref,
                    gateway_txn_id: get("支付宝交易号").to_string(),
                    refund_no: None,
                    amount_minor: order_amount,
                    fee_minor: fee,
                    currency: "CNY".to_string(),
                }
            }
            "退款" => {
                refund_gap = refund_gap.saturating_add(order_amount.saturating_sub(received));
                StatementLine {
                    kind: LineKind::Refund,
                    gateway_txn_id: get("支付宝交易号").to_string(),
                    refund_no: Some(get("退款批次号/请求号").to_string()).filter(|r| !r.is_empty()),
                    merchant_ref,
                    amount_minor: order_amount.checked_abs().unwrap_or(i64::MAX),
                    fee_minor: -fee,
                    currency: "CNY".to_string(),
                }
            }
            other => return Err(unreadable(n, format!("业务类型 {other:?}"))),
        };
        statement.lines.push(line);
    }
    let (Some((trade_count, trade_received)), Some((refund_count, refund_received))) = (trades, refunds) else {
        return Err(unreadable(0, "no #交易合计 and #退款合计: the file is cut short"));
    };
    if !ended {
        return Err(unreadable(0, "no end of the list: the file is cut short"));
    }
    statement.declared = Some(Declared {
        count: trade_count.saturating_add(refund_count),
        gross_minor: trade_received.saturating_add(trade_gap),
        // Refunds are written negative.
        refunds_minor: refund_received.saturating_add(refund_gap).saturating_neg(),
        fees_minor: 0,
    });
    Ok(statement)
}

/// `3笔，商家实收共80.00元，…`: the count and the received total.
fn alipay_footer(rest: &str, n: usize) -> Result<(i64, i64), BillError> {
    let (count, rest) = rest.split_once('笔').ok_or_else(|| unreadable(n, "a total without its count"))?;
    let count = count.trim().parse::<i64>().map_err(|_| unreadable(n, "a total's count is not a number"))?;
    let received = rest
        .split('，')
        .find_map(|part| part.strip_prefix("商家实收共").or_else(|| part.strip_prefix("商家实收退款共")))
        .and_then(|v| v.strip_suffix('元'))
        .and_then(parse_decimal)
        .ok_or_else(|| unreadable(n, "a total without 商家实收"))?;
    Ok((count, received))
}

/// The summary's `合计` row's `服务费（元）`: fees charged are written negative, fees returned
/// positive; kassa counts fees charged as positive.
fn parse_alipay_summary_fees(text: &str) -> Result<i64, BillError> {
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).enumerate();
    match lines.next() {
        Some((_, first)) if first.trim_start_matches('\u{feff}').starts_with("#支付宝业务汇总查询") => {}
        _ => return Err(unreadable(1, "not an Alipay summary file (#支付宝业务汇总查询)")),
    }
    let (header_n, header) = lines
        .by_ref()
        .find(|(_, l)| !l.starts_with('#') && !l.trim().is_empty())
        .ok_or_else(|| unreadable(0, "summary without a header"))?;
    let names: Vec<String> = header.split(',').map(alipay_value).collect();
    let fee_at = names
        .iter()
        .position(|n| n == "服务费（元）")
        .ok_or_else(|| unreadable(header_n + 1, "summary without 服务费（元）"))?;
    for (i, raw) in lines {
        let values: Vec<String> = raw.split(',').map(alipay_value).collect();
        if values.first().map(String::as_str) == Some("合计") {
            let fee = values.get(fee_at).and_then(|v| parse_decimal(v));
            return fee.map(i64::saturating_neg).ok_or_else(|| unreadable(i + 1, "合计 without 服务费（元）"));
        }
    }
    Err(unreadable(0, "summary without its 合计 row"))
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
        assert_eq!(
            parse_alipay_bill_zip(&alipay_zip(&short, ALIPAY_SUMMARY)).unwrap().declared.unwrap().gross_minor,
            8100
        );
    }

    #[test]
    fn an_alipay_bill_that_cannot_be_read_says_why() {
        let cut = ALIPAY_DETAIL.split("#------").take(2).collect::<Vec<_>>().join("#------");
        assert!(
            parse_alipay_bill_zip(&alipay_zip(&cut, ALIPAY_SUMMARY)).unwrap_err().to_string().contains("cut short")
        );
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
}
