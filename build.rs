//! Tells the test suite what it may run:
//! - with `KASSA_TEST_DATABASE_URL` set when the tests are built, the `kassa_test_pg` cfg is on and
//!   the PostgreSQL variants run; without it they are compiled as ignored, and the test summary
//!   counts them as such, with the reason, rather than as passed;
//! - with `KASSA_PREVIOUS_BIN` set (the previous release's binary, `scripts/previous-release.sh`),
//!   the `kassa_test_previous` cfg is on and the rolling-upgrade tests run; without it, the same;
//! - with `KASSA_NGINX` set (the path of nginx, Debian's `nginx-light`), the `kassa_test_nginx` cfg
//!   is on and the tests behind a real proxy run; without it, the same;
//! - with `KASSA_SCHEMATHESIS` set (the path of Schemathesis' `st`), the `kassa_test_schemathesis`
//!   cfg is on and the contract tests run it against a served kassa; without it, the same.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(kassa_test_pg)");
    println!("cargo::rustc-check-cfg=cfg(kassa_test_previous)");
    println!("cargo::rerun-if-env-changed=KASSA_TEST_DATABASE_URL");
    println!("cargo::rustc-check-cfg=cfg(kassa_test_schemathesis)");
    println!("cargo::rerun-if-env-changed=KASSA_PREVIOUS_BIN");
    println!("cargo::rerun-if-env-changed=KASSA_SCHEMATHESIS");
    println!("cargo::rustc-check-cfg=cfg(kassa_test_nginx)");
    println!("cargo::rerun-if-env-changed=KASSA_NGINX");
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
}
