//! The selection annotation parser must never panic, and whatever it accepts must plan and
//! build delegate configs without panicking either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus_agent::spec::plan::plan_attachments;
use plexus_agent::spec::selection::parse_selection;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(selections) = parse_selection(text) {
        let _ = plan_attachments("ns", "eth0", &selections, &["default".to_owned()]);
    }
});
