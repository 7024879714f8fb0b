// Package systemdtest gives tests a systemd that speaks the real protocols
// over loopback: a private dbus-daemon with a fake org.freedesktop.systemd1
// on it, a notify socket that receives what sd_notify sends, and journal
// files (committed, built by systemd-journal-remote from export text). Code under test reaches them the way
// it reaches the real thing (a D-Bus address, NOTIFY_SOCKET, journalctl
// --directory), so nothing in production code knows it is tested.
//
// # Concepts
//
// The external programs (dbus-daemon, journalctl) come from the Debian
// packages dbus and systemd (.ci/deps installs them).
// Need skips a test when one is missing on a developer machine, and fails it
// under CI=true, where a skipped check is a check that did not run.
package systemdtest
