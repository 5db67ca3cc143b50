//! Pod manifests of the standalone catalog (`--pod-dir`) are files anyone with write access
//! to the directory controls: YAML or JSON, one or many documents. Parsing must never panic,
//! and a pod's networks annotation, once found, must parse and plan without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus_agent::catalog::manifest::parse_objects;
use plexus_agent::spec::plan::plan_attachments;
use plexus_agent::spec::selection::parse_selection;
use plexus_agent::spec::NETWORKS_ANNOTATION;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(objects) = parse_objects(text) else { return };
    for pod in &objects.pods {
        let Some(annotation) = pod.annotations.get(NETWORKS_ANNOTATION) else { continue };
        if let Ok(selections) = parse_selection(annotation) {
            let _ = plan_attachments(&pod.namespace, "eth0", &selections, &["default".to_owned()]);
        }
    }
});
