// Package firstboot configures a Perch board from files on its FAT boot
// partition, so it can be set up without a keyboard or screen.
//
// # Concepts
//
// Seeds are the settings files a person (or Raspberry Pi Imager) puts on the
// boot partition: Perch's own perch-setup.json, and the cloud-init files
// user-data and network-config that Imager's "OS customisation" writes.
// There is no cloud-init on the board: this package reads the part of those
// files that matters (host name, time zone, accounts and SSH keys, Wi-Fi
// networks and country) with a small reader of the YAML subset Imager
// produces, and reports the rest as not applied (packages, scripts,
// passwords: no account has a password).
//
// Run reads every seed before applying any, so a file with a mistake
// changes nothing and stays on the partition for its owner to fix; the
// reason is kept for the console. Applied seeds go to the system's own files
// (hostname, hosts, localtime, wpa_supplicant, authorized_keys) and to
// Perch's config through appliance/config, which validates them; then they
// are removed from the partition, which anyone who pulls the card can read.
//
// The first boot also creates the config with an API token of the board's
// own (no two boards flashed from one image share one); the console banner
// shows it, with the gateway's one-time setup code, since the console is
// then the only place to read them. A second boot with no seeds changes
// nothing.
//
// SSH is on exactly when a key was given: the image ships Debian's
// /etc/ssh/sshd_not_to_be_run and first boot removes it, after making the
// host keys on the board.
package firstboot
