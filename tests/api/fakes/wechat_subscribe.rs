//! WeChat's `subscribe/send` of the mini-program API, checked as WeChat checks it: the access token,
//! the openid, the template, the buyer's one-time consent for it, and each field's value against
//! its kind's limits (docs/gateways/wechat-subscribe.md).

use super::*;

/// `POST /cgi-bin/message/subscribe/send?access_token=…`.
pub(super) async fn mini_subscribe_send(
    State(ledger): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
    Json(b): Json<Value>,
) -> Json<Value> {
    let mut l = lock(&ledger);
    let answer = subscribe_answer(&mut l, q.get("access_token"), &b);
    l.subscribe_answers.push(answer);
    if answer == 0 {
        l.subscribe_sent.push(b);
    }
    Json(json!({"errcode": answer, "errmsg": if answer == 0 { "ok" } else { "refused" }}))
}

fn subscribe_answer(l: &mut Ledger, token: Option<&String>, b: &Value) -> i64 {
    if token.is_none() || token != l.mini_token.as_ref() || l.mini_token_revoked {
        return 40001;
    }
    if let Some(code) = l.subscribe_script.pop_front() {
        return code;
    }
    let openid = b["touser"].as_str().unwrap_or_default();
    if openid.is_empty() {
        return 40003;
    }
    let template = b["template_id"].as_str().unwrap_or_default();
    if !SUBSCRIBE_TEMPLATES.contains(&template) {
        return 40037;
    }
    if !["developer", "trial", "formal"].contains(&b["miniprogram_state"].as_str().unwrap_or("formal")) {
        return 47003;
    }
    let Some(data) = b["data"].as_object().filter(|d| !d.is_empty()) else { return 47003 };
    for (key, value) in data {
        let Some(v) = value["value"].as_str() else { return 47003 };
        if !field_fits(key, v) {
            return 47003;
        }
    }
    let consent = l.subscribe_consents.entry((openid.to_string(), template.to_string())).or_insert(0);
    if *consent == 0 {
        return 43101;
    }
    *consent -= 1;
    0
}

/// Whether `v` fits field `key`'s kind.
fn field_fits(key: &str, v: &str) -> bool {
    let n = v.chars().count();
    match key.trim_end_matches(|c: char| c.is_ascii_digit()) {
        "thing" => (1..=20).contains(&n),
        "character_string" => (1..=32).contains(&n) && v.chars().all(|c| c.is_ascii_graphic()),
        "phrase" => (1..=5).contains(&n) && v.chars().all(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)),
        "amount" => {
            let body = v.trim_start_matches(['¥', '$', '€', '£']).trim_end_matches('元');
            let digits = body.chars().filter(char::is_ascii_digit).count();
            (1..=10).contains(&digits)
                && body.chars().all(|c| c.is_ascii_digit() || c == '.')
                && body.matches('.').count() <= 1
        }
        "time" | "date" => n > 0 && v.chars().any(|c| c.is_ascii_digit()),
        _ => false,
    }
}
