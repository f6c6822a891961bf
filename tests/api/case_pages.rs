//! The complaints and disputes desk on the console, against the fake Stripe, on both databases:
//! the list (open first by deadline, linked to the orders, the overdue marked), a case's page (its
//! facts, the provider's messages escaped, the evidence form prefilled from the order), the evidence
//! saved and submitted, the loss accepted, a form without its CSRF token refused, and *Poll the
//! providers now* finding a dispute no event announced.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, Shop, s};
use crate::fakes::FakeStripe;
use crate::on_both;

/// A signed-in console: its requests carry the session cookie (and the CSRF token on forms).
struct Console {
    http: reqwest::Client,
    cookie: String,
    csrf: String,
}

impl Console {
    async fn page(&self, w: &Shop, path: &str) -> String {
        let r = self.http.get(w.t.url(path)).header("cookie", &self.cookie).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "GET {path}");
        r.text().await.unwrap()
    }

    /// Posts a form (with the CSRF token when `csrf`): the status and where it leads.
    async fn post(&self, w: &Shop, path: &str, form: &[(&str, &str)], csrf: bool) -> (StatusCode, String) {
        let mut form: Vec<(&str, &str)> = form.to_vec();
        if csrf {
            form.push(("csrf", &self.csrf));
        }
        let r = self.http.post(w.t.url(path)).header("cookie", &self.cookie).form(&form).send().await.unwrap();
        let location = r.headers().get("location").map(|l| l.to_str().unwrap().to_string()).unwrap_or_default();
        (r.status(), location)
    }
}

/// The text of the textarea `id` on `html` (as the page escapes it).
fn textarea(html: &str, id: &str) -> String {
    let rest = html.split(&format!("id=\"{id}\"")).nth(1).unwrap_or_else(|| panic!("no {id} in\n{html}"));
    rest.split_once('>').unwrap().1.split("</textarea>").next().unwrap().to_string()
}

/// The row of the case `id` on the list page.
fn row<'a>(html: &'a str, id: &str) -> &'a str {
    let rest = html.split(&format!("<tr id=\"case-{id}\"")).nth(1).unwrap_or_else(|| panic!("no case {id} in\n{html}"));
    rest.split("</tr>").next().unwrap()
}

/// Opens a dispute on the payment of `attempt_ref` due in `due_in_s` and sends its signed event,
/// with `note` in its metadata: the case's id and the dispute.
async fn dispute(w: &Shop, attempt_ref: &str, due_in_s: i64, note: &str) -> (String, Value) {
    let pi = w.stripe.session_for(attempt_ref).expect("session").txn_id;
    let mut d = w.stripe.open_dispute(&pi, 8_888, due_in_s);
    d["metadata"] = json!({"note": note});
    let event = FakeStripe::case_event("charge.dispute.created", &d, d["created"].as_i64().unwrap());
    assert_eq!(w.stripe.send_event(&event).await.0, 200);
    let cases = w.t.admin_get("/api/v1/admin/cases").await;
    let case = cases["items"].as_array().unwrap().iter().find(|c| c["provider_case_id"] == d["id"]).cloned();
    (s(&case.expect("the case")["id"]), d)
}

on_both!(the_console_answers_disputes_and_polls_the_providers, console_desk);

async fn console_desk(backend: Backend) {
    let w = Shop::start(backend, Opts { manual_clock: true, ..Default::default() }, 50).await;
    let (order_a, attempt_a) = w.paid("stripe").await;
    let (order_b, attempt_b) = w.paid("stripe").await;
    // Paid before the clock moves on (the fake signs its events with the time it reads).
    let (_, attempt_c) = w.paid("stripe").await;
    let (a, _) = dispute(&w, &attempt_a, 7 * 86_400, "<script>alert(1)</script>").await;
    let (b, dispute_b) = dispute(&w, &attempt_b, 3_600, "plain").await;
    w.advance(2 * 3_600_000);
    let (http, cookie, csrf) = crate::pages::console(&w.t).await;
    let c = Console { http, cookie, csrf };

    // The list: the nearest deadline first, each linked to its order, its deadline and amount shown,
    // the one past its deadline marked.
    let list = c.page(&w, "/admin/cases").await;
    assert!(list.contains("href=\"/admin/cases\"") && list.contains("Complaints and disputes"), "{list}");
    let (pos_a, pos_b) = (list.find(&format!("case-{a}")).unwrap(), list.find(&format!("case-{b}")).unwrap());
    assert!(pos_b < pos_a, "the nearest deadline first");
    let due_a = s(&w.t.admin_get(&format!("/api/v1/admin/cases/{a}")).await["due_at"]);
    let row_a = row(&list, &a);
    assert!(row_a.contains(&format!("href=\"/admin/orders/{order_a}\"")), "{row_a}");
    assert!(row_a.contains(&due_a) && row_a.contains("(evidence)") && row_a.contains("88.88"), "{row_a}");
    assert!(row_a.contains("needs_response") && !row_a.contains("overdue"), "{row_a}");
    let row_b = row(&list, &b);
    assert!(row_b.contains(&format!("href=\"/admin/orders/{order_b}\"")) && row_b.contains("overdue"), "{row_b}");
    let zh = c.page(&w, "/admin/cases?lang=zh").await;
    assert!(zh.contains("投诉与争议") && zh.contains("已逾期"), "{zh}");

    // The case's page: its facts, the event as it arrived (escaped), the evidence kassa suggests.
    let page = c.page(&w, &format!("/admin/cases/{a}?lang=en")).await;
    assert!(page.contains(&format!("href=\"/admin/orders/{order_a}\"")), "{page}");
    assert!(page.contains("&#60;script&#62;alert(1)&#60;/script&#62;") && !page.contains("<script>alert"), "{page}");
    assert!(page.contains("charge.dispute.created") && page.contains("<pre"), "{page}");
    assert_eq!(textarea(&page, "evidence-product_description"), "1 × Longjing tea");
    assert!(textarea(&page, "evidence-uncategorized_text").contains(&order_a), "{page}");
    assert_eq!(textarea(&page, "evidence-shipping_carrier"), "", "the other fields, empty");
    assert!(page.contains("id=\"accept\"") && page.contains("id=\"submit-evidence\""), "{page}");

    // Saved without submitting, then submitted with the operator's edit.
    let path = format!("/admin/cases/{a}/evidence");
    let description = ("evidence[product_description]", "1 × Longjing tea, 250 g");
    let (status, location) =
        c.post(&w, &path, &[description, ("evidence[customer_name]", ""), ("submit", "false")], true).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, format!("/admin/cases/{a}?done=saved").as_str()));
    let (status, location) =
        c.post(&w, &path, &[description, ("evidence[customer_name]", "A. Buyer"), ("submit", "true")], true).await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/admin/cases/{a}?done=submitted")));
    {
        let cases = w.stripe.cases.lock().unwrap();
        assert_eq!(cases.evidence_forms.len(), 2);
        let saved = &cases.evidence_forms[0];
        assert_eq!(saved.get("submit").map(String::as_str), Some("false"));
        assert!(!saved.contains_key("evidence[customer_name]"), "an empty field is left out: {saved:?}");
        let sent = &cases.evidence_forms[1];
        assert_eq!(sent.get("submit").map(String::as_str), Some("true"));
        assert_eq!(sent.get("evidence[customer_name]").map(String::as_str), Some("A. Buyer"));
        assert_eq!(sent.get("evidence[product_description]").map(String::as_str), Some("1 × Longjing tea, 250 g"));
        assert!(sent.get("evidence[uncategorized_text]").is_some_and(|t| t.contains(&order_a)), "{sent:?}");
    }
    let page = c.page(&w, &format!("/admin/cases/{a}?done=submitted")).await;
    assert!(page.contains("id=\"case-state\">under_review") && page.contains("Evidence submitted."), "{page}");
    assert!(page.contains("evidence_submitted") && page.contains("A. Buyer"), "what was sent is kept: {page}");

    // A form without its CSRF token is refused and sends nothing.
    let (status, _) = c.post(&w, &format!("/admin/cases/{b}/accept"), &[("confirm", "yes")], false).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = c.post(&w, &path, &[("submit", "true")], false).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(w.stripe.cases.lock().unwrap().evidence_forms.len(), 2);
    assert!(w.stripe.cases.lock().unwrap().closed.is_empty());

    // Accepting the loss takes the box ticked; then the dispute closes as lost.
    let accept = format!("/admin/cases/{b}/accept");
    let (status, location) = c.post(&w, &accept, &[], true).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.starts_with(&format!("/admin/cases/{b}?error=")), "{location}");
    assert!(w.stripe.cases.lock().unwrap().closed.is_empty());
    let (status, location) = c.post(&w, &accept, &[("confirm", "yes")], true).await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/admin/cases/{b}?done=accepted")));
    assert_eq!(w.stripe.cases.lock().unwrap().closed, vec![s(&dispute_b["id"])]);
    let closed = w.t.admin_get(&format!("/api/v1/admin/cases/{b}")).await;
    assert_eq!((s(&closed["state"]), s(&closed["outcome"])), ("closed".into(), "lost".into()));
    let page = c.page(&w, &format!("/admin/cases/{b}")).await;
    assert!(page.contains("id=\"case-outcome\">lost") && !page.contains("id=\"evidence-form\""), "{page}");
    // Once more: refused, the reason on the page.
    let (_, location) = c.post(&w, &accept, &[("confirm", "yes")], true).await;
    let page = c.page(&w, &location).await;
    assert!(page.contains("id=\"error\">the case is closed"), "{page}");

    // Closed cases only with ?all=1.
    let list = c.page(&w, "/admin/cases").await;
    assert!(list.contains(&format!("case-{a}")) && !list.contains(&format!("case-{b}")), "{list}");
    let list = c.page(&w, "/admin/cases?all=1").await;
    assert!(row(&list, &b).contains("lost"), "{list}");

    // A dispute no event announced: the poll finds it.
    let lost = w.stripe.open_dispute(&w.stripe.session_for(&attempt_c).unwrap().txn_id, 100, 7 * 86_400);
    let (status, location) = c.post(&w, "/admin/cases/poll", &[], true).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    // Every provider with cases is polled: Stripe finds the new dispute, Alipay and WeChat Pay
    // have none.
    assert_eq!(location, "/admin/cases?polled=alipay%3A0%3A0%3A0%2Cstripe%3A3%3A1%3A0%2Cwechatpay%3A0%3A0%3A0");
    let list = c.page(&w, &location).await;
    assert!(list.contains("alipay: 0 case(s) listed, 0 new, 0 changed."), "{list}");
    assert!(list.contains("stripe: 3 case(s) listed, 1 new, 0 changed."), "{list}");
    assert!(list.contains("wechatpay: 0 case(s) listed, 0 new, 0 changed."), "{list}");
    let found = w.t.admin_get("/api/v1/admin/cases").await;
    assert!(found["items"].as_array().unwrap().iter().any(|c| c["provider_case_id"] == lost["id"]), "{found}");
    let (status, _) = c.post(&w, "/admin/cases/poll", &[], false).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    w.t.assert_clean().await;
}

on_both!(the_console_refunds_a_case_and_releases_the_keys_it_holds, console_refund_release);

async fn console_refund_release(backend: Backend) {
    let w = Shop::start(backend, Opts { manual_clock: true, ..Default::default() }, 50).await;
    let body = json!({"sku": "GAME", "name": "Game key", "price_minor": 500, "currency": "CNY", "kind": "digital"});
    assert_eq!(w.t.admin_post("/api/v1/admin/skus", body).await.0, StatusCode::CREATED);
    assert_eq!(w.t.admin_post("/api/v1/admin/skus/GAME/keys", json!({"keys": ["KEY-1"]})).await.0, StatusCode::OK);
    let buyer = w.t.buyer().await;
    let basket = w.t.basket(&buyer, &[("GAME", 1)]).await;
    let (status, placed) = w.t.checkout_with(&buyer, &basket, &json!({"gateway": "stripe"})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
    assert!(w.stripe.pay(&attempt_ref, true).await.is_some_and(|(status, _)| status == 200));
    let (id, _) = dispute(&w, &attempt_ref, 7 * 86_400, "keys").await;
    let (http, cookie, csrf) = crate::pages::console(&w.t).await;
    let c = Console { http, cookie, csrf };
    let page = c.page(&w, &format!("/admin/cases/{id}?lang=en")).await;
    assert!(page.contains("id=\"refund-form\"") && page.contains("id=\"release-keys\""), "{page}");

    // A refund typed as money: 2.00 CNY under the case's refund number; the amount refused when
    // it is not money of the order's currency.
    let path = format!("/admin/cases/{id}/refund");
    let (status, location) = c.post(&w, &path, &[("amount", "2.00")], true).await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/admin/cases/{id}?done=refunded")));
    let order = w.t.order(&order_no).await;
    let refunds: Vec<(String, i64)> = order["refunds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (s(&r["refund_no"]), r["amount_minor"].as_i64().unwrap()))
        .collect();
    assert_eq!(refunds, vec![(format!("case-{id}-200"), 200)]);
    let (_, location) = c.post(&w, &path, &[("amount", "two")], true).await;
    assert!(location.starts_with(&format!("/admin/cases/{id}?error=")), "{location}");
    let (status, _) = c.post(&w, &path, &[("amount", "1.00")], false).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The keys the case holds back, shown to the buyer again.
    let path = format!("/admin/cases/{id}/release-keys");
    let (status, location) = c.post(&w, &path, &[], true).await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/admin/cases/{id}?done=released")));
    assert_eq!(w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await["keys_held"], false);
    let page = c.page(&w, &format!("/admin/cases/{id}?done=released&lang=en")).await;
    assert!(!page.contains("id=\"release-keys\"") && page.contains("The keys are shown to the buyer again."), "{page}");
    w.t.assert_clean().await;
}
