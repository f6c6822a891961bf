//! The layers of the crate, declared once. A module may use the modules of the layers below its
//! own and nothing else: no module uses one of its own layer or of a layer above. The tests below
//! read every source file of the library and fail on any `crate::` path against this order, and
//! on any loop among the files of one module (`http/api.rs` using `http/pages.rs` and back), so a
//! cycle cannot come back unnoticed. ARCHITECTURE.md says what each layer is for.

/// Lowest first.
pub const LAYERS: &[&[&str]] = &[
    // The pure core: rules and types, no I/O, no clock.
    &["domain"],
    // Leaf services: time, the secret box.
    &["clock", "vault"],
    // The one error type (maps domain refusals to stable codes).
    &["error"],
    // The database: each command one transaction.
    &["store"],
    // The built-in simulated provider (its own tables through the store).
    &["sandbox"],
    // The payment providers' adapters (remote calls, no database).
    &["gateway"],
    // The use cases: one function per command, shared by the HTTP layer and the workers.
    &["usecase"],
    // Background work.
    &["workers"],
    // The HTTP surface: API, pages, notifications.
    &["http"],
    // Command line, environment and file, resolved into each layer's own settings.
    &["config"],
    // Wiring and whole-database tools.
    &["app", "backup"],
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use super::LAYERS;

    fn layer_of(module: &str) -> Option<usize> {
        LAYERS.iter().position(|layer| layer.contains(&module))
    }

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    fn ident(text: &str) -> &str {
        let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len());
        &text[..end]
    }

    /// The first segment of every `crate::` path in `code`, `use crate::{a, b::c}` included.
    fn crate_paths(code: &str) -> Vec<String> {
        paths_after(code, "crate::")
    }

    /// The segment after `prefix` of every path in `code` that starts with it, groups included.
    fn paths_after(code: &str, prefix: &str) -> Vec<String> {
        let mut found = Vec::new();
        for (at, _) in code.match_indices(prefix) {
            // A longer path that only ends with the prefix (`super::super::` for `super::`) is
            // not this one.
            if code[..at].ends_with("::") {
                continue;
            }
            let rest = &code[at + prefix.len()..];
            if rest.starts_with(prefix) {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 0usize;
                let mut item_start = true;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => item_start = true,
                        c if item_start && !c.is_whitespace() => {
                            item_start = false;
                            found.push(ident(&group[i..]).to_string());
                        }
                        _ => {}
                    }
                }
            } else {
                found.push(ident(rest).to_string());
            }
        }
        found
    }

    /// The top-level module a library source file belongs to; `None` for the crate root and the
    /// binary's own modules.
    fn module_of(src: &Path, file: &Path) -> Option<String> {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel.components().next()?.as_os_str().to_str()?.trim_end_matches(".rs").to_string();
        match first.as_str() {
            "lib" | "main" | "bench" | "cases_cli" | "layers" => None,
            _ => Some(first),
        }
    }

    #[test]
    fn every_module_is_in_one_layer() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
        let missing: Vec<&String> = modules.iter().filter(|m| layer_of(m).is_none()).collect();
        assert!(missing.is_empty(), "modules in no layer of src/layers.rs: {missing:?}");
        let declared: Vec<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
        let unique: BTreeSet<&str> = declared.iter().copied().collect();
        assert_eq!(unique.len(), declared.len(), "a module declared twice in src/layers.rs");
    }

    #[test]
    fn no_module_uses_its_own_layer_or_one_above() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        files.sort();
        let mut against = Vec::new();
        for file in &files {
            let Some(module) = module_of(&src, file) else { continue };
            let Some(own) = layer_of(&module) else { continue };
            let text = std::fs::read_to_string(file).unwrap();
            let code: String =
                text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
            for used in crate_paths(&code) {
                if used == module {
                    continue;
                }
                if let Some(theirs) = layer_of(&used)
                    && theirs >= own
                {
                    against.push(format!("{} uses crate::{used}", file.strip_prefix(&src).unwrap().display()));
                }
            }
        }
        against.sort();
        against.dedup();
        assert!(against.is_empty(), "imports against the layer order of src/layers.rs:\n{}", against.join("\n"));
    }

    /// A file's code without comments and without its unit tests (a test module may reach any
    /// sibling).
    fn code_of(file: &Path) -> String {
        let text = std::fs::read_to_string(file).unwrap();
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
    }

    /// The files and folders of module folder `dir` (its `mod.rs`, which declares and wires them,
    /// and the `*_tests.rs` files aside), each with the siblings it uses: `super::x` from a file
    /// of `dir`, `super::super::x` from a file of a folder in it, or the full `crate::…::x`.
    fn sibling_uses(src: &Path, dir: &Path) -> Vec<(String, BTreeSet<String>)> {
        let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().trim_end_matches(".rs").to_string();
        let mut nodes: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir() || (p.extension().is_some_and(|e| e == "rs") && !name(p).ends_with("_tests")))
            .filter(|p| name(p) != "mod")
            .collect();
        nodes.sort();
        let names: BTreeSet<String> = nodes.iter().map(|p| name(p)).collect();
        let module_path: Vec<String> =
            dir.strip_prefix(src).unwrap().components().map(|c| c.as_os_str().to_str().unwrap().to_string()).collect();
        let full = format!("crate::{}::", module_path.join("::"));
        nodes
            .iter()
            .map(|node| {
                let mut files = Vec::new();
                if node.is_dir() {
                    sources(node, &mut files);
                } else {
                    files.push(node.clone());
                }
                let mut used = BTreeSet::new();
                for file in &files {
                    let code = code_of(file);
                    let up = if node.is_dir() { "super::super::" } else { "super::" };
                    for path in paths_after(&code, up).into_iter().chain(paths_after(&code, &full)) {
                        if names.contains(&path) && path != name(node) {
                            used.insert(path);
                        }
                    }
                }
                (name(node), used)
            })
            .collect()
    }

    /// The loops in a graph of names: each strongly connected part of more than one node.
    fn loops(graph: &[(String, BTreeSet<String>)]) -> Vec<Vec<String>> {
        let reach = |from: &str| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.to_string()];
            while let Some(n) = todo.pop() {
                for (_, next) in graph.iter().filter(|(name, _)| *name == n) {
                    for m in next {
                        if seen.insert(m.clone()) {
                            todo.push(m.clone());
                        }
                    }
                }
            }
            seen
        };
        let mut found: Vec<Vec<String>> = Vec::new();
        for (name, _) in graph {
            if found.iter().any(|l| l.contains(name)) {
                continue;
            }
            let mut part: Vec<String> =
                reach(name).into_iter().filter(|other| other != name && reach(other).contains(name)).collect();
            if !part.is_empty() {
                part.push(name.clone());
                part.sort();
                found.push(part);
            }
        }
        found
    }

    #[test]
    fn the_files_of_a_module_use_each_other_without_loops() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut dirs = Vec::new();
        let mut todo = vec![src.clone()];
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path.clone());
                    todo.push(path);
                }
            }
        }
        dirs.sort();
        let mut against = Vec::new();
        for dir in &dirs {
            for part in loops(&sibling_uses(&src, dir)) {
                against.push(format!("{}: {}", dir.strip_prefix(&src).unwrap().display(), part.join(" ⇄ ")));
            }
        }
        assert!(against.is_empty(), "files of one module that use each other in a loop:\n{}", against.join("\n"));
    }

    #[test]
    fn loops_are_found_and_one_way_uses_are_not_loops() {
        let graph = |edges: &[(&str, &[&str])]| -> Vec<(String, BTreeSet<String>)> {
            edges.iter().map(|(n, to)| (n.to_string(), to.iter().map(|t| t.to_string()).collect())).collect()
        };
        assert!(loops(&graph(&[("a", &["b"]), ("b", &["c"]), ("c", &[])])).is_empty());
        let found = loops(&graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]));
        assert_eq!(found, [vec!["a".to_string(), "b".into(), "c".into()]]);
        let code = "use super::{x, y::Z};\nuse super::super::w;\nlet v = crate::http::q::f();";
        assert_eq!(paths_after(code, "super::"), ["x", "y"]);
        assert_eq!(paths_after(code, "crate::http::"), ["q"]);
    }

    #[test]
    fn paths_are_read_from_groups_and_plain_uses() {
        let code = "use crate::{a::{b, c}, d};\nuse crate::e::F;\nlet x = crate::g::h();";
        assert_eq!(crate_paths(code), ["a", "d", "e", "g"]);
    }
}
