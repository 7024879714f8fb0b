package tools

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func uidOf(t *testing.T, p string) int {
	t.Helper()
	var st syscall.Stat_t
	must(t, syscall.Lstat(p, &st))
	return int(st.Uid)
}

// TestFileToolsKeepTheWorkspaceOwner: under a root gateway the workspace
// belongs to the user commands run as (tools.exec.user), so what the file
// tools create there is that user's too, and a file they replace keeps its
// owner: commands can go on changing what the agent wrote. As another user
// the tools write as that user and change no owner.
func TestFileToolsKeepTheWorkspaceOwner(t *testing.T) {
	for _, restrict := range []bool{true, false} {
		fx := newFSFixture(t, restrict)
		owner := os.Geteuid()
		if owner == 0 {
			owner = 65534 // nobody, as the sandbox hands it the workspace
			must(t, os.Chown(fx.ws, owner, owner))
			must(t, os.Chown(filepath.Join(fx.ws, "inner.txt"), owner, owner))
		}
		wantOK(t, fx.run(t, "write_file", map[string]any{"path": "new/dir/a.txt", "content": "a"}))
		wantOK(t, fx.run(t, "append_file", map[string]any{"path": "new/b.txt", "content": "b"}))
		wantOK(t, fx.run(t, "write_file", map[string]any{"path": "inner.txt", "content": "replaced"}))
		wantOK(t, fx.run(t, "edit_file", map[string]any{"path": "inner.txt", "old_text": "replaced", "new_text": "edited"}))
		for _, rel := range []string{"new", "new/dir", "new/dir/a.txt", "new/b.txt", "inner.txt"} {
			if uid := uidOf(t, filepath.Join(fx.ws, rel)); uid != owner {
				t.Errorf("restrict=%v: %s belongs to uid %d, want %d", restrict, rel, uid, owner)
			}
		}
		// A file someone else owns in the workspace stays theirs.
		if os.Geteuid() == 0 {
			other := filepath.Join(fx.ws, "sub", "deep.txt") // root's
			wantOK(t, fx.run(t, "write_file", map[string]any{"path": "sub/deep.txt", "content": "x"}))
			if uid := uidOf(t, other); uid != 0 {
				t.Errorf("restrict=%v: root's file went to uid %d", restrict, uid)
			}
		}
	}
}
