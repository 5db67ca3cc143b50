//! Reading and removing many entries of a BPF hash map with one system call per chunk
//! (`BPF_MAP_LOOKUP_BATCH`, `BPF_MAP_DELETE_BATCH`, Linux 5.6+), instead of two per entry as
//! aya's iterator does (next key, then lookup): a walk of 100,000 flows is a few dozen calls
//! instead of 200,000, so DEL and the reaper stay cheap on a full table. A walk hands each
//! chunk to the caller as it is read ([`lookup_each`]), so it holds one chunk, not the table.
//!
//! Also the removal of one entry that returns its value ([`lookup_and_delete`]), which aya
//! 0.14 has for queues and stacks only.
//!
//! aya 0.14 has no batch operations; the calls are made directly, with the `bpf_attr` layouts
//! of include/uapi/linux/bpf.h.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

const BPF_MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// Entries read per call. A hash bucket is never split across calls: a chunk smaller than the
/// biggest bucket fails with ENOSPC, and is then doubled.
const CHUNK: usize = 4096;

/// `bpf_attr` for `BPF_MAP_*_BATCH`.
#[repr(C)]
#[derive(Debug, Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// `bpf_attr` for the commands on one element (`BPF_MAP_LOOKUP_ELEM`,
/// `BPF_MAP_LOOKUP_AND_DELETE_ELEM`, ...).
#[repr(C)]
#[derive(Debug, Default)]
struct ElemAttr {
    map_fd: u32,
    pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// A `bpf_attr` layout: one of the structs above.
trait Attr {}
impl Attr for BatchAttr {}
impl Attr for ElemAttr {}

fn bpf<A: Attr>(cmd: libc::c_long, attr: &mut A) -> io::Result<()> {
    // SAFETY: `attr` is a `bpf_attr` prefix (`Attr` is implemented by those only), the one of
    // `cmd` as its callers pair them; the kernel reads and writes it within its size, and the
    // buffers it points to, which the callers size for the map's key and value sizes (`count`
    // entries of each for the batch commands).
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_mut(attr), std::mem::size_of::<A>()) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn fd_u32(map: BorrowedFd<'_>) -> io::Result<u32> {
    u32::try_from(map.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
}

/// Every (key, value) of the hash map `map` (not per-CPU), whose key and value types must have
/// exactly the map's key and value sizes. The programs may change the map meanwhile: an entry
/// made during the walk may be missing, none is returned twice.
pub fn lookup_all<K: aya::Pod + Default, V: aya::Pod + Default>(
    map: BorrowedFd<'_>,
) -> io::Result<Vec<(K, V)>> {
    let mut out = Vec::new();
    lookup_each(map, |k: &K, v: &V| out.push((*k, *v)))?;
    Ok(out)
}

/// Calls `each` on every (key, value) of the hash map `map` (not per-CPU), a chunk at a time as
/// it is read, so the walk holds one chunk of the map, not all of it. As [`lookup_all`]: the
/// types must have the map's key and value sizes, and an entry made during the walk may be
/// missed, none is passed twice. On an error, `each` has had the entries read before it.
pub fn lookup_each<K: aya::Pod + Default, V: aya::Pod + Default>(
    map: BorrowedFd<'_>,
    mut each: impl FnMut(&K, &V),
) -> io::Result<()> {
    let map_fd = fd_u32(map)?;
    let mut chunk = CHUNK;
    let mut keys: Vec<K> = vec![K::default(); chunk];
    let mut values: Vec<V> = vec![V::default(); chunk];
    // The kernel's position (a bucket index), opaque: none before the first call.
    let mut position: u32 = 0;
    let mut started = false;
    loop {
        let mut next: u32 = 0;
        let mut attr = BatchAttr {
            in_batch: if started { std::ptr::from_ref(&position) as u64 } else { 0 },
            out_batch: std::ptr::from_mut(&mut next) as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: u32::try_from(chunk).unwrap_or(u32::MAX),
            map_fd,
            ..BatchAttr::default()
        };
        let result = bpf(BPF_MAP_LOOKUP_BATCH, &mut attr);
        let n = (attr.count as usize).min(chunk);
        keys[..n].iter().zip(&values[..n]).for_each(|(k, v)| each(k, v));
        match result {
            Ok(()) => {
                position = next;
                started = true;
            }
            // The end of the map.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            // A bucket holds more entries than the chunk: read it again with a bigger one.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && n == 0 && chunk < (1 << 20) => {
                chunk *= 2;
                keys.resize(chunk, K::default());
                values.resize(chunk, V::default());
            }
            Err(e) => return Err(e),
        }
    }
}

/// Removes `key` from the hash map `map` and returns its value as it was when removed, in one
/// step under the kernel's bucket lock (`BPF_MAP_LOOKUP_AND_DELETE_ELEM`, for hash maps since
/// Linux 5.14): unlike a lookup then a delete, no update made in between is removed unseen.
/// `None` when the key is not there. The types must have the map's key and value sizes.
pub fn lookup_and_delete<K: aya::Pod, V: aya::Pod + Default>(
    map: BorrowedFd<'_>,
    key: &K,
) -> io::Result<Option<V>> {
    let mut value = V::default();
    let mut attr = ElemAttr {
        map_fd: fd_u32(map)?,
        key: std::ptr::from_ref(key) as u64,
        value: std::ptr::from_mut(&mut value) as u64,
        ..ElemAttr::default()
    };
    match bpf(BPF_MAP_LOOKUP_AND_DELETE_ELEM, &mut attr) {
        Ok(()) => Ok(Some(value)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes `keys` from the hash map `map`; returns how many were there. Keys gone already (the
/// programs removed them) are skipped.
pub fn delete_all<K: aya::Pod>(map: BorrowedFd<'_>, keys: &[K]) -> io::Result<usize> {
    let map_fd = fd_u32(map)?;
    let mut removed = 0;
    let mut rest = keys;
    while !rest.is_empty() {
        let count = rest.len().min(CHUNK);
        let mut attr = BatchAttr {
            keys: rest.as_ptr() as u64,
            count: u32::try_from(count).unwrap_or(u32::MAX),
            map_fd,
            ..BatchAttr::default()
        };
        let result = bpf(BPF_MAP_DELETE_BATCH, &mut attr);
        // The kernel deletes in order and stops at the first key it cannot delete.
        let done = (attr.count as usize).min(count);
        removed += done;
        match result {
            Ok(()) => rest = &rest[done..],
            // rest[done] is gone already: skip it.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => rest = &rest[(done + 1).min(rest.len())..],
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}
