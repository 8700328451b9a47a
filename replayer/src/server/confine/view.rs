//! The file system an executor sees: a tmpfs root holding bind mounts of what the driver and
//! the executor need, built in the executor's mount namespace before it starts ([`super::child`]).

use std::collections::BTreeSet;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::ConfineError;
use crate::server::config::ConfineConfig;

/// The host's paths executors read (those that exist): the system's programs, libraries and
/// configuration (the loader's cache, the driver's files).
const SYSTEM_READ_ONLY: &[&str] =
    &["/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc", "/opt/nvidia"];
/// Paths executors write where they exist: the kernel's views (the driver writes its own
/// process's files at cuInit: with /proc read-only, cuInit fails with CUDA_ERROR_OPERATING_SYSTEM
/// on an H100; what else they hold is guarded by its own permissions against an unprivileged
/// user), the MPS control pipes, the persistence daemon.
const SYSTEM_READ_WRITE: &[&str] =
    &["/proc", "/sys", "/tmp/nvidia-mps", "/run/nvidia-persistenced", "/var/run/nvidia-persistenced"];
/// Device nodes every program expects.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// One step of building the view, in order; paths are absolute in the host, created under the
/// view's root (the mount point `base`) by [`super::child`].
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// A directory (mode 0755); one that exists already is fine.
    Dir(CString),
    /// An empty file to bind a file onto.
    File(CString),
    /// A symbolic link: (target, at).
    Symlink(CString, CString),
    /// A bind mount: (source in the host, destination under the root, read-only, the source
    /// mount's flags that a read-only remount must keep).
    Bind(CString, CString, bool, libc::c_ulong),
    /// A tmpfs: (destination, options).
    Tmpfs(CString, CString),
}

/// The view: its mount point and the steps.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    /// The directory the view's root tmpfs is mounted on (in the executor's namespace only).
    pub base: Option<CString>,
    /// The steps, parents before children.
    pub steps: Vec<Step>,
}

/// A path to make reachable.
struct Want {
    path: PathBuf,
    write: bool,
}

impl View {
    /// The view for executors run from `exe` with `cache` writable, `env` kept, as `uid`.
    pub fn new(
        cfg: &ConfineConfig,
        exe: &Path,
        cache: &[&Path],
        env: &[(OsString, OsString)],
        uid: u32,
    ) -> Result<View, ConfineError> {
        // One per user: servers of several users on a machine each have their own.
        // SAFETY: geteuid has no preconditions.
        let base = std::env::temp_dir().join(format!("gpuless-executor-root-{}", unsafe { libc::geteuid() }));
        make_mount_point(&base).map_err(|e| ConfineError::Io(base.display().to_string(), e))?;
        let mut wants: Vec<Want> = Vec::new();
        let ro = |p: &str| Want { path: PathBuf::from(p), write: false };
        wants.extend(SYSTEM_READ_ONLY.iter().map(|p| ro(p)));
        wants.extend(cfg.read_only.iter().map(|p| ro(p)));
        for (k, v) in env {
            if k == "LD_LIBRARY_PATH" {
                wants.extend(
                    std::env::split_paths(v).filter(|p| p.is_absolute()).map(|path| Want { path, write: false }),
                );
            }
            if k == "CUDA_MPS_PIPE_DIRECTORY" || k == "CUDA_MPS_LOG_DIRECTORY" || k == "GPULESS_EXECUTOR_TIMELINE" {
                wants.push(Want { path: PathBuf::from(v), write: true });
            }
        }
        wants.push(Want { path: exe.to_path_buf(), write: false });
        wants.extend(SYSTEM_READ_WRITE.iter().map(|p| Want { path: PathBuf::from(p), write: true }));
        wants.extend(cfg.read_write.iter().map(|p| Want { path: PathBuf::from(p), write: true }));
        // The cache only to read: the server writes it (`manager_store.rs`).
        wants.extend(cache.iter().map(|p| Want { path: p.to_path_buf(), write: false }));

        let mut b = Builder::default();
        b.steps.push(Step::Tmpfs(c("/")?, c("mode=0755,size=16m")?));
        // Parents before children: a shorter path first, the order given among equals. What
        // lies under /tmp or /dev goes on top of the private ones made below.
        wants.sort_by_key(|w| w.path.components().count());
        let (later, now): (Vec<Want>, Vec<Want>) =
            wants.into_iter().partition(|w| w.path.starts_with("/tmp") || w.path.starts_with("/dev"));
        let mut done: Vec<(PathBuf, bool)> = Vec::new();
        b.place(now, &mut done, uid)?;
        // /dev: the usual nodes and the driver's, a private /dev/shm; a private /tmp.
        b.tmpfs("/dev", "mode=0755,size=1m")?;
        let mut nodes: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
        if let Ok(rd) = std::fs::read_dir("/dev") {
            let mut nv: Vec<PathBuf> =
                rd.flatten().filter(|e| e.file_name().as_bytes().starts_with(b"nvidia")).map(|e| e.path()).collect();
            nv.sort();
            nodes.extend(nv);
        }
        for n in nodes {
            let Ok(meta) = std::fs::metadata(&n) else { continue };
            b.bind(&n, &n, false, meta.is_dir())?;
        }
        b.tmpfs("/dev/shm", "mode=1777,size=64m")?;
        b.tmpfs("/tmp", &format!("mode=1777,size={}", cfg.tmp_bytes))?;
        b.place(later, &mut done, uid)?;
        let steps = b.steps.into_iter().map(|s| rebase(s, &base)).collect::<Result<_, _>>()?;
        Ok(View { base: Some(c(base.as_os_str())?), steps })
    }

    /// The view of an executor for the GPUs with these device minor numbers
    /// (`/dev/nvidiaN`): the other GPUs' device nodes are left out, so a process that escaped
    /// `CUDA_VISIBLE_DEVICES` still reaches no other GPU. The driver's shared nodes
    /// (`nvidiactl`, `nvidia-uvm`, `nvidia-caps`, ...) stay.
    pub fn for_gpus(&self, minors: &[u32]) -> View {
        let other_gpu = |p: &CString| {
            let name = p.as_bytes().rsplit(|&b| b == b'/').next().unwrap_or(b"");
            match name.strip_prefix(b"nvidia") {
                Some(n) if !n.is_empty() && n.iter().all(u8::is_ascii_digit) => {
                    let minor = std::str::from_utf8(n).ok().and_then(|n| n.parse::<u32>().ok());
                    !minor.is_some_and(|m| minors.contains(&m))
                }
                _ => false,
            }
        };
        let steps = self
            .steps
            .iter()
            .filter(|s| match s {
                Step::File(p) | Step::Bind(_, p, _, _) => !other_gpu(p),
                _ => true,
            })
            .cloned()
            .collect();
        View { base: self.base.clone(), steps }
    }

    /// How many bind mounts the view has.
    pub fn binds(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s, Step::Bind(..))).count()
    }
}

#[derive(Default)]
struct Builder {
    steps: Vec<Step>,
    /// Directories made so far (each once).
    made: BTreeSet<PathBuf>,
}

impl Builder {
    /// Binds each wanted path that exists, unless an earlier bind covers it.
    fn place(&mut self, wants: Vec<Want>, done: &mut Vec<(PathBuf, bool)>, uid: u32) -> Result<(), ConfineError> {
        for w in wants {
            let Ok(meta) = std::fs::symlink_metadata(&w.path) else { continue };
            // Covered by an earlier bind that allows as much.
            if done.iter().any(|(p, write)| w.path.starts_with(p) && (*write || !w.write)) {
                continue;
            }
            if meta.file_type().is_symlink() {
                let target =
                    std::fs::read_link(&w.path).map_err(|e| ConfineError::Io(w.path.display().to_string(), e))?;
                // A top-level link such as /lib -> usr/lib is made as a link.
                if w.path.parent() == Some(Path::new("/")) && target.is_relative() {
                    self.steps.push(Step::Symlink(c(target.as_os_str())?, c(w.path.as_os_str())?));
                    continue;
                }
            }
            let Ok(real) = std::fs::canonicalize(&w.path) else { continue };
            let Ok(meta) = std::fs::metadata(&real) else { continue };
            // A directory the executor's user cannot enter is bound file by file.
            let enterable = meta.uid() == uid || meta.permissions().mode() & 0o001 != 0;
            if meta.is_dir() && !enterable && !w.write {
                self.parents(&w.path)?;
                if self.made.insert(w.path.clone()) {
                    self.steps.push(Step::Dir(c(w.path.as_os_str())?));
                }
                if let Ok(rd) = std::fs::read_dir(&real) {
                    for e in rd.flatten() {
                        if e.file_type().is_ok_and(|t| t.is_file()) {
                            self.bind(&e.path(), &w.path.join(e.file_name()), true, false)?;
                        }
                    }
                }
                continue;
            }
            self.bind(&real, &w.path, !w.write, meta.is_dir())?;
            done.push((w.path, w.write));
        }
        Ok(())
    }

    /// Steps making the directories above `p`.
    fn parents(&mut self, p: &Path) -> Result<(), ConfineError> {
        let mut at = PathBuf::from("/");
        let comps: Vec<Component> = p.components().collect();
        for comp in comps.iter().take(comps.len().saturating_sub(1)) {
            if let Component::Normal(n) = comp {
                at.push(n);
                if self.made.insert(at.clone()) {
                    self.steps.push(Step::Dir(c(at.as_os_str())?));
                }
            }
        }
        Ok(())
    }

    /// A tmpfs at `dst` (its mount point made first); what is under it is made again.
    fn tmpfs(&mut self, dst: &str, opts: &str) -> Result<(), ConfineError> {
        let p = Path::new(dst);
        self.parents(p)?;
        self.made.retain(|m| !m.starts_with(p));
        self.steps.push(Step::Dir(c(dst)?));
        self.steps.push(Step::Tmpfs(c(dst)?, c(opts)?));
        self.made.insert(p.to_path_buf());
        Ok(())
    }

    /// A bind of `src` at `dst`: its parents, its mount point, the mount.
    fn bind(&mut self, src: &Path, dst: &Path, read_only: bool, dir: bool) -> Result<(), ConfineError> {
        self.parents(dst)?;
        if dir {
            if self.made.insert(dst.to_path_buf()) {
                self.steps.push(Step::Dir(c(dst.as_os_str())?));
            }
        } else {
            self.steps.push(Step::File(c(dst.as_os_str())?));
        }
        self.steps.push(Step::Bind(c(src.as_os_str())?, c(dst.as_os_str())?, read_only, locked_flags(src)));
        Ok(())
    }
}

/// The flags of the mount holding `p` that a read-only remount of its bind must keep (a user
/// namespace may not clear them).
fn locked_flags(p: &Path) -> libc::c_ulong {
    let Ok(cp) = CString::new(p.as_os_str().as_bytes()) else { return 0 };
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `cp` is a valid C string and `st` a valid out-pointer.
    if unsafe { libc::statvfs(cp.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    let mut out = 0;
    for (from, to) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & from != 0 {
            out |= to;
        }
    }
    out
}

/// `step` with its destination under `base` (the child makes no strings of its own).
fn rebase(step: Step, base: &Path) -> Result<Step, ConfineError> {
    let under = |p: &CString| -> Result<CString, ConfineError> {
        let rel = Path::new(std::ffi::OsStr::from_bytes(p.as_bytes()));
        c(base.join(rel.strip_prefix("/").unwrap_or(rel)).as_os_str())
    };
    Ok(match step {
        Step::Dir(p) => Step::Dir(under(&p)?),
        Step::File(p) => Step::File(under(&p)?),
        Step::Symlink(t, at) => Step::Symlink(t, under(&at)?),
        Step::Bind(src, dst, ro, flags) => Step::Bind(src, under(&dst)?, ro, flags),
        Step::Tmpfs(dst, opts) => Step::Tmpfs(under(&dst)?, opts),
    })
}

/// The view's mount point: an empty directory owned by this user, not a link.
fn make_mount_point(p: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(p) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(p)?;
    // SAFETY: geteuid has no preconditions.
    if !m.is_dir() || m.uid() != unsafe { libc::geteuid() } {
        return Err(std::io::Error::other("not a directory of this user (a link or another user's)"));
    }
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
}

fn c<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> Result<CString, ConfineError> {
    CString::new(s.as_ref().as_bytes()).map_err(|_| {
        ConfineError::Io(s.as_ref().to_string_lossy().into(), std::io::Error::other("a NUL byte in the path"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpus_view_keeps_its_device_nodes_and_the_drivers_shared_ones() {
        let bind = |p: &str| Step::Bind(c(p).unwrap(), c(&format!("/v{p}")).unwrap(), false, 0);
        let file = |p: &str| Step::File(c(&format!("/v{p}")).unwrap());
        let names = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia12", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/null"];
        let steps = names.iter().flat_map(|n| [file(n), bind(n)]).collect();
        let v = View { base: None, steps }.for_gpus(&[1]);
        let kept: Vec<String> = v
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Bind(src, ..) => Some(src.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        assert_eq!(kept, ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/null"]);
        assert_eq!(v.steps.len(), 8, "each kept node's file stays with its bind");
    }
}
