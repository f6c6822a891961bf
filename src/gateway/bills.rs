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
#[path = "bills_tests.rs"]
mod tests;
