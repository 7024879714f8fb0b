//go:build !linux

package appliance

import "errors"

// diskSpace is Linux only: Perch's boards run Linux.
func diskSpace(string) (Disk, error) {
	return Disk{}, errors.New("disk space is reported on Linux only")
}
