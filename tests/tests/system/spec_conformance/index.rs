//! Traceability: which test covers which requirement of the spec (section, requirement, test),
//! checked against the tests the section files define.

use std::collections::BTreeSet;

/// (section, requirement, test): every MUST / SHALL / "must fail" of sections 3 to 7.
pub const INDEX: &[(&str, &str, &str)] = &[
    (
        "3.2",
        "the NAD object shall be metadata + spec.config (a string of CNI JSON)",
        "spec_3_2_nad_object_definition",
    ),
    (
        "3.2",
        "without valid spec keys, the network known by the NAD's name shall be attached",
        "kernel_spec_3_2_no_spec_keys_attaches_network_known_by_name",
    ),
    (
        "3.3",
        "NAD names must be made of DNS-1123 label units (63 characters per unit only recommended)",
        "kernel_spec_3_3_nad_names_are_dns1123_label_units",
    ),
    ("3.4.1", "rule 1: spec.config is used when present", "kernel_spec_3_4_1_rule_1_spec_config_first"),
    (
        "3.4.1",
        "rule 2: else an on-disk configlist named after the NAD",
        "kernel_spec_3_4_1_rule_2_on_disk_configlist",
    ),
    (
        "3.4.1",
        "rule 3: else an on-disk config named after the NAD",
        "kernel_spec_3_4_1_rule_3_on_disk_config",
    ),
    ("3.4.1", "rule 4: otherwise the network request must fail", "kernel_spec_3_4_1_rule_4_no_config_fails"),
    (
        "3.4.2",
        "a missing CNI 'name' shall be filled with the NAD's name",
        "kernel_spec_3_4_2_name_injected_from_nad",
    ),
    ("3.4.3", "each NAD must have a name", "spec_3_4_3_nad_must_have_a_name"),
    (
        "3.4.3",
        "NAD name and CNI config name need not match",
        "kernel_spec_3_4_3_config_name_may_differ_from_nad_name",
    ),
    ("4.1", "the annotation name shall be k8s.v1.cni.cncf.io/networks", "kernel_spec_4_1_annotation_name"),
    ("4.1", "both formats must be supported: comma-delimited", "kernel_spec_4_1_1_comma_delimited_format"),
    ("4.1", "both formats must be supported: JSON list", "kernel_spec_4_1_2_json_list_format"),
    (
        "4.1.2.1",
        "non-standard keys use reverse domain names (and do not break the annotation)",
        "kernel_spec_4_1_2_1_reverse_domain_keys_accepted",
    ),
    ("4.1.2.1.1", "\"name\" is required", "kernel_spec_4_1_2_1_1_name_is_required"),
    (
        "4.1.2.1.3",
        "invalid \"ips\" makes the annotation invalid and ignored",
        "kernel_spec_4_1_2_1_3_invalid_ips_ignore_annotation",
    ),
    (
        "4.1.2.1.3.2",
        "\"ips\" goes into runtimeConfig",
        "kernel_spec_4_1_2_1_3_2_ips_passed_in_runtime_config",
    ),
    (
        "4.1.2.1.3.2",
        "no plugin with the \"ips\" capability: the attachment must fail",
        "kernel_spec_4_1_2_1_3_2_ips_without_capability_fails",
    ),
    (
        "4.1.2.1.4",
        "invalid \"mac\" makes the annotation invalid and ignored",
        "kernel_spec_4_1_2_1_4_invalid_mac_ignores_annotation",
    ),
    (
        "4.1.2.1.4.2",
        "\"mac\" goes into runtimeConfig",
        "kernel_spec_4_1_2_1_4_2_mac_passed_in_runtime_config",
    ),
    (
        "4.1.2.1.4.2",
        "no plugin with the \"mac\" capability: the attachment must fail",
        "kernel_spec_4_1_2_1_4_2_mac_without_capability_fails",
    ),
    (
        "4.1.2.1.5",
        "invalid \"interface\" makes the annotation invalid and ignored",
        "kernel_spec_4_1_2_1_5_invalid_interface_ignores_annotation",
    ),
    (
        "4.1.2.1.5",
        "an interface name already in use must fail the attachment",
        "kernel_spec_4_1_2_1_5_interface_in_use_fails",
    ),
    ("4.1.2.1.5.1", "\"interface\" sets CNI_IFNAME", "kernel_spec_4_1_2_1_5_1_interface_sets_cni_ifname"),
    (
        "4.1.2.1.6.2",
        "\"cni-args\" must reach the plugin as \"args\", over the config's own args",
        "kernel_spec_4_1_2_1_6_2_cni_args_override_config_args",
    ),
    (
        "4.1.2.1.7",
        "invalid \"portMappings\" makes the annotation invalid and ignored",
        "kernel_spec_4_1_2_1_7_invalid_port_mappings_ignore_annotation",
    ),
    (
        "4.1.2.1.7",
        "port, protocol value rules (1-65535, TCP/UDP/SCTP any case, TCP default)",
        "spec_4_1_2_1_7_port_mapping_values",
    ),
    (
        "4.1.2.1.7.2",
        "\"portMappings\" goes into runtimeConfig",
        "kernel_spec_4_1_2_1_7_2_port_mappings_passed_in_runtime_config",
    ),
    (
        "4.1.2.1.7 / .7.2",
        "no plugin with the \"portMappings\" capability: the attachment must fail",
        "kernel_spec_4_1_2_1_7_2_port_mappings_without_capability_fails",
    ),
    (
        "4.1.2.1.8",
        "invalid \"bandwidth\" makes the annotation invalid and ignored",
        "kernel_spec_4_1_2_1_8_invalid_bandwidth_ignores_annotation",
    ),
    (
        "4.1.2.1.8.2",
        "\"bandwidth\" goes into runtimeConfig",
        "kernel_spec_4_1_2_1_8_2_bandwidth_passed_in_runtime_config",
    ),
    (
        "4.1.2.1.8 / .8.2",
        "no plugin with the \"bandwidth\" capability: the attachment must fail",
        "kernel_spec_4_1_2_1_8_2_bandwidth_without_capability_fails",
    ),
    (
        "4.1.2.1.9",
        "\"default-route\" on more than one item (or invalid): annotation invalid and ignored",
        "kernel_spec_4_1_2_1_9_default_route_on_two_networks_ignores_annotation",
    ),
    (
        "4.1.2.1.9",
        "\"default-route\" moves the pod's default route to that attachment",
        "kernel_spec_4_1_2_1_9_default_route_moves_to_selected_network",
    ),
    (
        "4.1.2.1",
        "(implementation option) strict mode fails instead of ignoring",
        "kernel_spec_4_1_2_invalid_annotation_fails_in_strict_mode",
    ),
    (
        "4.2",
        "the same network twice: separate operations, separate status entries",
        "kernel_spec_4_2_same_network_twice_is_two_attachments",
    ),
    (
        "4.2.1",
        "all operations of one attachment use the same [container, network, ifname]",
        "kernel_spec_4_2_1_operations_use_the_same_tuple",
    ),
    (
        "4.2.1",
        "generated CNI_IFNAMEs must be unique per [container, network]",
        "kernel_spec_4_2_1_generated_ifnames_are_unique",
    ),
    (
        "5",
        "status annotation name, value a JSON list of maps, one per attachment",
        "kernel_spec_5_status_annotation_is_a_json_list_of_maps",
    ),
    (
        "5.1 / 5.1.1",
        "status shall come from the first sandbox interface of the result",
        "kernel_spec_5_1_1_status_from_first_sandbox_interface",
    ),
    (
        "5.2",
        "the default network must have an entry with 'default' true",
        "kernel_spec_5_2_default_network_entry",
    ),
    (
        "5.3",
        "non-standard status keys must use reverse domain names",
        "kernel_spec_5_3_status_keys_are_standard",
    ),
    ("5.3.1", "\"name\" is the NAD reference or the default network's name", "kernel_spec_5_3_1_status_name"),
    (
        "5.3.2",
        "\"interface\" shall name the interface in the pod",
        "kernel_spec_5_3_2_status_interface_is_in_the_pod",
    ),
    (
        "5.3.3",
        "\"ips\" shall be the addresses assigned to the pod",
        "kernel_spec_5_3_3_status_ips_are_pod_addresses",
    ),
    (
        "5.3.3",
        "\"ips\" as readers parse them: bare addresses, with \"mtu\" and \"gateway\" (the client library's NetworkStatus)",
        "kernel_spec_5_3_3_status_is_what_the_client_library_writes",
    ),
    (
        "5.3.4",
        "\"mac\" shall be the interface's address; \"mac\" needs \"interface\"",
        "kernel_spec_5_3_4_status_mac_is_the_interface_address",
    ),
    (
        "5.3.5",
        "\"default\" is required and only one entry may be true",
        "kernel_spec_5_3_5_exactly_one_default_entry",
    ),
    (
        "5.3.6",
        "\"dns\" shall hold the DNS information of the result",
        "kernel_spec_5_3_6_status_dns_from_result",
    ),
    (
        "5.3.6.4",
        "\"default-route\" shall be set when the selection had it",
        "kernel_spec_5_3_6_4_status_default_route",
    ),
    (
        "6",
        "every pod must be attached to the cluster default network",
        "kernel_spec_6_every_pod_gets_the_default_network",
    ),
    (
        "6.1",
        "the CNI config is written only once the default network is ready",
        "kernel_spec_6_1_config_written_once_default_network_ready",
    ),
    (
        "6.1.2",
        "operations must be blocked until the default network is ready",
        "kernel_spec_6_1_2_add_blocked_until_default_network_ready",
    ),
    (
        "6.2",
        "the default network must be attached before selected networks",
        "kernel_spec_6_2_default_network_attached_first",
    ),
    (
        "7.1",
        "name and cniVersion of the configlist must be injected into each plugin",
        "kernel_spec_7_1_name_and_cni_version_injected",
    ),
    (
        "7.1",
        "configlists must be invoked per the CNI spec (prevResult, reverse DEL, result version)",
        "kernel_spec_7_1_configlist_invoked_per_cni_spec",
    ),
    (
        "7.2",
        "a failed selected attachment shall fail setup at once; later ones not attempted",
        "kernel_spec_7_2_attachment_failure_fails_setup_and_skips_the_rest",
    ),
    (
        "7.2",
        "a failed default network attachment shall fail setup",
        "kernel_spec_7_2_default_network_failure_fails_setup",
    ),
    (
        "7.2",
        "every attempted attachment must be torn down",
        "kernel_spec_7_2_attempted_attachments_are_torn_down",
    ),
    (
        "7.2",
        "one failed detachment shall not prevent the next ones",
        "kernel_spec_7_2_teardown_continues_past_failure",
    ),
    (
        "7.2",
        "a failed detachment shall be reported to the runtime",
        "kernel_spec_7_2_teardown_failure_is_reported",
    ),
    (
        "7.3",
        "operations for one container must not run in parallel",
        "kernel_spec_7_3_operations_for_one_container_are_serialized",
    ),
    (
        "7.4",
        "a NAD the pod may not select must fail the operation",
        "kernel_spec_7_4_disallowed_network_fails",
    ),
    (
        "7.5",
        "runtimeConfig from the runtime must reach only the default network",
        "kernel_spec_7_5_runtime_config_only_for_default_network",
    ),
];

/// The section files, by section number.
const SECTIONS: [(&str, &str); 5] = [
    ("3", include_str!("section_3_nad.rs")),
    ("4", include_str!("section_4_selection.rs")),
    ("5", include_str!("section_5_status.rs")),
    ("6", include_str!("section_6_default_network.rs")),
    ("7", include_str!("section_7_runtime.rs")),
];

/// The names of the `#[test]` functions in `source`.
fn test_names(source: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut lines = source.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if line != "#[test]" {
            continue;
        }
        let signature = lines
            .by_ref()
            .find(|l| !l.starts_with("#["))
            .unwrap_or_else(|| panic!("#[test] at the end of a file"));
        let name = signature
            .strip_prefix("fn ")
            .and_then(|rest| rest.split('(').next())
            .unwrap_or_else(|| panic!("#[test] not followed by a function: {signature:?}"));
        names.push(name);
    }
    names
}

/// The section number a test name or an index section starts with ("spec_4_1_...",
/// "kernel_spec_4_1_..." and "4.1.2": 4).
fn major(text: &str) -> &str {
    text.trim_start_matches("kernel_")
        .trim_start_matches("spec_")
        .split(['_', '.', ' '])
        .next()
        .unwrap_or_default()
}

#[test]
fn index_names_every_test_and_only_existing_ones() {
    let mut tests = BTreeSet::new();
    for (section, source) in SECTIONS {
        let names = test_names(source);
        assert!(!names.is_empty(), "no test found in the file of section {section}");
        for name in names {
            assert_eq!(major(name), section, "{name} is in the file of section {section}");
            assert!(tests.insert(name), "{name} is defined twice");
        }
    }
    let indexed: BTreeSet<&str> = INDEX.iter().map(|(_, _, test)| *test).collect();
    let missing: Vec<&&str> = tests.difference(&indexed).collect();
    assert!(missing.is_empty(), "tests without a requirement in INDEX: {missing:?}");
    let unknown: Vec<&&str> = indexed.difference(&tests).collect();
    assert!(unknown.is_empty(), "INDEX names tests that do not exist: {unknown:?}");
    for (section, requirement, test) in INDEX {
        assert_eq!(major(section), major(test), "{section} {requirement:?} is covered by {test}");
    }
}
