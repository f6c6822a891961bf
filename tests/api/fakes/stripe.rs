//! The fake Stripe API (see the module above for what every fake does).

use super::*;

// ------------------------------------------------------------------------------------------------
// Stripe

#[derive(Clone)]
pub struct FakeStripe {
    pub url: String,
    pub ledger: Shared,
    pub webhook_url: Arc<Mutex<String>>,
    pub cases: Arc<Mutex<StripeCases>>,
}

/// The fake's disputes and early fraud warnings, and every evidence form it was sent.
#[derive(Default)]
pub struct StripeCases {
    pub disputes: Vec<Value>,
    pub warnings: Vec<Value>,
    pub evidence_forms: Vec<HashMap<String, String>>,
    pub closed: Vec<String>,
    pub list_calls: usize,
}

#[derive(Clone)]
struct StripeState {
    ledger: Shared,
    idempotency: Arc<Mutex<HashMap<String, Value>>>,
    cases: Arc<Mutex<StripeCases>>,
}

/// The provider's first checks: the secret key (a failure is counted), then, for a request with an
/// `Idempotency-Key` seen before, the stored answer. `Ok(key)` lets the request go on.
fn stripe_preamble(s: &StripeState, headers: &HeaderMap) -> Result<Option<String>, Box<Response>> {
    let authorized =
        headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {STRIPE_SECRET_KEY}"));
    if !authorized {
        lock(&s.ledger).bad_signatures += 1;
        return Err(Box::new(stripe_error(StatusCode::UNAUTHORIZED, "Invalid API Key provided")));
    }
    let idem = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(k) = &idem
        && let Some(v) = s.idempotency.lock().expect("idem").get(k)
    {
        return Err(Box::new(Json(v.clone()).into_response()));
    }
    Ok(idem)
}

fn stripe_error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"error": {"type": "invalid_request_error", "message": message}}))).into_response()
}

fn session_json(t: &Trade) -> Value {
    let (status, paid) = match t.status.as_str() {
        "paid" => ("complete", "paid"),
        "expired" => ("expired", "unpaid"),
        _ => ("open", "unpaid"),
    };
    json!({"id": t.id, "object": "checkout.session", "url": format!("https://checkout.stripe.com/c/pay/{}", t.id),
           "client_reference_id": t.out_trade_no, "status": status, "payment_status": paid,
           "payment_intent": if t.txn_id.is_empty() { Value::Null } else { json!(t.txn_id) },
           "amount_total": t.amount_minor, "currency": t.request["currency"], "expires_at": t.expires_at_s,
           "metadata": {"attempt_ref": t.out_trade_no}})
}

async fn stripe_create_session(State(s): State<StripeState>, headers: HeaderMap, body: String) -> Response {
    let idem = match stripe_preamble(&s, &headers) {
        Ok(idem) => idem,
        Err(answer) => return *answer,
    };
    let f: HashMap<String, String> = serde_urlencoded::from_str(&body).unwrap_or_default();
    let get = |k: &str| f.get(k).cloned().unwrap_or_default();
    let expires_at: i64 = get("expires_at").parse().unwrap_or(0);
    let now = now_s();
    if get("mode") != "payment" || get("success_url").is_empty() {
        return stripe_error(StatusCode::BAD_REQUEST, "Missing required param");
    }
    if expires_at < now + 1800 || expires_at > now + 86_400 {
        return stripe_error(StatusCode::BAD_REQUEST, "expires_at must be between 30 minutes and 24 hours from now");
    }
    let amount: i64 = get("line_items[0][price_data][unit_amount]").parse().unwrap_or(0);
    let quantity: i64 = get("line_items[0][quantity]").parse().unwrap_or(0);
    let trade = Trade {
        out_trade_no: get("client_reference_id"),
        amount_minor: amount * quantity,
        status: "open".to_string(),
        id: format!("cs_test_{}", uuid::Uuid::now_v7().simple()),
        expires_at_s: expires_at,
        request: json!({"currency": get("line_items[0][price_data][currency]"), "success_url": get("success_url")}),
        ..Default::default()
    };
    let v = session_json(&trade);
    let mut l = lock(&s.ledger);
    l.calls.push("create_session".to_string());
    l.trades.insert(trade.id.clone(), trade);
    if let Some(k) = idem {
        s.idempotency.lock().expect("idem").insert(k, v.clone());
    }
    Json(v).into_response()
}

async fn stripe_get_session(
    State(s): State<StripeState>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    match lock(&s.ledger).trades.get(&id) {
        Some(t) => Json(session_json(t)).into_response(),
        None => stripe_error(StatusCode::NOT_FOUND, "No such checkout.session"),
    }
}

async fn stripe_expire(State(s): State<StripeState>, UrlPath(id): UrlPath<String>, headers: HeaderMap) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let mut l = lock(&s.ledger);
    match l.trades.get_mut(&id) {
        Some(t) if t.status == "open" => {
            t.status = "expired".to_string();
            Json(session_json(t)).into_response()
        }
        Some(_) => stripe_error(StatusCode::BAD_REQUEST, "Only Checkout Sessions with a status of open can be expired"),
        None => stripe_error(StatusCode::NOT_FOUND, "No such checkout.session"),
    }
}

fn refund_json(id: &str, t: &Trade, refund_no: &str, amount: i64, status: &str) -> Value {
    json!({"id": id, "object": "refund", "amount": amount, "currency": t.request["currency"], "status": status,
           "payment_intent": t.txn_id, "metadata": {"refund_no": refund_no, "attempt_ref": t.out_trade_no}})
}

async fn stripe_refund(State(s): State<StripeState>, headers: HeaderMap, body: String) -> Response {
    let idem = match stripe_preamble(&s, &headers) {
        Ok(idem) => idem,
        Err(answer) => return *answer,
    };
    let f: HashMap<String, String> = serde_urlencoded::from_str(&body).unwrap_or_default();
    let intent = f.get("payment_intent").cloned().unwrap_or_default();
    let amount: i64 = f.get("amount").and_then(|a| a.parse().ok()).unwrap_or(0);
    let refund_no = f.get("metadata[refund_no]").cloned().unwrap_or_default();
    let mut l = lock(&s.ledger);
    let pending = l.refunds_pending;
    if l.trades.values().any(|t| t.again.contains_key(&intent)) {
        let Some(_) = refund_again(&mut l, &intent, &refund_no, amount) else {
            return stripe_error(StatusCode::BAD_REQUEST, "Refund amount is greater than unrefunded amount on charge");
        };
        let t = l.trades.values().find(|t| t.again.contains_key(&intent)).expect("found above").clone();
        let v =
            refund_json(&format!("re_{refund_no}"), &Trade { txn_id: intent, ..t }, &refund_no, amount, "succeeded");
        return Json(v).into_response();
    }
    let Some(t) = l.trades.values_mut().find(|t| t.txn_id == intent && !intent.is_empty()) else {
        return stripe_error(StatusCode::NOT_FOUND, "No such payment_intent");
    };
    if t.refunds.values().sum::<i64>() + amount > t.amount_minor {
        return stripe_error(StatusCode::BAD_REQUEST, "Refund amount is greater than unrefunded amount on charge");
    }
    t.refunds.insert(refund_no.clone(), amount);
    let id = format!("re_{}", refund_no);
    let v = refund_json(&id, t, &refund_no, amount, if pending { "pending" } else { "succeeded" });
    let source = json!({"id": id, "object": "refund", "amount": amount, "currency": "cny", "payment_intent": intent,
                        "status": "succeeded", "metadata": v["metadata"].clone()});
    l.stripe_balance.push(balance_transaction("refund", -amount, 0, source));
    if let Some(k) = idem {
        s.idempotency.lock().expect("idem").insert(k, v.clone());
    }
    Json(v).into_response()
}

/// A balance transaction as Stripe lists it: `amount` signed, `net` = amount − fee.
pub fn balance_transaction(kind: &str, amount: i64, fee: i64, source: Value) -> Value {
    json!({"id": format!("txn_{}", uuid::Uuid::now_v7().simple()), "object": "balance_transaction", "type": kind,
           "reporting_category": kind, "amount": amount, "fee": fee, "net": amount - fee, "currency": "cny",
           "created": now_s(), "status": "pending", "source": source})
}

/// `GET /v1/balance_transactions`: newest first, `created[gte|lt]`, `starting_after`, `limit`;
/// sources are ids unless `expand[]=data.source`.
async fn stripe_balance(
    State(s): State<StripeState>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&query.unwrap_or_default()).unwrap_or_default();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let number = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
    let expanded = pairs.iter().any(|(n, v)| n == "expand[]" && v == "data.source");
    let mut l = lock(&s.ledger);
    l.stripe_pages += 1;
    let limit = number("limit").unwrap_or(10).clamp(1, 100) as usize;
    let limit = l.stripe_page_max.map_or(limit, |m| limit.min(m));
    let mut items: Vec<Value> = l
        .stripe_balance
        .iter()
        .rev()
        .filter(|t| number("created[gte]").is_none_or(|g| t["created"].as_i64().unwrap_or(0) >= g))
        .filter(|t| number("created[lt]").is_none_or(|g| t["created"].as_i64().unwrap_or(0) < g))
        .cloned()
        .collect();
    if let Some(after) = get("starting_after") {
        match items.iter().position(|t| t["id"] == after.as_str()) {
            Some(i) => items.drain(..=i).for_each(drop),
            None => return stripe_error(StatusCode::BAD_REQUEST, "No such balance transaction"),
        }
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    if !expanded {
        for t in &mut items {
            t["source"] = t["source"]["id"].clone();
        }
    }
    Json(json!({"object": "list", "url": "/v1/balance_transactions", "has_more": has_more, "data": items}))
        .into_response()
}

async fn stripe_get_refund(State(s): State<StripeState>, UrlPath(id): UrlPath<String>, headers: HeaderMap) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let l = lock(&s.ledger);
    let refund_no = id.trim_start_matches("re_");
    match l.trades.values().find(|t| t.refunds.contains_key(refund_no)) {
        Some(t) => Json(refund_json(&id, t, refund_no, t.refunds[refund_no], "succeeded")).into_response(),
        None => stripe_error(StatusCode::NOT_FOUND, "No such refund"),
    }
}

/// A list page of `items` created at or after `created[gte]`, newest first, after `starting_after`.
fn stripe_list(items: &[Value], q: &HashMap<String, String>, url: &str) -> Response {
    let since: i64 = q.get("created[gte]").and_then(|v| v.parse().ok()).unwrap_or(0);
    let limit: usize = q.get("limit").and_then(|v| v.parse().ok()).unwrap_or(10).min(100);
    let mut all: Vec<&Value> = items.iter().filter(|d| d["created"].as_i64().unwrap_or(0) >= since).collect();
    all.reverse();
    if let Some(after) = q.get("starting_after") {
        match all.iter().position(|d| d["id"] == after.as_str()) {
            Some(i) => all = all.split_off(i + 1),
            None => return stripe_error(StatusCode::BAD_REQUEST, "No such object for starting_after"),
        }
    }
    let has_more = all.len() > limit;
    all.truncate(limit);
    Json(json!({"object": "list", "url": url, "has_more": has_more, "data": all})).into_response()
}

async fn stripe_list_disputes(
    State(s): State<StripeState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let mut cases = s.cases.lock().expect("cases");
    cases.list_calls += 1;
    stripe_list(&cases.disputes, &q, "/v1/disputes")
}

async fn stripe_list_warnings(
    State(s): State<StripeState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let cases = s.cases.lock().expect("cases");
    stripe_list(&cases.warnings, &q, "/v1/radar/early_fraud_warnings")
}

/// Evidence, as Stripe takes it: staged, or submitted (the dispute goes under review).
async fn stripe_update_dispute(
    State(s): State<StripeState>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let form: HashMap<String, String> = serde_urlencoded::from_str(&body).unwrap_or_default();
    let mut cases = s.cases.lock().expect("cases");
    let Some(d) = cases.disputes.iter_mut().find(|d| d["id"] == id.as_str()) else {
        return stripe_error(StatusCode::NOT_FOUND, "No such dispute");
    };
    if !matches!(d["status"].as_str(), Some("needs_response" | "warning_needs_response")) {
        return stripe_error(StatusCode::BAD_REQUEST, "This dispute is not accepting evidence");
    }
    for (k, v) in &form {
        if let Some(field) = k.strip_prefix("evidence[").and_then(|k| k.strip_suffix(']')) {
            d["evidence"][field] = json!(v);
        }
    }
    if form.get("submit").map(String::as_str) != Some("false") {
        let status = if d["status"] == "warning_needs_response" { "warning_under_review" } else { "under_review" };
        d["status"] = json!(status);
        d["evidence_details"]["submission_count"] =
            json!(d["evidence_details"]["submission_count"].as_i64().unwrap_or(0) + 1);
        d["evidence_details"]["has_evidence"] = json!(true);
    }
    let answer = d.clone();
    cases.evidence_forms.push(form);
    Json(answer).into_response()
}

async fn stripe_close_dispute(
    State(s): State<StripeState>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let mut cases = s.cases.lock().expect("cases");
    let Some(d) = cases.disputes.iter_mut().find(|d| d["id"] == id.as_str()) else {
        return stripe_error(StatusCode::NOT_FOUND, "No such dispute");
    };
    d["status"] = json!("lost");
    d["evidence_details"]["due_by"] = json!(0);
    let answer = d.clone();
    cases.closed.push(id);
    Json(answer).into_response()
}

impl FakeStripe {
    /// Opens a dispute on `payment_intent` (no event sent): its object.
    pub fn open_dispute(&self, payment_intent: &str, amount: i64, due_in_s: i64) -> Value {
        let now = now_s();
        let d = json!({"id": format!("du_{}", uuid::Uuid::now_v7().simple()), "object": "dispute",
            "amount": amount, "currency": "cny", "reason": "fraudulent", "status": "needs_response",
            "payment_intent": payment_intent, "charge": format!("ch_{payment_intent}"), "created": now,
            "is_charge_refundable": false, "evidence": {}, "metadata": {},
            "evidence_details": {"due_by": now + due_in_s, "has_evidence": false, "past_due": false, "submission_count": 0}});
        self.cases.lock().expect("cases").disputes.push(d.clone());
        d
    }

    /// Sets a dispute's status at the fake: its object.
    pub fn set_dispute_status(&self, id: &str, status: &str) -> Value {
        let mut cases = self.cases.lock().expect("cases");
        let d = cases.disputes.iter_mut().find(|d| d["id"] == id).expect("dispute");
        d["status"] = json!(status);
        d.clone()
    }

    /// An early fraud warning on `payment_intent` (no event sent): its object.
    pub fn add_warning(&self, payment_intent: &str, actionable: bool) -> Value {
        let w = json!({"id": format!("issfr_{}", uuid::Uuid::now_v7().simple()), "object": "radar.early_fraud_warning",
            "actionable": actionable, "charge": format!("ch_{payment_intent}"), "created": now_s(),
            "fraud_type": "made_with_stolen_card", "livemode": false, "payment_intent": payment_intent});
        self.cases.lock().expect("cases").warnings.push(w.clone());
        w
    }

    /// An event of `kind` about `object`, created at `created` (unix seconds).
    pub fn case_event(kind: &str, object: &Value, created: i64) -> Value {
        json!({"id": format!("evt_{}", uuid::Uuid::now_v7().simple()), "object": "event", "type": kind,
               "created": created, "data": {"object": object}})
    }

    pub async fn start() -> FakeStripe {
        let ledger: Shared = Arc::default();
        let idempotency: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
        let cases: Arc<Mutex<StripeCases>> = Arc::default();
        let state = StripeState { ledger: ledger.clone(), idempotency, cases: cases.clone() };
        let router = Router::new()
            .route("/v1/checkout/sessions", post(stripe_create_session))
            .route("/v1/checkout/sessions/{id}", get(stripe_get_session))
            .route("/v1/checkout/sessions/{id}/expire", post(stripe_expire))
            .route("/v1/refunds", post(stripe_refund))
            .route("/v1/refunds/{id}", get(stripe_get_refund))
            .route("/v1/balance_transactions", get(stripe_balance))
            .route("/v1/disputes", get(stripe_list_disputes))
            .route("/v1/disputes/{id}", post(stripe_update_dispute))
            .route("/v1/disputes/{id}/close", post(stripe_close_dispute))
            .route("/v1/radar/early_fraud_warnings", get(stripe_list_warnings))
            .with_state(state);
        FakeStripe { url: serve(router).await, ledger, webhook_url: Arc::default(), cases }
    }

    pub fn config(&self) -> StripeConfig {
        StripeConfig {
            secret_key: Secret(STRIPE_SECRET_KEY.to_string()),
            webhook_secret: Secret(STRIPE_WEBHOOK_SECRET.to_string()),
            previous_webhook_secrets: vec![],
            api_base_url: self.url.clone(),
        }
    }

    pub fn session_for(&self, attempt_ref: &str) -> Option<Trade> {
        lock(&self.ledger).trades.values().find(|t| t.out_trade_no == attempt_ref).cloned()
    }

    /// `Stripe-Signature` for `body` at `t` with `secret`.
    pub fn signature(secret: &str, t: i64, body: &str) -> String {
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret.as_bytes());
        let v1 = hex::encode(aws_lc_rs::hmac::sign(&key, format!("{t}.{body}").as_bytes()).as_ref());
        format!("t={t},v1={v1}")
    }

    pub async fn send_event(&self, event: &Value) -> (u16, String) {
        let body = event.to_string();
        let url = self.webhook_url.lock().expect("url").clone();
        let r = reqwest::Client::new()
            .post(url)
            .header("Stripe-Signature", Self::signature(STRIPE_WEBHOOK_SECRET, now_s(), &body))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("webhook");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    /// The buyer pays the session of `attempt_ref`; `checkout.session.completed` goes out when `deliver`.
    pub async fn pay(&self, attempt_ref: &str, deliver: bool) -> Option<(u16, String)> {
        let session = {
            let mut l = lock(&self.ledger);
            let t = l.trades.values_mut().find(|t| t.out_trade_no == attempt_ref).expect("session");
            assert_eq!(t.status, "open", "only an open session can be paid");
            t.status = "paid".to_string();
            t.txn_id = format!("pi_{}", uuid::Uuid::now_v7().simple());
            let charge = json!({"id": format!("ch_{}", uuid::Uuid::now_v7().simple()), "object": "charge",
                                "amount": t.amount_minor, "currency": "cny", "payment_intent": t.txn_id, "metadata": {}});
            let fee = t.amount_minor * 29 / 1000 + 30;
            let bt = balance_transaction("charge", t.amount_minor, fee, charge);
            let session = session_json(t);
            l.stripe_balance.push(bt);
            session
        };
        if !deliver {
            return None;
        }
        let event = json!({"id": format!("evt_{}", uuid::Uuid::now_v7().simple()), "object": "event",
                           "type": "checkout.session.completed", "data": {"object": session}});
        Some(self.send_event(&event).await)
    }

    /// The session of `attempt_ref`, paid, completes again under another PaymentIntent (a second
    /// capture). Returns the new PaymentIntent and kassa's answer.
    pub async fn pay_again(&self, attempt_ref: &str) -> (String, (u16, String)) {
        let t = capture_again(&self.ledger, |t| t.out_trade_no == attempt_ref, |n, _| format!("pi_again_{n}"));
        let event = json!({"id": format!("evt_{}", uuid::Uuid::now_v7().simple()), "object": "event",
                           "type": "checkout.session.completed", "data": {"object": session_json(&t)}});
        (t.txn_id.clone(), self.send_event(&event).await)
    }
}
