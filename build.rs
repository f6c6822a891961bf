//! Tells the test suite whether PostgreSQL is configured for it: with `KASSA_TEST_DATABASE_URL`
//! set when the tests are built, the `kassa_test_pg` cfg is on and the PostgreSQL variants run;
//! without it they are compiled as ignored, and the test summary counts them as such, with the
//! reason, rather than as passed.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(kassa_test_pg)");
    println!("cargo::rerun-if-env-changed=KASSA_TEST_DATABASE_URL");
    if std::env::var("KASSA_TEST_DATABASE_URL").is_ok_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=kassa_test_pg");
    }
}
