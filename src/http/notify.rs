//! Gateway notifications: a payment's verified, stored and applied once; a complaint's or
//! dispute's taken to the desk; one that fails verification kept as a bounded digest; each
//! answered in the gateway's own words.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{AppState, RawBody};
use crate::error::Error;
use crate::gateway::Rejection;
use crate::store::payments::Applied;

/// Gateway notifications: verify, store, apply once, and answer in the gateway's own words.
pub(super) async fn notify(
    State(state): State<AppState>,
    Path(name): Path<String>,
    axum::Extension(client): axum::Extension<super::guard::Client>,
    headers: HeaderMap,
    body: std::result::Result<RawBody, Error>,
) -> Response {
    let Some(gateway) = state.gateways.get(&name).cloned() else {
        return Error::not_found("gateway").into_response();
    };
    let reply = |r: crate::gateway::Reply| {
        (
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST),
            [(header::CONTENT_TYPE, r.content_type)],
            r.body,
        )
            .into_response()
    };
    let body = match body {
        Ok(RawBody(b)) => b,
        Err(e) => {
            let status = if e.code() == "payload_too_large" { 413 } else { 400 };
            let mut r = gateway.nack(e.code(), &e.to_string());
            r.status = status;
            return reply(r);
        }
    };
    let now = state.now_ms();
    // A complaint or dispute: a case for the desk, not a payment. Signed under a key not seen yet
    // (a rotated certificate), as a payment's notification may be: the keys fetched once, looked at
    // again.
    let mut case = gateway.verify_case(&headers, &body, now);
    if let Some(Err(Rejection { unknown_key: Some(serial), .. })) = &case
        && gateway.refresh_keys(serial).await
    {
        case = gateway.verify_case(&headers, &body, now);
    }
    if let Some(case) = case {
        return match case {
            Ok(report) => match crate::usecase::cases::on_notification(&state.cx, &report).await {
                Ok(recorded) => {
                    tracing::info!(gateway = %name, case = %report.case_id, result = ?recorded, "case notification recorded");
                    reply(gateway.ack())
                }
                Err(e) => {
                    tracing::error!(error = %e, "case notification could not be recorded");
                    reply(crate::gateway::json_error_reply(500, "internal", "try again later"))
                }
            },
            Err(rejection) => match rejected(&state, gateway.as_ref(), &client, rejection, &body, now).await {
                Rejected::Limited(limited) => limited,
                Rejected::Reply(r) => reply(r),
            },
        };
    }
    let mut verified = gateway.verify(&headers, &body, now);
    // Signed under a key not seen yet (a rotated certificate): fetch the keys once and look again.
    if let Err(Rejection { unknown_key: Some(serial), .. }) = &verified
        && gateway.refresh_keys(serial).await
    {
        verified = gateway.verify(&headers, &body, now);
    }
    match verified {
        Err(rejection) if rejection.code == crate::gateway::IGNORED_EVENT => {
            // Genuine, but nothing kassa acts on (another event type): acknowledged, not stored.
            tracing::info!(gateway = %name, detail = %rejection.detail, "notification acknowledged and ignored");
            reply(gateway.ack())
        }
        Err(rejection) => match rejected(&state, gateway.as_ref(), &client, rejection, &body, now).await {
            Rejected::Limited(limited) => limited,
            Rejected::Reply(r) => reply(r),
        },
        Ok(event) => {
            tracing::Span::current().record("attempt_ref", event.attempt_ref.as_str());
            let span = tracing::info_span!("notification", gateway = %name, event_id = %event.event_id, attempt_ref = %event.attempt_ref);
            let applied =
                tracing::Instrument::instrument(crate::usecase::payment::apply_verified(&state.cx, &event), span).await;
            match applied {
                Ok(Applied::Rejected { code, reason }) => {
                    tracing::warn!(code, reason = %reason, "notification refused");
                    reply(gateway.nack(code, &reason))
                }
                Ok(applied) => {
                    tracing::info!(result = ?applied, "notification applied");
                    reply(gateway.ack())
                }
                Err(e) => {
                    // Not acknowledged: the gateway will retry.
                    tracing::error!(error = %e, "notification could not be applied");
                    reply(crate::gateway::json_error_reply(500, "internal", "try again later"))
                }
            }
        }
    }
}

/// What a notification that failed verification is answered.
enum Rejected {
    /// Past the sender's rate of such bodies: 429, nothing stored.
    Limited(Response),
    Reply(crate::gateway::Reply),
}

/// A notification that failed verification: kept as a bounded digest for the operator (unless
/// its sender is past its rate) and refused in the gateway's own words.
async fn rejected(
    state: &AppState,
    gateway: &dyn crate::gateway::Gateway,
    client: &super::guard::Client,
    rejection: Rejection,
    body: &[u8],
    now: i64,
) -> Rejected {
    let name = gateway.name();
    tracing::warn!(gateway = %name, code = rejection.code, detail = %rejection.detail, client = %client.addr, "notification rejected");
    // Anyone can send a body that fails verification: past its per-address rate, such a
    // sender is answered 429 and nothing of it is stored.
    if let Err(limited) = state.guard.take(super::guard::Bucket::RejectedNotifications, client) {
        metrics::counter!("kassa_notifications_total", "gateway" => name, "result" => "rejected_limited").increment(1);
        return Rejected::Limited(limited.into_response());
    }
    let reason = format!("{}: {}", rejection.code, rejection.detail);
    if let Err(e) = crate::store::rejected::record_rejected(
        &state.db,
        name,
        rejection.claimed_event_id.as_deref(),
        &reason,
        body,
        now,
    )
    .await
    {
        tracing::error!(error = %e, "could not record a rejected notification");
    }
    Rejected::Reply(gateway.nack(rejection.code, &rejection.detail))
}
