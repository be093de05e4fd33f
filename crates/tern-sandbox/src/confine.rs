//! The kernel's side: a Landlock ruleset made from the [`Grant`]s, a seccomp filter for the
//! network, and applying both to a child between fork and exec or to the calling thread.
//!
//! Everything that allocates (opening the granted paths, building the ruleset and the BPF
//! program) happens in [`Confinement::build`], in the parent. [`Confinement::apply`] is
//! what runs in the forked child of a multi-threaded program, where only async-signal-safe
//! calls are allowed: three raw syscalls (`prctl`, `landlock_restrict_self`, `seccomp`).

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, OwnedFd};

use crate::rules::Grant;
use crate::{SandboxError, Support};

/// What one command (or one file-tool thread) is confined by. `none()` confines nothing.
#[derive(Debug, Default)]
pub struct Confinement {
    #[cfg(target_os = "linux")]
    ruleset: Option<OwnedFd>,
    #[cfg(target_os = "linux")]
    seccomp: Option<seccompiler::BpfProgram>,
}

impl Confinement {
    /// No confinement (`full-access`).
    pub fn none() -> Self {
        Confinement::default()
    }

    /// Whether anything is enforced.
    pub fn is_none(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.ruleset.is_none() && self.seccomp.is_none()
        }
        #[cfg(not(target_os = "linux"))]
        {
            true
        }
    }

    /// The ruleset of `grants` (with `network` off, no TCP), and with `filter` the seccomp
    /// filter: no socket but a unix one unless `network`, no widening chmod, no chown.
    #[cfg(target_os = "linux")]
    pub fn build(grants: &[Grant], network: bool, filter: bool) -> Result<Self, SandboxError> {
        Ok(Confinement {
            ruleset: Some(landlock_ruleset(grants, network)?),
            seccomp: if filter {
                Some(syscall_filter(network)?)
            } else {
                None
            },
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn build(_grants: &[Grant], _network: bool, _filter: bool) -> Result<Self, SandboxError> {
        Err(SandboxError::Unavailable {
            reason: "Landlock is Linux-only".into(),
        })
    }

    /// Confines the calling thread (and what it starts). Only raw syscalls, no allocation:
    /// safe between fork and exec.
    pub fn apply(&self) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            if self.is_none() {
                return Ok(());
            }
            drop_root_capabilities()?;
            // SAFETY: prctl with integer arguments; no memory is handed over.
            if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = &self.ruleset {
                // SAFETY: the ruleset fd is open for as long as `self` lives.
                let rc = unsafe {
                    libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32)
                };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some(prog) = &self.seccomp {
                seccompiler::apply_filter(prog).map_err(|e| match e {
                    seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => e,
                    _ => io::Error::from_raw_os_error(libc::EINVAL),
                })?;
            }
        }
        Ok(())
    }

    /// Confines the calling thread for good: for a thread made to do one file tool's work
    /// and end. The thread's later work, and threads it starts, stay confined.
    pub fn confine_current_thread(&self) -> io::Result<()> {
        self.apply()
    }
}

/// Root keeps its capabilities under Landlock: CAP_SYS_PTRACE would read the gateway's
/// memory and environment through `/proc`, CAP_DAC_OVERRIDE files of other users. A confined
/// command run by root loses them all, for itself and for what it executes (the bounding
/// set), as bubblewrap does. Raw syscalls only (this runs between fork and exec).
#[cfg(target_os = "linux")]
fn drop_root_capabilities() -> io::Result<()> {
    // SAFETY: geteuid has no arguments.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    for cap in 0..64 {
        // SAFETY: integer arguments. EINVAL past the last capability this kernel knows.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(err);
        }
    }
    // SAFETY: integer arguments.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: a v3 header and two data structs, as capset(2) reads them; both live on this
    // stack frame for the call.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes this process's memory and environment unreadable through `/proc` by processes of
/// the same user (`PR_SET_DUMPABLE` 0): Landlock on some kernels lets a confined command read
/// `/proc/PID/environ` of its unconfined parent. Also stops core dumps and debuggers for
/// the same user, which a program holding keys should not allow either.
pub fn harden_current_process() -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Asks the kernel for its Landlock ABI.
pub(crate) fn probe() -> Support {
    #[cfg(target_os = "linux")]
    {
        const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
        // SAFETY: the documented version query: no attribute pointer, size 0.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        if abi >= 1 {
            return Support::Landlock { abi: abi as i32 };
        }
        let err = io::Error::last_os_error();
        let reason = match err.raw_os_error() {
            Some(libc::ENOSYS) => {
                "the kernel has no Landlock (Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK)".to_owned()
            }
            Some(libc::EOPNOTSUPP) => {
                "Landlock is built into the kernel but not enabled (add landlock to the lsm= boot parameter)".to_owned()
            }
            _ => format!("the Landlock probe failed: {err}"),
        };
        Support::Missing { reason }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Support::Missing {
            reason: "Landlock is Linux-only".into(),
        }
    }
}

#[cfg(target_os = "linux")]
fn landlock_ruleset(grants: &[Grant], network: bool) -> Result<OwnedFd, SandboxError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
        Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
    };

    use crate::rules::Rights;

    // The newest ABI this crate knows; best effort drops what the kernel lacks.
    let abi = ABI::V10;
    let err = |e: landlock::RulesetError| SandboxError::Build(e.to_string());
    let read = AccessFs::from_read(abi) | AccessFs::ResolveUnix;
    let all = AccessFs::from_all(abi);
    let device = read | AccessFs::WriteFile | AccessFs::IoctlDev | AccessFs::Truncate;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(err)?
        .scope(Scope::from_all(abi))
        .map_err(err)?;
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?;
    for g in grants {
        let fd = match PathFd::new(&g.path) {
            Ok(fd) => fd,
            Err(e) => {
                // Gone between listing and opening: nothing to grant.
                tracing::debug!(path = %g.path.display(), error = %e, "sandbox: a granted path vanished");
                continue;
            }
        };
        let mut access: BitFlags<AccessFs> = match g.rights {
            Rights::Read => read,
            Rights::ReadWrite => all,
            Rights::Device => device,
        };
        if !g.path.is_dir() {
            access &= AccessFs::from_file(abi);
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(err)?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| SandboxError::Unavailable {
        reason: "the kernel refused to create a Landlock ruleset".into(),
    })
}

/// What the kernel's file rules cannot say, said with syscalls:
/// - no `socket` at all without `network` (io_uring too, which can open sockets without the
///   syscall), and no unix socket even with it: connecting to a socket file reaches a
///   program outside the sandbox (the session bus's `systemd-run`, `docker.sock`), and
///   Landlock controls that only from ABI 9. `socketpair` (an unnamed pair between a
///   command's own processes) stays allowed;
/// - chmod that widens a file's mode (group or other write, setuid, setgid, sticky) is
///   refused, since Landlock has no right for a file's mode: `chmod 777 FILE` outside the
///   writable roots would pass it. `chmod +x` and `chmod 600` stay possible;
/// - chown of any kind is refused (a user can only give a file to a group of theirs anyway).
///
/// All with EPERM. Other architectures' syscalls (a 32-bit binary on x86_64) kill the
/// process: their numbers would slip past the filter.
#[cfg(target_os = "linux")]
fn syscall_filter(network: bool) -> Result<seccompiler::BpfProgram, SandboxError> {
    use std::collections::BTreeMap;

    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    // fchmodat2(2) (Linux 6.6) is numbered alike on every architecture.
    const SYS_FCHMODAT2: i64 = 452;
    const WIDENING_BITS: [u64; 5] = [0o4000, 0o2000, 0o1000, 0o020, 0o002];

    let err = |e: seccompiler::BackendError| SandboxError::Build(format!("seccomp: {e}"));
    let arch: TargetArch = std::env::consts::ARCH.try_into().map_err(|_| {
        SandboxError::Build(format!(
            "seccomp: unsupported architecture {}",
            std::env::consts::ARCH
        ))
    })?;
    // One rule per bit: the rules of a syscall are alternatives, the conditions of a rule
    // all have to hold.
    let widening = |mode_arg: u8| -> Result<Vec<SeccompRule>, SandboxError> {
        WIDENING_BITS
            .iter()
            .map(|&bit| {
                SeccompRule::new(vec![
                    SeccompCondition::new(
                        mode_arg,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(bit),
                        bit,
                    )
                    .map_err(err)?,
                ])
                .map_err(err)
            })
            .collect()
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_fchmod, widening(1)?);
    rules.insert(libc::SYS_fchmodat, widening(2)?);
    rules.insert(SYS_FCHMODAT2, widening(2)?);
    rules.insert(libc::SYS_fchown, vec![]);
    rules.insert(libc::SYS_fchownat, vec![]);
    // The legacy path calls exist on x86_64 only (newer architectures have just the *at ones).
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_chmod, widening(1)?);
        rules.insert(libc::SYS_chown, vec![]);
        rules.insert(libc::SYS_lchown, vec![]);
    }
    if network {
        // Unix sockets by path stay refused (below): only internet sockets are the network.
        let unix = SeccompRule::new(vec![
            SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                libc::AF_UNIX as u64,
            )
            .map_err(err)?,
        ])
        .map_err(err)?;
        rules.insert(libc::SYS_socket, vec![unix]);
    } else {
        rules.insert(libc::SYS_socket, vec![]);
        rules.insert(libc::SYS_io_uring_setup, vec![]);
    }
    // x32 syscalls (the number with bit 30 set) report the x86_64 architecture: the same
    // rules under those numbers, or they would slip past.
    #[cfg(target_arch = "x86_64")]
    {
        const X32_BIT: i64 = 0x4000_0000;
        let x32: Vec<(i64, Vec<SeccompRule>)> = rules
            .iter()
            .map(|(nr, r)| (nr | X32_BIT, r.clone()))
            .collect();
        rules.extend(x32);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(err)?;
    filter.try_into().map_err(err)
}
