//! Integration tests: the real server over HTTP, a fresh database per test, on SQLite and (when
//! `KASSA_TEST_DATABASE_URL` is set) PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod abuse;
mod alipay_complaints;
mod browser;
mod case_pages;
mod cases;
mod check_settled;
mod checkout;
mod commit_flight;
mod complaint_actions;
mod complaints;
mod contract;
mod crash;
mod docs;
mod edges;
mod examples;
mod expiry;
mod fakes;
mod fleet;
mod gateway_statements;
mod gateway_vectors;
mod gateways;
mod hardening;
mod history;
mod integration;
mod key_delivery;
mod languages;
mod lifecycle;
mod lock_order;
mod lookup;
mod mail;
mod model;
mod notifications;
mod observability;
mod ops;
mod pages;
mod plans;
mod postgres;
mod promotion_pages;
mod promotions;
mod proxy;
mod reconcile;
mod rolling;
mod schema;
mod second_captures;
mod shipping;
mod statements;
mod status_counts;
mod store;
mod subscribe;
