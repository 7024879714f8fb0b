package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// tempRoot holds the commands' private temp dirs, inside the workspace so
// the workspace rule covers them and the shared /tmp stays out of reach.
const tempRoot = ".tmp"

// makeTemp creates a private temp dir for command n and returns its path
// relative to the workspace. It goes through os.Root, so whatever a command
// left at .tmp cannot make the gateway create or, later, delete outside the
// workspace; and it puts a directory back when a command replaced .tmp by a
// link or a file, so no command can disable the ones after it.
func (r *Runner) makeTemp(n uint64) (string, error) {
	root, err := os.OpenRoot(r.ws)
	if err != nil {
		return "", fmt.Errorf("sandbox: opening the workspace: %w", err)
	}
	defer root.Close()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	rel := filepath.Join(tempRoot, fmt.Sprintf("exec-%d-%s", n, hex.EncodeToString(rnd[:])))
	// A concurrent command may swap .tmp between the repair and the
	// mkdir; os.Root then refuses (a link out) and the next round repairs
	// again.
	for attempt := 0; ; attempt++ {
		if err = repairTempRoot(root); err == nil {
			if err = root.Mkdir(rel, 0o700); err == nil {
				if err = r.giveToUser(root, rel); err == nil {
					return rel, nil
				}
			}
		}
		if attempt == 2 {
			return "", fmt.Errorf("sandbox: creating the command's temp dir %s in the workspace: %w", rel, err)
		}
	}
}

// giveToUser makes .tmp and the temp dir rel the command user's, when
// that is not the gateway's. Lchown: a link a concurrent command put at
// .tmp changes owner itself, and nothing it points to.
func (r *Runner) giveToUser(root *os.Root, rel string) error {
	if r.user == nil {
		return nil
	}
	for _, p := range []string{tempRoot, rel} {
		if err := root.Lchown(p, r.user.uid, r.user.gid); err != nil {
			return err
		}
	}
	return nil
}

// repairTempRoot makes .tmp a directory: created when missing, and when a
// command replaced it by a symbolic link, a file or anything else, that
// entry itself is removed (never what a link points to) and a directory
// made in its place.
func repairTempRoot(root *os.Root) error {
	fi, err := root.Lstat(tempRoot)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		if err := root.Remove(tempRoot); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the %s left at %s: %w", fi.Mode().Type(), tempRoot, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := root.Mkdir(tempRoot, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// staleTempAge is when a temp dir left by a crashed gateway is removed. It
// is long because gateways may share a workspace and one's running command
// must keep its dir.
const staleTempAge = 24 * time.Hour

// removeStaleTemps removes the temp dirs crashed gateways left. A .tmp that
// is not a directory is left to makeTemp: a link is never listed, so the
// gateway never looks at, let alone removes, what lies at its target.
func (r *Runner) removeStaleTemps() {
	root, err := os.OpenRoot(r.ws)
	if err != nil {
		return
	}
	defer root.Close()
	if fi, err := root.Lstat(tempRoot); err != nil || !fi.IsDir() {
		return
	}
	d, err := root.Open(tempRoot)
	if err != nil {
		return
	}
	entries, _ := d.ReadDir(-1)
	d.Close()
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), "exec-") && time.Since(fi.ModTime()) > staleTempAge {
			r.removeTemp(filepath.Join(tempRoot, e.Name()))
		}
	}
}

// removeTemp removes a command's temp dir. When .tmp is no longer a
// directory, the dir went with whatever the command did to it.
func (r *Runner) removeTemp(rel string) {
	root, err := os.OpenRoot(r.ws)
	if err != nil {
		return
	}
	defer root.Close()
	if fi, err := root.Lstat(tempRoot); err != nil || !fi.IsDir() {
		return
	}
	if err := root.RemoveAll(rel); err != nil {
		r.log.Debug("sandbox: temp dir left behind", "dir", rel, "err", err)
	}
}
