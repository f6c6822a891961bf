//! The shell blocks of the README and the docs run as written. Every ```sh block is in [`PLAN`]:
//! run as a script (its output must show what the text promises), run as a server (it must come
//! up listening), or not run, with the reason. A block added or changed without a plan entry fails
//! the first test; the second runs the plan in a scratch directory where `kassa` is this build's
//! binary and `cargo run --release -- ARGS` runs it with ARGS (what that command does once built).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the docs test does with one block.
#[derive(Debug, Clone, Copy)]
enum Run {
    /// Run to its end with `bash -eo pipefail`; its output must contain this.
    Script(&'static str),
    /// Starts servers that keep running: this many must print that they listen.
    Server(usize),
    /// Not run, and why.
    Excused(&'static str),
}

/// One block: the file, the start of its first line, and what is done with it, in order of the
/// files below and of the blocks within each.
const PLAN: &[(&str, &str, Run)] = &[
    (
        "README.md",
        "cargo run --release -- serve --demo",
        Run::Excused(
            "the suite runs `serve --demo` and the purchase below runs against it; `cargo test` is what CI runs",
        ),
    ),
    ("README.md", "B=http://127.0.0.1:8080", Run::Script("\"paid\"")),
    ("README.md", "SHOP_KEY=$(openssl rand -hex 32)", Run::Script("\"merchant_reference\":\"PO-118\"")),
    (
        "docs/operating.md",
        "cargo install --path .",
        Run::Excused("builds and installs the release binary: the binary this suite runs as `kassa`"),
    ),
    (
        "docs/operations.md",
        "kassa backup --data-dir /var/lib/kassa",
        Run::Excused("a production host's paths; backup and restore run in tests/api/ops.rs"),
    ),
    (
        "docs/operations.md",
        "kassa restore --from /backups/kassa-latest",
        Run::Excused("a production host's paths; backup and restore run in tests/api/ops.rs"),
    ),
    ("docs/operations.md", "export KASSA_PREVIOUS_BIN", Run::Excused("runs the test suite itself, as CI does")),
    ("docs/postgresql.md", "createdb -h 127.0.0.1 -U postgres kassa", Run::Server(1)),
    ("docs/postgresql.md", "# with KASSA_ADMIN_TOKEN exported as above", Run::Server(3)),
    ("docs/public-internet.md", "kassa serve --trusted-proxies", Run::Server(1)),
    (
        "docs/webhooks.md",
        "curl -s -H \"Authorization: Bearer $KASSA_ADMIN_TOKEN\"",
        Run::Excused("reads a shop's own kassa at its address; the same read runs in tests/api/integration.rs"),
    ),
    ("TESTING.md", "cargo test", Run::Excused("the suite's own commands, run by CI")),
    ("TESTING.md", "KASSA_MODEL_CASES=20000", Run::Excused("a long run of the model tests, which CI runs shorter")),
    (
        "TESTING.md",
        "rustup toolchain install nightly",
        Run::Excused("fuzzing needs a nightly toolchain, which this machine kind cannot fetch"),
    ),
    (
        "BENCHMARKS.md",
        "cargo run --release -- bench",
        Run::Excused("benchmarks, run by scripts/bench.sh and scripts/bench-compare.sh"),
    ),
    (
        "BENCHMARKS.md",
        "kassa bench seed --orders 1000000",
        Run::Excused("a benchmark on a history of a million orders; the seeder runs in tests/api/history.rs"),
    ),
];

/// The files whose shell blocks are planned: the README, docs/, and the other guides at the top.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files.extend(["TESTING.md", "BENCHMARKS.md", "ARCHITECTURE.md"].iter().map(|f| root.join(f)));
    files
}

/// The ```sh (or bash, shell, console) blocks of every document: (file relative to the root, text).
fn blocks() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for file in documents() {
        let name = file.strip_prefix(root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        let mut block: Option<String> = None;
        for line in text.lines() {
            match &mut block {
                None if ["```sh", "```bash", "```shell", "```console"].contains(&line.trim_end()) => {
                    block = Some(String::new());
                }
                Some(b) if line.starts_with("```") => {
                    found.push((name.clone(), std::mem::take(b)));
                    block = None;
                }
                Some(b) => {
                    b.push_str(line);
                    b.push('\n');
                }
                None => {}
            }
        }
    }
    found
}

/// The plan's entries, each with the block it names.
fn planned() -> Vec<(&'static str, String, Run)> {
    let blocks = blocks();
    let mut unplanned: Vec<String> = Vec::new();
    let mut planned = Vec::new();
    let mut plan = PLAN.iter();
    for (file, text) in &blocks {
        match plan.next() {
            Some((f, start, run)) if f == file && text.starts_with(start) => planned.push((*f, text.clone(), *run)),
            _ => unplanned.push(format!("{file}:\n{text}")),
        }
    }
    assert!(
        unplanned.is_empty() && plan.next().is_none() && planned.len() == PLAN.len(),
        "every shell block of the docs is in tests/api/docs.rs's PLAN, in order (run, or not run with the reason); \
         not matched:\n{}",
        unplanned.join("\n")
    );
    planned
}

#[test]
fn every_shell_block_of_the_docs_is_run_or_says_why_not() {
    let planned = planned();
    assert!(planned.iter().any(|(_, _, run)| matches!(run, Run::Script(_))));
    for (file, text, run) in &planned {
        if let Run::Excused(why) = run {
            assert!(why.split(' ').count() >= 5, "{file}: say why a block is not run: {text}");
        }
    }
}

/// Under `CI=true` the documented commands must have been built to run.
#[test]
fn the_documented_commands_are_built_to_run_in_ci() {
    if std::env::var("CI").is_ok_and(|v| v == "true") && !(cfg!(kassa_test_docs) && cfg!(kassa_test_pg)) {
        panic!(
            "CI=true but curl, jq, openssl or createdb was missing, or KASSA_TEST_DATABASE_URL unset, when the tests were built"
        );
    }
}

/// A scratch directory with `bin/kassa` (this build) and `bin/cargo` (`cargo run --release --
/// ARGS` runs it; anything else is refused) ahead of the `PATH`.
fn scratch() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kassa"), bin.join("kassa")).unwrap();
    let shim = bin.join("cargo");
    std::fs::write(
        &shim,
        "#!/bin/sh\n# What `cargo run --release -- ARGS` does once built: run kassa with ARGS.\n\
         if [ \"$1 $2 $3\" = \"run --release --\" ]; then shift 3; exec kassa \"$@\"; fi\n\
         echo \"the docs test runs only cargo run --release -- …\" >&2; exit 2\n",
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `bash -eo pipefail -c text` in `dir`, a process group of its own (so whatever it starts in the
/// background is stopped with it), its output in `dir/out-N.log`.
fn spawn(dir: &Path, n: usize, text: &str, env: &[(&str, &str)]) -> (Group, PathBuf) {
    use std::os::unix::process::CommandExt as _;
    let log = dir.join(format!("out-{n}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let path = format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new("bash");
    command.args(["-eo", "pipefail", "-c", text]).current_dir(dir).env("PATH", path);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KASSA_")) {
        command.env_remove(k);
    }
    command
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .process_group(0);
    (Group(Some(command.spawn().unwrap())), log)
}

/// A process group started by [`spawn`], stopped when this goes out of scope (a failing assertion
/// included), so nothing is left listening.
struct Group(Option<Child>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.wait();
        }
    }
}

/// Stops `child`'s process group and waits until nothing listens on `ports`.
fn stop(group: Group, ports: &[u16]) {
    let Some(pid) = group.0.as_ref().map(Child::id) else { return };
    let _ = Command::new("kill").args(["-TERM", "--", &format!("-{pid}")]).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while ports.iter().any(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok()) {
        assert!(Instant::now() < deadline, "ports {ports:?} still in use");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(group);
}

fn read(log: &Path) -> String {
    let mut text = String::new();
    std::fs::File::open(log).unwrap().read_to_string(&mut text).unwrap();
    text
}

/// Waits until `log` says `n` times that kassa listens.
fn wait_listening(log: &Path, n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while read(log).matches("kassa listening on").count() < n {
        assert!(Instant::now() < deadline, "{what} did not come up listening:\n{}", read(log));
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn createdb_drop(database: &str) {
    let _ =
        Command::new("dropdb").args(["-h", "127.0.0.1", "-U", "postgres", "--if-exists", "--force", database]).status();
}

#[cfg_attr(
    not(all(kassa_test_docs, kassa_test_pg)),
    ignore = "the documented commands need curl, jq, openssl and createdb when the tests are built, and KASSA_TEST_DATABASE_URL"
)]
#[test]
fn the_documented_commands_run_as_written() {
    let planned = planned();
    for port in [8080, 8081, 8082, 8083] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} is in use: the docs' commands listen on 8080-8083 (stop `serve --demo` before `cargo test`)"
        );
    }
    let dir = scratch();
    // The README's first command, which its purchase runs against: the demo on 127.0.0.1:8080.
    let (demo, demo_log) = spawn(dir.path(), 0, "kassa serve --demo", &[]);
    wait_listening(&demo_log, 1, "kassa serve --demo");
    let mut demo = Some(demo);
    // PostgreSQL's quick start creates the database `kassa` on the machine's server.
    createdb_drop("kassa");
    let token = "docs-admin-token-0123456789abcdef0123456789";
    for (n, (file, text, run)) in planned.into_iter().enumerate() {
        let what = format!("{file}: {}", text.lines().next().unwrap_or_default());
        match run {
            Run::Excused(_) => {}
            Run::Script(expect) => {
                let (mut child, log) = spawn(dir.path(), n + 1, &text, &[]);
                let deadline = Instant::now() + Duration::from_secs(120);
                let status = loop {
                    if let Some(status) = child.0.as_mut().unwrap().try_wait().unwrap() {
                        break status;
                    }
                    assert!(Instant::now() < deadline, "{what} did not finish:\n{}", read(&log));
                    std::thread::sleep(Duration::from_millis(100));
                };
                let out = read(&log);
                // What it left running in the background (a server) is stopped with it.
                stop(child, &[8081]);
                assert!(status.success(), "{what} failed ({status}):\n{out}");
                assert!(out.contains(expect), "{what} did not show {expect}:\n{out}");
            }
            Run::Server(listening) => {
                // The guides' servers listen where the demo did.
                if let Some(demo) = demo.take() {
                    stop(demo, &[8080]);
                }
                let (child, log) = spawn(dir.path(), n + 1, &text, &[("KASSA_ADMIN_TOKEN", token)]);
                wait_listening(&log, listening, &what);
                stop(child, &[8080, 8081, 8082, 8083]);
            }
        }
    }
    createdb_drop("kassa");
    if let Some(demo) = demo {
        stop(demo, &[8080]);
    }
}
