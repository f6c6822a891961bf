//! Watching kassa: the metrics it exports at every scrape, logs without secrets, the benchmark
//! and profiling tools, and the Prometheus rules and Grafana dashboard in `deploy/`.

use kassa::store::sql;
use serde_json::{Value, json};

use crate::common::s;

/// `kassa serve --demo` on a free port with its data, stdout and stderr in `dir`: the child, its
/// base URL and the admin token it generated.
async fn serve_demo(dir: &std::path::Path, log_level: &str) -> (std::process::Child, String, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = crate::common::kassa_command()
        .args(["serve", "--demo", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", log_level)
        .stdout(std::fs::File::create(dir.join("stdout.log")).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let mut admin = String::new();
    for _ in 0..400 {
        let stdout = std::fs::read_to_string(dir.join("stdout.log")).unwrap_or_default();
        if let Some(line) = stdout.lines().find(|l| l.starts_with("admin token: ")) {
            admin = line.trim_start_matches("admin token: ").to_string();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(!admin.is_empty(), "the demo prints its generated admin token");
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..400 {
        if reqwest::get(format!("{base}/readyz")).await.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    (child, base, admin)
}

/// One gauge's value in a Prometheus text page.
fn gauge(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The database gauges are right at every scrape (a process of its own: the metrics recorder is
/// one per process): an order's status shows at once, a status no order holds reads 0, and without
/// a webhook URL the outbox has no backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_gauges_are_right_at_every_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, base, _admin) = serve_demo(dir.path(), "warn").await;
    let http = reqwest::Client::new();
    let scrape = || async { http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap() };
    let orders = |page: &str, status: &str| gauge(page, &format!("kassa_orders{{status=\"{status}\"}}"));
    let page = scrape().await;
    for status in kassa::domain::OrderStatus::ALL {
        assert_eq!(orders(&page, status.as_str()), Some(0.0), "{status} is shown, at 0: {page}");
    }
    let buyer: Value = http.post(format!("{base}/api/v1/sessions")).send().await.unwrap().json().await.unwrap();
    let buyer = s(&buyer["token"]);
    let basket: Value = http
        .post(format!("{base}/api/v1/baskets"))
        .bearer_auth(&buyer)
        .json(&json!({"lines": [{"sku": "MUG-CELADON", "quantity": 1}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let checkout = format!("{base}/api/v1/baskets/{}/checkout", s(&basket["basket_id"]));
    let placed: Value =
        http.post(checkout).bearer_auth(&buyer).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let order_no = s(&placed["order_no"]);
    assert_eq!(orders(&scrape().await, "pending_payment"), Some(1.0), "{placed}");
    let cancel = format!("{base}/api/v1/orders/{order_no}/cancel");
    let r = http.post(cancel).bearer_auth(&buyer).json(&json!({})).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let page = scrape().await;
    assert_eq!((orders(&page, "pending_payment"), orders(&page, "cancelled")), (Some(0.0), Some(1.0)), "{page}");
    // The order's messages are kept, unsent: no webhook URL, so no backlog.
    assert_eq!(gauge(&page, "kassa_outbox_backlog"), Some(0.0), "{page}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A full run of `kassa serve --demo` at debug level: its logs must not contain any secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logs_never_contain_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("stderr.log");
    let (mut child, base, admin) = serve_demo(dir.path(), "debug").await;
    let http = reqwest::Client::new();
    let post = |path: &str, token: &str, body: Value| {
        let (http, url, token) = (http.clone(), format!("{base}{path}"), token.to_string());
        async move {
            http.post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap_or(Value::Null)
        }
    };
    post(
        "/api/v1/admin/skus",
        &admin,
        json!({"sku": "GAME", "name": "Game", "price_minor": 100, "currency": "CNY", "kind": "digital"}),
    )
    .await;
    let card_key = "CARD-KEY-9f1c2e7a-SECRET";
    post("/api/v1/admin/skus/GAME/keys", &admin, json!({"keys": [card_key]})).await;
    let buyer = s(&post("/api/v1/sessions", "", json!({})).await["token"]);
    let basket = s(&post("/api/v1/baskets", &buyer, json!({})).await["basket_id"]);
    http.put(format!("{base}/api/v1/baskets/{basket}/lines/GAME"))
        .bearer_auth(&buyer)
        .json(&json!({"quantity": 1}))
        .send()
        .await
        .unwrap();
    let placed = post(&format!("/api/v1/baskets/{basket}/checkout"), &buyer, json!({})).await;
    let attempt_ref = s(&placed["attempt_ref"]);
    post(&format!("/sandbox/api/payments/{attempt_ref}/complete"), "", json!({"outcome": "succeeded", "copies": 2}))
        .await;
    let order_no = s(&placed["order_no"]);
    let mut delivered = Value::Null;
    for _ in 0..200 {
        delivered = http
            .get(format!("{base}/api/v1/orders/{order_no}"))
            .bearer_auth(&buyer)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if delivered["status"] == "delivered" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(delivered["lines"][0]["keys"][0], card_key, "{delivered}");
    // Sign in to the console with the token; a wrong token too.
    let form = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    form.post(format!("{base}/admin/login")).form(&[("token", admin.as_str())]).send().await.unwrap();
    form.post(format!("{base}/admin/login")).form(&[("token", "wrong-token-guess")]).send().await.unwrap();
    child.kill().unwrap();
    child.wait().unwrap();

    let logs = std::fs::read_to_string(&log_path).unwrap();
    assert!(logs.lines().count() > 20, "a debug run logs plenty: {logs}");
    assert!(logs.contains(&order_no), "log lines carry the order number");
    let keys_secret = std::fs::read_to_string(dir.path().join("data/keys.secret")).unwrap();
    let db = kassa::store::Db::connect(&format!("sqlite://{}", dir.path().join("data/kassa.db").display()), 2)
        .await
        .unwrap();
    let settings: Vec<String> =
        sql::query_scalar("SELECT value FROM settings").fetch_all(db.read_pool()).await.unwrap();
    let mut secrets = vec![
        admin.clone(),
        buyer.clone(),
        card_key.to_string(),
        keys_secret.trim().to_string(),
        "wrong-token-guess".into(),
    ];
    secrets.extend(settings.into_iter().filter(|v| v.len() >= 32));
    for secret in &secrets {
        assert!(!logs.contains(secret.as_str()), "a secret leaked into the logs: {}…", &secret[..8.min(secret.len())]);
    }
}

/// The benchmark tool works end to end (figures are in BENCHMARKS.md; nothing here asserts speed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_tool_runs_each_mode() {
    let dir = tempfile::tempdir().unwrap();
    for (i, args) in [
        vec!["--scenario", "hot", "--buyers", "4", "--seconds", "1", "--hot-stock", "25"],
        vec!["--scenario", "hot", "--promotion", "--buyers", "4", "--seconds", "1", "--hot-stock", "25"],
        vec!["--engine", "--scenario", "confirm", "--buyers", "2", "--seconds", "1"],
        vec!["--scenario", "commit-limit", "--seconds", "1"],
        vec!["--scenario", "notify-direct", "--buyers", "4", "--seconds", "2"],
        vec!["--scenario", "checkout", "--buyers", "4", "--seconds", "1"],
    ]
    .into_iter()
    .enumerate()
    {
        let json_path = dir.path().join(format!("report-{i}.json"));
        let (cmd_args, path) = (args.clone(), json_path.clone());
        let out = tokio::task::spawn_blocking(move || {
            crate::common::kassa_command()
                .arg("bench")
                .args(&cmd_args)
                .arg("--json")
                .arg(&path)
                .env("RUST_LOG", "warn")
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(out.status.success(), "bench {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
        if args.contains(&"commit-limit") {
            assert!(report["commits_per_s"].as_f64().unwrap() > 0.0);
        } else if args.contains(&"notify-direct") {
            // Every order placed was paid by a notification the load generator signed itself.
            assert!(report["notifications_applied"].as_u64().unwrap() > 0, "{report}");
            assert_eq!(report["errors"], serde_json::json!({}), "{report}");
            assert_eq!(report["check_violations"], 0);
        } else {
            assert!(report["confirms"].as_u64().unwrap() > 0, "{report}");
            assert_eq!(report["oversold"], 0);
            assert_eq!(report["check_violations"], 0);
            if args.contains(&"hot") {
                // 25 units: the sale sells out within the second, exactly, and refuses the rest.
                assert_eq!(report["stock"], 25, "{report}");
                assert_eq!(report["confirms"], 25, "{report}");
                assert!(report["errors"]["out_of_stock"].as_u64().unwrap() > 0, "{report}");
            }
            if args.contains(&"--promotion") {
                // The sale with the code sold out too, each order taking one use, none over.
                let p = &report["promotion"];
                assert_eq!(p["orders_with_code"], 25, "{report}");
                assert_eq!(p["uses"], 25, "{report}");
                assert_eq!((p["over_used"].clone(), p["oversold"].clone()), (0.into(), 0.into()), "{report}");
                let [before, after] = [0, 1].map(|i| p["confirms_per_s_without_each"][i].as_f64().unwrap());
                assert!(before > 0.0 && after > 0.0, "{report}");
                let mean = f64::midpoint(before, after);
                assert!((p["confirms_per_s_without"].as_f64().unwrap() - mean).abs() < 1e-9, "{report}");
            }
            if args.contains(&"checkout") {
                // Basket and confirm only: nothing was paid, so no notification was applied.
                assert_eq!(report["notifications_applied"], 0, "{report}");
                assert_eq!(report["errors"], serde_json::json!({}), "{report}");
            }
        }
    }
    // `checkout` is the engine's `spread` flow over HTTP; the engine has no scenario of that name.
    let out = crate::common::kassa_command().args(["bench", "--engine", "--scenario", "checkout"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("checkout is an HTTP scenario"), "{out:?}");
}

/// `scripts/flamegraph.py` (used by `scripts/profile.sh`) folds `perf script` output by thread
/// (a name with slashes and digits included, with or without a CPU field),
/// leaves out the runtime's inlined plumbing but keeps kassa's own inlined frames and the
/// kernel's (marked), and draws every frame with its share and an escaped name.
#[test]
fn the_profile_script_folds_perf_stacks_into_a_flame_graph() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/flamegraph.py");
    let perf_script = "\
kassa-sqlite-wr 101 10.000001:    1001001 cpu-clock:pppH: 
\t          16d8bb sqlite3VdbeExec+0xbb (/tmp/kassa)
\t          7ed9bd poll<kassa::store::Thing> (inlined)
\t          7ed9bd kassa::store::checkout::confirm_here+0x3d (inlined)
\t          848a7d kassa::store::writer::run+0x1d (/tmp/kassa)

kassa-sqlite-wr 101 10.000002:    1001001 cpu-clock:pppH: 
\t          16d8bb sqlite3VdbeExec+0xbb (/tmp/kassa)
\t          7ed9bd poll<kassa::store::Thing> (inlined)
\t          7ed9bd kassa::store::checkout::confirm_here+0x3d (inlined)
\t          848a7d kassa::store::writer::run+0x1d (/tmp/kassa)

tokio-rt-worker 102 10.000003:    1001001 cpu-clock:pppH: 
\tffffffff81369742 tcp_sendmsg+0x72 ([kernel.kallsyms])
\t          a10fb6 <Vec<T> as Clone>::clone+0x666 (/tmp/kassa)

kworker/1:1H-kb 55 [001] 10.000004:    1001001 cpu-clock:pppH: 
\tffffffff81369000 worker_thread+0x10 ([kernel.kallsyms])

";
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("out.folded");
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .args(["--title", "a <test> & \"run\"", "--folded"])
        .arg(&folded)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs scripts/flamegraph.py");
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(perf_script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let folded = std::fs::read_to_string(folded).unwrap();
    assert_eq!(
        folded,
        "kassa-sqlite-wr;kassa::store::writer::run;kassa::store::checkout::confirm_here;sqlite3VdbeExec 2\n\
         kworker/1:1H-kb;[k] worker_thread 1\n\
         tokio-rt-worker;<Vec<T> as Clone>::clone;[k] tcp_sendmsg 1\n"
    );
    let svg = String::from_utf8(out.stdout).unwrap();
    assert!(svg.starts_with("<svg "), "{svg}");
    assert!(svg.contains("a &lt;test&gt; &amp; &quot;run&quot; (4 samples"), "{svg}");
    assert!(svg.contains("<title>sqlite3VdbeExec — 2 samples, 50.00 %</title>"), "{svg}");
    assert!(svg.contains("<title>&lt;Vec&lt;T&gt; as Clone&gt;::clone — 1 samples, 25.00 %</title>"), "{svg}");
    assert!(!svg.contains("poll&lt;kassa::store::Thing"), "runtime plumbing is left out: {svg}");
}

/// The Prometheus alert rules in `deploy/prometheus/` are valid and do what their unit tests say
/// (`promtool check rules`, `promtool test rules`: firing across a fleet's instances, and not
/// firing below their thresholds). Ignored, and counted so, where promtool (Debian's `prometheus`)
/// was not installed when the tests were built; CI installs it.
/// Under `CI=true` the alert rules' tests must have been built to run.
#[test]
fn promtool_tests_are_built_to_run_in_ci() {
    if std::env::var("CI").is_ok_and(|v| v == "true") && !cfg!(kassa_test_promtool) {
        panic!("CI=true but promtool was not installed when the tests were built");
    }
}

#[cfg_attr(
    not(kassa_test_promtool),
    ignore = "promtool was not installed when the tests were built (apt-get install prometheus)"
)]
#[test]
fn prometheus_alert_rules_pass_their_unit_tests() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus");
    let run = |args: &[&str]| std::process::Command::new("promtool").args(args).current_dir(&dir).output();
    let check = run(&["check", "rules", "kassa-rules.yml"]).expect("promtool runs");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = run(&["test", "rules", "kassa-rules.test.yml"]).unwrap();
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
}

/// The Grafana dashboard is valid JSON and charts only metrics kassa exports: each `kassa_…` name
/// in its queries (less a histogram's `_bucket`/`_count`/`_sum`) is one the code records.
#[test]
fn the_grafana_dashboard_charts_metrics_kassa_exports() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("deploy/grafana/kassa-dashboard.json")).unwrap())
            .unwrap();
    let mut source = String::new();
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                source.push_str(&std::fs::read_to_string(path).unwrap());
            }
        }
    }
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 10);
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let names =
                expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("kassa_"));
            for name in names {
                let base = ["_bucket", "_count", "_sum"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
                assert!(
                    source.contains(&format!("\"{base}\"")),
                    "{} charts {name}, which kassa does not record",
                    panel["title"]
                );
            }
        }
    }
}
