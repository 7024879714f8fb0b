package store

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// lockFile opens path and takes the lock bbolt itself uses (flock on the
// file): exclusive for a writer (creating the file when absent), shared for
// a reader, waiting up to timeout. The store checks a file before bbolt sees
// it, so the lock must be held from the first byte read: a check reading a
// file that another process is committing to would see damage that is not
// there. bbolt then opens the same descriptor (reuseFile), and flock on a
// descriptor that already holds the lock succeeds at once.
//
// After waiting, the name may point to another file than the one locked (the
// previous holder set a damaged file aside or swapped in a compacted copy):
// the lock is then dropped and taken again on the file the name points to.
func lockFile(path string, write bool, timeout time.Duration, holder func() string) (*os.File, error) {
	flag, how := os.O_RDONLY, syscall.LOCK_SH
	if write {
		flag, how = os.O_RDWR|os.O_CREATE, syscall.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for {
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
		for {
			err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
			if err == nil {
				break
			}
			if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
				f.Close()
				return nil, fmt.Errorf("store: lock %s: %w", path, err)
			}
			if time.Now().After(deadline) {
				f.Close()
				return nil, lockedError(path, write, holder)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if samePath(f, path) {
			return f, nil
		}
		f.Close()
	}
}

func lockedError(path string, write bool, holder func() string) error {
	who := "another perch process"
	if holder != nil {
		if h := holder(); h != "" {
			who += " (" + h + ")"
		}
	}
	fix := "stop it first, or use the CLI while it runs (it talks to the gateway's API)"
	if !write {
		fix = "stop the gateway first (systemctl stop perch)"
	}
	return fmt.Errorf("%w by %s: %s; %s", ErrLocked, who, path, fix)
}

// samePath reports whether path still names the file f has open.
func samePath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	if err != nil {
		return false
	}
	return os.SameFile(a, b)
}

// reuseFile hands bbolt a descriptor the store opened and locked. bbolt
// opens the file again only to copy it out (Tx.WriteTo); that gets a fresh
// descriptor.
func reuseFile(f *os.File) func(string, int, os.FileMode) (*os.File, error) {
	var used atomic.Bool
	return func(name string, flag int, mode os.FileMode) (*os.File, error) {
		if used.CompareAndSwap(false, true) {
			return f, nil
		}
		return os.OpenFile(name, flag, mode)
	}
}

// syncDir makes a rename or a new name in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
