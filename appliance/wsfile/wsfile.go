// Package wsfile reads the workspace files the gateway itself takes in (the
// prompt's AGENT.md, IDENTITY.md, USER.md and memory, skills' SKILL.md,
// HEARTBEAT.md). The agent's commands write in the workspace, so each of
// those names may be whatever a command made it: a symbolic link to the
// config file (whose keys would reach the model), a FIFO (which would block
// the read, and every turn waiting for the prompt, for good), a device, or
// a file of gigabytes. Read confines the read to the workspace and to a
// bounded regular file.
package wsfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is returned for a name that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// Read returns up to max bytes of the regular file name (slash-separated,
// relative to dir), and whether it was longer. Symbolic links are followed
// only while they stay inside dir (os.Root); a link that leads out of it,
// ".." or an absolute name is an error, as is anything but a regular file.
func Read(dir, name string, max int64) (data []byte, truncated bool, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, false, err
	}
	defer root.Close()
	// O_NONBLOCK: opening a FIFO for reading waits for a writer without
	// it; a regular file ignores it.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, false, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, fi.Mode().Type())}
	}
	data, err = io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > max {
		return data[:max], true, nil
	}
	return data, false, nil
}
