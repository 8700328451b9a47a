//! The rules of warm constants, without a GPU.
use super::*;

#[test]
fn a_kept_range_is_skipped_only_in_a_clean_allocation_and_only_once_overwritten_never() {
    let (h, g) = (Hash128(7), Hash128(8));
    let mut r = Resident::start(BTreeMap::from([(0x1000, (MIN_RESIDENT, h)), (0x100000, (MIN_RESIDENT, g))]));
    assert_eq!(r.kept_bytes(), 2 * MIN_RESIDENT);
    // Not taken over yet: copied.
    assert!(!r.upload(0x1000, MIN_RESIDENT, h, Some(0x1000)));
    // The copy replaced the kept range (the same bytes, but it is no longer needed).
    assert_eq!(r.kept_bytes(), MIN_RESIDENT);
    r.adopted(0x100000);
    // Other content, or another length: copied, and the kept range is gone.
    let mut other = Resident::start(BTreeMap::from([(0x100000, (MIN_RESIDENT, g))]));
    other.adopted(0x100000);
    assert!(!other.upload(0x100000, MIN_RESIDENT, h, Some(0x100000)));
    assert!(!other.upload(0x100000, MIN_RESIDENT, g, Some(0x100000)), "overwritten by the other content");
    // The same content at the same place in a clean allocation: skipped.
    assert!(r.upload(0x100000, MIN_RESIDENT, g, Some(0x100000)));
    assert_eq!(r.skipped, (1, MIN_RESIDENT));
    // After a device write, nothing more is skipped.
    let mut d = Resident::start(BTreeMap::from([(0x100000, (MIN_RESIDENT, g))]));
    d.adopted(0x100000);
    d.dirty();
    assert!(!d.upload(0x100000, MIN_RESIDENT, g, Some(0x100000)));
    // Uploads are noted (large ones), the later replacing what it overlaps.
    assert_eq!(r.uploads().count(), 2);
    r.upload(0x1000 + 16, MIN_RESIDENT, g, None);
    assert_eq!(r.uploads().map(|u| u.0).collect::<Vec<_>>(), [0x1000 + 16, 0x100000]);
    r.upload(0x200000, 100, g, None);
    assert_eq!(r.uploads().count(), 2, "small uploads are not noted");
}

#[test]
fn gaps_are_what_the_ranges_leave_out() {
    let m = BTreeMap::from([(10, (5, Hash128(1))), (20, (5, Hash128(2))), (40, (100, Hash128(3)))]);
    assert_eq!(gaps(0, 50, &m), [(0, 10), (15, 5), (25, 15)]);
    assert_eq!(gaps(12, 22, &m), [(15, 5)]);
    assert_eq!(gaps(200, 210, &m), [(200, 10)]);
    assert!(gaps(41, 50, &m).is_empty());
}

#[test]
fn overlapping_ranges_go() {
    let mut m = BTreeMap::from([(10, (5, Hash128(1))), (20, (5, Hash128(2))), (40, (10, Hash128(3)))]);
    remove_overlapping(&mut m, 14, 7);
    assert_eq!(m.keys().copied().collect::<Vec<_>>(), [40]);
    remove_overlapping(&mut m, 50, 1);
    assert_eq!(m.len(), 1);
    remove_overlapping(&mut m, 49, 1);
    assert!(m.is_empty());
}

#[test]
fn uploads_are_copies_of_a_stored_host_source_to_a_device_destination() {
    use gpuless_analyzer::api::{self, ApiLevel};
    let f = |name: &str| api::functions().iter().find(|f| f.name == name).expect(name);
    let rec = |name: &str, args: Vec<Value>| {
        let mut r = CallRecord::new(1, ApiLevel::Driver, crate::Function::Known(f(name).id));
        r.args = args;
        r
    };
    let b = BlobRef { hash: Hash128(5), len: 4096 };
    let htod = rec("cuMemcpyHtoD", vec![Value::DevPtr(0x1000), Value::Blob(b), Value::Size(4096)]);
    assert_eq!(plain_upload(f("cuMemcpyHtoD"), &htod), Some((0x1000, b)));
    // Unified addresses: the values say which side is the host's.
    let up = rec("cuMemcpy", vec![Value::DevPtr(0x2000), Value::Blob(b), Value::Size(4096)]);
    assert_eq!(plain_upload(f("cuMemcpy"), &up), Some((0x2000, b)));
    let up_async = rec(
        "cuMemcpyAsync",
        vec![Value::DevPtr(0x2000), Value::Blob(b), Value::Size(4096), Value::Handle(api::HandleKind::Stream, 0)],
    );
    assert_eq!(plain_upload(f("cuMemcpyAsync"), &up_async), Some((0x2000, b)));
    let host_to_host = rec("cuMemcpy", vec![Value::HostPtr(0x7000), Value::Blob(b), Value::Size(4096)]);
    assert_eq!(plain_upload(f("cuMemcpy"), &host_to_host), None);
    let on_device = rec("cuMemcpy", vec![Value::DevPtr(0x2000), Value::DevPtr(0x3000), Value::Size(4096)]);
    assert_eq!(plain_upload(f("cuMemcpy"), &on_device), None);
    let down = rec("cuMemcpyDtoH", vec![Value::HostPtr(0x7000), Value::DevPtr(0x2000), Value::Size(4096)]);
    assert_eq!(plain_upload(f("cuMemcpyDtoH"), &down), None);
}
