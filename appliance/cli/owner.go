package cli

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// actAsHomeOwner makes a root process the user who owns dir, the home it
// is about to use, when that is not root: the perch user of a package
// install. Files a command creates there (the database and its journal, a
// salvaged copy, a skill) would otherwise be root's, and the service, which
// is not root, could then not open them and would fail at every start. It
// returns the user's name when it changed user.
func actAsHomeOwner(dir string) (string, error) {
	if os.Geteuid() != 0 {
		return "", nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", nil // a home yet to be made is made by root for root
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || sys.Uid == 0 {
		return "", nil
	}
	uid, gid := int(sys.Uid), int(sys.Gid)
	name := strconv.Itoa(uid)
	groups := []int{gid}
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
		if g, err := strconv.Atoi(u.Gid); err == nil {
			gid = g
		}
		if ids, err := u.GroupIds(); err == nil {
			groups = groups[:0]
			for _, id := range ids {
				if g, err := strconv.Atoi(id); err == nil {
					groups = append(groups, g)
				}
			}
		}
	}
	// Groups and group first: once the user id is no longer root, neither
	// may be changed.
	err = syscall.Setgroups(groups)
	if err == nil {
		err = syscall.Setgid(gid)
	}
	if err == nil {
		err = syscall.Setuid(uid)
	}
	if err != nil {
		return "", fmt.Errorf("%s belongs to %s, and root cannot act as that user here (%v); files made as root there would lock the service out: run the command as %s (sudo -u %s perch …)", dir, name, err, name, name)
	}
	return name, nil
}
