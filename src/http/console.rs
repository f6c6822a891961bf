//! What every page of the operator's console shares: the signed-in operator and their forms'
//! CSRF token, and what a page says after an action.

use std::collections::BTreeMap;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};

use super::i18n::Texts;
use super::{AppState, cookie};
use crate::error::{Error, Result};
use crate::store::admin;

pub(super) const ADMIN_COOKIE: &str = "kassa_admin";

/// A signed-in operator, with the CSRF token their forms must echo.
pub struct Operator {
    pub(super) csrf: String,
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = Response;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> std::result::Result<Self, Response> {
        let token = cookie(&parts.headers, ADMIN_COOKIE).unwrap_or_default();
        match admin::session_csrf(&state.db, token, state.now_ms(), state.protection.admin_idle_ms).await {
            Ok(Some(csrf)) => Ok(Operator { csrf }),
            Ok(None) => Err(Redirect::to("/admin/login").into_response()),
            Err(e) => Err(e.into_response()),
        }
    }
}

impl Operator {
    pub(super) fn check(&self, form: &BTreeMap<String, String>) -> Result<()> {
        let given = form.get("csrf").map(String::as_bytes).unwrap_or_default();
        aws_lc_rs::constant_time::verify_slices_are_equal(given, self.csrf.as_bytes()).map_err(|_| {
            Error::refused(crate::error::RefusalKind::Forbidden, "csrf_failed", "the form has expired; reload the page")
        })
    }
}

/// What the SKUs page says after an action (`?done=…&n=…&dup=…`), in the operator's language.
pub fn done_message(t: &Texts, query: &BTreeMap<String, String>) -> String {
    let number = |name: &str| query.get(name).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    match query.get("done").map(String::as_str) {
        Some("created") => t.t("admin.skus.done_created").into(),
        Some("edited") => t.t("admin.skus.done_edited").into(),
        Some("stock") => t.t("admin.skus.done_stock").into(),
        Some("keys") => {
            let batches = match number("batches") {
                0 | 1 => String::new(),
                n => t.f("admin.skus.in_batches", "n", n),
            };
            t.f2("admin.skus.done_keys", "n", number("n"), "dup", number("dup")).replace("{batches}", &batches)
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::i18n::Lang;

    fn form(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn the_page_says_what_was_done() {
        let (en, zh) = (Lang::En.texts(), Lang::Zh.texts());
        assert_eq!(
            done_message(en, &form(&[("done", "keys"), ("n", "3"), ("dup", "1")])),
            "3 key(s) imported, 1 duplicate(s) skipped."
        );
        let batched = form(&[("done", "keys"), ("n", "1203"), ("dup", "1"), ("batches", "3")]);
        assert_eq!(done_message(en, &batched), "1203 key(s) imported, 1 duplicate(s) skipped in 3 batches.");
        assert_eq!(done_message(zh, &batched), "已导入 1203 个卡密，跳过 1 个重复，分 3 批。");
        assert_eq!(done_message(zh, &form(&[("done", "stock")])), "库存已调整。");
        assert_eq!(done_message(en, &form(&[("done", "<script>")])), "");
    }
}
