//! Every call kassa makes to a gateway, timed: `kassa_gateway_request_duration_seconds`, a
//! histogram by gateway, operation and outcome (`ok` or `error`). Wrapped around each adapter
//! when it is mounted ([`super::Gateways::add`]), so no call site can forget it.

use std::sync::Arc;
use std::time::Instant;

use axum::http::HeaderMap;
use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;

use super::{
    AttemptKey, CloseOutcome, Gateway, GatewayError, Handed, HandoffRequest, Payer, PaymentState, RefundAnswer,
    RefundQuery, RefundRequest, RefundState, Rejection, Reply, StatementError,
};
use crate::clock::Millis;
use crate::domain::Currency;
use crate::domain::case::{CaseImage, CaseReport, ImageLimits, RefundVerdict};
use crate::domain::event::VerifiedEvent;
use crate::domain::statement::Statement;

/// A gateway whose remote calls are timed.
pub struct Timed(pub Arc<dyn Gateway>);

/// Runs `call` and records how long it took.
fn timed<'a, T: 'a, E: 'a>(
    gateway: &'static str,
    operation: &'static str,
    call: BoxFuture<'a, Result<T, E>>,
) -> BoxFuture<'a, Result<T, E>> {
    let started = Instant::now();
    call.map(move |result| {
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::histogram!(
            "kassa_gateway_request_duration_seconds",
            "gateway" => gateway,
            "operation" => operation,
            "outcome" => outcome
        )
        .record(started.elapsed().as_secs_f64());
        result
    })
    .boxed()
}

impl Gateway for Timed {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn channels(&self) -> &'static [&'static str] {
        self.0.channels()
    }
    fn default_channel(&self) -> &'static str {
        self.0.default_channel()
    }
    fn currencies(&self) -> Option<&'static [Currency]> {
        self.0.currencies()
    }
    fn check_payer(&self, channel: &str, payer: &Payer) -> Result<(), GatewayError> {
        self.0.check_payer(channel, payer)
    }
    fn app_id(&self) -> Option<&str> {
        self.0.app_id()
    }
    fn handoff<'a>(&'a self, req: &'a HandoffRequest) -> BoxFuture<'a, Result<Handed, GatewayError>> {
        timed(self.name(), "handoff", self.0.handoff(req))
    }
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Result<VerifiedEvent, Rejection> {
        self.0.verify(headers, body, now)
    }
    fn refresh_keys<'a>(&'a self, serial: &'a str) -> BoxFuture<'a, bool> {
        self.0.refresh_keys(serial)
    }
    fn maintain_keys(&self, now: Millis) -> BoxFuture<'_, Result<(), String>> {
        self.0.maintain_keys(now)
    }
    fn ack(&self) -> Reply {
        self.0.ack()
    }
    fn nack(&self, code: &str, message: &str) -> Reply {
        self.0.nack(code, message)
    }
    fn close<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<CloseOutcome, GatewayError>> {
        timed(self.name(), "close", self.0.close(key))
    }
    fn query<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<PaymentState, GatewayError>> {
        timed(self.name(), "query", self.0.query(key))
    }
    fn refund<'a>(&'a self, req: &'a RefundRequest) -> BoxFuture<'a, Result<RefundAnswer, GatewayError>> {
        timed(self.name(), "refund", self.0.refund(req))
    }
    fn query_refund<'a>(&'a self, req: &'a RefundQuery) -> BoxFuture<'a, Result<RefundState, GatewayError>> {
        timed(self.name(), "query_refund", self.0.query_refund(req))
    }
    fn statement_offset(&self) -> Option<time::UtcOffset> {
        self.0.statement_offset()
    }
    fn statement_so_far(&self) -> bool {
        self.0.statement_so_far()
    }
    fn statement(&self, day: time::Date) -> BoxFuture<'_, Result<Statement, StatementError>> {
        timed(self.name(), "statement", self.0.statement(day))
    }
    fn verify_case(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Option<Result<CaseReport, Rejection>> {
        self.0.verify_case(headers, body, now)
    }
    fn list_cases(&self, since: Millis, now: Millis) -> BoxFuture<'_, Result<Vec<CaseReport>, GatewayError>> {
        timed(self.name(), "list_cases", self.0.list_cases(since, now))
    }
    fn submit_evidence<'a>(
        &'a self,
        case_id: &'a str,
        evidence: &'a [(String, String)],
        submit: bool,
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        timed(self.name(), "submit_evidence", self.0.submit_evidence(case_id, evidence, submit, now))
    }
    fn accept_case<'a>(&'a self, case_id: &'a str, now: Millis) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        timed(self.name(), "accept_case", self.0.accept_case(case_id, now))
    }
    fn fetch_case<'a>(&'a self, case_id: &'a str, now: Millis) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        timed(self.name(), "fetch_case", self.0.fetch_case(case_id, now))
    }
    fn case_image_limits(&self) -> Option<ImageLimits> {
        self.0.case_image_limits()
    }
    fn upload_case_image<'a>(&'a self, image: &'a CaseImage) -> BoxFuture<'a, Result<String, GatewayError>> {
        timed(self.name(), "upload_case_image", self.0.upload_case_image(image))
    }
    fn reply_case<'a>(
        &'a self,
        case_id: &'a str,
        text: &'a str,
        media_ids: &'a [String],
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        timed(self.name(), "reply_case", self.0.reply_case(case_id, text, media_ids, now))
    }
    fn answer_refund_request<'a>(
        &'a self,
        case_id: &'a str,
        verdict: &'a RefundVerdict,
        media_ids: &'a [String],
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        timed(self.name(), "answer_refund_request", self.0.answer_refund_request(case_id, verdict, media_ids, now))
    }
    fn case_notify_url(&self) -> BoxFuture<'_, Result<Option<String>, GatewayError>> {
        timed(self.name(), "case_notify_url", self.0.case_notify_url())
    }
    fn register_case_notify_url<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<String, GatewayError>> {
        timed(self.name(), "register_case_notify_url", self.0.register_case_notify_url(url))
    }
    fn delete_case_notify_url(&self) -> BoxFuture<'_, Result<bool, GatewayError>> {
        timed(self.name(), "delete_case_notify_url", self.0.delete_case_notify_url())
    }
    fn complete_case<'a>(
        &'a self,
        case_id: &'a str,
        completion: crate::domain::case::Completion,
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        timed(self.name(), "complete_case", self.0.complete_case(case_id, completion, now))
    }
}
