package tools

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// A root gateway runs commands as another user, who owns the workspace
// (tools.exec.user). What the file tools create there takes the owner of
// the directory it is created in, and a file they replace keeps its owner,
// so commands can go on changing what the agent wrote. Gateways that are
// not root create as themselves, which is the owner already.

// ownerOf returns fi's owner.
func ownerOf(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// adopt gives f, just created, the owner of like (the file it replaces, or
// the directory it is created in).
func adopt(f *os.File, like fs.FileInfo) error {
	if os.Geteuid() != 0 || like == nil {
		return nil
	}
	uid, gid, ok := ownerOf(like)
	if !ok || (uid == 0 && gid == 0) {
		return nil
	}
	return f.Chown(uid, gid)
}

// missingDirs lists the directories above name that do not exist yet,
// outermost first, for adoptDirs once they are made.
func missingDirs(fsys files, name string) []string {
	if os.Geteuid() != 0 {
		return nil
	}
	var out []string
	for d := filepath.Dir(name); d != "." && d != "/"; d = filepath.Dir(d) {
		if _, err := fsys.Lstat(d); err == nil {
			break
		}
		out = append([]string{d}, out...)
	}
	return out
}

// adoptDirs gives each directory made the owner of its parent (Lchown: a
// link swapped in meanwhile changes owner itself, and nothing it points
// to).
func adoptDirs(fsys files, dirs []string) error {
	for _, d := range dirs {
		parent, err := fsys.Stat(filepath.Dir(d))
		if err != nil {
			return err
		}
		uid, gid, ok := ownerOf(parent)
		if !ok || (uid == 0 && gid == 0) {
			continue
		}
		if err := fsys.Lchown(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}
