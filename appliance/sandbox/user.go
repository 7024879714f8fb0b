package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// A gateway run as root runs commands as an unprivileged user
// (tools.exec.user, nobody by default), so that file permissions keep them
// out of root's files as well as the ruleset does: Landlock can only allow
// whole directories, and /etc holds root-only files no deny list can name
// in advance (a VPN's private key, a service's token). The user gets the
// workspace: the gateway hands it over at start, each command's temp dir is
// made for it, and where the user cannot reach the workspace by its path
// (under /root, or a 0700 $PERCH_HOME), the command's mount namespace
// reveals it (reveal.go).

// DefaultExecUser is who a root gateway's commands run as.
const DefaultExecUser = "nobody"

// execUser is who commands run as.
type execUser struct {
	name   string
	uid    int
	gid    int
	groups []int // supplementary groups, as the system lists them for name
}

// lookupExecUser resolves tools.exec.user: a user name, or a numeric uid
// (which need not have a passwd entry; its group is then the same number).
func lookupExecUser(name string) (*execUser, error) {
	if name == "" {
		name = DefaultExecUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		n, numErr := strconv.Atoi(name)
		if numErr != nil || n < 0 {
			return nil, fmt.Errorf("sandbox: tools.exec.user %q: no such user on this system (%v); create it (adduser --system --no-create-home %s) or set tools.exec.user to an existing unprivileged user such as nobody", name, err, name)
		}
		if u, err = user.LookupId(name); err != nil {
			return &execUser{name: name, uid: n, gid: n}, nil
		}
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("sandbox: tools.exec.user %q: unusable ids %s:%s", name, u.Uid, u.Gid)
	}
	eu := &execUser{name: u.Username, uid: uid, gid: gid}
	ids, _ := u.GroupIds()
	for _, s := range ids {
		if g, err := strconv.Atoi(s); err == nil && g != gid {
			eu.groups = append(eu.groups, g)
		}
	}
	return eu, nil
}

// canSearch reports whether u may pass through a directory with st's
// owner and mode (ACLs aside: a grant they add only makes the reveal
// unneeded, never wrong).
func (u *execUser) canSearch(st *syscall.Stat_t) bool {
	switch {
	case int(st.Uid) == u.uid:
		return st.Mode&0o100 != 0
	case int(st.Gid) == u.gid || slices.Contains(u.groups, int(st.Gid)):
		return st.Mode&0o010 != 0
	}
	return st.Mode&0o001 != 0
}

// hiddenAncestor returns the highest directory above ws that u cannot pass
// through, or "" when u reaches ws by its path.
func hiddenAncestor(ws string, u *execUser) (string, error) {
	p := "/"
	for _, elem := range append([]string{""}, splitPath(filepath.Dir(ws))...) {
		p = filepath.Join(p, elem)
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return "", fmt.Errorf("sandbox: %s: %w", p, err)
		}
		if !u.canSearch(&st) {
			if p == "/" {
				return "", fmt.Errorf("sandbox: user %s cannot enter / (mode %o)", u.name, st.Mode&0o777)
			}
			return p, nil
		}
	}
	return "", nil
}

// handOver gives the workspace to u when its root directory is not u's
// yet: on the first start with an exec user, after tools.exec.user changed,
// or when an older Perch ran commands as root. Directories, regular files
// and symbolic links (the link itself) change owner; a file with more than
// one name is left alone, since another name may be outside the workspace,
// and so is anything on another file system mounted inside it. The root
// directory goes last, so an interrupted hand-over is resumed at the next
// start.
func handOver(ws string, u *execUser, log *slog.Logger) error {
	var root syscall.Stat_t
	if err := syscall.Lstat(ws, &root); err != nil {
		return fmt.Errorf("sandbox: workspace %s: %w", ws, err)
	}
	if int(root.Uid) == u.uid && int(root.Gid) == u.gid {
		return nil
	}
	changed := 0
	err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished or unreadable: keep going
		}
		if p == ws {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return nil
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR, syscall.S_IFLNK:
		case syscall.S_IFREG:
			if st.Nlink > 1 {
				return nil
			}
		default:
			return nil // devices, sockets, FIFOs
		}
		if int(st.Uid) != u.uid || int(st.Gid) != u.gid {
			if err := os.Lchown(p, u.uid, u.gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("sandbox: handing %s to user %s: %w", p, u.name, err)
			}
			changed++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.Lchown(ws, u.uid, u.gid); err != nil {
		return fmt.Errorf("sandbox: handing the workspace %s to user %s (tools.exec.user): %w", ws, u.name, err)
	}
	log.Info("sandbox: the workspace now belongs to the user commands run as", "workspace", ws, "user", u.name, "entries", changed+1)
	return nil
}

// checkHidden refuses a hidden ancestor that also holds what commands
// need: covering it would hide that too.
func checkHidden(hide string) error {
	for _, p := range append(slices.Clone(readOnlyRoots), "/dev") {
		if strings.HasPrefix(p+"/", hide+"/") {
			return fmt.Errorf("sandbox: the workspace lies under %s, which commands' user cannot enter and which holds %s; move the workspace (agents.defaults.workspace)", hide, p)
		}
	}
	return nil
}
