// Package systemd is Perch's side of systemd: readiness and watchdog
// notifications, the unit's status for GET /admin/service, its journal for
// GET /admin/logs, and the unit file itself (perch.service, with its
// sysusers.d and tmpfiles.d companions), embedded for packaging.
//
// # Concepts
//
// systemd degrades to a no-op off systemd. Ready, Stopping, Status and the
// Watchdog do nothing (and return no error) when NOTIFY_SOCKET or
// WATCHDOG_USEC is unset, so `perch gateway` behaves the same on a laptop,
// in a container and under `make run`. UnitStatus and Logs cannot pretend:
// off systemd they return an error wrapping ErrNoSystemd (or ErrJournal)
// that says the gateway must run under systemd for them.
//
// Notifications. Type=notify makes `systemctl start perch` wait for READY=1,
// which the gateway sends once its HTTP listener is up; STOPPING=1 marks
// the start of shutdown. The Watchdog answers WatchdogSec= by pinging at
// half the interval while a health function says the gateway works; when it
// stops saying so, the pings stop and systemd restarts the service.
//
// Status over D-Bus. A Client asks org.freedesktop.systemd1 on the system
// bus (or any D-Bus address) for the unit's properties and lays them out
// like `systemctl status --no-pager`, without running systemctl.
//
// Logs with journalctl. Journal runs `journalctl --unit=U --lines=N
// --no-pager --output=short-iso` with a timeout and keeps at most MaxBytes of
// output (the newest). A Directory or Files option reads journal files
// instead of the system journal. The cgo journal reader (sdjournal) is not
// used: the default build has no cgo, and journalctl's text is what
// operators read anyway.
//
// The unit file. perch.service runs the gateway as the unprivileged user
// perch with a strict sandbox, leaving open what hardware tools and the
// exec tool need (device nodes, /sys, Landlock system calls); its comments
// give the reason for each choice, and its tests hold the choices and the
// `systemd-analyze security` score.
//
// Tests reach a real dbus-daemon, notify socket and journalctl through the
// systemdtest package; nothing here knows it is tested.
package systemd
