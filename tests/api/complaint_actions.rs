//! WeChat Pay complaint actions against the fake WeChat, on both databases: a reply with an image
//! (uploaded as multipart signed over its meta, its media id in the reply) and the images refused
//! before anything is uploaded; the buyer's refund request approved then refunded through kassa's
//! refund engine, or rejected with a reason; the complaint notification URL registered, shown and
//! removed from the command line, the admin API and the console.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{ADMIN, Backend, Opts, Shop, s};
use crate::fakes::{self, fixture};
use crate::on_both;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR-a-small-png";

async fn world(backend: Backend, public_url: Option<&str>) -> Shop {
    let opts = Opts { manual_clock: true, public_url: public_url.map(str::to_string), ..Default::default() };
    Shop::start(backend, opts, 200).await
}

/// A paid WeChat order with a complaint (its `problem_type`) notified: the case's id, the
/// complaint's id, the order.
async fn complained(w: &Shop, problem_type: &str) -> (String, String, String) {
    let (order_no, attempt_ref) = w.paid("wechatpay").await;
    let now_s = w.t.now_ms() / 1000;
    let complaint = w.wechat.open_complaint(&attempt_ref, now_s - 600);
    let cid = s(&complaint["complaint_id"]);
    {
        let mut l = w.wechat.ledger.lock().unwrap();
        let c = l.wechat_complaints.iter_mut().find(|c| c["complaint_id"] == cid.as_str()).unwrap();
        c["problem_type"] = json!(problem_type);
    }
    assert_eq!(w.wechat.notify_complaint(&cid, "COMPLAINT.CREATE", "CREATE_COMPLAINT").await.0, 204);
    let cases = w.t.admin_get("/api/v1/admin/cases?open=false&limit=200").await;
    let case = cases["items"].as_array().unwrap().iter().find(|c| c["provider_case_id"] == cid.as_str()).cloned();
    (s(&case.expect("the case")["id"]), cid, order_no)
}

fn error_code(body: &Value) -> String {
    s(&body["error"]["code"])
}

fn uploads(w: &Shop) -> usize {
    w.wechat.ledger.lock().unwrap().complaint_images.len()
}

on_both!(a_reply_carries_images_and_bad_images_are_refused, reply_with_images);

async fn reply_with_images(backend: Backend) {
    let w = world(backend, None).await;
    let (id, cid, _) = complained(&w, "REFUND").await;
    let path = format!("/api/v1/admin/cases/{id}/reply");

    // Refused before anything is uploaded: too large, not an image WeChat takes, too many, not
    // base64.
    let mut large = PNG.to_vec();
    large.resize(kassa::domain::case::CASE_IMAGE_BYTES_MAX + 1, 0);
    let gif = B64.encode(b"GIF89a....");
    let png = B64.encode(PNG);
    for (images, expected) in [
        (vec![B64.encode(&large)], "image_too_large"),
        (vec![gif], "image_type_refused"),
        (vec![png.clone(); kassa::domain::case::CASE_IMAGES_MAX + 1], "too_many_images"),
        (vec!["not base64!".to_string()], "invalid_image"),
    ] {
        let (status, refused) = w.t.admin_post(&path, json!({"text": "您好", "images": images})).await;
        assert_eq!(
            (status, error_code(&refused)),
            (StatusCode::UNPROCESSABLE_ENTITY, expected.to_string()),
            "{refused}"
        );
    }
    assert_eq!(uploads(&w), 0);
    assert!(w.wechat.ledger.lock().unwrap().complaint_responses.is_empty());

    // A reply with an image: uploaded (its SHA-256 checked by WeChat), its media id in the reply.
    let (status, replied) = w.t.admin_post(&path, json!({"text": "已补发，见截图", "images": [png]})).await;
    assert_eq!(status, StatusCode::OK, "{replied}");
    {
        let l = w.wechat.ledger.lock().unwrap();
        assert_eq!(l.complaint_images, vec![("MEDIA-1".to_string(), PNG.to_vec())]);
        assert_eq!(l.complaint_responses.len(), 1);
        assert_eq!(l.complaint_responses[0]["response_images"], json!(["MEDIA-1"]));
        assert_eq!(l.complaint_replies, vec![(cid.clone(), "已补发，见截图".to_string())]);
    }
    let operator: Vec<&Value> =
        replied["messages"].as_array().unwrap().iter().filter(|m| m["source"] == "operator").collect();
    assert_eq!(
        serde_json::from_str::<Value>(&s(&operator[0]["body"])).unwrap(),
        json!({"text": "已补发，见截图", "media_ids": ["MEDIA-1"]})
    );
    assert_eq!(s(&replied["provider_status"]), "PROCESSING");
    // A reply without images sends none.
    let (status, _) = w.t.admin_post(&path, json!({"text": "还有问题请联系我们"})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(w.wechat.ledger.lock().unwrap().complaint_responses[1].get("response_images").is_none());
    w.t.assert_clean().await;
}

on_both!(a_refund_request_is_approved_then_refunded_or_rejected_with_a_reason, refund_requests);

async fn refund_requests(backend: Backend) {
    let w = world(backend, None).await;
    let (approved, approved_cid, order_no) = complained(&w, "REFUND").await;
    let (rejected, rejected_cid, _) = complained(&w, "REFUND").await;
    let (other, _, _) = complained(&w, "SERVICE_NOT_WORK").await;
    let path = |id: &str| format!("/api/v1/admin/cases/{id}/refund-request");

    // Approved: WeChat is told when the refund starts; the complaint stays open and no money
    // moved.
    let (status, body) = w.t.admin_post(&path(&approved), json!({"action": "approve", "launch_refund_days": 2})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((s(&body["state"]), s(&body["provider_status"])), ("needs_response".into(), "PROCESSING".into()));
    assert_eq!(
        w.wechat.ledger.lock().unwrap().complaint_refund_answers,
        vec![(approved_cid.clone(), json!({"action": "APPROVE", "launch_refund_day": 2}))]
    );
    assert!(w.t.order(&order_no).await["refunds"].as_array().unwrap().is_empty());
    let ops: Vec<String> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["source"] == "operator")
        .map(|m| s(&m["kind"]))
        .collect();
    assert_eq!(ops, vec!["refund_approved"]);
    // The money moves through the desk's refund, under the case's refund number.
    let amount = body["amount_minor"].as_i64().unwrap();
    let (status, refund) =
        w.t.admin_post(&format!("/api/v1/admin/cases/{approved}/refund"), json!({"amount_minor": amount})).await;
    assert_eq!(status, StatusCode::CREATED, "{refund}");
    assert_eq!(s(&refund["refund_no"]), format!("case-{approved}-{amount}"));
    let (status, too_many) =
        w.t.admin_post(&path(&approved), json!({"action": "approve", "launch_refund_days": 8})).await;
    assert_eq!(
        (status, error_code(&too_many)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_launch_refund_days".into())
    );

    let with_image = json!({"action": "approve", "images": [B64.encode(PNG)]});
    let (status, refused) = w.t.admin_post(&path(&approved), with_image).await;
    assert_eq!((status, error_code(&refused)), (StatusCode::UNPROCESSABLE_ENTITY, "images_not_taken".into()));
    assert_eq!(uploads(&w), 0);

    // Rejected: a reason is required; with one (a remark and an image too), WeChat closes it.
    for body in [json!({"action": "reject"}), json!({"action": "reject", "reason": "  "})] {
        let (status, refused) = w.t.admin_post(&path(&rejected), body).await;
        assert_eq!((status, error_code(&refused)), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_reject_reason".into()));
    }
    let (status, refused) = w.t.admin_post(&path(&rejected), json!({"action": "maybe"})).await;
    assert_eq!((status, error_code(&refused)), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_action".into()));
    assert_eq!(w.wechat.ledger.lock().unwrap().complaint_refund_answers.len(), 1, "nothing sent");
    let reject =
        json!({"action": "reject", "reason": "卡密已发放并已查看", "remark": "见截图", "images": [B64.encode(PNG)]});
    let (status, body) = w.t.admin_post(&path(&rejected), reject).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        w.wechat.ledger.lock().unwrap().complaint_refund_answers[1],
        (
            rejected_cid.clone(),
            json!({"action": "REJECT", "reject_reason": "卡密已发放并已查看", "remark": "见截图", "reject_media_list": ["MEDIA-1"]})
        )
    );
    assert_eq!((s(&body["state"]), s(&body["outcome"])), ("closed".into(), "resolved".into()));
    let (status, refused) = w.t.admin_post(&path(&rejected), json!({"action": "approve"})).await;
    assert_eq!((status, error_code(&refused)), (StatusCode::CONFLICT, "case_closed".into()));

    // A complaint that asks for no refund takes no answer to one.
    let (status, refused) = w.t.admin_post(&path(&other), json!({"action": "approve"})).await;
    assert_eq!((status, error_code(&refused)), (StatusCode::CONFLICT, "not_a_refund_request".into()));
    assert_eq!(w.wechat.ledger.lock().unwrap().complaint_refund_answers.len(), 2);
    w.t.assert_clean().await;
}

/// A multipart/form-data body of `fields` and image `files` (name, bytes): the body and its
/// content type.
fn multipart(fields: &[(&str, &str)], files: &[(&str, &[u8])]) -> (Vec<u8>, String) {
    let boundary = "test-boundary-7d1f";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").bytes(),
        );
    }
    for (name, bytes) in files {
        body.extend(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n"
            )
            .bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").bytes());
    (body, format!("multipart/form-data; boundary={boundary}"))
}

on_both!(the_console_replies_with_images_and_answers_refund_requests, console_actions);

async fn console_actions(backend: Backend) {
    let w = world(backend, None).await;
    let (id, cid, _) = complained(&w, "REFUND").await;
    let (http, cookie, csrf) = crate::pages::console(&w.t).await;
    let page = http.get(w.t.url(&format!("/admin/cases/{id}?lang=en"))).header("cookie", &cookie).send().await.unwrap();
    let page = page.text().await.unwrap();
    for form in ["reply-form", "complete-form", "approve-form", "reject-form"] {
        assert!(page.contains(&format!("id=\"{form}\"")), "{form}: {page}");
    }
    assert!(
        page.contains("enctype=\"multipart/form-data\"") && page.contains("moves through the refund form"),
        "{page}"
    );
    let t = &w.t;
    let post = |path: String, body: Vec<u8>, content_type: String| {
        let (http, cookie) = (http.clone(), cookie.clone());
        async move {
            let r = http
                .post(t.url(&path))
                .header("cookie", cookie)
                .header("content-type", content_type)
                .body(body)
                .send()
                .await
                .unwrap();
            let location = r.headers().get("location").map(|l| l.to_str().unwrap().to_string()).unwrap_or_default();
            (r.status(), location)
        }
    };

    // Without the CSRF token: refused, nothing uploaded.
    let (body, ct) = multipart(&[("text", "您好")], &[("images", PNG)]);
    assert_eq!(post(format!("/admin/cases/{id}/reply"), body, ct).await.0, StatusCode::FORBIDDEN);
    assert_eq!(uploads(&w), 0);
    // Five files: refused, the reason on the page.
    let five = [("images", PNG); 5];
    let (body, ct) = multipart(&[("csrf", csrf.as_str()), ("text", "您好")], &five);
    let (status, location) = post(format!("/admin/cases/{id}/reply"), body, ct).await;
    assert!(status == StatusCode::SEE_OTHER && location.contains("error="), "{location}");
    assert_eq!(uploads(&w), 0);
    // A reply with one image and an empty file input.
    let (body, ct) =
        multipart(&[("csrf", csrf.as_str()), ("text", "已补发")], &[("images", PNG), ("images", &b""[..])]);
    let (status, location) = post(format!("/admin/cases/{id}/reply"), body, ct).await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/admin/cases/{id}?done=replied")));
    assert_eq!(w.wechat.ledger.lock().unwrap().complaint_responses[0]["response_images"], json!(["MEDIA-1"]));

    // Approved, then straight to the refund form.
    let (body, ct) = multipart(&[("csrf", csrf.as_str()), ("action", "approve"), ("launch_refund_days", "1")], &[]);
    let (status, location) = post(format!("/admin/cases/{id}/refund-request"), body, ct).await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::SEE_OTHER, format!("/admin/cases/{id}?done=refund_approved#refund-form").as_str())
    );
    assert_eq!(
        w.wechat.ledger.lock().unwrap().complaint_refund_answers,
        vec![(cid.clone(), json!({"action": "APPROVE", "launch_refund_day": 1}))]
    );
    let page = http.get(w.t.url(&location)).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("Approving moved no money") && page.contains("id=\"refund-form\""), "{page}");
    // A refusal without its reason goes back with the reason why.
    let (body, ct) = multipart(&[("csrf", csrf.as_str()), ("action", "reject"), ("reason", "")], &[]);
    let (_, location) = post(format!("/admin/cases/{id}/refund-request"), body, ct).await;
    assert!(location.starts_with(&format!("/admin/cases/{id}?error=")), "{location}");
    assert_eq!(w.wechat.ledger.lock().unwrap().complaint_refund_answers.len(), 1);
    // Completed from the console.
    let form = [("csrf", csrf.as_str())];
    let r = http.post(w.t.url(&format!("/admin/cases/{id}/complete"))).header("cookie", &cookie).form(&form);
    let r = r.send().await.unwrap();
    assert_eq!(r.headers()["location"], format!("/admin/cases/{id}?done=completed").as_str());
    assert_eq!(w.wechat.ledger.lock().unwrap().complaints_completed, vec![cid]);
    // Closed: the page offers none of the complaint's forms any more.
    let page = http.get(w.t.url(&format!("/admin/cases/{id}"))).header("cookie", &cookie).send().await.unwrap();
    let page = page.text().await.unwrap();
    assert!(!page.contains("id=\"reply-form\"") && !page.contains("id=\"approve-form\""), "{page}");
    w.t.assert_clean().await;
}

/// `kassa cases wechat-notify-url …` against the test's database and the fake WeChat.
async fn cli(w: &Shop, dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let config = dir.join("kassa.toml");
    std::fs::write(
        &config,
        format!(
            "database_url = \"{db}\"\npublic_url = \"https://kassa.example\"\n\n[gateways.wechatpay]\nmchid = \"{mchid}\"\nappid = \"{appid}\"\n\
             merchant_serial_no = \"{serial}\"\nmerchant_private_key_file = \"{key}\"\nplatform_public_key_file = \"{pubkey}\"\n\
             platform_serial = \"{pserial}\"\napi_v3_key = \"{v3}\"\napi_base_url = \"{url}\"\n",
            db = w.t.database_url,
            mchid = fakes::WECHAT_MCHID,
            appid = fakes::WECHAT_APPID,
            serial = fakes::WECHAT_MERCHANT_SERIAL,
            key = fixture("merchant_private.pem").display(),
            pubkey = fixture("provider_public.pem").display(),
            pserial = fakes::WECHAT_PLATFORM_SERIAL,
            v3 = fakes::WECHAT_API_V3_KEY,
            url = w.wechat.url,
        ),
    )
    .unwrap();
    let mut cmd = crate::common::kassa_command();
    cmd.args(["cases", "wechat-notify-url"])
        .args(args)
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env_remove("KASSA_DATABASE_URL");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

on_both!(the_notify_url_is_registered_shown_and_removed, notify_url);

async fn notify_url(backend: Backend) {
    let w = world(backend, Some("https://kassa.example")).await;
    let dir = tempfile::tempdir().unwrap();
    let calls = || w.wechat.ledger.lock().unwrap().complaint_notify_calls.clone();

    // The command line: none registered; kassa's own set (POST), then another (PUT); deleted.
    let (code, out, err) = cli(&w, dir.path(), &["show"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("registered  (none)") && out.contains("kassa       https://kassa.example/notify/wechatpay"));
    let (code, out, err) = cli(&w, dir.path(), &["set"]).await;
    assert_eq!((code, out.trim()), (0, "registered  https://kassa.example/notify/wechatpay"), "{err}");
    let (code, out, _) = cli(&w, dir.path(), &["set", "https://shop.example/wechat/complaints"]).await;
    assert_eq!((code, out.trim()), (0, "registered  https://shop.example/wechat/complaints"));
    assert_eq!(calls(), vec!["POST", "PUT"]);
    let (code, _, err) = cli(&w, dir.path(), &["set", "http://shop.example/plain"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("https://"), "{err}");
    let (code, out, _) = cli(&w, dir.path(), &["delete"]).await;
    assert_eq!((code, out.trim()), (0, "removed"));
    let (code, out, _) = cli(&w, dir.path(), &["delete"]).await;
    assert_eq!((code, out.trim()), (0, "none was registered"));
    assert_eq!(w.wechat.ledger.lock().unwrap().complaint_notify_url, None);

    // The admin API: shown, kassa's own registered, another, removed.
    let path = "/api/v1/admin/cases/notify-url/wechatpay";
    let shown = w.t.admin_get(path).await;
    assert_eq!(
        shown,
        json!({"provider": "wechatpay", "registered": null, "kassa_url": "https://kassa.example/notify/wechatpay"})
    );
    let http = reqwest::Client::new();
    let t = &w.t;
    let put = |body: Value| {
        let http = http.clone();
        async move {
            let r = http.put(t.url(path)).bearer_auth(ADMIN).json(&body).send().await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = put(json!({})).await;
    assert_eq!((status, s(&body["registered"])), (StatusCode::OK, "https://kassa.example/notify/wechatpay".into()));
    let (status, body) = put(json!({"url": "https://kassa.example/notify?x=1"})).await;
    assert_eq!((status, error_code(&body)), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_notify_url".into()));
    let r = http.delete(w.t.url(path)).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"provider": "wechatpay", "removed": true}));
    let r = http.get(w.t.url("/api/v1/admin/cases/notify-url/stripe")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // The console: linked from the cases, kassa's own registered, removed once confirmed.
    let (browser, cookie, csrf) = crate::pages::console(&w.t).await;
    let get = |p: &'static str| {
        let (browser, cookie) = (browser.clone(), cookie.clone());
        async move { browser.get(t.url(p)).header("cookie", cookie).send().await.unwrap().text().await.unwrap() }
    };
    assert!(get("/admin/cases?lang=en").await.contains("href=\"/admin/cases/notify-url\""));
    let page = get("/admin/cases/notify-url?lang=en").await;
    assert!(page.contains("none registered") && page.contains("https://kassa.example/notify/wechatpay"), "{page}");
    let form = |p: &'static str, fields: Vec<(&'static str, String)>| {
        let (browser, cookie) = (browser.clone(), cookie.clone());
        async move {
            let r = browser.post(t.url(p)).header("cookie", cookie).form(&fields).send().await.unwrap();
            (r.status(), r.headers().get("location").map(|l| l.to_str().unwrap().to_string()).unwrap_or_default())
        }
    };
    assert_eq!(form("/admin/cases/notify-url", vec![]).await.0, StatusCode::FORBIDDEN);
    let (status, location) = form("/admin/cases/notify-url", vec![("csrf", csrf.clone())]).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/admin/cases/notify-url?done=registered"));
    let page = get("/admin/cases/notify-url?lang=en").await;
    assert!(page.contains("id=\"registered-url\">https://kassa.example/notify/wechatpay"), "{page}");
    let (_, location) = form("/admin/cases/notify-url/delete", vec![("csrf", csrf.clone())]).await;
    assert!(location.starts_with("/admin/cases/notify-url?error="), "{location}");
    let (_, location) =
        form("/admin/cases/notify-url/delete", vec![("csrf", csrf.clone()), ("confirm", "yes".into())]).await;
    assert_eq!(location, "/admin/cases/notify-url?done=removed");
    assert_eq!(calls(), vec!["POST", "PUT", "DELETE", "POST", "DELETE", "POST", "DELETE"]);
    w.t.assert_clean().await;
}
