//! The rules for one simple command, given its words as bash passes them.
//!
//! Flow: `Scan::simple` looks through prefix words (`sudo -u x`, `env A=b`, `timeout 5`,
//! `xargs -0`, …) to the command that really runs → an expansion or glob in that position
//! is `dynamic_command` → otherwise the command's name picks its rule, which reads the
//! flags and operands the way that command does (`-rf` is a cluster, `--` ends flags,
//! `-t DIR` takes a value).

use super::shell::{STDIN_PATHS, Stdin, Word};
use super::{Rule, Scan, Target};

/// Top-level directories whose recursive delete is hard-line, like `/` itself.
const TOP_DIRS: &[&str] = &[
    "bin",
    "boot",
    "dev",
    "etc",
    "home",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "media",
    "mnt",
    "opt",
    "proc",
    "root",
    "run",
    "sbin",
    "srv",
    "sys",
    "usr",
    "var",
    "Applications",
    "Library",
    "System",
    "Users",
    "Volumes",
    "private",
];

/// Top-level directories holding the operating system (for permission changes).
const SYSTEM_DIRS: &[&str] = &[
    "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "sys", "usr",
    "System", "Library",
];

/// Directories under `/` that ordinary work does not write to.
const WRITE_PROTECTED: &[&str] = &[
    "etc", "boot", "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "sys", "proc/sys",
    "System", "Library",
];

/// Shell startup files (relative to a home directory).
const SHELL_RC: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".zlogout",
    ".cshrc",
    ".tcshrc",
    ".kshrc",
    ".mkshrc",
    ".config/fish/config.fish",
];

/// Paths whose writes go nowhere or to the terminal.
const HARMLESS_OUTPUTS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"];

const SHELLS: &[&str] = &[
    "sh", "bash", "rbash", "zsh", "dash", "ksh", "ksh93", "mksh", "pdksh", "ash", "yash", "fish",
    "csh", "tcsh",
];

/// What an interpreter is told to run.
enum Code<'a, 'w> {
    /// Nothing we can see (a module, `--version`).
    None,
    /// Code given on the command line.
    Arg {
        text: String,
        literal: bool,
        downloads: bool,
    },
    /// A script named by a path (a file, or `<(…)`).
    File(&'a Word<'w>),
    /// Its standard input. `explicit`: asked for by `-s`, `-` or `/dev/stdin` rather than by
    /// giving no script at all.
    Stdin { explicit: bool },
}

impl<'a, 'w> Code<'a, 'w> {
    fn arg(word: &Word<'_>) -> Self {
        Self::Arg {
            text: word.text.clone(),
            literal: !word.dynamic,
            downloads: word.downloads,
        }
    }

    /// Code attached to its flag (`-cprint(1)`): no longer a node of its own.
    fn attached(word: &Word<'_>, text: &str) -> Self {
        Self::Arg {
            text: text.to_owned(),
            literal: !word.dynamic,
            downloads: word.downloads,
        }
    }

    /// No flag gave code: the first operand is the script, or stdin when there is none.
    fn script(operand: Option<&'a Word<'w>>) -> Self {
        match operand {
            Some(w) if w.text == "-" => Self::Stdin { explicit: true },
            Some(w) => Self::File(w),
            None => Self::Stdin { explicit: false },
        }
    }
}

impl Scan {
    /// Judges one simple command. Returns the name of the command that really runs (after
    /// the prefix words), for callers that care (`find -exec`).
    pub(super) fn simple(&mut self, words: &[Word<'_>], stdin: &Stdin) -> Option<String> {
        let mut i = 0;
        let mut xargs = false;
        loop {
            let word = words.get(i)?;
            if word.dynamic || word.glob {
                self.add(Rule::DynamicCommand);
                return None;
            }
            let rest = &words[i + 1..];
            let skip = match basename(&word.text) {
                "sudo" => option_words(
                    rest,
                    "ugChpDrtTUR",
                    &[
                        "--user",
                        "--group",
                        "--host",
                        "--prompt",
                        "--close-from",
                        "--chdir",
                        "--role",
                        "--type",
                        "--command-timeout",
                        "--other-user",
                        "--chroot",
                    ],
                ),
                "doas" => option_words(rest, "uC", &[]),
                "pkexec" => option_words(rest, "", &["--user"]),
                "nice" => option_words(rest, "n", &["--adjustment"]),
                "ionice" => option_words(
                    rest,
                    "cnpPu",
                    &["--class", "--classdata", "--pid", "--pgid", "--uid"],
                ),
                "stdbuf" => option_words(rest, "ioe", &["--input", "--output", "--error"]),
                "time" => option_words(rest, "fo", &["--format", "--output"]),
                "exec" => option_words(rest, "a", &[]),
                "setsid" | "nohup" | "builtin" | "busybox" => option_words(rest, "", &[]),
                "command" => {
                    // `command -v rm` only says where rm is.
                    if rest
                        .first()
                        .is_some_and(|w| is_short_cluster(&w.text) && w.text.contains(['v', 'V']))
                    {
                        return None;
                    }
                    option_words(rest, "", &[])
                }
                "timeout" => {
                    option_words(rest, "sk", &["--signal", "--kill-after"]) + 1 // the duration
                }
                "xargs" => {
                    xargs = true;
                    option_words(
                        rest,
                        "adEILnPs",
                        &[
                            "--arg-file",
                            "--delimiter",
                            "--eof",
                            "--replace",
                            "--max-lines",
                            "--max-args",
                            "--max-procs",
                            "--max-chars",
                            "--process-slot-var",
                        ],
                    )
                }
                "env" => self.env_prefix(rest)?,
                _ => break,
            };
            i += 1 + skip;
        }
        let name = basename(&words[i].text).to_owned();
        let args = &words[i + 1..];
        let ctx = Ctx { xargs, stdin };
        self.note_stage(&name, args, stdin);
        self.dispatch(&name, args, &ctx);
        Some(name)
    }

    /// `env`'s options and `NAME=value` words; `None` when `-S STRING` took the rest of the
    /// line (it was handed to the shell walk).
    fn env_prefix(&mut self, rest: &[Word<'_>]) -> Option<usize> {
        let mut i = 0;
        while let Some(w) = rest.get(i) {
            let t = w.text.as_str();
            let split = if let Some(v) = t.strip_prefix("--split-string=") {
                Some(v.to_owned())
            } else if t == "-S" || t == "--split-string" {
                i += 1;
                rest.get(i).map(|v| v.text.clone())
            } else {
                t.strip_prefix("-S").map(|v| v.to_owned())
            };
            if let Some(split) = split {
                let mut text = split;
                for w in rest.iter().skip(i + 1) {
                    text.push(' ');
                    text.push_str(&w.text);
                }
                let literal = !rest.iter().any(|w| w.dynamic);
                let downloads = rest.iter().any(|w| w.downloads);
                self.shell_code(&text, literal, downloads);
                return None;
            }
            if t == "--" {
                return Some(i + 1);
            }
            if t == "-u" || t == "-C" || t == "--unset" || t == "--chdir" {
                i += 2;
            } else if (t.starts_with('-') && t != "-") || is_assignment(t) {
                i += 1;
            } else {
                return Some(i);
            }
        }
        Some(i)
    }

    /// Records what the current pipeline stage runs.
    fn note_stage(&mut self, name: &str, args: &[Word<'_>], stdin: &Stdin) {
        self.stage.commands += 1;
        match name {
            "curl" | "wget" => self.stage.downloads = true,
            "find" => self.stage.finds = true,
            "echo" => {
                let printed: Vec<&Word<'_>> = args
                    .iter()
                    .skip_while(|w| matches!(w.text.as_str(), "-n" | "-e" | "-E" | "-ne" | "-en"))
                    .collect();
                let text = printed
                    .iter()
                    .map(|w| w.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                let literal = !printed.iter().any(|w| w.dynamic);
                self.stage.text = Some((text, literal));
            }
            "cat" if operands(args).iter().all(|w| w.text == "-") => {
                if let Stdin::Text(text, literal) = stdin {
                    self.stage.text = Some((text.clone(), *literal));
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, name: &str, args: &[Word<'_>], ctx: &Ctx<'_>) {
        match name {
            "rm" => self.rm(args, ctx),
            "rmdir" | "unlink" => {
                if !operands(args).is_empty() || ctx.xargs {
                    self.add(Rule::DeleteFiles);
                }
                self.find_driven(ctx);
            }
            "shred" => {
                let p = parse(args, "ns", &["--iterations", "--size"]);
                self.destroy_contents(&p, ctx, Rule::ShredDisk);
                self.find_driven(ctx);
            }
            "blkdiscard" => {
                let p = parse(args, "olp", &["--offset", "--length", "--step"]);
                if p.texts().any(is_disk) {
                    self.add(Rule::ShredDisk);
                } else if !p.operands.is_empty() {
                    self.add(Rule::DiskTool);
                }
            }
            "truncate" => {
                let p = parse(args, "sr", &["--size", "--reference"]);
                self.destroy_contents(&p, ctx, Rule::OverwriteFile);
            }
            "mv" => self.mv(args, ctx),
            "cp" => self.cp(args),
            "ln" | "install" | "rsync" => self.copy_like(name, args),
            "dd" => {
                for w in args {
                    if let Some(path) = w.text.strip_prefix("of=") {
                        self.add(if is_disk(path) {
                            Rule::OverwriteDisk
                        } else {
                            Rule::DdWrite
                        });
                    }
                }
            }
            "tee" => {
                let p = parse(args, "", &[]);
                let append = p.short('a') || p.long("--append");
                for path in p.texts() {
                    self.write_to(path, append);
                }
            }
            "sed" => self.sed(args),
            "chmod" => self.chmod(args, ctx),
            "chown" | "chgrp" => {
                let p = parse(args, "", &["--reference", "--from"]);
                if p.short('R') || p.long("--recursive") {
                    self.add(Rule::RecursiveChown);
                }
                if p.operands.len() >= 2 || ctx.xargs {
                    self.add(Rule::ChangePermissions);
                }
            }
            "find" => self.find(args),
            "git" => self.git(args),
            "cd" | "pushd" => self.cd(args),
            "kill" => self.kill(args),
            "killall" | "killall5" => self.add(Rule::Killall),
            "pkill" => {
                let force = args.windows(2).any(|w| {
                    matches!(w[0].text.as_str(), "-s" | "--signal") && is_kill_signal(&w[1].text)
                }) || args.iter().any(|w| {
                    let t = w.text.as_str();
                    matches!(t, "-9" | "-KILL" | "-SIGKILL")
                        || t.strip_prefix("--signal=").is_some_and(is_kill_signal)
                });
                if force {
                    self.add(Rule::PkillForce);
                }
            }
            "shutdown" | "reboot" | "halt" | "poweroff" => self.add(Rule::Shutdown),
            "init" | "telinit"
                if operands(args)
                    .first()
                    .is_some_and(|w| w.text == "0" || w.text == "6") =>
            {
                self.add(Rule::Shutdown);
            }
            "systemctl" => {
                let p = parse(
                    args,
                    "HMtspPno",
                    &[
                        "--host",
                        "--machine",
                        "--type",
                        "--state",
                        "--property",
                        "--signal",
                        "--lines",
                        "--output",
                        "--root",
                    ],
                );
                match p.operands.first().map(|w| w.text.as_str()) {
                    Some("reboot" | "poweroff" | "halt" | "kexec") => self.add(Rule::Shutdown),
                    Some("stop" | "disable" | "mask" | "kill") => self.add(Rule::SystemctlStop),
                    _ => {}
                }
            }
            "service" if operands(args).get(1).is_some_and(|w| w.text == "stop") => {
                self.add(Rule::SystemctlStop);
            }
            "iptables" | "ip6tables" | "iptables-legacy" | "ip6tables-legacy" | "iptables-nft"
            | "ip6tables-nft"
                if args.iter().any(|w| w.text == "-F" || w.text == "--flush") =>
            {
                self.add(Rule::FirewallFlush);
            }
            "nft"
                if args
                    .windows(2)
                    .any(|w| w[0].text == "flush" && w[1].text == "ruleset") =>
            {
                self.add(Rule::FirewallFlush);
            }
            "ufw" => {
                let verb = args.iter().find(|w| !w.text.starts_with('-'));
                if verb.is_some_and(|w| w.text == "disable" || w.text == "reset") {
                    self.add(Rule::FirewallFlush);
                }
            }
            "crontab" if parse(args, "u", &[]).short('r') => {
                self.add(Rule::CrontabRemove);
            }
            "mke2fs" | "mkswap" => self.mkfs(args),
            n if n == "mkfs" || n.starts_with("mkfs.") => self.mkfs(args),
            "wipefs" => self.add(Rule::DiskTool),
            "fdisk" | "sfdisk" | "cfdisk" | "gdisk" | "sgdisk" | "parted"
                if !args.iter().any(|w| w.text == "-l" || w.text == "--list") =>
            {
                self.add(Rule::DiskTool);
            }
            "dropdb" => self.add(Rule::SqlDrop),
            "eval" => self.joined_code(args),
            "trap" => {
                let ops = operands(args);
                if let [action, _signal, ..] = ops.as_slice()
                    && !matches!(action.text.as_str(), "" | "-")
                {
                    self.shell_code(&action.text, !action.dynamic, action.downloads);
                }
            }
            "watch" => {
                let skip = option_words(args, "nd", &["--interval", "--differences"]);
                self.joined_code(&args[skip.min(args.len())..]);
            }
            "su" => self.su(args),
            "source" | "." => {
                let code = operands(args).first().map_or(Code::None, |w| Code::File(w));
                self.run_code(code, true, ctx.stdin);
            }
            n if SHELLS.contains(&n) => {
                let code = shell_code_of(args);
                self.run_code(code, true, ctx.stdin);
            }
            n if is_python(n) => {
                let code = python_code_of(args);
                self.run_code(code, false, ctx.stdin);
            }
            "perl" | "ruby" => self.perl_like(name, args, ctx),
            "node" | "nodejs" | "bun" => {
                let code = flag_code_of(
                    args,
                    &["-e", "--eval", "-p", "--print"],
                    &[
                        "-r",
                        "--require",
                        "--import",
                        "--loader",
                        "-C",
                        "--conditions",
                    ],
                );
                self.run_code(code, false, ctx.stdin);
            }
            "deno" if operands(args).first().is_some_and(|w| w.text == "eval") => {
                self.add(Rule::InterpreterCode);
            }
            "php" => {
                let code = flag_code_of(args, &["-r", "-B", "-R", "-E"], &["-f", "-c", "-d"]);
                self.run_code(code, false, ctx.stdin);
            }
            "lua" | "luajit" => {
                let code = flag_code_of(args, &["-e"], &["-l"]);
                self.run_code(code, false, ctx.stdin);
            }
            "osascript" | "Rscript" if args.iter().any(|w| w.text == "-e") => {
                self.add(Rule::InterpreterCode);
            }
            "awk" | "gawk" | "mawk" | "nawk" => self.awk(args),
            _ => {}
        }
    }

    // ----- deletes -----

    fn rm(&mut self, args: &[Word<'_>], ctx: &Ctx<'_>) {
        let p = parse(args, "", &[]);
        if p.short('r') || p.short('R') || p.long("--recursive") {
            for path in p.texts() {
                let kind = match target_kind(path) {
                    Target::Other if path.starts_with('*') || path.starts_with("./*") => self.cwd,
                    kind => kind,
                };
                match kind {
                    Target::Root => self.add(Rule::DeleteRoot),
                    Target::Home => self.add(Rule::DeleteHome),
                    Target::Other => {}
                }
            }
            self.add(Rule::RecursiveDelete);
        } else if !p.operands.is_empty() || ctx.xargs {
            self.add(Rule::DeleteFiles);
        }
        self.find_driven(ctx);
    }

    /// `find … | xargs rm`: the files find lists are deleted.
    fn find_driven(&mut self, ctx: &Ctx<'_>) {
        if ctx.xargs && ctx.stdin.finds() {
            self.add(Rule::FindDelete);
        }
    }

    /// `shred`, `truncate`: a disk gets `disk_rule`, a system file `write_system_file`, any
    /// other operand `overwrite_file`.
    fn destroy_contents(&mut self, p: &Parsed<'_, '_>, ctx: &Ctx<'_>, disk_rule: Rule) {
        if p.texts().any(is_disk) {
            self.add(disk_rule);
        }
        if p.texts().any(is_write_protected) {
            self.add(Rule::WriteSystemFile);
        }
        if !p.operands.is_empty() || ctx.xargs {
            self.add(Rule::OverwriteFile);
        }
    }

    /// A write onto `path` (a redirection, `tee`, `find -fprint`): disks and system files
    /// whichever way; a truncating write onto any file.
    pub(super) fn write_to(&mut self, path: &str, append: bool) {
        if HARMLESS_OUTPUTS.contains(&path) || path.starts_with("/dev/fd/") {
            return;
        }
        if is_disk(path) {
            self.add(Rule::OverwriteDisk);
        } else if is_write_protected(path) {
            self.add(Rule::WriteSystemFile);
        } else if !append {
            self.add(if is_shell_rc(path) {
                Rule::OverwriteShellRc
            } else {
                Rule::OverwriteFile
            });
        }
    }

    // ----- moves and copies -----

    fn mv(&mut self, args: &[Word<'_>], ctx: &Ctx<'_>) {
        let p = parse(args, "tS", &["--target-directory", "--suffix"]);
        if let Some(target) = p.target() {
            if target == "/dev/null" {
                self.add(Rule::MoveToDevNull);
            } else if is_shell_rc(target) {
                self.add(Rule::OverwriteShellRc);
            } else if is_write_protected(target) {
                self.add(Rule::WriteSystemFile);
            }
        }
        if !p.operands.is_empty() || ctx.xargs {
            self.add(Rule::MoveFiles);
        }
    }

    fn cp(&mut self, args: &[Word<'_>]) {
        let p = parse(args, "tS", &["--target-directory", "--suffix"]);
        let Some(target) = p.target() else {
            return;
        };
        if is_disk(target) {
            self.add(Rule::OverwriteDisk);
        } else if is_shell_rc(target) {
            self.add(Rule::OverwriteShellRc);
        } else if is_write_protected(target) {
            self.add(Rule::WriteSystemFile);
        }
        // Copying an empty (or endless) device onto a file truncates it in disguise.
        let sources =
            p.operands.len() - usize::from(p.value(&["-t", "--target-directory"]).is_none());
        if p.operands[..sources]
            .iter()
            .any(|w| w.text == "/dev/null" || w.text == "/dev/zero")
        {
            self.add(Rule::OverwriteFile);
        }
    }

    fn copy_like(&mut self, name: &str, args: &[Word<'_>]) {
        let p = match name {
            "install" => parse(
                args,
                "tSmog",
                &[
                    "--target-directory",
                    "--suffix",
                    "--mode",
                    "--owner",
                    "--group",
                ],
            ),
            "rsync" => parse(
                args,
                "eBfT",
                &["--rsh", "--filter", "--temp-dir", "--exclude", "--include"],
            ),
            _ => parse(args, "tS", &["--target-directory", "--suffix"]),
        };
        if let Some(target) = p.target() {
            if name == "ln" && is_shell_rc(target) {
                self.add(Rule::OverwriteShellRc);
            } else if is_write_protected(target) {
                self.add(Rule::WriteSystemFile);
            }
        }
        if name == "rsync"
            && p.flags.iter().any(|f| {
                f.starts_with("--delete") || *f == "--del" || *f == "--remove-source-files"
            })
        {
            self.add(Rule::DeleteFiles);
        }
    }

    fn sed(&mut self, args: &[Word<'_>]) {
        let mut in_place = false;
        let mut script_flag = false;
        let mut operands = Vec::new();
        let mut i = 0;
        let mut options_done = false;
        while let Some(w) = args.get(i) {
            i += 1;
            let t = w.text.as_str();
            if options_done || !t.starts_with('-') || t == "-" {
                operands.push(t);
            } else if t == "--" {
                options_done = true;
            } else if t == "--in-place" || t.starts_with("--in-place=") {
                in_place = true;
            } else if t == "--expression" || t == "--file" {
                script_flag = true;
                i += 1;
            } else if t.starts_with("--expression=") || t.starts_with("--file=") {
                script_flag = true;
            } else if is_short_cluster(t) {
                for (k, ch) in t.char_indices().skip(1) {
                    match ch {
                        // The rest of the cluster is the backup suffix.
                        'i' => {
                            in_place = true;
                            break;
                        }
                        'e' | 'f' | 'l' => {
                            script_flag |= ch != 'l';
                            if k + 1 == t.len() {
                                i += 1;
                            }
                            break;
                        }
                        _ => {}
                    }
                }
            }
        }
        if !in_place {
            return;
        }
        let files = if script_flag {
            &operands[..]
        } else {
            operands.get(1..).unwrap_or(&[])
        };
        if files.iter().any(|f| is_write_protected(f)) {
            self.add(Rule::WriteSystemFile);
        }
        self.add(Rule::OverwriteFile);
    }

    // ----- permissions -----

    fn chmod(&mut self, args: &[Word<'_>], ctx: &Ctx<'_>) {
        let mut recursive = false;
        let mut reference = false;
        let mut rest = Vec::new();
        let mut options_done = false;
        for w in args {
            let t = w.text.as_str();
            // A mode may start with `-` (`chmod -w f`): only c, f, v, R are chmod's flags.
            let is_flag = !options_done
                && (t.starts_with("--")
                    || is_short_cluster(t) && t[1..].chars().all(|c| "cfvR".contains(c)));
            if t == "--" && !options_done {
                options_done = true;
            } else if is_flag {
                recursive |= t == "--recursive" || (!t.starts_with("--") && t.contains('R'));
                reference |= t.starts_with("--reference");
            } else {
                rest.push(t);
            }
        }
        let (mode, targets) = if reference {
            ("", &rest[..])
        } else {
            match rest.split_first() {
                Some((mode, targets)) => (*mode, targets),
                None => return,
            }
        };
        let system = targets.iter().any(|t| is_system_path(t));
        if mode_is_world_writable(mode) {
            self.add(Rule::ChmodWorldWritable);
        }
        if recursive && system {
            self.add(Rule::RecursiveChmodSystem);
        }
        if !targets.is_empty() || ctx.xargs {
            self.add(Rule::ChangePermissions);
        }
    }

    // ----- find -----

    fn find(&mut self, args: &[Word<'_>]) {
        let mut i = 0;
        while let Some(w) = args.get(i) {
            i += 1;
            match w.text.as_str() {
                "-delete" => self.add(Rule::FindDelete),
                "-exec" | "-execdir" | "-ok" | "-okdir" => {
                    let start = i;
                    while let Some(w) = args.get(i) {
                        let end = w.text == ";"
                            || (w.text == "+" && i > start && args[i - 1].text == "{}");
                        if end {
                            break;
                        }
                        i += 1;
                    }
                    let inner = &args[start..i];
                    i += 1;
                    let name = self.simple(inner, &Stdin::Inherited);
                    if matches!(name.as_deref(), Some("rm" | "rmdir" | "unlink" | "shred")) {
                        self.add(Rule::FindDelete);
                    }
                }
                "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                    if let Some(file) = args.get(i) {
                        self.write_to(&file.text, false);
                    }
                }
                _ => {}
            }
        }
    }

    // ----- git -----

    fn git(&mut self, args: &[Word<'_>]) {
        let skip = option_words(
            args,
            "Cc",
            &[
                "--git-dir",
                "--work-tree",
                "--namespace",
                "--super-prefix",
                "--config-env",
            ],
        );
        let Some((sub, rest)) = args.get(skip..).and_then(<[Word<'_>]>::split_first) else {
            return;
        };
        match sub.text.as_str() {
            "push" => {
                let p = parse(
                    rest,
                    "o",
                    &["--push-option", "--repo", "--receive-pack", "--exec"],
                );
                let refspecs = p.operands.iter().skip(1).map(|w| w.text.as_str());
                let force = p.short('f')
                    || p.flags.iter().any(|f| f.starts_with("--force"))
                    || refspecs.clone().any(|r| r.starts_with('+'));
                // `:` alone pushes matching branches; `:name` deletes `name`.
                let delete = p.short('d')
                    || p.long("--delete")
                    || p.long("--mirror")
                    || p.long("--prune")
                    || refspecs.clone().any(|r| {
                        r.trim_start_matches('+')
                            .strip_prefix(':')
                            .is_some_and(|name| !name.is_empty())
                    });
                if force {
                    self.add(Rule::GitForcePush);
                }
                if delete {
                    self.add(Rule::GitPushDelete);
                }
            }
            "reset" if rest.iter().any(|w| w.text == "--hard") => {
                self.add(Rule::GitResetHard);
            }
            "clean" => {
                let p = parse(rest, "e", &["--exclude"]);
                if p.short('f') || p.long("--force") {
                    self.add(Rule::GitCleanForce);
                }
            }
            "branch" => {
                let p = parse(rest, "u", &["--set-upstream-to", "--contains", "--merged"]);
                let delete = p.short('d') || p.long("--delete");
                let force = p.short('f') || p.long("--force");
                if p.short('D') || delete && force {
                    self.add(Rule::GitBranchForceDelete);
                }
            }
            "checkout" => {
                let p = parse(
                    rest,
                    "bBU",
                    &["--orphan", "--conflict", "--pathspec-from-file"],
                );
                // `git checkout -- paths`, `git checkout .`, `git checkout -f`: the changes
                // in those files are gone. `git checkout NAME` cannot be told apart from a
                // branch switch, so it stays safe.
                let paths_after_dashdash = p.after_dashdash > 0;
                let everything = p.texts().any(is_everything);
                if paths_after_dashdash || everything || p.short('f') || p.long("--force") {
                    self.add(Rule::GitDiscardChanges);
                }
            }
            "restore" => {
                let p = parse(rest, "s", &["--source", "--pathspec-from-file"]);
                let staged = p.short('S') || p.long("--staged");
                let worktree = p.short('W') || p.long("--worktree");
                let paths = !p.operands.is_empty() || p.long("--pathspec-from-file");
                // `--staged` alone only unstages; the working tree is restored otherwise.
                if paths && (!staged || worktree) {
                    self.add(Rule::GitDiscardChanges);
                }
            }
            _ => {}
        }
    }

    // ----- processes and the machine -----

    fn kill(&mut self, args: &[Word<'_>]) {
        // `-1` as a process id (after a signal option or `--`) is every process.
        for (i, w) in args.iter().enumerate().skip(1) {
            if w.text == "-1" && !matches!(args[i - 1].text.as_str(), "-s" | "-n" | "--signal") {
                self.add(Rule::KillAll);
            }
        }
    }

    fn mkfs(&mut self, args: &[Word<'_>]) {
        if args.iter().any(|w| w.text.contains("/dev/")) {
            self.add(Rule::FormatDevice);
        } else {
            self.add(Rule::MakeFilesystem);
        }
    }

    fn cd(&mut self, args: &[Word<'_>]) {
        self.cwd = match operands(args).first() {
            None => Target::Home,
            Some(w) => target_kind(&w.text),
        };
    }

    // ----- code -----

    /// `eval a b`: the words joined with spaces are shell code.
    fn joined_code(&mut self, args: &[Word<'_>]) {
        if args.is_empty() {
            return;
        }
        let text = args
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let literal = !args.iter().any(|w| w.dynamic);
        let downloads = args.iter().any(|w| w.downloads);
        self.shell_code(&text, literal, downloads);
    }

    fn su(&mut self, args: &[Word<'_>]) {
        let mut i = 0;
        while let Some(w) = args.get(i) {
            i += 1;
            let t = w.text.as_str();
            if t == "-c" || t == "--command" {
                if let Some(code) = args.get(i) {
                    self.shell_code(&code.text, !code.dynamic, code.downloads);
                }
                return;
            }
            if let Some(code) = t.strip_prefix("--command=") {
                self.shell_code(code, !w.dynamic, w.downloads);
                return;
            }
        }
    }

    fn perl_like(&mut self, name: &str, args: &[Word<'_>], ctx: &Ctx<'_>) {
        let mut code = None;
        let mut in_place = false;
        let mut i = 0;
        // Flags whose value is the rest of the cluster (or the next word for some).
        let (valued, next_word_ok) = if name == "perl" {
            ("MmIxCdDFl0", "")
        } else {
            ("rICEFxW0TK", "rICE")
        };
        while let Some(w) = args.get(i) {
            let t = w.text.as_str();
            if t == "--" {
                i += 1;
                break;
            }
            if t == "-" {
                code.get_or_insert(Code::Stdin { explicit: true });
                i += 1;
                break;
            }
            if !is_short_cluster(t) {
                break;
            }
            i += 1;
            for (k, ch) in t.char_indices().skip(1) {
                let rest = &t[k + ch.len_utf8()..];
                if ch == 'e' || (ch == 'E' && name == "perl") {
                    code = Some(if rest.is_empty() {
                        let arg = args.get(i).map_or(Code::None, Code::arg);
                        i += 1;
                        arg
                    } else {
                        Code::attached(w, rest)
                    });
                    break;
                }
                if ch == 'i' {
                    in_place = true;
                    break;
                }
                if valued.contains(ch) {
                    if rest.is_empty() && next_word_ok.contains(ch) {
                        i += 1;
                    }
                    break;
                }
            }
        }
        if in_place {
            self.add(Rule::OverwriteFile);
        }
        let code = code.unwrap_or_else(|| Code::script(args.get(i)));
        self.run_code(code, false, ctx.stdin);
    }

    /// awk programs can run commands (`system()`, `print | "sh"`, `"cmd" | getline`);
    /// printing and matching are everyday work, so only those forms ask.
    fn awk(&mut self, args: &[Word<'_>]) {
        let mut i = 0;
        let mut program_file = false;
        while let Some(w) = args.get(i) {
            let t = w.text.as_str();
            if t == "--" {
                i += 1;
                break;
            }
            if !t.starts_with('-') || t == "-" {
                break;
            }
            i += 1;
            if (matches!(t, "-i" | "--include") && args.get(i).is_some_and(|w| w.text == "inplace"))
                || t == "--include=inplace"
                || t == "-iinplace"
            {
                self.add(Rule::OverwriteFile);
            }
            if t == "-f" || t.starts_with("--file") {
                program_file = true;
            }
            if matches!(
                t,
                "-F" | "-v" | "-f" | "-i" | "-e" | "--source" | "--include" | "--file"
            ) {
                if matches!(t, "-e" | "--source") {
                    if let Some(p) = args.get(i) {
                        self.awk_program(p);
                    }
                    program_file = true;
                }
                i += 1;
            }
        }
        if !program_file && let Some(program) = args.get(i) {
            self.awk_program(program);
        }
    }

    fn awk_program(&mut self, program: &Word<'_>) {
        let text = program.text.as_str();
        let pipes = text.contains("|&")
            || text.char_indices().any(|(k, ch)| {
                ch == '|'
                    && (text[k + 1..].trim_start().starts_with('"')
                        || text[..k].trim_end().ends_with('"'))
            });
        if program.dynamic || text.contains("system") || pipes {
            self.add(Rule::InterpreterCode);
        }
    }

    /// Decides what running `code` means. `shell`: the code is shell code, which can be read
    /// (when literal) instead of only feared.
    fn run_code(&mut self, code: Code<'_, '_>, shell: bool, stdin: &Stdin) {
        match code {
            Code::None => {}
            Code::Arg {
                text,
                literal,
                downloads,
            } => {
                if shell {
                    self.shell_code(&text, literal, downloads);
                } else {
                    if downloads {
                        self.add(Rule::PipeToShell);
                    }
                    self.add(Rule::InterpreterCode);
                }
            }
            Code::File(w) if w.node.kind() == "process_substitution" => {
                self.add(if w.downloads {
                    Rule::PipeToShell
                } else {
                    Rule::InterpreterCode
                });
            }
            Code::File(w) if STDIN_PATHS.contains(&w.text.as_str()) => {
                self.run_code(Code::Stdin { explicit: true }, shell, stdin);
            }
            // A script file: its text is not on the line (see the module docs).
            Code::File(_) => {}
            Code::Stdin { explicit } => match stdin {
                Stdin::Pipe {
                    downloads: true, ..
                } => self.add(Rule::PipeToShell),
                Stdin::Pipe {
                    text: Some((text, literal)),
                    ..
                } if shell => self.shell_code(text, *literal, false),
                Stdin::Pipe { .. } => self.add(Rule::InterpreterCode),
                Stdin::Text(text, literal) if shell => self.shell_code(text, *literal, false),
                Stdin::Text(..) => self.add(Rule::InterpreterCode),
                Stdin::File => {}
                Stdin::Inherited => {
                    if explicit {
                        self.add(Rule::InterpreterCode);
                    }
                }
            },
        }
    }
}

/// What `simple` knows about how the command was started.
struct Ctx<'s> {
    /// Started by `xargs`: more operands come from stdin.
    xargs: bool,
    stdin: &'s Stdin,
}

// ---------------------------------------------------------------------------------------
// Interpreters' command lines.

/// `sh -c CODE`, `bash -lc CODE`, `sh -s`, `bash script`, `fish --command=CODE`.
fn shell_code_of<'a, 'w>(args: &'a [Word<'w>]) -> Code<'a, 'w> {
    let mut dash_c = false;
    let mut dash_s = false;
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let t = w.text.as_str();
        if t == "--" || t == "-" {
            i += 1;
            dash_s |= t == "-";
            break;
        }
        if let Some(code) = t.strip_prefix("--command=") {
            return Code::attached(w, code);
        }
        if t.starts_with("--") {
            dash_c |= t == "--command";
            i += 1 + usize::from(matches!(t, "--rcfile" | "--init-file"));
            continue;
        }
        let Some(cluster) = t.strip_prefix('-').or_else(|| t.strip_prefix('+')) else {
            break;
        };
        if t.starts_with('-') {
            dash_c |= cluster.contains('c');
            dash_s |= cluster.contains('s');
        }
        // `-o pipefail`, `+O extglob`: the option's name is the next word.
        i += 1 + usize::from(cluster.ends_with(['o', 'O']));
    }
    if dash_c {
        return args.get(i).map_or(Code::None, Code::arg);
    }
    if dash_s {
        return Code::Stdin { explicit: true };
    }
    Code::script(args.get(i))
}

fn is_python(name: &str) -> bool {
    ["python", "pypy"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    })
}

/// `python -c CODE`, `python -m module`, `python -`, `python script.py`.
fn python_code_of<'a, 'w>(args: &'a [Word<'w>]) -> Code<'a, 'w> {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let t = w.text.as_str();
        if t == "--" {
            i += 1;
            break;
        }
        if !is_short_cluster(t) {
            if t.starts_with("--") {
                i += 1;
                continue;
            }
            break;
        }
        i += 1;
        for (k, ch) in t.char_indices().skip(1) {
            let rest = &t[k + ch.len_utf8()..];
            match ch {
                'c' if rest.is_empty() => return args.get(i).map_or(Code::None, Code::arg),
                'c' => return Code::attached(w, rest),
                'm' => return Code::None,
                'W' | 'X' => {
                    i += usize::from(rest.is_empty());
                    break;
                }
                _ => {}
            }
        }
    }
    Code::script(args.get(i))
}

/// Interpreters whose code comes after one of `code_flags` (`node -e`, `php -r`); other
/// flags in `valued` take the next word.
fn flag_code_of<'a, 'w>(
    args: &'a [Word<'w>],
    code_flags: &[&str],
    valued: &[&str],
) -> Code<'a, 'w> {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let t = w.text.as_str();
        i += 1;
        if code_flags.contains(&t) {
            return args.get(i).map_or(Code::None, Code::arg);
        }
        if let Some((flag, code)) = t.split_once('=')
            && code_flags.contains(&flag)
        {
            return Code::attached(w, code);
        }
        if t == "--" {
            break;
        }
        if t == "-" {
            return Code::Stdin { explicit: true };
        }
        if !t.starts_with('-') {
            i -= 1;
            break;
        }
        if valued.contains(&t) {
            i += 1;
        }
    }
    Code::script(args.get(i))
}

// ---------------------------------------------------------------------------------------
// Flags and operands.

/// A command's words split GNU-style: flags anywhere, `--` ends them, some flags take a
/// value (attached, or the next word).
#[derive(Default)]
struct Parsed<'a, 'w> {
    flags: Vec<&'a str>,
    /// The letters of all short-flag clusters (values excluded).
    shorts: String,
    values: Vec<(String, String)>,
    operands: Vec<&'a Word<'w>>,
    /// How many operands came after `--`.
    after_dashdash: usize,
}

impl Parsed<'_, '_> {
    fn short(&self, letter: char) -> bool {
        self.shorts.contains(letter)
    }

    fn long(&self, name: &str) -> bool {
        self.flags.iter().any(|f| {
            f.strip_prefix(name)
                .is_some_and(|r| r.is_empty() || r.starts_with('='))
        })
    }

    fn value(&self, keys: &[&str]) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(k, _)| keys.contains(&k.as_str()))
            .map(|(_, v)| v.as_str())
    }

    fn texts(&self) -> impl Iterator<Item = &str> + Clone {
        self.operands.iter().map(|w| w.text.as_str())
    }

    /// Where `cp`/`mv`/`ln` write: `-t DIR`, or the last operand.
    fn target(&self) -> Option<&str> {
        self.value(&["-t", "--target-directory"])
            .or_else(|| self.operands.last().map(|w| w.text.as_str()))
    }
}

fn parse<'a, 'w>(args: &'a [Word<'w>], short_valued: &str, long_valued: &[&str]) -> Parsed<'a, 'w> {
    let mut p = Parsed::default();
    let mut i = 0;
    let mut options_done = false;
    while let Some(w) = args.get(i) {
        i += 1;
        let t = w.text.as_str();
        if options_done || t == "-" || !t.starts_with('-') {
            p.operands.push(w);
            p.after_dashdash += usize::from(options_done);
            continue;
        }
        if t == "--" {
            options_done = true;
            continue;
        }
        p.flags.push(t);
        if t.starts_with("--") {
            if let Some((name, value)) = t.split_once('=') {
                p.values.push((name.to_owned(), value.to_owned()));
            } else if long_valued.contains(&t)
                && let Some(v) = args.get(i)
            {
                p.values.push((t.to_owned(), v.text.clone()));
                i += 1;
            }
            continue;
        }
        for (k, ch) in t.char_indices().skip(1) {
            p.shorts.push(ch);
            if short_valued.contains(ch) {
                let rest = &t[k + ch.len_utf8()..];
                if !rest.is_empty() {
                    p.values.push((format!("-{ch}"), rest.to_owned()));
                } else if let Some(v) = args.get(i) {
                    p.values.push((format!("-{ch}"), v.text.clone()));
                    i += 1;
                }
                break;
            }
        }
    }
    p
}

fn operands<'a, 'w>(args: &'a [Word<'w>]) -> Vec<&'a Word<'w>> {
    parse(args, "", &[]).operands
}

/// How many leading words are options (with their values) of a prefix command, `--`
/// included; the command it runs comes next.
fn option_words(args: &[Word<'_>], short_valued: &str, long_valued: &[&str]) -> usize {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let t = w.text.as_str();
        if t == "--" {
            return i + 1;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        i += 1;
        if t.starts_with("--") {
            i += usize::from(!t.contains('=') && long_valued.contains(&t));
            continue;
        }
        if let Some((k, ch)) = t
            .char_indices()
            .skip(1)
            .find(|&(_, c)| short_valued.contains(c))
        {
            i += usize::from(k + ch.len_utf8() == t.len());
        }
    }
    i
}

fn is_short_cluster(t: &str) -> bool {
    t.len() > 1 && t.starts_with('-') && !t.starts_with("--")
}

fn is_assignment(t: &str) -> bool {
    t.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn is_kill_signal(s: &str) -> bool {
    matches!(s, "9" | "KILL" | "SIGKILL")
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `git checkout` operands that mean "every file".
fn is_everything(path: &str) -> bool {
    matches!(path, "." | "./" | ":/" | ":/*" | "*")
}

// ---------------------------------------------------------------------------------------
// Paths.

pub(super) fn target_kind(operand: &str) -> Target {
    let mut t = String::with_capacity(operand.len());
    for ch in operand.chars() {
        if !(ch == '/' && t.ends_with('/')) {
            t.push(ch);
        }
    }
    loop {
        if t.ends_with("/*") || t.ends_with("/.") {
            t.truncate(t.len() - 2);
        } else if t.len() > 1 && t.ends_with('/') {
            t.pop();
        } else {
            break;
        }
    }
    match t.as_str() {
        "" | "/" => Target::Root,
        "~" | "$HOME" | "${HOME}" => Target::Home,
        s if s.strip_prefix('/').is_some_and(|d| TOP_DIRS.contains(&d)) => Target::Root,
        _ => Target::Other,
    }
}

/// `/`, home, or a path inside a directory of the operating system (`/etc/...`).
fn is_system_path(operand: &str) -> bool {
    target_kind(operand) != Target::Other
        || operand
            .strip_prefix('/')
            .and_then(|rest| rest.split('/').next())
            .is_some_and(|first| SYSTEM_DIRS.contains(&first))
}

/// A raw disk device (whole disk or partition), not /dev/null, /dev/zero or a tty.
pub(super) fn is_disk(path: &str) -> bool {
    let Some(dev) = path.strip_prefix("/dev/") else {
        return false;
    };
    let digit_after = |prefix: &str| {
        dev.strip_prefix(prefix)
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    };
    ["sd", "hd", "vd", "xvd"].iter().any(|p| {
        dev.strip_prefix(p)
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_lowercase()))
    }) || ["nvme", "mmcblk", "disk", "rdisk", "md", "dm-"]
        .iter()
        .any(|p| digit_after(p))
        || dev.starts_with("disk/")
        || dev.starts_with("mapper/")
}

/// Under a directory that ordinary work does not write to (`/etc`, `/usr`, …).
fn is_write_protected(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    WRITE_PROTECTED.iter().any(|dir| {
        rest.strip_prefix(dir).is_some_and(|after| {
            !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

/// A shell startup file in a home directory (`~/.bashrc`, `$HOME/.zshrc`, `/root/.profile`).
fn is_shell_rc(path: &str) -> bool {
    let home_relative = ["~/", "$HOME/", "${HOME}/", "/root/"]
        .iter()
        .find_map(|home| path.strip_prefix(home))
        .or_else(|| {
            let user_and_rest = path.strip_prefix("/home/")?;
            let (user, rest) = user_and_rest.split_once('/')?;
            (!user.is_empty()).then_some(rest)
        });
    home_relative.is_some_and(|rest| SHELL_RC.contains(&rest))
}

/// Whether a chmod mode (`777`, `o+w`, `a=rwx,u+x`) lets everyone write.
pub(super) fn mode_is_world_writable(mode: &str) -> bool {
    if !mode.is_empty() && mode.chars().all(|ch| ('0'..='7').contains(&ch)) {
        return mode.len() <= 4 && mode.ends_with(['2', '3', '6', '7']);
    }
    mode.split(',').any(|clause| {
        let who_len = clause
            .find(|ch: char| !"ugoa".contains(ch))
            .unwrap_or(clause.len());
        let (who, ops) = clause.split_at(who_len);
        if !who.contains(['o', 'a']) {
            return false;
        }
        let mut granting = false;
        ops.chars().any(|ch| match ch {
            '+' | '=' => {
                granting = true;
                false
            }
            '-' => {
                granting = false;
                false
            }
            'w' => granting,
            _ => false,
        })
    })
}
