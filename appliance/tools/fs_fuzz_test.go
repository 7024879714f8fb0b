package tools

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolveStaysInWorkspace feeds path strings to path resolution and to
// every file tool of a restricted workspace, and checks that nothing outside
// the workspace is ever read, created or changed. "{ws}" and "{base}" in an
// input stand for the workspace and its parent, so absolute paths can aim at
// the real neighbours.
func FuzzResolveStaysInWorkspace(f *testing.F) {
	for _, seed := range []string{
		"../outside/secret.txt",
		`..\outside\secret.txt`,
		`..\\..\\outside`,
		"/etc/passwd",
		"/",
		"a/../../b",
		"a/../../outside/secret.txt",
		"sub/../../outside/secret.txt",
		"./../outside",
		"..",
		"...",
		".",
		"",
		"~/secret.txt",
		"inner.txt\x00../../outside/secret.txt",
		"\x00",
		"link-out/secret.txt",
		"link-out/../inner.txt",
		"link-abs",
		"dir-out/new.txt",
		"dir-out/../secret.txt",
		"loop1",
		"loop1/x",
		"link-in",
		"{base}/outside/secret.txt",
		"{ws}/../outside/secret.txt",
		"{ws}/./../outside",
		"{ws}-evil/x.txt",
		"{ws}/inner.txt",
		"{ws}/link-out/secret.txt",
		"{base}/ws/../outside/new.txt",
		"//{base}//outside//secret.txt",
		strings.Repeat("a/", 2100) + "x",
		strings.Repeat("../", 64) + "etc/passwd",
		strings.Repeat("x", 300),
		"sub/" + strings.Repeat("./", 500) + "../../outside/secret.txt",
	} {
		f.Add(seed)
	}
	fx := newFSFixture(f, true)
	before := snapshotOutside(f, fx)
	w := &workspace{dir: fx.ws, opts: FSOptions{Dir: fx.ws, Restrict: true}}
	expand := strings.NewReplacer("{ws}", fx.ws, "{base}", fx.base)

	f.Fuzz(func(t *testing.T, p string) {
		p = expand.Replace(p)
		if name, err := w.resolve(p); err == nil && !filepath.IsLocal(name) {
			t.Fatalf("resolve(%q) = %q: not a path inside the root", p, name)
		}
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"read_file", map[string]any{"path": p}},
			{"list_dir", map[string]any{"path": p}},
			{"edit_file", map[string]any{"path": p, "old_text": secret, "new_text": "PWNED"}},
			{"append_file", map[string]any{"path": p, "content": "FUZZ"}},
			{"write_file", map[string]any{"path": p, "content": "FUZZ"}},
		} {
			res := fx.run(t, c.tool, c.args)
			if strings.Contains(res.ForLLM, secret) {
				t.Fatalf("%s(%q) showed a file outside the workspace: %q", c.tool, p, res.ForLLM)
			}
		}
		if after := snapshotOutside(t, fx); after != before {
			t.Fatalf("path %q changed something outside the workspace:\nbefore:\n%s\nafter:\n%s", p, before, after)
		}
	})
}

// snapshotOutside describes every file under the fixture's base except the
// workspace: names, kinds, sizes, modification times and contents.
func snapshotOutside(t testing.TB, fx *fsFixture) string {
	t.Helper()
	var sb strings.Builder
	err := filepath.WalkDir(fx.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == fx.ws {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		sb.WriteString(p + " " + fi.Mode().String() + " " + fi.ModTime().String())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sb.WriteString(" " + string(b))
		}
		sb.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}
