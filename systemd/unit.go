package systemd

import _ "embed"

// The installed files, embedded so packaging (and `perch` itself, should it
// ever print them) takes them from this source, never from a copy.
var (
	//go:embed perch.service
	unitFile string
	//go:embed perch.sysusers
	sysusersFile string
	//go:embed perch.tmpfiles
	tmpfilesFile string
)

// UnitFile is perch.service, to be installed as
// /usr/lib/systemd/system/perch.service (UnitName).
func UnitFile() string { return unitFile }

// SysusersFile is the sysusers.d entry creating the perch user, to be
// installed as /usr/lib/sysusers.d/perch.conf.
func SysusersFile() string { return sysusersFile }

// TmpfilesFile is the tmpfiles.d entry creating /etc/perch for the user, to
// be installed as /usr/lib/tmpfiles.d/perch.conf.
func TmpfilesFile() string { return tmpfilesFile }

// OptionalGroups returns the hardware groups of Raspberry Pi OS that plain
// Debian lacks. The unit cannot name them in SupplementaryGroups= (a missing
// group fails the start with 216/GROUP), so postinst adds the perch user to
// each one that exists:
//
//	for g in i2c spi gpio; do getent group $g >/dev/null && adduser --quiet perch $g; done
func OptionalGroups() []string { return []string{"i2c", "spi", "gpio"} }
