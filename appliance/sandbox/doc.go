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
//     gateway's SIGTERM (timeout, cancellation) or death.
//   - confine: joins a pids cgroup (root only), sets no_new_privs, applies
//     the Landlock ruleset, drops every capability (root only), sets the
//     resource limits and execs /bin/sh -c, all on one locked thread.
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
// included; from ABI 6 it cannot signal them either.
//
// The environment is built from an allow list (PATH, HOME = the workspace,
// LANG, TZ, TMPDIR = a private directory inside the workspace), never
// inherited. Limits cap CPU time, address space, data size, open files,
// file size and the number of tasks (RLIMIT_NPROC on top of what the user
// already runs; a pids cgroup for root, which the kernel exempts from
// RLIMIT_NPROC). Output is kept head and tail within MaxOutput, however
// much a command prints.
//
// Before a line runs, CheckCommand applies the deny list of spec §8. It is
// a guard rail that names the rule it refuses by, not the boundary: the
// sandbox holds whatever gets past it.
//
// Where the kernel lacks Landlock, commands still run with the deny list,
// the limits, the clean environment and no_new_privs, and Status says
// "unavailable: …"; with RequireSandbox they are refused instead.
// README.md ("Security model") describes the model for users.
package sandbox
