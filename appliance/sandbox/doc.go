// Package sandbox runs the shell commands of the exec tool and of cron
// command jobs confined, so that what a command can reach is decided by the
// kernel and not by what the command line says.
//
// # Concepts
//
// A Runner runs one command line at a time per call (calls may overlap) as
// /bin/sh -c in the workspace. Each command goes through a launcher: the
// perch binary re-executed with the hidden first argument LauncherArg, which
// cmd/perch hands to RunLauncher before anything else. The launcher has two
// stages, so the restrictions bind the command and nothing else:
//
//   - supervise: the gateway's child. A child subreaper that waits for the
//     command and then kills whatever it left running (background jobs,
//     setsid and double-forked daemons), and kills the whole tree on the
//     gateway's SIGTERM (timeout, cancellation) or death. It reports the
//     command's process group to the gateway.
//   - confine: joins the command's cgroups, reveals the workspace where the
//     command's user cannot reach it by path (reveal.go), sets
//     no_new_privs, applies the Landlock ruleset, drops every capability
//     and becomes tools.exec.user (root only, user.go), installs the
//     seccomp filter (seccomp.go), marks every inherited descriptor
//     close-on-exec, sets the resource limits and execs /bin/sh -c, all on
//     one locked thread.
//
// The ruleset grants the workspace read-write (device nodes excepted), the
// system directories (/usr, /bin, /sbin, /lib*, /etc, /proc, /sys)
// read-only, and /dev/null, /dev/zero, /dev/full, /dev/random and
// /dev/urandom; everything else is denied, including the config, the
// database, home directories, /var, /run and the shared /tmp. Landlock only
// allows, so /etc is granted entry by entry around the secrets that live
// there (/etc/perch, /etc/shadow, host and TLS private keys, Wi-Fi
// passwords) and around Options.Secrets. Landlock's ptrace rule keeps a
// command out of other processes' environ, mem and fd, the gateway's
// included; from ABI 6 it cannot signal them either, and below it the
// seccomp filter refuses signals to the supervisor and the gateway.
//
// A root gateway runs commands as tools.exec.user (nobody by default) and
// hands it the workspace, so file permissions keep commands out of root's
// files too. Each command gets a cgroup of its own where the gateway may
// make one (cgroup.go: a root gateway, or a subtree systemd delegated to
// its user), which the gateway kills as soon as the supervisor is gone;
// without one, the command's process group serves.
//
// The environment is built from an allow list (PATH, HOME = the workspace,
// LANG, TZ, TMPDIR = a private directory inside the workspace), never
// inherited. Limits cap CPU time, address space, data size, open files,
// file size and the number of tasks (RLIMIT_NPROC on top of what the user
// already runs, or the cgroup's pids.max). Output is kept head and tail
// within MaxOutput, however much a command prints.
//
// Before a line runs, CheckCommand applies the deny list (guard.go). It is
// a guard rail that names the rule it refuses by, not the boundary: the
// sandbox holds whatever gets past it.
//
// Where the kernel lacks Landlock, commands still run with the deny list,
// the limits, the clean environment and no_new_privs, and Status says
// "unavailable: …"; with RequireSandbox they are refused instead.
// SECURITY.md says what holds on which kernel and as which user.
package sandbox
