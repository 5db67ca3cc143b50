//! Pinned TC links across agent "restarts" (a second load of the object) and "upgrades" (a
//! link running other code), on a veth of a private network namespace and a private bpffs.
//! Needs root.

use std::path::Path;
use std::process::Command;

use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::TcAttachOptions;
use aya::programs::{LinkOrder, Program, SchedClassifier, TcAttachType, TestRun, TestRunOptions};
use plexus_testkit::{Bpffs, Netns};

use super::attach::{Attach, AttachPoint, Hook};
use super::loader::{tc_link_name, unpinned_tc_link};
use super::pin::PinDir;
use super::portmap::mapper::{load, OBJECT, TC_EGRESS, TC_INGRESS};

/// Runs the TC program `program` of `ebpf` on `packet` with BPF_PROG_TEST_RUN (its skb on
/// the loopback device of the caller's network namespace): its verdict and the packet out.
pub(crate) fn run_tc(ebpf: &aya::Ebpf, program: &str, packet: &[u8]) -> (u32, Vec<u8>) {
    let prog: &SchedClassifier = match ebpf.program(program) {
        Some(Program::SchedClassifier(p)) => p,
        _ => panic!("no TC program {program}"),
    };
    let mut out = vec![0u8; packet.len() + 256];
    let result = prog
        .test_run(TestRunOptions { data_in: Some(packet), data_out: Some(&mut out), ..Default::default() })
        .expect("BPF_PROG_TEST_RUN");
    out.truncate(result.data_size_out as usize);
    (result.return_value, out)
}

/// A network namespace with a veth pair `v0`/`v1`, `v0` up.
fn with_veth() -> Netns {
    let ns = Netns::empty("pxdp");
    ns.ip("link add v0 type veth peer name v1");
    ns.ip("link set v0 up");
    ns
}

/// The program id behind a pinned link.
fn linked_program(path: &Path) -> u32 {
    let link: FdLink = PinnedLink::from_pin(path).expect("pinned link").into();
    link.info().expect("link info").program_id()
}

/// Names of the programs TCX runs on `v0`'s ingress.
fn ingress_programs() -> Vec<String> {
    let (_, programs) = SchedClassifier::query_tcx("v0", TcAttachType::Ingress).expect("tcx query");
    programs.iter().map(|p| p.name_as_str().unwrap_or("?").to_owned()).collect()
}

/// A link whose last reference goes (its pin removed) is released by a kernel work item, a
/// moment later.
fn eventually(check: impl Fn() -> bool) -> bool {
    for _ in 0..100 {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

#[test]
fn restarts_keep_identical_links_and_upgrades_replace_others_without_a_gap() {
    let ns = with_veth();
    let bpffs = Bpffs::new("pxdp");
    let root = bpffs.path().join("plexus");
    // This thread, until the guard drops (before the namespace's).
    let _inside = ns.enter();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(c"v0".as_ptr()) };
    assert_ne!(ifindex, 0, "v0 in the namespace");
    let pins = PinDir::prepare(&root).expect("pin dir");
    let link = pins.link(&tc_link_name(ifindex, Hook::Ingress));

    // First run: attach.
    let mut first = load(Some(pins.clone())).expect("load");
    first.attach_tc(ifindex, "v0", Hook::Ingress).expect("attach");
    let attached = linked_program(&link);
    drop(first);
    assert_eq!(ingress_programs(), [TC_INGRESS], "the pinned link outlives the loader");

    // A restart: same code, the link is left as it is.
    let mut second = load(Some(pins.clone())).expect("load");
    second.attach_tc(ifindex, "v0", Hook::Ingress).expect("attach");
    assert_eq!(linked_program(&link), attached, "an identical program is not relinked");
    assert_eq!(ingress_programs(), [TC_INGRESS]);

    // An "older version": another program pinned as the link of that hook.
    let old: &mut SchedClassifier = match second.ebpf_mut().program_mut(TC_EGRESS) {
        Some(Program::SchedClassifier(p)) => p,
        _ => panic!("no {TC_EGRESS}"),
    };
    std::fs::remove_file(&link).expect("unpinning");
    let id = old
        .attach_with_options("v0", TcAttachType::Ingress, TcAttachOptions::TcxOrder(LinkOrder::default()))
        .expect("attaching the old program");
    let old_link: FdLink = old.take_link(id).expect("link").try_into().expect("fd link");
    old_link.pin(&link).expect("pinning the old link");
    drop(second);
    assert!(eventually(|| ingress_programs() == [TC_EGRESS]), "{:?}", ingress_programs());

    // The upgrade: the new program is attached next to the old one, then its link
    // replaces the old pin, which releases the old link.
    let mut third = load(Some(pins.clone())).expect("load");
    third.attach_tc(ifindex, "v0", Hook::Ingress).expect("attach");
    assert!(
        eventually(|| ingress_programs() == [TC_INGRESS]),
        "exactly the new program runs: {:?}",
        ingress_programs()
    );
    assert_ne!(linked_program(&link), attached);
    let leftovers: Vec<String> =
        pins.link_names().expect("links").into_iter().filter(|n| n.contains("new")).collect();
    assert!(leftovers.is_empty(), "temporary pins left: {leftovers:?}");

    third.detach_tc(ifindex, Hook::Ingress).expect("detach");
    assert!(eventually(|| ingress_programs().is_empty()), "still attached: {:?}", ingress_programs());
}

/// Filters ([`Attach::Filter`]): attached, found, replaced in place by a restarted agent's
/// program (idempotent), and removed; a removal of what is gone already is fine.
#[test]
fn filters_attach_replace_in_place_and_detach() {
    let ns = with_veth();
    let _inside = ns.enter();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(c"v0".as_ptr()) };
    let point = AttachPoint { ifindex, ifname: "v0".into(), hook: Hook::Ingress, attach: Attach::Filter };
    let filters = || {
        let out = Command::new("tc").args(["filter", "show", "dev", "v0", "ingress"]).output().expect("tc");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    let mut first = load(None).expect("load");
    assert!(!first.runs_at(&point, &[]).expect("query"));
    first.attach_point(&point).expect("attach");
    assert!(first.runs_at(&point, &[]).expect("query"));
    drop(first);
    assert!(filters().contains(TC_INGRESS), "the filter outlives the loader: {}", filters());

    // A restart: the same filter is replaced in place, not duplicated.
    let mut second = load(None).expect("load");
    second.attach_point(&point).expect("attach again");
    assert_eq!(filters().matches("direct-action").count(), 1, "{}", filters());
    assert!(second.runs_at(&point, &[]).expect("query"));

    second.detach_point(&point).expect("detach");
    assert!(!second.runs_at(&point, &[]).expect("query"), "{}", filters());
    second.detach_point(&point).expect("detaching what is gone");
    let gone = AttachPoint { ifname: "nosuch0".into(), ..point.clone() };
    second.detach_point(&gone).expect("detaching from a device that is gone");
}

/// A filter point moved to a TCX link, as the service does after an ADD: the link is attached
/// beside the filter, pinned, the filter removed; the point still runs, a restart leaves the
/// link as it is and adds no filter, and detaching the point removes the link. An unpinned
/// link that is dropped (a DEL came during the move) detaches.
#[test]
fn a_filter_point_moves_to_a_tcx_link_which_restarts_keep_and_detaching_removes() {
    let ns = with_veth();
    let bpffs = Bpffs::new("pxdp");
    let _inside = ns.enter();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(c"v0".as_ptr()) };
    let pins = PinDir::prepare(&bpffs.path().join("plexus")).expect("pin dir");
    let link = pins.link(&tc_link_name(ifindex, Hook::Ingress));
    let point = AttachPoint { ifindex, ifname: "v0".into(), hook: Hook::Ingress, attach: Attach::Filter };
    let filters = || {
        let out = Command::new("tc").args(["filter", "show", "dev", "v0", "ingress"]).output().expect("tc");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // A link dropped before it is pinned detaches.
    let mut first = load(Some(pins.clone())).expect("load");
    let dropped = unpinned_tc_link(&pins, &OBJECT, "v0", Hook::Ingress).expect("a TCX link");
    assert_eq!(ingress_programs(), [TC_INGRESS], "the unpinned link runs");
    drop(dropped);
    assert!(eventually(|| ingress_programs().is_empty()), "{:?}", ingress_programs());

    first.attach_point(&point).expect("attach");
    assert!(filters().contains(TC_INGRESS), "the ADD attaches a filter: {}", filters());
    assert!(!first.tc_link_is_current(ifindex, Hook::Ingress).expect("query"));
    let moved = unpinned_tc_link(&pins, &OBJECT, "v0", Hook::Ingress).expect("a TCX link");
    assert_eq!(ingress_programs(), [TC_INGRESS], "the link runs beside the filter");
    first.pin_tc_link(ifindex, Hook::Ingress, moved).expect("pin");
    first.detach_filter("v0", Hook::Ingress).expect("the filter's removal");
    assert!(!filters().contains(TC_INGRESS), "{}", filters());
    let links = first.tc_links().expect("links");
    assert!(first.runs_at(&point, &links).expect("query"), "the TCX link counts as the point running");
    assert!(first.tc_link_is_current(ifindex, Hook::Ingress).expect("query"));
    let attached = linked_program(&link);
    drop(first);

    // A restart: the point's link runs the same code; no filter comes back.
    let mut second = load(Some(pins.clone())).expect("load");
    second.attach_point(&point).expect("attach again");
    assert!(!filters().contains(TC_INGRESS), "{}", filters());
    assert_eq!(linked_program(&link), attached);
    assert_eq!(ingress_programs(), [TC_INGRESS]);

    second.detach_point(&point).expect("detach");
    assert!(!link.exists(), "the link's pin stays");
    assert!(eventually(|| ingress_programs().is_empty()), "still attached: {:?}", ingress_programs());
    assert!(!second.runs_at(&point, &second.tc_links().expect("links")).expect("query"));
}

/// Where cgroup2 is not mounted (the agent's mount namespace may hide it), its root comes
/// from a mount attached nowhere: a cgroup2 directory, and no directory made for it.
#[test]
fn the_cgroup_root_opens_without_a_mount_point() {
    use nix::sys::statfs::{fstatfs, CGROUP2_SUPER_MAGIC};
    let root = super::pin::open_cgroup_root(Path::new("/proc")).expect("the cgroup2 root");
    assert_eq!(fstatfs(&root).expect("fstatfs").filesystem_type(), CGROUP2_SUPER_MAGIC);
    assert!(
        std::fs::read_dir(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&root))).is_ok(),
        "an ordinary directory descriptor"
    );
    let leftovers: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .expect("the temporary directory")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("plexus-cgroup2"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A map pinned by an older version with another layout (here: a map of the bandwidth object
/// pinned under a port mapping map's name) is unpinned and replaced by a map of this version's
/// layout; the old map lives on for whoever still holds it.
#[test]
fn a_pinned_map_of_another_layout_is_replaced_by_the_load() {
    use super::loader::{layout_differs, Loaded, MapLayout};
    let bpffs = Bpffs::new("pxdp");
    let layout = |info: &aya::maps::MapInfo| MapLayout {
        map_type: 0,
        key_size: info.key_size(),
        value_size: info.value_size(),
        flags: info.map_flags(),
    };
    // The layouts this version pins, from a load into a directory of their own.
    let reference = PinDir::prepare(&bpffs.path().join("reference")).expect("pin dir");
    drop(load(Some(reference.clone())).expect("load"));
    let bandwidth = PinDir::prepare(&bpffs.path().join("bandwidth")).expect("pin dir");
    let old_object =
        Loaded::load_object(&super::bandwidth::shaper::OBJECT, Some(bandwidth.clone())).expect("load");
    let mut pairs = super::portmap::mapper::OBJECT.maps.iter().flat_map(|name| {
        let wanted = layout(&aya::maps::MapInfo::from_pin(reference.map(name)).expect("reference pin"));
        super::bandwidth::shaper::OBJECT.maps.iter().map(move |other| (*name, wanted, *other))
    });
    let (name, wanted, other) = pairs
        .find(|(_, wanted, other)| {
            let info = aya::maps::MapInfo::from_pin(bandwidth.map(other)).expect("bandwidth pin");
            layout_differs(&layout(&info), wanted).is_some()
        })
        .expect("a bandwidth map of another layout");

    let pins = PinDir::prepare(&bpffs.path().join("plexus")).expect("pin dir");
    let old_id = aya::maps::MapInfo::from_pin(bandwidth.map(other)).expect("old").id();
    std::fs::rename(bandwidth.map(other), pins.map(name)).expect("pinning the old layout's map there");

    let loaded = load(Some(pins.clone())).expect("a load over an incompatible pin");
    let pinned = aya::maps::MapInfo::from_pin(pins.map(name)).expect("the new pin");
    assert_ne!(pinned.id(), old_id, "the old map was replaced");
    assert_eq!(layout_differs(&layout(&pinned), &wanted), None, "the new pin has this version's layout");
    assert!(
        aya::maps::MapInfo::from_id(old_id).is_ok(),
        "the old map lives on while the old object holds it"
    );
    drop((loaded, old_object));
}
