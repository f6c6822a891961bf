//! The layers of the crate, declared once. A module may use the modules of the layers below its
//! own and nothing else: no module uses one of its own layer or of a layer above. The test below
//! reads every source file of the library and fails on any `crate::` path against this order, so
//! a cycle cannot come back unnoticed. ARCHITECTURE.md says what each layer is for.

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
        let mut found = Vec::new();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
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
            "lib" | "main" | "bench" | "layers" => None,
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

    #[test]
    fn paths_are_read_from_groups_and_plain_uses() {
        let code = "use crate::{a::{b, c}, d};\nuse crate::e::F;\nlet x = crate::g::h();";
        assert_eq!(crate_paths(code), ["a", "d", "e", "g"]);
    }
}
