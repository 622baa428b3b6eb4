//! The limit parsing on sample file contents, as the kernel writes them.

use std::path::PathBuf;

use super::*;

const V2_STAT: &str =
    "anon 1000\nfile 9000\ninactive_anon 0\nactive_file 3000\ninactive_file 6000\n";

#[test]
fn cgroup_v2_limits() {
    // Unlimited.
    assert_eq!(v2_room("max\n", "123456\n", V2_STAT), None);
    // 1 GiB with 100 MiB charged, 6000 bytes of it reclaimable file cache.
    let room = v2_room("1073741824\n", "104857600\n", V2_STAT);
    assert_eq!(room, Some(1073741824 - 104857600 + 6000));
    // Over the limit (a cgroup may briefly exceed it): no room, not an underflow.
    assert_eq!(v2_room("1000\n", "5000\n", ""), Some(0));
    // Garbage is "cannot tell", not zero.
    assert_eq!(v2_room("lots\n", "1\n", ""), None);
    assert_eq!(v2_room("100\n", "\n", ""), None);
}

#[test]
fn cgroup_v1_limits() {
    // "No limit" in v1 is a page-rounded i64::MAX, and other huge values.
    let stat =
        "cache 4096\ntotal_inactive_file 8192\nhierarchical_memory_limit 9223372036854771712\n";
    assert_eq!(v1_room("9223372036854771712\n", "1823096832\n", stat), None);
    assert_eq!(v1_room("9223372036854775807\n", "0\n", ""), None);
    assert_eq!(v1_room("4611686018427387904\n", "0\n", ""), None);
    // A real limit, with reclaimable cache.
    let room = v1_room("1073741824\n", "4153344\n", stat);
    assert_eq!(room, Some(1073741824 - 4153344 + 8192));
    // A parent's lower limit applies through `hierarchical_memory_limit`.
    let stat = "total_inactive_file 0\nhierarchical_memory_limit 536870912\n";
    assert_eq!(
        v1_room("9223372036854771712\n", "1000\n", stat),
        Some(536870912 - 1000)
    );
    assert_eq!(v1_room("-1\n", "0\n", ""), None);
}

#[test]
fn meminfo() {
    let text =
        "MemTotal:       32803468 kB\nMemFree:         1182384 kB\nMemAvailable:   23883632 kB\n";
    assert_eq!(meminfo_available(text), Some(23883632 * 1024));
    assert_eq!(meminfo_available("MemTotal: 5 kB\n"), None);
    assert_eq!(meminfo_available("MemAvailable: 7 MB\n"), None);
}

#[test]
fn own_cgroup_lines() {
    let hybrid = "9:name=systemd:/\n4:memory:/process_api/e848\n1:cpu,cpuacct:/\n0::/\n";
    assert_eq!(
        OwnCgroups::parse(hybrid),
        OwnCgroups {
            v2: Some("/".into()),
            v1_memory: Some("/process_api/e848".into()),
        }
    );
    let v2_only = "0::/user.slice/user-1000.slice/session-3.scope\n";
    let own = OwnCgroups::parse(v2_only);
    assert_eq!(
        own.v2.as_deref(),
        Some("/user.slice/user-1000.slice/session-3.scope")
    );
    assert_eq!(own.v1_memory, None);
    let v1_combined = "5:memory,hugetlb:/docker/abc\n";
    assert_eq!(
        OwnCgroups::parse(v1_combined).v1_memory.as_deref(),
        Some("/docker/abc")
    );
}

#[test]
fn mount_lines() {
    let text = "\
25 30 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
31 25 0:27 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
35 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
40 25 0:33 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
";
    let mounts = CgroupMounts::parse(text);
    let v1 = mounts.v1_memory.unwrap();
    assert_eq!(v1.point, PathBuf::from("/sys/fs/cgroup/memory"));
    assert_eq!(
        v1.dir_of("/process_api/e848"),
        PathBuf::from("/sys/fs/cgroup/memory/process_api/e848")
    );
    let v2 = mounts.v2.unwrap();
    assert_eq!(v2.dir_of("/"), PathBuf::from("/sys/fs/cgroup/unified"));

    // A container: the mount's root is the container's own cgroup, which /proc/self/cgroup names in full.
    let text = "100 90 0:40 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    let v2 = CgroupMounts::parse(text).v2.unwrap();
    assert_eq!(v2.dir_of("/kubepods/pod1"), PathBuf::from("/sys/fs/cgroup"));
    assert_eq!(
        v2.dir_of("/kubepods/pod1/inner"),
        PathBuf::from("/sys/fs/cgroup/inner")
    );
    // Escaped spaces in a mount point.
    let text = "1 0 0:1 / /mnt/cg\\040v2 rw - cgroup2 none rw\n";
    let v2 = CgroupMounts::parse(text).v2.unwrap();
    assert_eq!(v2.point, PathBuf::from("/mnt/cg v2"));
}

#[test]
fn small_requests_are_not_checked_and_impossible_ones_fail() {
    assert!(check_fits("a tensor", CHECKED_FROM_BYTES - 1).is_ok());
    if let Some(room) = headroom() {
        // Twice the room: other tests (and processes) allocate and free between the two reads of it.
        let too_much = usize::try_from(room.bytes)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
            .saturating_add(1);
        match check_fits("a tensor", too_much) {
            Err(Error::OutOfMemory {
                bytes, available, ..
            }) => {
                assert_eq!(bytes, Some(too_much));
                assert!(available.is_some_and(|a| a.bytes < too_much as u64));
            }
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
    }
}
