//! Executors confined for untrusted tenants (issue 37; docs/SECURITY.md). An executor executes
//! a tenant's driver calls and kernels, so the server starts each one:
//!
//! - as an unprivileged user (`confine.user`, default `nobody`, where the server runs as root;
//!   the server refuses to run executors as root unless `allow_root`);
//! - in namespaces of its own (mount, network, IPC, UTS; where the server is not root, a user
//!   namespace that maps only its own user), where it sees a file system of the driver's device
//!   nodes, the system's libraries and configuration read-only, the executor binary, the cache
//!   directories read-only (the server writes what sessions upload: `manager_store.rs`), and a
//!   private /tmp — nothing else of the host (no home directories, no other sessions' files)
//!   and no network;
//! - with its environment cleared but for the driver's and gpuless's variables, no core dumps,
//!   a bound on open files, `no_new_privs`, and not dumpable (another executor of the same user
//!   cannot read its memory through /proc);
//! - and the executor installs a seccomp allow-list ([`seccomp`]) once its GPU is initialized:
//!   the system calls measured of executors serving sessions on a GPU.
//!
//! [`Plan::new`] resolves the configuration into what the child does between fork and exec
//! ([`child`]: system calls only, every string prepared before the fork); [`Plan::probe`] tries
//! it once at start, so that where the kernel refuses namespaces the server says so once and
//! goes on without them (`namespaces = "auto"`), or refuses to start (`"on"`).

pub(crate) mod child;
pub mod seccomp;
mod syscalls;
mod view;

use std::ffi::{CString, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::config::{ConfineConfig, NamespaceMode};

/// A confinement that cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The configured user does not exist.
    #[error("confine.user `{0}`: no such user")]
    NoUser(String),
    /// Executors would run as root without `allow_root`.
    #[error("executors would run as root ({0}): set confine.user to an unprivileged user (default `nobody`), or allow it with confine.allow_root / --allow-root-executors")]
    Root(&'static str),
    /// Namespaces were required and the kernel refused them.
    #[error("confine.namespaces = \"on\", but executors cannot get namespaces here: {0}")]
    Namespaces(String),
    /// A file-system operation failed.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// The environment variables an executor keeps: the driver's, gpuless's own, the loader's path
/// and the stand-in driver's.
const KEPT_PREFIXES: &[&str] = &["CUDA_", "NVIDIA_", "GPULESS_", "FAKE_CUDA_", "NCCL_", "__GL_"];
const KEPT_NAMES: &[&str] = &["LD_LIBRARY_PATH", "PATH", "RUST_BACKTRACE", "TZ", "LANG"];

/// What every executor process is started with.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The user and group to switch to (the server runs as root), else `None`.
    pub(crate) switch: Option<(u32, u32)>,
    /// Namespaces (and the file-system view) at all.
    pub(crate) namespaces: bool,
    /// A user namespace mapping the server's own user (the server is not root): the lines
    /// written to `uid_map` and `gid_map`.
    pub(crate) userns: Option<(CString, CString)>,
    /// The file-system view built in the new mount namespace.
    pub(crate) view: view::View,
    /// The environment kept.
    env: Vec<(OsString, OsString)>,
    /// Most open files.
    pub(crate) open_files: u64,
    /// Whether the executor installs its seccomp filter.
    pub seccomp: bool,
    /// Whether confinement is on at all.
    pub enabled: bool,
}

impl Plan {
    /// Resolves `cfg` for executors run from `exe` with the cache in `cache` (both tiers, which
    /// executors read and the server writes), creating the view's mount point; the timeline
    /// directory, if one is asked for, is given to the executors'
    /// user. Fails where executors would run as root without `allow_root`.
    pub fn new(cfg: &ConfineConfig, exe: &Path, cache: &[&Path]) -> Result<Plan, ConfineError> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !cfg.enabled {
            if root && !cfg.allow_root {
                return Err(ConfineError::Root("confinement is off and the server runs as root"));
            }
            return Ok(Plan::off());
        }
        let switch = if root {
            let (uid, gid) = user_ids(&cfg.user)?;
            if uid == 0 && !cfg.allow_root {
                return Err(ConfineError::Root("confine.user is root"));
            }
            (uid != 0).then_some((uid, gid))
        } else {
            None
        };
        // The cache exists before its view is built (the server writes it; executors read it).
        for dir in cache {
            std::fs::create_dir_all(dir).map_err(|e| ConfineError::Io(dir.display().to_string(), e))?;
        }
        if let Some((uid, gid)) = switch {
            // The executors write the timeline where one is asked for; the cache they only read
            // (the server writes it for them: `manager_store.rs`).
            if let Some(dir) = std::env::var_os("GPULESS_EXECUTOR_TIMELINE").map(PathBuf::from) {
                give_tree(&dir, uid, gid).map_err(|e| ConfineError::Io(dir.display().to_string(), e))?;
            }
        }
        let env = kept_env(&cfg.keep_env);
        let namespaces = cfg.namespaces != NamespaceMode::Off;
        let view = if namespaces {
            let executor_uid = switch.map(|(u, _)| u).unwrap_or_else(|| unsafe { libc::geteuid() });
            view::View::new(cfg, exe, cache, &env, executor_uid)?
        } else {
            view::View::default()
        };
        // SAFETY: getuid and getgid have no preconditions.
        let userns = (!root).then(|| {
            let (u, g) = unsafe { (libc::getuid(), libc::getgid()) };
            (
                CString::new(format!("{u} {u} 1\n")).unwrap_or_default(),
                CString::new(format!("{g} {g} 1\n")).unwrap_or_default(),
            )
        });
        Ok(Plan {
            switch,
            namespaces,
            userns,
            view,
            env,
            open_files: cfg.open_files,
            seccomp: cfg.seccomp,
            enabled: true,
        })
    }

    /// No confinement (`confine.enabled = false`).
    pub fn off() -> Plan {
        Plan {
            switch: None,
            namespaces: false,
            userns: None,
            view: view::View::default(),
            env: Vec::new(),
            open_files: 0,
            seccomp: false,
            enabled: false,
        }
    }

    /// Applies the plan to the executor's command: the environment here, the rest between fork
    /// and exec (after the caller's own `pre_exec` steps, which run first).
    pub fn apply(&self, cmd: &mut Command) {
        if !self.enabled {
            return;
        }
        cmd.env_clear();
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.current_dir("/");
        let plan = self.clone();
        // SAFETY: `child::enter` makes system calls only, on strings prepared before the fork
        // (no allocation, no locks), as `pre_exec` requires.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, move || child::enter(&plan));
        }
    }

    /// The command of an executor for partition `spec` run from `exe`, confined by the plan
    /// (environment set on it afterwards is kept); with `minors`, its view holds only those
    /// GPUs' device nodes ([`view::View::for_gpus`]). GPULESS_EXECUTOR_WRAPPER (a command and
    /// its arguments, split at white space) runs it under a tool: `strace -ff -o DIR/x`, perf,
    /// compute-sanitizer (confined too).
    pub fn executor_command(&self, exe: &Path, spec: &str, minors: Option<&[u32]>) -> Command {
        let wrapper = std::env::var("GPULESS_EXECUTOR_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut cmd = match words.next() {
            Some(tool) => {
                let mut c = Command::new(tool);
                c.args(words).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.arg("__executor").arg("--partition").arg(spec);
        match minors {
            Some(m) if self.enabled => Plan { view: self.view.for_gpus(m), ..self.clone() }.apply(&mut cmd),
            _ => self.apply(&mut cmd),
        }
        if self.enabled {
            cmd.arg("--confined");
        }
        if self.seccomp {
            cmd.arg("--seccomp");
        }
        cmd
    }

    /// Tries the plan once on `exe --version`: where namespaces are refused, `auto` goes on
    /// without them (returned as a warning) and `on` fails.
    pub fn probe(&mut self, exe: &Path, mode: NamespaceMode) -> Result<Option<String>, ConfineError> {
        if !self.enabled {
            return Ok(None);
        }
        let run = |p: &Plan| -> Result<(), String> {
            let mut cmd = Command::new(exe);
            // Its stderr is the server's: a step that fails names itself there.
            cmd.arg("--version").stdout(std::process::Stdio::null()).stderr(std::process::Stdio::inherit());
            p.apply(&mut cmd);
            match cmd.output() {
                Ok(o) if o.status.success() => Ok(()),
                Ok(o) => Err(format!("the probe exited with {}", o.status)),
                Err(e) => Err(e.to_string()),
            }
        };
        match run(self) {
            Ok(()) => Ok(None),
            Err(why) if self.namespaces && mode == NamespaceMode::Auto => {
                self.namespaces = false;
                self.userns = None;
                run(self).map_err(ConfineError::Namespaces)?;
                Ok(Some(format!(
                    "executors run without namespaces of their own (they see the host's file system and network): {why}"
                )))
            }
            Err(why) if self.namespaces => Err(ConfineError::Namespaces(why)),
            Err(why) => Err(ConfineError::Namespaces(format!("executors cannot be started confined: {why}"))),
        }
    }

    /// One line for the log: what executors get.
    pub fn describe(&self) -> String {
        if !self.enabled {
            return "executors are not confined".into();
        }
        let who = match self.switch {
            Some((u, g)) => format!("uid {u} gid {g}"),
            // SAFETY: geteuid has no preconditions.
            None => format!("the server's user (uid {})", unsafe { libc::geteuid() }),
        };
        format!(
            "executors run as {who}; namespaces {}; {} paths in view; seccomp {}; env {} variables",
            if self.namespaces { "on" } else { "off" },
            self.view.binds(),
            if self.seccomp { "on" } else { "off" },
            self.env.len()
        )
    }
}

/// The environment an executor keeps of the server's.
fn kept_env(extra: &[String]) -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            KEPT_NAMES.contains(&k.as_ref())
                || KEPT_PREFIXES.iter().any(|p| k.starts_with(p))
                || extra.iter().any(|e| e == k.as_ref())
        })
        .collect()
}

/// The user and group ids of `name` (or of a number).
fn user_ids(name: &str) -> Result<(u32, u32), ConfineError> {
    if let Ok(uid) = name.parse::<u32>() {
        return Ok((uid, uid));
    }
    let c = CString::new(name).map_err(|_| ConfineError::NoUser(name.into()))?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives the read of `pwd`.
    let rc = unsafe { libc::getpwnam_r(c.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() {
        return Err(ConfineError::NoUser(name.into()));
    }
    Ok((pwd.pw_uid, pwd.pw_gid))
}

/// Gives `dir` and everything under it to `uid:gid` (the executors write their timelines there).
fn give_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(uid), Some(gid))?;
        if std::fs::symlink_metadata(&p)?.is_dir() {
            for e in std::fs::read_dir(&p)? {
                stack.push(e?.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
