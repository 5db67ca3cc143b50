//! The agent's folders are layers (docs/architecture.md): every `crate::` import of its code
//! points down, so no two top-level modules of `agent/src` import each other, directly or
//! around a circle. Test code is left out (a `tests` folder or file, and what follows
//! `#[cfg(test)]` in a file); so are comments. And the one netlink layer is sealed: no file
//! outside `agent/src/netlink/`, tests included, names a type of the netlink crates.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn agent_src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agent/src")
}

/// The top-level modules: each folder and each file of `agent/src` but the crate roots.
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("agent/src")
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let module = if e.path().is_dir() { name } else { name.strip_suffix(".rs")?.to_owned() };
            (module != "lib" && module != "main").then_some(module)
        })
        .collect()
}

/// The `.rs` files below `dir`; with `tests: false`, those of the crate's code only (a
/// `tests.rs`, and the folders `tests`, `kernel_tests` and `testdata`, left out).
fn rust_files(dir: &Path, tests: bool, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a folder of agent/src").flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let test_only = matches!(name.as_str(), "tests" | "kernel_tests" | "testdata" | "tests.rs");
        if test_only && !tests {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, tests, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The code of a file before its `#[cfg(test)]` items, without comment lines.
fn code_of(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The top-level modules that `code` names through `crate::`, in paths (`crate::a::b`) and
/// groups (`crate::{a, b::c}`).
fn imported_modules(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first segment of each item of the group, at its top level.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            names.insert(first_segment(&item));
        } else {
            names.insert(first_segment(rest));
        }
    }
    names
}

fn first_segment(path: &str) -> String {
    path.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// Module -> the modules it imports (itself left out).
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = agent_src();
    let modules = top_level_modules(&src);
    let mut graph: BTreeMap<String, BTreeSet<String>> =
        modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    let mut files = Vec::new();
    rust_files(&src, false, &mut files);
    for file in files {
        let relative = file.strip_prefix(&src).expect("under agent/src");
        let first = relative.components().next().expect("a path").as_os_str().to_string_lossy().into_owned();
        let module = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
        if !modules.contains(&module) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for imported in imported_modules(&code_of(&text)) {
            if imported != module && modules.contains(&imported) {
                graph.get_mut(&module).expect("a module").insert(imported);
            }
        }
    }
    graph
}

/// A circle of imports, if there is one: depth-first, a module met again on the current path.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.to_owned());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_agents_top_level_modules_import_each_other_in_no_circle() {
    let graph = import_graph();
    assert!(graph.len() > 20, "read {} modules of agent/src", graph.len());
    assert!(
        graph["engine"].contains("spec") && graph["engine"].contains("state"),
        "the engine's imports were read"
    );
    if let Some(circle) = circle(&graph) {
        panic!("imports run in a circle, so one of them runs up a layer: {}", circle.join(" -> "));
    }
}

#[test]
fn no_file_outside_the_netlink_layer_names_a_netlink_crate() {
    let src = agent_src();
    let netlink = src.join("netlink");
    let mut files = Vec::new();
    rust_files(&src, true, &mut files);
    assert!(files.len() > 100, "read {} files of agent/src", files.len());
    let naming: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with(&netlink))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            ["rtnetlink::", "use rtnetlink", "netlink_packet_", "netlink_sys::", "use netlink_sys"]
                .iter()
                .any(|name| text.contains(name))
        })
        .map(|f| f.strip_prefix(&src).unwrap_or(f).display().to_string())
        .collect();
    assert!(naming.is_empty(), "outside agent/src/netlink/, these name a netlink crate: {naming:?}");
    let inside = files
        .iter()
        .filter(|f| f.starts_with(&netlink))
        .any(|f| std::fs::read_to_string(f).unwrap_or_default().contains("rtnetlink::"));
    assert!(inside, "the netlink layer itself was read");
}

#[test]
fn the_reader_finds_paths_groups_and_circles() {
    let code = code_of(
        "use crate::spec::plan;\n// crate::engine in a comment\nuse crate::{cni::Command, state::{A, B}, metrics};\n\
         fn f() { crate::netlink::x(); }\n#[cfg(test)]\nmod tests { use crate::engine::Engine; }",
    );
    let found: Vec<String> = imported_modules(&code).into_iter().collect();
    assert_eq!(found, ["cni", "metrics", "netlink", "spec", "state"]);

    let edges = |pairs: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            g.entry((*a).into()).or_default().insert((*b).into());
            g.entry((*b).into()).or_default();
        }
        g
    };
    assert_eq!(circle(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    assert_eq!(circle(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])).map(|c| c.len()), Some(4));
}
