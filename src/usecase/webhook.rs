//! The shop's webhooks as the operator handles them.

use super::Context;
use crate::error::Result;
use crate::store::listing::MessageView;
use crate::store::outbox;

/// Sends webhook message `id` again: due now, its tries started afresh.
pub async fn resend(cx: &Context, id: &str) -> Result<MessageView> {
    outbox::resend(&cx.db, id, cx.now_ms()).await
}
