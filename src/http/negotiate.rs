//! What a request asks for besides its body: a page or JSON, and the buyer's device.

use axum::http::{HeaderMap, header};

/// The buyer's device, from the request's `User-Agent` (chooses a channel when none is named).
pub(super) fn device(headers: &HeaderMap) -> crate::domain::channel::Device {
    crate::domain::channel::device_of(headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()))
}

/// The client asks for a page (a browser), not JSON.
pub(super) fn wants_html(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}
