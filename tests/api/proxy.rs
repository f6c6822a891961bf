//! Behind a real nginx (`KASSA_NGINX`, Debian's `nginx-light`): for each header kassa can be told to
//! believe, the proxy writes it the way its documentation says, a client forges every forwarding
//! header, and the per-address limits and the sign-in lockout still count the client's own address.
//!
//! Addresses: nginx listens on 127.0.0.1 and connects to kassa from 127.0.0.2 (the one trusted
//! proxy); the client under test connects from 127.0.0.5, the real admin from 127.0.0.3.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;

use crate::common::{ADMIN, Backend, Opts, TestApp, test_protection};
use kassa::config::{ClientAddressHeader, Protection, RateLimits};

const PROXY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const ADMIN_AT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 5);
const SESSIONS_PER_MINUTE: u32 = 5;
const LOCKOUT_FAILURES: u32 = 3;

/// An nginx of the test's own, on a free port, stopped when dropped.
struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Nginx {
    /// Proxies every request to `upstream`, writing `header` as its documentation snippet does.
    fn start(upstream: SocketAddr, header: ClientAddressHeader) -> Nginx {
        let bin = std::env::var("KASSA_NGINX").expect("KASSA_NGINX names the nginx binary (Debian's nginx-light)");
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let forwarding = match header {
            ClientAddressHeader::XForwardedFor => "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
            ClientAddressHeader::Forwarded => "proxy_set_header Forwarded $kassa_forwarded;",
            ClientAddressHeader::XRealIp => "proxy_set_header X-Real-IP $remote_addr;",
            ClientAddressHeader::None => "",
        };
        let d = dir.path().display();
        let conf = format!(
            "pid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n\
               access_log off;\n\
               client_body_temp_path {d}/body;\n\
               proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n\
               uwsgi_temp_path {d}/uwsgi;\n\
               scgi_temp_path {d}/scgi;\n\
               map $http_forwarded $kassa_forwarded {{\n\
                 \"\" \"for=$remote_addr\";\n\
                 default \"$http_forwarded, for=$remote_addr\";\n\
               }}\n\
               server {{\n\
                 listen 127.0.0.1:{port};\n\
                 location / {{\n\
                   proxy_pass http://{upstream};\n\
                   proxy_bind {PROXY};\n\
                   {forwarding}\n\
                 }}\n\
               }}\n\
             }}\n"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("nginx.conf");
        let child = Command::new(&bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .args(["-g", "daemon off; master_process off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {bin}: {e}"));
        let mut nginx = Nginx { child, dir, port };
        nginx.wait_ready();
        nginx
    }

    fn wait_ready(&mut self) {
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("nginx exited ({status}): {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nginx did not listen on {}: {}", self.port, self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client whose connections come from `from`.
fn client_at(from: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(from))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// Every forwarding header, each naming `who`: what a client that wants another address sends.
fn forged(r: reqwest::RequestBuilder, who: &str) -> reqwest::RequestBuilder {
    r.header("x-forwarded-for", who).header("forwarded", format!("for={who}")).header("x-real-ip", who)
}

async fn kassa_behind(header: ClientAddressHeader) -> TestApp {
    let limits = RateLimits {
        sessions_per_minute: SESSIONS_PER_MINUTE,
        signin_lockout_failures: LOCKOUT_FAILURES,
        ..RateLimits::default()
    };
    let protection = Protection {
        rate_limits: Some(limits),
        trusted_proxies: vec![format!("{PROXY}/32").parse().expect("net")],
        client_address_header: header,
        ..test_protection()
    };
    TestApp::spawn_with(Backend::Sqlite, Opts { protection, ..Opts::default() }).await
}

/// A client that forges a different address on every request is still one address: the limit,
/// then refusals.
async fn sessions_count_the_client(url: impl Fn(&str) -> String) {
    let client = client_at(CLIENT);
    let mut statuses = Vec::new();
    for i in 0..SESSIONS_PER_MINUTE + 3 {
        let r = forged(client.post(url("/api/v1/sessions")), &format!("10.{i}.0.9")).send().await.expect("request");
        statuses.push(r.status());
    }
    let created = statuses.iter().filter(|s| **s == StatusCode::CREATED).count();
    assert_eq!(created, SESSIONS_PER_MINUTE as usize, "{statuses:?}");
    assert!(
        statuses[SESSIONS_PER_MINUTE as usize..].iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    // Another client has its own allowance.
    let other = client_at(Ipv4Addr::new(127, 0, 0, 6));
    assert_eq!(other.post(url("/api/v1/sessions")).send().await.expect("request").status(), StatusCode::CREATED);
}

/// Wrong tokens naming the admin's address lock out only the guesser's own; the admin, and the
/// right token from the guesser's address, still sign in.
async fn sign_ins_lock_out_the_guesser_only(url: impl Fn(&str) -> String) {
    let guesser = client_at(CLIENT);
    let admin = client_at(ADMIN_AT);
    let sign_in = |c: &reqwest::Client, token: &str, forge: bool| {
        let r = c.post(url("/admin/login")).form(&[("token", token)]);
        if forge { forged(r, &ADMIN_AT.to_string()) } else { r }.send()
    };
    for i in 1..LOCKOUT_FAILURES {
        let r = sign_in(&guesser, &format!("guess-{i}"), true).await.expect("request");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let locked = sign_in(&guesser, "guess-last", true).await.expect("request");
    assert_eq!(locked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(sign_in(&guesser, "guess-more", true).await.expect("request").status(), StatusCode::TOO_MANY_REQUESTS);
    // The admin's own address was never counted: a typo there is one failure, not a lockout.
    assert_eq!(sign_in(&admin, "typo", false).await.expect("request").status(), StatusCode::UNAUTHORIZED);
    assert_eq!(sign_in(&admin, ADMIN, false).await.expect("request").status(), StatusCode::SEE_OTHER);
    // The right token is never locked out, whatever address it comes from.
    assert_eq!(sign_in(&guesser, ADMIN, true).await.expect("request").status(), StatusCode::SEE_OTHER);
}

async fn behind_nginx(header: ClientAddressHeader) {
    let t = kassa_behind(header).await;
    let nginx = Nginx::start(t.app.addr, header);
    sessions_count_the_client(|p| nginx.url(p)).await;
    sign_ins_lock_out_the_guesser_only(|p| nginx.url(p)).await;
    // Straight to kassa, the peer is not a trusted proxy: its headers are not believed either.
    let direct = client_at(CLIENT);
    let r = forged(direct.post(t.url("/api/v1/sessions")), "10.9.9.9").send().await.expect("request");
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "the same client, counted by its own address");
}

macro_rules! behind_nginx {
    ($name:ident, $header:expr) => {
        #[cfg_attr(
            not(kassa_test_nginx),
            ignore = "nginx: KASSA_NGINX (the path of nginx, Debian's nginx-light) was not set when the tests were built"
        )]
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            behind_nginx($header).await;
        }
    };
}

behind_nginx!(behind_nginx_writing_x_forwarded_for, ClientAddressHeader::XForwardedFor);
behind_nginx!(behind_nginx_writing_forwarded, ClientAddressHeader::Forwarded);
behind_nginx!(behind_nginx_writing_x_real_ip, ClientAddressHeader::XRealIp);

/// `none`: kassa faces the internet itself, and believes no header even from a listed proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn facing_clients_itself_no_header_is_believed() {
    let t = kassa_behind(ClientAddressHeader::None).await;
    sessions_count_the_client(|p| t.url(p)).await;
    sign_ins_lock_out_the_guesser_only(|p| t.url(p)).await;
    // Even the listed proxy's address is counted as itself.
    let proxy = client_at(PROXY);
    let mut created = 0;
    for i in 0..SESSIONS_PER_MINUTE + 1 {
        let r = forged(proxy.post(t.url("/api/v1/sessions")), &format!("10.{i}.0.1")).send().await.expect("request");
        created += usize::from(r.status() == StatusCode::CREATED);
    }
    assert_eq!(created, SESSIONS_PER_MINUTE as usize);
}

/// Under `CI=true` the proxy tests must have been built to run.
#[test]
fn proxy_tests_are_built_to_run_in_ci() {
    if std::env::var("CI").is_ok_and(|v| v == "true") && !cfg!(kassa_test_nginx) {
        panic!("CI=true but KASSA_NGINX was not set when the tests were built");
    }
}
