//! `--mig` / `--create` / `--emulate` plumbing without a GPU: target selection against made-up
//! NVML reports, and `run_on_created` against a fake NVML layer that records every call.
//! The real NVML mutations (`partition::mig_nvml`) never run in tests.

use std::cell::RefCell;
use std::rc::Rc;

use gpuless_replayer::partition::mig::{
    is_mig_uuid, needs_instance, plan_create, run_on_created, select_by_uuid, select_emulation, select_existing,
    CreateError, CreatedCi, CreatedGi, MigOpError, MigOps, MigSelectError,
};
use gpuless_replayer::partition::nvml::{
    GpuInfo, GpuInstanceInfo, MigDeviceInfo, MigModeState, ReportedProfile, SmCountSource,
};
use gpuless_replayer::partition::{choose_placement, GpuModel, Instance, Placement, PlacementError, ResolveError};

const ID_1G: u32 = 19;
const ID_3G: u32 = 9;
const ID_4G: u32 = 5;
const ID_7G: u32 = 0;

fn h200(mig_on: bool) -> GpuInfo {
    GpuInfo {
        index: 0,
        name: Some("NVIDIA H200".into()),
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000".into()),
        memory_total_bytes: Some(150_754_820_096),
        sm_count: Some(132),
        sm_count_source: SmCountSource::CoresPerSm,
        compute_capability: Some((9, 0)),
        mig_mode: Some(MigModeState { current: mig_on, pending: mig_on }),
        known_model: Some(GpuModel::H200),
        profiles: GpuModel::H200
            .profiles()
            .into_iter()
            .map(|profile| ReportedProfile { profile, free_instances: None, media: [0; 4], p2p: false })
            .collect(),
        gpu_instances: Vec::new(),
        mig_devices: Vec::new(),
        warnings: Vec::new(),
    }
}

/// Adds a GPU instance of `profile_id` at `start` with one full compute instance.
fn add_instance(g: &mut GpuInfo, gi_id: u32, profile_id: u32, start: u32) {
    let p = g.effective_profiles().into_iter().find(|p| p.id == profile_id).expect("profile");
    g.gpu_instances.push(GpuInstanceInfo {
        id: gi_id,
        profile_id,
        profile_name: Some(p.name.clone()),
        placement: Placement { start, size: p.memory_slices },
    });
    g.mig_devices.push(MigDeviceInfo {
        index: g.mig_devices.len() as u32,
        uuid: Some(format!("MIG-{gi_id:08x}-0000-0000-0000-000000000000")),
        name: Some(format!("NVIDIA H200 MIG {}", p.name)),
        gpu_instance_id: Some(gi_id),
        compute_instance_id: Some(0),
        sm_count: Some(p.sms),
        memory_total_bytes: Some(p.memory_mib << 20),
    });
}

// ---- selection ---------------------------------------------------------------------------

#[test]
fn a_server_creates_an_instance_only_where_mig_is_on_none_exists_and_one_fits() {
    // MIG off: a soft partition instead, never a creation.
    assert!(!needs_instance(&h200(false), "3g.71gb"));
    // MIG on, no instance of the profile: create.
    let mut g = h200(true);
    assert!(needs_instance(&g, "3g.71gb"));
    assert!(needs_instance(&g, &ID_3G.to_string()));
    // One exists: use it.
    add_instance(&mut g, 1, ID_3G, 4);
    assert!(!needs_instance(&g, "3g.71gb"));
    // None of 3g exists but the GPU is full (a 7g instance): nothing fits, nothing is created.
    let mut full = h200(true);
    add_instance(&mut full, 1, ID_7G, 0);
    assert!(!needs_instance(&full, "3g.71gb"));
    // Another model's profile name is not this GPU's.
    assert!(!needs_instance(&h200(true), "3g.40gb"));
}

#[test]
fn missing_profile_names_the_same_slice_count() {
    for g in [h200(false), h200(true)] {
        let err = select_existing(&g, "3g.20gb").unwrap_err();
        assert!(matches!(err, MigSelectError::Resolve(ResolveError::OtherModel { .. })), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("`3g.20gb` is not offered by this GPU"), "{msg}");
        assert!(msg.contains("here is `3g.71gb`"), "{msg}");
        assert!(msg.contains("1g.18gb (id 19)"), "{msg}");
        // The same check comes first for --emulate and --create.
        assert!(matches!(select_emulation(&h200(false), "3g.20gb"), Err(MigSelectError::Resolve(_))));
        assert!(matches!(plan_create(&g, "3g.20gb"), Err(MigSelectError::Resolve(_))));
    }
    assert!(matches!(
        select_existing(&h200(true), "42"),
        Err(MigSelectError::Resolve(ResolveError::UnknownId { id: 42, .. }))
    ));
}

#[test]
fn mig_off_says_how_to_enable_it_and_points_at_emulate() {
    let mut g = h200(false);
    g.mig_mode = Some(MigModeState { current: false, pending: false });
    let err = select_existing(&g, "3g.71gb").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, MigSelectError::MigOff { pending: false, .. }), "{err:?}");
    assert!(msg.contains("MIG mode is disabled on GPU 0 (NVIDIA H200)"), "{msg}");
    assert!(msg.contains("`sudo nvidia-smi -i 0 -mig 1`"), "{msg}");
    assert!(msg.contains("no process may be using the GPU"), "{msg}");
    assert!(msg.contains("--emulate"), "{msg}");
    assert!(msg.contains("60 SMs") && msg.contains("69.75 GiB"), "{msg}");
    assert!(msg.contains("no memory or bandwidth isolation"), "{msg}");
    // Pending: says to reset.
    g.mig_mode = Some(MigModeState { current: false, pending: true });
    let msg = select_existing(&g, "9").unwrap_err().to_string();
    assert!(msg.contains("enabled but pending") && msg.contains("nvidia-smi -i 0 -r"), "{msg}");
    // --create on a MIG-off GPU: the same error, before any NVML mutation.
    assert!(matches!(plan_create(&h200(false), "3g.71gb"), Err(MigSelectError::MigOff { .. })));
}

#[test]
fn not_mig_capable() {
    let mut g = h200(false);
    g.mig_mode = None;
    g.name = Some("NVIDIA GeForce RTX 4090".into());
    let msg = select_existing(&g, "3g.71gb").unwrap_err().to_string();
    assert!(msg.contains("does not support MIG"), "{msg}");
}

#[test]
fn existing_instance_of_the_profile_is_chosen() {
    let mut g = h200(true);
    add_instance(&mut g, 1, ID_1G, 6);
    add_instance(&mut g, 2, ID_3G, 4);
    add_instance(&mut g, 5, ID_3G, 0);
    let t = select_existing(&g, "3g.71gb").unwrap();
    assert_eq!(t.device.gpu_instance_id, Some(2), "lowest GPU-instance id first");
    assert_eq!(t.uuid(), Some("MIG-00000002-0000-0000-0000-000000000000"));
    assert_eq!(t.profile.as_ref().map(|p| p.sms), Some(60));
    let t = select_existing(&g, "19").unwrap();
    assert_eq!(t.device.gpu_instance_id, Some(1));

    let err = select_existing(&g, "4g.71gb").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, MigSelectError::NoInstance { profile_id: ID_4G, .. }), "{err:?}");
    assert!(msg.contains("no MIG instance of profile 4g.71gb"), "{msg}");
    assert!(msg.contains("MIG-00000001-0000-0000-0000-000000000000 (1g.18gb, 16 SMs)"), "{msg}");
    assert!(msg.contains("--create") && msg.contains("-cgi 5 -C"), "{msg}");
    let msg = select_existing(&h200(true), "3g.71gb").unwrap_err().to_string();
    assert!(msg.contains("existing MIG devices: none"), "{msg}");
}

#[test]
fn by_uuid() {
    let mut g = h200(true);
    add_instance(&mut g, 3, ID_3G, 0);
    let uuid = "MIG-00000003-0000-0000-0000-000000000000";
    assert!(is_mig_uuid(uuid) && is_mig_uuid(" mig-abc") && !is_mig_uuid("3g.71gb") && !is_mig_uuid("MIG"));
    let t = select_by_uuid(std::slice::from_ref(&g), &uuid.to_lowercase()).unwrap();
    assert_eq!(t.profile.map(|p| p.name), Some("3g.71gb".to_string()));
    let msg = select_by_uuid(&[g], "MIG-ffffffff").unwrap_err().to_string();
    assert!(msg.contains("no MIG device has UUID MIG-ffffffff") && msg.contains(uuid), "{msg}");
}

#[test]
fn emulation_targets_for_h200_profiles() {
    let g = h200(false);
    let t = select_emulation(&g, "3g.71gb").unwrap();
    assert_eq!((t.sms, t.memory_limit_bytes), (60, 71424 << 20));
    let t = select_emulation(&g, "1g.18gb").unwrap();
    assert_eq!((t.sms, t.memory_limit_bytes), (16, 16384 << 20));
    let t = select_emulation(&g, "0").unwrap();
    assert_eq!((t.profile.name.as_str(), t.sms), ("7g.141gb", 132));
    // A GPU that reports no profiles (not MIG-capable) but whose model is tabulated.
    let mut bare = h200(false);
    bare.profiles.clear();
    bare.mig_mode = None;
    assert_eq!(select_emulation(&bare, "2g.35gb").unwrap().sms, 32);
    let msg = select_emulation(&h200(true), "3g.71gb").unwrap_err().to_string();
    assert!(msg.contains("MIG mode is on for GPU 0"), "{msg}");
}

// ---- --create through a fake NVML ------------------------------------------------------

type Log = Rc<RefCell<Vec<String>>>;

/// A stand-in for NVML: keeps a GPU's state, records every call, and can fail one step.
struct FakeNvml {
    gpu: GpuInfo,
    log: Log,
    fail: Option<&'static str>,
    next_gi: u32,
    live_ci: Vec<(u32, u32)>,
}

impl FakeNvml {
    fn new(gpu: GpuInfo) -> (FakeNvml, Log) {
        let log: Log = Rc::default();
        let next_gi = gpu.gpu_instances.iter().map(|g| g.id + 1).max().unwrap_or(1);
        (FakeNvml { gpu, log: log.clone(), fail: None, next_gi, live_ci: Vec::new() }, log)
    }

    fn step(&self, name: &'static str, entry: String) -> Result<(), MigOpError> {
        self.log.borrow_mut().push(entry);
        if self.fail == Some(name) {
            Err(MigOpError { call: name, detail: "injected failure".into() })
        } else {
            Ok(())
        }
    }
}

impl MigOps for FakeNvml {
    fn snapshot(&mut self, gpu: u32) -> Result<GpuInfo, MigOpError> {
        self.step("snapshot", format!("snapshot {gpu}"))?;
        Ok(self.gpu.clone())
    }

    fn create_gpu_instance(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: Placement,
    ) -> Result<CreatedGi, MigOpError> {
        self.step("create_gi", format!("create_gi profile {profile_id} at {placement}"))?;
        // The fake driver checks placements with the same rules a real one applies.
        let profiles = self.gpu.effective_profiles();
        let legal = gpuless_replayer::partition::legal_placements(&profiles, &self.gpu.instances(), profile_id)
            .map_err(|e| MigOpError { call: "create_gi", detail: e.to_string() })?;
        if !legal.contains(&placement) {
            return Err(MigOpError { call: "create_gi", detail: format!("illegal placement {placement}") });
        }
        let id = self.next_gi;
        self.next_gi += 1;
        self.gpu.gpu_instances.push(GpuInstanceInfo { id, profile_id, profile_name: None, placement });
        Ok(CreatedGi { handle: 0x1000 + id as usize, id, gpu })
    }

    fn create_compute_instance(&mut self, gi: &CreatedGi, compute_slices: u32) -> Result<CreatedCi, MigOpError> {
        self.step("create_ci", format!("create_ci in gi {} ({compute_slices} slices)", gi.id))?;
        self.live_ci.push((gi.id, 0));
        self.gpu.mig_devices.push(MigDeviceInfo {
            index: 0,
            uuid: Some(format!("MIG-fake-{}-0", gi.id)),
            name: None,
            gpu_instance_id: Some(gi.id),
            compute_instance_id: Some(0),
            sm_count: None,
            memory_total_bytes: None,
        });
        Ok(CreatedCi { handle: 0x2000 + gi.id as usize, id: 0 })
    }

    fn mig_device_uuid(&mut self, gi: &CreatedGi, ci: &CreatedCi) -> Result<String, MigOpError> {
        self.step("uuid", format!("uuid gi {} ci {}", gi.id, ci.id))?;
        let d = self.gpu.mig_devices.iter().find(|d| d.gpu_instance_id == Some(gi.id));
        Ok(d.and_then(|d| d.uuid.clone()).unwrap_or_default())
    }

    fn destroy_compute_instance(&mut self, ci: &CreatedCi) -> Result<(), MigOpError> {
        let gi = (ci.handle - 0x2000) as u32;
        self.step("destroy_ci", format!("destroy_ci gi {gi} ci {}", ci.id))?;
        self.live_ci.retain(|&(g, c)| (g, c) != (gi, ci.id));
        self.gpu.mig_devices.retain(|d| d.gpu_instance_id != Some(gi));
        Ok(())
    }

    fn destroy_gpu_instance(&mut self, gi: &CreatedGi) -> Result<(), MigOpError> {
        self.step("destroy_gi", format!("destroy_gi {}", gi.id))?;
        if self.live_ci.iter().any(|&(g, _)| g == gi.id) {
            return Err(MigOpError { call: "destroy_gi", detail: "in use by a compute instance".into() });
        }
        self.gpu.gpu_instances.retain(|g| g.id != gi.id);
        Ok(())
    }
}

fn entries(log: &Log) -> Vec<String> {
    log.borrow().clone()
}

#[test]
fn create_use_destroy_in_order() {
    let (mut fake, log) = FakeNvml::new(h200(true));
    let run_log = log.clone();
    let run = run_on_created(&mut fake, 0, "3g.71gb", |uuid| {
        run_log.borrow_mut().push(format!("run on {uuid}"));
        7
    })
    .unwrap();
    assert_eq!(run.value, 7);
    assert_eq!(run.uuid, "MIG-fake-1-0");
    assert_eq!(run.teardown, Ok(()));
    assert_eq!(
        entries(&log),
        [
            "snapshot 0",
            "create_gi profile 9 at 4:4",
            "create_ci in gi 1 (3 slices)",
            "uuid gi 1 ci 0",
            "run on MIG-fake-1-0",
            "destroy_ci gi 1 ci 0",
            "destroy_gi 1"
        ]
    );
    assert!(fake.gpu.gpu_instances.is_empty() && fake.gpu.mig_devices.is_empty() && fake.live_ci.is_empty());
}

/// Existing instances `(profile id, start)`, the profile to create, the start it must get.
type Case = (&'static [(u32, u32)], u32, u32);

#[test]
fn placement_comes_from_the_placement_code() {
    // (existing instances, profile) → the create call must use choose_placement's answer.
    let cases: [Case; 5] = [
        (&[], ID_1G, 6),
        (&[], ID_3G, 4),
        (&[(ID_3G, 4)], ID_3G, 0),
        (&[(ID_1G, 6), (ID_1G, 5)], ID_1G, 4),
        (&[(ID_4G, 0)], ID_1G, 6),
    ];
    for (existing, profile_id, want_start) in cases {
        let mut g = h200(true);
        for (i, &(p, start)) in existing.iter().enumerate() {
            add_instance(&mut g, i as u32 + 1, p, start);
        }
        let instances: Vec<Instance> =
            existing.iter().map(|&(profile_id, start)| Instance { profile_id, start }).collect();
        let chosen = choose_placement(&g.effective_profiles(), &instances, profile_id).unwrap().placement;
        assert_eq!(chosen.start, want_start, "{existing:?} + {profile_id}");
        let (mut fake, log) = FakeNvml::new(g);
        let run = run_on_created(&mut fake, 0, &profile_id.to_string(), |_| ()).unwrap();
        assert_eq!(run.plan.placement, chosen);
        assert!(entries(&log).contains(&format!("create_gi profile {profile_id} at {chosen}")), "{:?}", entries(&log));
    }
}

#[test]
fn destroyed_when_the_run_fails() {
    let (mut fake, log) = FakeNvml::new(h200(true));
    let run = run_on_created(&mut fake, 0, "1g.18gb", |_| Err::<(), _>("replay failed")).unwrap();
    assert_eq!(run.value, Err("replay failed"));
    assert_eq!(run.teardown, Ok(()));
    let l = entries(&log);
    assert_eq!(&l[l.len() - 2..], ["destroy_ci gi 1 ci 0", "destroy_gi 1"]);
    assert!(fake.gpu.gpu_instances.is_empty());
}

#[test]
fn destroyed_when_the_run_panics() {
    let (mut fake, log) = FakeNvml::new(h200(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_on_created(&mut fake, 0, "3g.71gb", |_| -> () { panic!("replay panicked") })
    }));
    assert!(result.is_err(), "the panic goes on after cleanup");
    let l = entries(&log);
    assert_eq!(&l[l.len() - 2..], ["destroy_ci gi 1 ci 0", "destroy_gi 1"], "{l:?}");
    assert!(fake.gpu.gpu_instances.is_empty() && fake.live_ci.is_empty());
}

#[test]
fn failed_creation_steps_roll_back() {
    // Compute instance creation fails: the GPU instance is destroyed, nothing runs.
    let (mut fake, log) = FakeNvml::new(h200(true));
    fake.fail = Some("create_ci");
    let ran = Rc::new(RefCell::new(false));
    let r = ran.clone();
    let err = run_on_created(&mut fake, 0, "3g.71gb", |_| *r.borrow_mut() = true).unwrap_err();
    assert!(matches!(err, CreateError::Create { cleanup: None, .. }), "{err:?}");
    assert!(err.to_string().contains("creating a 3g.71gb instance at placement 4:4: create_ci failed"), "{err}");
    assert!(!*ran.borrow());
    assert_eq!(entries(&log).last().map(String::as_str), Some("destroy_gi 1"));
    assert!(fake.gpu.gpu_instances.is_empty());

    // The UUID lookup fails: both are destroyed, compute instance first.
    let (mut fake, log) = FakeNvml::new(h200(true));
    fake.fail = Some("uuid");
    assert!(run_on_created(&mut fake, 0, "3g.71gb", |_| ()).is_err());
    let l = entries(&log);
    assert_eq!(&l[l.len() - 2..], ["destroy_ci gi 1 ci 0", "destroy_gi 1"]);

    // GPU instance creation fails: nothing to destroy.
    let (mut fake, log) = FakeNvml::new(h200(true));
    fake.fail = Some("create_gi");
    assert!(run_on_created(&mut fake, 0, "3g.71gb", |_| ()).is_err());
    assert_eq!(entries(&log), ["snapshot 0", "create_gi profile 9 at 4:4"]);
}

#[test]
fn teardown_failure_keeps_the_value_and_says_how_to_clean_up() {
    let (mut fake, _log) = FakeNvml::new(h200(true));
    fake.fail = Some("destroy_ci");
    let run = run_on_created(&mut fake, 0, "3g.71gb", |_| "ok").unwrap();
    assert_eq!(run.value, "ok");
    let msg = run.teardown.unwrap_err();
    assert!(msg.contains("destroy_ci failed") && msg.contains("nvidia-smi mig -i 0 -gi 1 -ci 0 -dci"), "{msg}");
    // The GPU instance could not go either (its compute instance is alive): both reported.
    assert!(msg.contains("destroy_gi failed") && msg.contains("nvidia-smi mig -i 0 -gi 1 -dgi"), "{msg}");
}

#[test]
fn selection_errors_come_before_any_mutation() {
    // Unknown profile.
    let (mut fake, log) = FakeNvml::new(h200(true));
    let err = run_on_created(&mut fake, 0, "3g.20gb", |_| ()).unwrap_err();
    assert!(matches!(err, CreateError::Select(MigSelectError::Resolve(ResolveError::OtherModel { .. }))), "{err:?}");
    assert_eq!(entries(&log), ["snapshot 0"]);
    // MIG off.
    let (mut fake, log) = FakeNvml::new(h200(false));
    let err = run_on_created(&mut fake, 0, "3g.71gb", |_| ()).unwrap_err();
    assert!(matches!(err, CreateError::Select(MigSelectError::MigOff { .. })), "{err:?}");
    assert!(err.to_string().contains("sudo nvidia-smi -i 0 -mig 1"), "{err}");
    assert_eq!(entries(&log), ["snapshot 0"]);
    // No capacity: both 3g placements taken.
    let mut full = h200(true);
    add_instance(&mut full, 1, ID_3G, 0);
    add_instance(&mut full, 2, ID_3G, 4);
    let (mut fake, log) = FakeNvml::new(full.clone());
    let err = run_on_created(&mut fake, 0, "3g.71gb", |_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            CreateError::Select(MigSelectError::NoCapacity { source: PlacementError::MaxInstances { .. }, .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("cannot create a 3g.71gb instance on GPU 0"), "{err}");
    assert_eq!(entries(&log), ["snapshot 0"]);
    // No free placement: a 7g next to anything.
    let (mut fake, _) = FakeNvml::new(full);
    let err = run_on_created(&mut fake, 0, &ID_7G.to_string(), |_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            CreateError::Select(MigSelectError::NoCapacity { source: PlacementError::NoFreePlacement { .. }, .. })
        ),
        "{err:?}"
    );
    // Snapshot failure.
    let (mut fake, _) = FakeNvml::new(h200(true));
    fake.fail = Some("snapshot");
    assert!(matches!(run_on_created(&mut fake, 0, "3g.71gb", |_| ()), Err(CreateError::Snapshot(_))));
}
