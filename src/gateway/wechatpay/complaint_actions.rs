//! The adapter's complaint actions (docs/gateways/wechatpay.md §9): a reply with its images, a
//! completion, the answer to a refund request, an image uploaded (multipart, signed over its
//! `meta` part), and the complaint notification URL registered, read or removed. Each is a signed
//! request; an action on a complaint answers the complaint as fetched after it.

use serde_json::{Value, json};

use super::super::GatewayError;
use super::super::keys::nonce;
use super::super::wechat_complaints as complaints;
use super::super::wechat_wire::{Outgoing, refusal};
use super::WechatPay;
use crate::clock::Millis;
use crate::domain::case::{CaseImage, CaseReport};

impl WechatPay {
    /// A complaint request (`path` from [`complaints::complaint_path`]); then the complaint as it
    /// stands, fetched.
    pub(super) async fn complaint_action(
        &self,
        case_id: &str,
        suffix: &str,
        body: Value,
        now: Millis,
    ) -> Result<CaseReport, GatewayError> {
        let path = complaints::complaint_path(case_id, suffix)
            .ok_or_else(|| GatewayError::invalid("case_refused", "not a WeChat Pay complaint id"))?;
        let r = self.call("POST", &path, Some(&body)).await?;
        if !matches!(r.status, 200 | 204) {
            return Err(refusal("complaint", &r));
        }
        self.complaint_detail(case_id, now).await
    }

    /// `GET …/complaints-v2/{id}`: the complaint as it stands at `now`.
    pub(super) async fn complaint_detail(&self, case_id: &str, now: Millis) -> Result<CaseReport, GatewayError> {
        let path = complaints::complaint_path(case_id, "")
            .ok_or_else(|| GatewayError::invalid("case_refused", "not a WeChat Pay complaint id"))?;
        let r = self.call("GET", &path, None).await?;
        if r.status != 200 {
            return Err(refusal("complaint", &r));
        }
        let report = complaints::detail_report(&r.body, &format!("GET {}", complaints::COMPLAINTS_PATH), now)
            .map_err(|why| GatewayError::unavailable(format!("wechatpay complaint: {why}")))?;
        Ok(complaints::with_history(report, self.complaint_history(case_id).await?))
    }

    /// `GET …/{complaint_id}/negotiation-historys`, page by page: the thread between the buyer,
    /// the merchant and WeChat, as WeChat sent it.
    async fn complaint_history(&self, case_id: &str) -> Result<Vec<Value>, GatewayError> {
        let mut thread = Vec::new();
        for _ in 0..complaints::HISTORY_PAGES_MAX {
            let path = complaints::history_path(case_id, thread.len())
                .ok_or_else(|| GatewayError::invalid("case_refused", "not a WeChat Pay complaint id"))?;
            let r = self.call("GET", &path, None).await?;
            if r.status != 200 {
                return Err(refusal("negotiation history", &r));
            }
            let (entries, more) = complaints::history_page(&r.body, thread.len())
                .map_err(|why| GatewayError::unavailable(format!("wechatpay complaint: {why}")))?;
            thread.extend(entries);
            if !more {
                break;
            }
        }
        Ok(thread)
    }

    /// The reply `text` with the images uploaded for it.
    pub(super) async fn reply(
        &self,
        case_id: &str,
        text: &str,
        media_ids: &[String],
        now: Millis,
    ) -> Result<CaseReport, GatewayError> {
        let body = complaints::response_body(&self.mchid, text, media_ids)
            .map_err(|why| GatewayError::invalid("invalid_reply", why))?;
        self.complaint_action(case_id, "/response", body, now).await
    }

    /// `POST /v3/merchant-service/images/upload`: the image as multipart/form-data, the request
    /// signed over its `meta` JSON; the media id WeChat gives it.
    pub(super) async fn upload_image(&self, image: &CaseImage) -> Result<String, GatewayError> {
        let meta = complaints::image_meta(image);
        let boundary = complaints::upload_boundary(&nonce(16), &meta, image);
        let out = Outgoing {
            bytes: complaints::upload_body(&boundary, &meta, image),
            content_type: format!("multipart/form-data; boundary={boundary}"),
            signed: meta,
        };
        let r = self.call_out("POST", complaints::IMAGES_PATH, out).await?;
        if r.status != 200 {
            return Err(refusal("image upload", &r));
        }
        complaints::media_id(&r.body).map_err(|why| GatewayError::unavailable(format!("wechatpay upload: {why}")))
    }

    /// `GET …/complaint-notifications`: the registered URL; `None` when WeChat has none
    /// (`RESOURCE_NOT_EXISTS`, or an answer without a URL).
    pub(super) async fn notify_url_registered(&self) -> Result<Option<String>, GatewayError> {
        let r = self.call("GET", complaints::NOTIFICATIONS_PATH, None).await?;
        match r.status {
            200 => Ok(complaints::registered_url(&r.body)),
            404 => Ok(None),
            _ if r.code() == "RESOURCE_NOT_EXISTS" => Ok(None),
            _ => Err(refusal("complaint notification URL", &r)),
        }
    }

    /// Registers `url`: created when none is registered, replaced otherwise; the URL WeChat then
    /// has.
    pub(super) async fn register_notify_url(&self, url: &str) -> Result<String, GatewayError> {
        let registered = self.notify_url_registered().await?;
        let method = complaints::registration_method(registered.as_deref());
        let r = self.call(method, complaints::NOTIFICATIONS_PATH, Some(&json!({"url": url}))).await?;
        if r.status != 200 {
            return Err(refusal("complaint notification URL", &r));
        }
        complaints::registered_url(&r.body)
            .ok_or_else(|| GatewayError::unavailable("wechatpay complaint notification URL: the answer names no url"))
    }

    /// Removes the registered URL; whether one was.
    pub(super) async fn delete_notify_url(&self) -> Result<bool, GatewayError> {
        let r = self.call("DELETE", complaints::NOTIFICATIONS_PATH, None).await?;
        match r.status {
            200 | 204 => Ok(true),
            404 => Ok(false),
            _ if r.code() == "RESOURCE_NOT_EXISTS" => Ok(false),
            _ => Err(refusal("complaint notification URL", &r)),
        }
    }
}
