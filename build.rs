//! Tells the test suite what it may run:
//! - with `KASSA_TEST_DATABASE_URL` set when the tests are built, the `kassa_test_pg` cfg is on and
//!   the PostgreSQL variants run; without it they are compiled as ignored, and the test summary
//!   counts them as such, with the reason, rather than as passed;
//! - with `KASSA_PREVIOUS_BIN` set (the previous release's binary, `scripts/previous-release.sh`),
//!   the `kassa_test_previous` cfg is on and the rolling-upgrade tests run; without it, the same;
//! - with `KASSA_NGINX` set (the path of nginx, Debian's `nginx-light`), the `kassa_test_nginx` cfg
//!   is on and the tests behind a real proxy run; without it, the same;
//! - with `KASSA_SCHEMATHESIS` set (the path of Schemathesis' `st`), the `kassa_test_schemathesis`
//!   cfg is on and the contract tests run it against a served kassa; without it, the same;
//! - with `KASSA_AIOSMTPD` set (the path of a Python with `aiosmtpd`), the `kassa_test_smtp` cfg is
//!   on and the e-mail tests send through a real SMTP server on loopback; without it, the same;
//! - with `KASSA_EXAMPLES` set (what `scripts/examples-setup.sh` prepared: the client generators
//!   and the Node.js example's packages), the `kassa_test_examples` cfg is on and the shop
//!   examples in `examples/` run against a served kassa; without it, the same;
//! - with Chromium and chromedriver installed (`CHROMIUM`, `CHROMEDRIVER`, else Debian's paths) the
//!   `kassa_test_browser` cfg is on and the browser tests run; with promtool (Debian's
//!   `prometheus`) `kassa_test_promtool`, and the alert rules' tests run; with Node.js and Python
//!   `kassa_test_node` and `kassa_test_python`, and the webhook snippets run; with curl, jq,
//!   openssl and PostgreSQL's client programs `kassa_test_docs`, and the docs' shell blocks run.
//!   Without one, its tests are compiled as ignored and counted so, naming what to install.
//!
//! Programs are looked up when the tests are built: installing one (into /usr/bin or
//! /usr/local/bin) builds the tests again.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(kassa_test_pg)");
    println!("cargo::rustc-check-cfg=cfg(kassa_test_previous)");
    println!("cargo::rerun-if-env-changed=KASSA_TEST_DATABASE_URL");
    println!("cargo::rustc-check-cfg=cfg(kassa_test_schemathesis)");
    println!("cargo::rerun-if-env-changed=KASSA_PREVIOUS_BIN");
    println!("cargo::rerun-if-env-changed=KASSA_SCHEMATHESIS");
    println!("cargo::rustc-check-cfg=cfg(kassa_test_nginx)");
    println!("cargo::rerun-if-env-changed=KASSA_NGINX");
    println!("cargo::rustc-check-cfg=cfg(kassa_test_examples)");
    println!("cargo::rerun-if-env-changed=KASSA_EXAMPLES");
    if std::env::var("KASSA_EXAMPLES").is_ok_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=kassa_test_examples");
    }
    if std::env::var("KASSA_TEST_DATABASE_URL").is_ok_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=kassa_test_pg");
    }
    if std::env::var("KASSA_PREVIOUS_BIN").is_ok_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=kassa_test_previous");
    }
    if std::env::var("KASSA_NGINX").is_ok_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=kassa_test_nginx");
    }
    if std::env::var("KASSA_SCHEMATHESIS").is_ok_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=kassa_test_schemathesis");
    }
    println!("cargo::rustc-check-cfg=cfg(kassa_test_smtp)");
    println!("cargo::rerun-if-env-changed=KASSA_AIOSMTPD");
    if std::env::var("KASSA_AIOSMTPD").is_ok_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=kassa_test_smtp");
    }
    for (cfg, found) in [
        ("kassa_test_browser", program("CHROMEDRIVER", "chromedriver") && program("CHROMIUM", "chromium")),
        ("kassa_test_promtool", program("", "promtool")),
        ("kassa_test_node", program("", "node")),
        ("kassa_test_python", program("", "python3")),
        ("kassa_test_docs", ["curl", "jq", "openssl", "createdb", "dropdb", "bash"].iter().all(|p| program("", p))),
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if found {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
    for dir in ["/usr/bin", "/usr/local/bin"] {
        if std::path::Path::new(dir).is_dir() {
            println!("cargo::rerun-if-changed={dir}");
        }
    }
}

/// Whether `name` is installed: at the path the environment variable `env` names, if it is set,
/// else on the `PATH`.
fn program(env: &str, name: &str) -> bool {
    if !env.is_empty() {
        println!("cargo::rerun-if-env-changed={env}");
        if let Ok(path) = std::env::var(env) {
            return std::path::Path::new(&path).is_file();
        }
    }
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}
