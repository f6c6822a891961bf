//! An image uploaded for a complaint's reply (`alipay.merchant.image.upload`, docs/gateways/alipay.md
//! §6): the common parameters and `image_type` signed as every request is (the file is not), sent
//! as Alipay's SDKs send an upload, the answer verified like every answer and read for its
//! `image_id`. Sent by the desk before the reply, outside any transaction.

use super::super::keys::nonce;
use super::super::{GatewayError, transport_error};
use super::{Alipay, complaint_refusal, complaints, is_ok, verify_response};
use crate::clock::Clock as _;
use crate::domain::case::CaseImage;

/// Random hex characters a multipart boundary starts from.
const BOUNDARY_SEED_LEN: usize = 16;

impl Alipay {
    /// Uploads `image`; its `image_id`. A refusal Alipay may not repeat is `case_refused`; one
    /// worth repeating, or an answer kassa cannot use, is unavailable.
    pub(super) async fn upload_image(&self, image: &CaseImage) -> Result<String, GatewayError> {
        let image_type = complaints::image_type(image.kind)
            .ok_or_else(|| GatewayError::invalid("image_type_refused", "Alipay takes JPEG or PNG images only"))?;
        let now = crate::clock::SystemClock.now_ms();
        let signed = self.signed_text(complaints::IMAGE_UPLOAD, now, &[(complaints::IMAGE_TYPE, image_type)]);
        let upload = complaints::upload_request(signed, image, &nonce(BOUNDARY_SEED_LEN));
        let mut url = reqwest::Url::parse(&self.gateway_url)
            .map_err(|_| GatewayError::unavailable("alipay upload: the gateway URL does not parse"))?;
        url.query_pairs_mut().extend_pairs(&upload.query);
        let response = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, upload.content_type)
            .body(upload.body)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        if response.status().is_server_error() {
            return Err(GatewayError::unavailable(format!("alipay upload answered {}", response.status())));
        }
        let text = response.text().await.map_err(|e| transport_error(&e))?;
        let node = format!("{}_response", complaints::IMAGE_UPLOAD.replace('.', "_"));
        let r = verify_response(&self.alipay_key, &text, &node)?;
        if !is_ok(&r) {
            return Err(complaint_refusal(complaints::IMAGE_UPLOAD, &r));
        }
        complaints::image_id(&r).map_err(|why| GatewayError::unavailable(format!("alipay upload: {why}")))
    }
}
