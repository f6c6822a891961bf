//! The SKUs a run sells, created through the admin API of the kassa under test: physical stock,
//! or with `--digital` a digital SKU whose stock is the card keys imported before the run, so
//! that each payment hands out its key (the exactly-once delivery under the SKU's contention).

use super::*;
use kassa::store::fulfilment::IMPORT_API_MAX;

/// Creates `sku` with `stock` units (`--digital`: `stock` card keys) on the kassa at `base`.
pub(super) async fn stock_sku(
    args: &BenchArgs,
    http: &reqwest::Client,
    base: &str,
    admin: &str,
    sku: &str,
    stock: i64,
) -> anyhow::Result<()> {
    let kind = if args.digital { "digital" } else { "physical" };
    let r = http
        .post(format!("{base}/api/v1/admin/skus"))
        .bearer_auth(admin)
        .json(&json!({"sku": sku, "name": sku, "price_minor": 990, "currency": "CNY", "kind": kind, "stock": stock}))
        .send()
        .await?;
    if !(r.status().is_success() || r.status() == reqwest::StatusCode::CONFLICT) {
        anyhow::bail!("creating SKU {sku}: {}", r.status());
    }
    if !args.digital {
        return Ok(());
    }
    // Keys of this run only, in imports of the most the API takes at once.
    let run = uuid::Uuid::now_v7().simple().to_string();
    let chunk = i64::try_from(IMPORT_API_MAX).unwrap_or(i64::MAX);
    let mut from = 0;
    while from < stock {
        let to = from.saturating_add(chunk).min(stock);
        let keys: Vec<String> = (from..to).map(|n| format!("{sku}-{run}-{n:07}")).collect();
        let r = http
            .post(format!("{base}/api/v1/admin/skus/{sku}/keys"))
            .bearer_auth(admin)
            .json(&json!({ "keys": keys }))
            .send()
            .await?;
        if !r.status().is_success() {
            anyhow::bail!("importing the card keys of {sku}: {}", r.status());
        }
        from = to;
    }
    Ok(())
}

/// A keys secret for a spawned kassa: 32 random bytes, hex.
pub(super) fn keys_secret() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}
