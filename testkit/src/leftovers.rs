//! What a test may leave behind, and the assertion every test ends with.

use std::path::Path;

/// The names in `dir`, sorted; none when it does not exist.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Addresses host-local still holds in `data_dir` ("NETWORK/ADDRESS"): it keeps one file per
/// address in `<dataDir>/<network name>/`, next to its lock and last-reserved markers.
pub fn host_local_allocations(data_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for net in files_in(data_dir) {
        for f in files_in(&data_dir.join(&net)) {
            if f != "lock" && !f.starts_with("last_reserved_ip") {
                out.push(format!("{net}/{f}"));
            }
        }
    }
    out
}

/// Fails the test with the list of what was left behind (links, records, allocations, pins:
/// whatever the caller gathered, one line each), unless it is empty.
#[track_caller]
pub fn assert_nothing_left(leftovers: Vec<String>) {
    assert_eq!(leftovers, Vec::<String>::new(), "left behind");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_local_allocations_are_its_address_files() {
        let dir = std::env::temp_dir().join(crate::unique("pxkitipam"));
        std::fs::create_dir_all(dir.join("blue")).expect("dataDir");
        for f in ["lock", "last_reserved_ip.0", "10.0.0.2"] {
            std::fs::write(dir.join("blue").join(f), "c1").expect("a host-local file");
        }
        let found = host_local_allocations(&dir);
        std::fs::remove_dir_all(&dir).expect("removing the dataDir");
        assert_eq!(found, ["blue/10.0.0.2"]);
        assert_eq!(files_in(&dir), Vec::<String>::new(), "a missing directory holds nothing");
    }

    #[test]
    #[should_panic(expected = "left behind")]
    fn anything_left_fails() {
        assert_nothing_left(vec!["link net1 in pxpod-1-0".into()]);
    }
}
