//! What an executor's process does between fork and exec ([`enter`]): system calls only, on
//! strings the [`super::Plan`] prepared before the fork. A step that fails names itself on
//! stderr and fails the executor's start with its error.

use std::ffi::CStr;

use super::view::Step;
use super::Plan;

/// The error of the last system call, after one line naming `what` on stderr.
fn fail(what: &[u8]) -> std::io::Error {
    let e = std::io::Error::last_os_error();
    let parts: [&[u8]; 3] = [b"gpuless executor: confinement failed at ", what, b"\n"];
    for p in parts {
        // SAFETY: writing a valid buffer to stderr; a short or failed write is of no consequence.
        unsafe { libc::write(2, p.as_ptr().cast(), p.len()) };
    }
    e
}

/// Enters the plan: namespaces and the file-system view, limits, the user, `no_new_privs`.
pub(crate) fn enter(plan: &Plan) -> std::io::Result<()> {
    // SAFETY: system calls on valid C strings and buffers owned by `plan`.
    unsafe {
        if plan.namespaces {
            let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
            if plan.userns.is_some() {
                flags |= libc::CLONE_NEWUSER;
            }
            if libc::unshare(flags) != 0 {
                return Err(fail(b"unshare"));
            }
            if let Some((uid_map, gid_map)) = &plan.userns {
                write_file(c"/proc/self/setgroups", b"deny").map_err(|_| fail(b"/proc/self/setgroups"))?;
                write_file(c"/proc/self/uid_map", uid_map.as_bytes()).map_err(|_| fail(b"uid_map"))?;
                write_file(c"/proc/self/gid_map", gid_map.as_bytes()).map_err(|_| fail(b"gid_map"))?;
            }
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(fail(b"making mounts private"));
            }
            if let Some(base) = &plan.view.base {
                for step in &plan.view.steps {
                    run(step)?;
                }
                pivot(base)?;
            }
        }
        let limits = [(libc::RLIMIT_CORE, 0), (libc::RLIMIT_NOFILE, plan.open_files)];
        for (res, want) in limits {
            let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            if libc::getrlimit(res, &mut cur) != 0 {
                return Err(fail(b"getrlimit"));
            }
            let v = want.min(cur.rlim_max);
            let l = libc::rlimit { rlim_cur: v, rlim_max: v };
            if libc::setrlimit(res, &l) != 0 {
                return Err(fail(b"setrlimit"));
            }
        }
        if let Some((uid, gid)) = plan.switch {
            if libc::setgroups(0, std::ptr::null()) != 0 {
                return Err(fail(b"setgroups"));
            }
            if libc::setgid(gid) != 0 {
                return Err(fail(b"setgid"));
            }
            if libc::setuid(uid) != 0 {
                return Err(fail(b"setuid"));
            }
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(fail(b"no_new_privs"));
        }
    }
    Ok(())
}

/// One step of the view.
unsafe fn run(step: &Step) -> std::io::Result<()> {
    let null = std::ptr::null::<libc::c_char>();
    match step {
        Step::Dir(p) => {
            if libc::mkdir(p.as_ptr(), 0o755) != 0
                && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
            {
                return Err(fail(p.as_bytes()));
            }
        }
        Step::File(p) => {
            let fd = libc::open(p.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o644);
            if fd < 0 {
                // An existing file that cannot be opened for writing is a mount point all the same.
                let e = std::io::Error::last_os_error().raw_os_error();
                if e != Some(libc::EROFS) && e != Some(libc::EACCES) && e != Some(libc::EEXIST) {
                    return Err(fail(p.as_bytes()));
                }
            } else {
                libc::close(fd);
            }
        }
        Step::Symlink(target, at) => {
            if libc::symlink(target.as_ptr(), at.as_ptr()) != 0 {
                return Err(fail(at.as_bytes()));
            }
        }
        Step::Bind(src, dst, read_only, locked) => {
            if libc::mount(src.as_ptr(), dst.as_ptr(), null, libc::MS_BIND | libc::MS_REC, std::ptr::null()) != 0 {
                return Err(fail(dst.as_bytes()));
            }
            if *read_only {
                let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | locked;
                if libc::mount(null, dst.as_ptr(), null, flags, std::ptr::null()) != 0 {
                    return Err(fail(dst.as_bytes()));
                }
            }
        }
        Step::Tmpfs(dst, opts) => {
            if libc::mount(c"tmpfs".as_ptr(), dst.as_ptr(), c"tmpfs".as_ptr(), libc::MS_NOSUID, opts.as_ptr().cast())
                != 0
            {
                return Err(fail(dst.as_bytes()));
            }
        }
    }
    Ok(())
}

/// Makes `base` the root (pivot_root(".", "."), then the old root detached).
unsafe fn pivot(base: &CStr) -> std::io::Result<()> {
    if libc::chdir(base.as_ptr()) != 0 {
        return Err(fail(b"chdir to the view"));
    }
    if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0 {
        return Err(fail(b"pivot_root"));
    }
    if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 {
        return Err(fail(b"detaching the host's root"));
    }
    if libc::chdir(c"/".as_ptr()) != 0 {
        return Err(fail(b"chdir /"));
    }
    Ok(())
}

/// Writes `data` to the file `path`.
unsafe fn write_file(path: &CStr, data: &[u8]) -> Result<(), ()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(());
    }
    let n = libc::write(fd, data.as_ptr().cast(), data.len());
    libc::close(fd);
    if n == data.len() as isize {
        Ok(())
    } else {
        Err(())
    }
}
