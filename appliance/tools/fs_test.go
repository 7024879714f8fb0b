package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// fsFixture is a workspace with neighbours worth stealing:
//
//	base/
//	  outside/secret.txt        "TOPSECRET"
//	  outside/sub/
//	  ws-evil/                  shares the workspace's name as a prefix
//	  ws/                       the workspace
//	    inner.txt, sub/deep.txt
//	    link-in -> inner.txt            (relative, inside: allowed)
//	    link-out -> ../outside          (relative, leads out)
//	    link-abs -> base/outside/secret.txt
//	    dir-out -> ../outside/sub
//	    loop1 -> loop2, loop2 -> loop1
type fsFixture struct {
	base, ws, outside string
	reg               *Registry
}

const secret = "TOPSECRET"

func newFSFixture(t testing.TB, restrict bool) *fsFixture {
	t.Helper()
	base := t.TempDir()
	fx := &fsFixture{base: base, ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{"outside/sub", "ws-evil", "ws/sub"} {
		must(t, os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	for name, content := range map[string]string{
		"outside/secret.txt": secret,
		"ws-evil/x.txt":      secret,
		"ws/inner.txt":       "inner\n",
		"ws/sub/deep.txt":    "deep\n",
	} {
		must(t, os.WriteFile(filepath.Join(base, name), []byte(content), 0o644))
	}
	for link, target := range map[string]string{
		"link-in":  "inner.txt",
		"link-out": "../outside",
		"link-abs": filepath.Join(base, "outside", "secret.txt"),
		"dir-out":  "../outside/sub",
		"loop1":    "loop2",
		"loop2":    "loop1",
	} {
		must(t, os.Symlink(target, filepath.Join(fx.ws, link)))
	}
	fx.reg = registryOf(NewFS(FSOptions{Dir: fx.ws, Restrict: restrict})...)
	return fx
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// run calls a tool through the registry, as the agent does.
func (fx *fsFixture) run(t testing.TB, tool string, args map[string]any) Result {
	t.Helper()
	b, err := json.Marshal(args)
	must(t, err)
	return fx.reg.Execute(context.Background(), tool, string(b))
}

func (fx *fsFixture) read(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fx.ws, rel))
	must(t, err)
	return string(b)
}

func wantOK(t *testing.T, res Result) {
	t.Helper()
	if res.IsError() {
		t.Fatalf("unexpected error: %s", res.ForLLM)
	}
}

func wantErr(t *testing.T, res Result, substrs ...string) {
	t.Helper()
	if !res.IsError() {
		t.Fatalf("expected an error, got %q", res.ForLLM)
	}
	for _, s := range substrs {
		if !strings.Contains(res.ForLLM, s) {
			t.Errorf("error %q lacks %q", res.ForLLM, s)
		}
	}
}

// TestRestrictedWorkspaceRefusesEscapes: every way out (outside paths,
// traversal, symlinks) is
// refused with an error naming the path and the rule, by every tool.
func TestRestrictedWorkspaceRefusesEscapes(t *testing.T) {
	fx := newFSFixture(t, true)
	paths := []struct {
		path string
		how  string // extra words the error must carry
	}{
		{"../outside/secret.txt", ""},
		{"sub/../../outside/secret.txt", ""},
		{"..", ""},
		{"/etc/passwd", ""},
		{filepath.Join(fx.base, "outside", "secret.txt"), ""},
		{filepath.Join(fx.ws, "..", "outside", "secret.txt"), ""},
		{filepath.Join(fx.base, "ws-evil", "x.txt"), ""}, // a prefix match is not "inside"
		{"link-out/secret.txt", "symbolic link"},
		{"link-abs", "symbolic link"},
		{"dir-out/new.txt", "symbolic link"},
	}
	calls := []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{}},
		{"write_file", map[string]any{"content": "PWNED"}},
		{"edit_file", map[string]any{"old_text": secret, "new_text": "PWNED"}},
		{"append_file", map[string]any{"content": "PWNED"}},
		{"list_dir", map[string]any{}},
	}
	for _, c := range calls {
		for _, p := range paths {
			t.Run(c.tool+" "+p.path, func(t *testing.T) {
				args := map[string]any{"path": p.path}
				for k, v := range c.args {
					args[k] = v
				}
				res := fx.run(t, c.tool, args)
				wantErr(t, res, c.tool+": ", `"`+p.path+`"`, "outside the workspace", fx.ws, "restrict_to_workspace", p.how)
				if !errors.Is(res.Err, ErrOutsideWorkspace) {
					t.Errorf("error does not wrap ErrOutsideWorkspace: %v", res.Err)
				}
				if strings.Contains(res.ForLLM, secret) {
					t.Error("the secret leaked into the result")
				}
			})
		}
	}
	for _, f := range []string{"outside/secret.txt", "ws-evil/x.txt"} {
		if b, _ := os.ReadFile(filepath.Join(fx.base, f)); string(b) != secret {
			t.Errorf("%s was changed to %q", f, b)
		}
	}
	for _, f := range []string{"outside/sub/new.txt", "outside/new.txt"} {
		if _, err := os.Stat(filepath.Join(fx.base, f)); err == nil {
			t.Errorf("%s was created outside the workspace", f)
		}
	}
}

// TestRestrictedWorkspaceAcceptsInsidePaths: absolute paths into the
// workspace and links that stay inside are fine.
func TestRestrictedWorkspaceAcceptsInsidePaths(t *testing.T) {
	fx := newFSFixture(t, true)
	for _, p := range []string{"inner.txt", "./inner.txt", "sub/../inner.txt", filepath.Join(fx.ws, "inner.txt"), "link-in"} {
		t.Run(p, func(t *testing.T) {
			res := fx.run(t, "read_file", map[string]any{"path": p})
			wantOK(t, res)
			if res.ForLLM != "inner\n" {
				t.Errorf("read %q", res.ForLLM)
			}
		})
	}
	wantOK(t, fx.run(t, "write_file", map[string]any{"path": filepath.Join(fx.ws, "abs.txt"), "content": "x"}))
	if fx.read(t, "abs.txt") != "x" {
		t.Error("absolute write inside the workspace went elsewhere")
	}
	res := fx.run(t, "list_dir", map[string]any{"path": fx.ws})
	wantOK(t, res)
	if !strings.Contains(res.ForLLM, "FILE abs.txt (1 bytes)") {
		t.Errorf("list of absolute workspace path: %s", res.ForLLM)
	}
}

// TestWorkspaceThroughSymlinkedParent: the model may quote the workspace by
// its real path when the configured one goes through a symbolic link.
func TestWorkspaceThroughSymlinkedParent(t *testing.T) {
	real := t.TempDir()
	must(t, os.WriteFile(filepath.Join(real, "a.txt"), []byte("A"), 0o644))
	alias := filepath.Join(t.TempDir(), "alias")
	must(t, os.Symlink(real, alias))
	reg := registryOf(NewFS(FSOptions{Dir: alias, Restrict: true})...)
	for _, p := range []string{filepath.Join(alias, "a.txt"), filepath.Join(real, "a.txt")} {
		if res := reg.Execute(context.Background(), "read_file", `{"path":"`+p+`"}`); res.ForLLM != "A" {
			t.Errorf("read %s = %q", p, res.ForLLM)
		}
	}
}

func TestUnrestrictedResolvesAgainstWorkspace(t *testing.T) {
	fx := newFSFixture(t, false)
	res := fx.run(t, "read_file", map[string]any{"path": "inner.txt"})
	if res.ForLLM != "inner\n" {
		t.Errorf("relative read = %q", res.ForLLM)
	}
	for _, p := range []string{"../outside/secret.txt", filepath.Join(fx.outside, "secret.txt"), "link-out/secret.txt", "link-abs"} {
		if res := fx.run(t, "read_file", map[string]any{"path": p}); res.ForLLM != secret {
			t.Errorf("unrestricted read %s = %q", p, res.ForLLM)
		}
	}
	wantOK(t, fx.run(t, "write_file", map[string]any{"path": "../outside/new.txt", "content": "n"}))
	if b, _ := os.ReadFile(filepath.Join(fx.outside, "new.txt")); string(b) != "n" {
		t.Errorf("unrestricted write landed elsewhere: %q", b)
	}
}

func TestReadFile(t *testing.T) {
	fx := newFSFixture(t, true)
	must(t, os.WriteFile(filepath.Join(fx.ws, "empty.txt"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(fx.ws, "image.png"), []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), 0o644))
	must(t, os.WriteFile(filepath.Join(fx.ws, "latin1.txt"), []byte("caf\xe9\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(fx.ws, "utf8.txt"), []byte("caf\u00e9\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(fx.ws, "cp1252.txt"), []byte("\x93caf\xe9\x94 \xe0 la cr\xe8me\n"), 0o644))
	tests := []struct {
		name    string
		args    map[string]any
		want    string
		wantErr []string
	}{
		{"text", map[string]any{"path": "sub/deep.txt"}, "deep\n", nil},
		{"offset", map[string]any{"path": "inner.txt", "offset": 2}, "ner\n\n[end of file: bytes 2-6 of 6 shown]", nil},
		{"empty", map[string]any{"path": "empty.txt"}, "(empty.txt is empty)", nil},
		// The model is told, so it does not write the file back from
		// this text and lose its characters.
		{"invalid UTF-8 replaced and said", map[string]any{"path": "latin1.txt"}, "caf\uFFFD\n\n[not UTF-8: 1 \uFFFD stands for bytes in another encoding (Latin-1, Windows-1252?): do not write the file back from this text, which would lose those characters; convert it with exec, e.g. iconv -f latin1 -t utf-8]", nil},
		// Each run of such bytes is one U+FFFD, and counted so.
		{"runs counted as shown", map[string]any{"path": "cp1252.txt"}, "\uFFFDcaf\uFFFD \uFFFD la cr\uFFFDme\n\n[not UTF-8: 4 \uFFFD stand for bytes in another encoding (Latin-1, Windows-1252?): do not write the file back from this text, which would lose those characters; convert it with exec, e.g. iconv -f latin1 -t utf-8]", nil},
		// A read that starts inside a character is no other encoding.
		{"offset inside a character", map[string]any{"path": "utf8.txt", "offset": 4}, "\uFFFD\n\n[end of file: bytes 4-6 of 6 shown]", nil},
		{"missing", map[string]any{"path": "nope.txt"}, "", []string{`"nope.txt" does not exist; use list_dir to see what is there`}},
		{"directory", map[string]any{"path": "sub"}, "", []string{`"sub" is a directory`, "list_dir"}},
		{"binary", map[string]any{"path": "image.png"}, "", []string{`"image.png" is a binary file (image/png, 16 bytes)`}},
		{"offset past end", map[string]any{"path": "inner.txt", "offset": 6}, "", []string{"offset 6 is at or past the end", "(6 bytes)"}},
		{"negative offset", map[string]any{"path": "inner.txt", "offset": -1}, "", []string{`"offset" must be at least 0`}},
		{"empty path", map[string]any{"path": ""}, "", []string{"path is empty"}},
		{"NUL byte", map[string]any{"path": "inner.txt\x00.png"}, "", []string{"NUL byte"}},
		{"link loop", map[string]any{"path": "loop1"}, "", []string{"symbolic links"}},
		{"file as directory", map[string]any{"path": "inner.txt/x"}, "", []string{"not a directory"}},
		{"missing path argument", map[string]any{}, "", []string{`missing required argument "path"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := fx.run(t, "read_file", tt.args)
			if tt.wantErr != nil {
				wantErr(t, res, tt.wantErr...)
				return
			}
			wantOK(t, res)
			if res.ForLLM != tt.want {
				t.Errorf("got %q, want %q", res.ForLLM, tt.want)
			}
		})
	}
}

// TestReadFileInPartsReassembles: following the truncation notes' offsets
// reads the whole file, each part cut after a full line or character.
func TestReadFileInPartsReassembles(t *testing.T) {
	dir := t.TempDir()
	reg := registryOf(NewFS(FSOptions{Dir: dir, Restrict: true, MaxReadBytes: 100})...)
	var want strings.Builder
	for i := range 40 {
		want.WriteString(strings.Repeat("é€", i%7) + "line\n")
	}
	want.WriteString(strings.Repeat("ü", 300)) // a long last line: cut on runes
	must(t, os.WriteFile(filepath.Join(dir, "f.txt"), []byte(want.String()), 0o644))

	var got strings.Builder
	offset := int64(0)
	for range 100 {
		res := reg.Execute(context.Background(), "read_file", `{"path":"f.txt","offset":`+itoa(offset)+`}`)
		wantOK(t, res)
		text, note, found := strings.Cut(res.ForLLM, "\n[truncated: ")
		if !found {
			text, _, _ = strings.Cut(res.ForLLM, "\n[end of file: ")
			got.WriteString(text)
			break
		}
		if strings.ContainsRune(text, '\uFFFD') {
			t.Fatalf("part at %d split a character: %q", offset, text)
		}
		got.WriteString(text)
		var next int64
		i := strings.Index(note, "offset=")
		for _, c := range note[i+len("offset="):] {
			if c < '0' || c > '9' {
				break
			}
			next = next*10 + int64(c-'0')
		}
		if next <= offset {
			t.Fatalf("offset did not advance: %s", note)
		}
		offset = next
	}
	if got.String() != want.String() {
		t.Errorf("reassembled %d bytes, want %d", got.Len(), want.Len())
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestReadFileStreamsLargeFiles: a 2 GB (sparse) file is read in a cap's
// worth of memory, not slurped.
func TestReadFileStreamsLargeFiles(t *testing.T) {
	fx := newFSFixture(t, true)
	path := filepath.Join(fx.ws, "huge.log")
	f, err := os.Create(path)
	must(t, err)
	_, err = f.WriteString(strings.Repeat("log line of text\n", 8000))
	must(t, err)
	must(t, f.Truncate(2<<30))
	must(t, f.Close())

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := fx.run(t, "read_file", map[string]any{"path": "huge.log"})
	runtime.ReadMemStats(&after)
	wantOK(t, res)
	if !strings.Contains(res.ForLLM, "of 2147483648 shown; call read_file with offset=") {
		t.Errorf("no truncation note: %q", res.ForLLM[len(res.ForLLM)-120:])
	}
	if len(res.ForLLM) > MaxResultBytes {
		t.Errorf("result %d bytes exceeds MaxResultBytes", len(res.ForLLM))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("reading allocated %d bytes; it should stream", alloc)
	}
}

// TestReadFileRefusesFIFO: opening a FIFO for reading would block the turn
// until some writer appeared.
func TestReadFileRefusesFIFO(t *testing.T) {
	fx := newFSFixture(t, true)
	must(t, syscall.Mkfifo(filepath.Join(fx.ws, "pipe"), 0o644))
	wantErr(t, fx.run(t, "read_file", map[string]any{"path": "pipe"}), "not a regular file")
	wantErr(t, fx.run(t, "edit_file", map[string]any{"path": "pipe", "old_text": "a", "new_text": "b"}), "not a regular file")
	wantErr(t, fx.run(t, "write_file", map[string]any{"path": "pipe", "content": "x"}), "not a regular file")
}

func TestWriteFile(t *testing.T) {
	fx := newFSFixture(t, true)
	res := fx.run(t, "write_file", map[string]any{"path": "new/dirs/a.txt", "content": "héllo"})
	wantOK(t, res)
	if res.ForLLM != "wrote 6 bytes to new/dirs/a.txt" {
		t.Errorf("result %q", res.ForLLM)
	}
	if fx.read(t, "new/dirs/a.txt") != "héllo" {
		t.Error("content")
	}
	fi, err := os.Stat(filepath.Join(fx.ws, "new/dirs/a.txt"))
	must(t, err)
	if fi.Mode().Perm()&0o600 != 0o600 {
		t.Errorf("new file mode %v", fi.Mode())
	}

	wantOK(t, fx.run(t, "write_file", map[string]any{"path": "empty.txt", "content": ""}))
	if fx.read(t, "empty.txt") != "" {
		t.Error("empty content")
	}
	wantErr(t, fx.run(t, "write_file", map[string]any{"path": "sub", "content": "x"}), `"sub" is a directory`)
	wantErr(t, fx.run(t, "write_file", map[string]any{"path": ".", "content": "x"}), `"." is a directory`)
	wantErr(t, fx.run(t, "write_file", map[string]any{"path": "inner.txt/x", "content": "x"}), "not a directory")
	wantErr(t, fx.run(t, "write_file", map[string]any{"path": "a.txt"}), `missing required argument "content"`)
}

// TestWriteFileIsAtomic: the file is replaced by rename (a new inode), keeps
// its mode, and no temporary file is left, also when the write fails.
func TestWriteFileIsAtomic(t *testing.T) {
	fx := newFSFixture(t, true)
	target := filepath.Join(fx.ws, "conf.txt")
	must(t, os.WriteFile(target, []byte("old"), 0o600))
	must(t, os.Chmod(target, 0o640))
	before, err := os.Stat(target)
	must(t, err)
	// A reader holding the old file sees the old content whole.
	held, err := os.Open(target)
	must(t, err)
	defer held.Close()

	wantOK(t, fx.run(t, "write_file", map[string]any{"path": "conf.txt", "content": "new content"}))
	after, err := os.Stat(target)
	must(t, err)
	if os.SameFile(before, after) {
		t.Error("the file was rewritten in place, not replaced by rename")
	}
	if after.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640 kept", after.Mode().Perm())
	}
	if b := make([]byte, 10); true {
		n, _ := held.Read(b)
		if string(b[:n]) != "old" {
			t.Errorf("the old file changed under a reader: %q", b[:n])
		}
	}
	assertNoTempFiles(t, fx.ws)

	if os.Geteuid() != 0 { // root ignores directory permissions
		ro := filepath.Join(fx.ws, "ro")
		must(t, os.Mkdir(ro, 0o755))
		must(t, os.WriteFile(filepath.Join(ro, "f.txt"), []byte("keep"), 0o644))
		must(t, os.Chmod(ro, 0o555))
		t.Cleanup(func() { os.Chmod(ro, 0o755) })
		wantErr(t, fx.run(t, "write_file", map[string]any{"path": "ro/f.txt", "content": "lost"}), "permission denied")
		if fx.read(t, "ro/f.txt") != "keep" {
			t.Error("a failed write damaged the file")
		}
	}
	// A refused write leaves no temporary file either.
	must(t, os.Mkdir(filepath.Join(fx.ws, "dir.txt"), 0o755))
	wantErr(t, fx.run(t, "write_file", map[string]any{"path": "dir.txt", "content": "x"}), "is a directory")
	assertNoTempFiles(t, fx.ws)
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func TestEditFile(t *testing.T) {
	tests := []struct {
		name     string
		content  string
		old, new string
		want     string // file afterwards
		wantErr  []string
	}{
		{"single match", "a\nb\nc\n", "b\n", "B\n", "a\nB\nc\n", nil},
		{"delete", "keep drop keep", " drop", "", "keep keep", nil},
		{"multi-line", "func a() {\n\treturn 1\n}\n", "\treturn 1\n", "\treturn 2\n", "func a() {\n\treturn 2\n}\n", nil},
		{"no match", "abc", "x", "y", "abc", []string{"old_text was not found in f.txt (0 matches)", "exact text"}},
		{"two matches", "x x", "x", "y", "x x", []string{"old_text occurs 2 times in f.txt", "more surrounding text"}},
		{"five matches", "aaaaa", "a", "b", "aaaaa", []string{"occurs 5 times"}},
		{"CRLF hint", "a\r\nb\r\n", "a\nb", "c", "a\r\nb\r\n", []string{"Windows line endings"}},
		{"empty old_text", "abc", "", "y", "abc", []string{"old_text is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFSFixture(t, true)
			must(t, os.WriteFile(filepath.Join(fx.ws, "f.txt"), []byte(tt.content), 0o600))
			res := fx.run(t, "edit_file", map[string]any{"path": "f.txt", "old_text": tt.old, "new_text": tt.new})
			if tt.wantErr != nil {
				wantErr(t, res, tt.wantErr...)
			} else {
				wantOK(t, res)
				if !strings.HasPrefix(res.ForLLM, "edited f.txt: replaced 1 occurrence") {
					t.Errorf("result %q", res.ForLLM)
				}
			}
			if got := fx.read(t, "f.txt"); got != tt.want {
				t.Errorf("file = %q, want %q", got, tt.want)
			}
			fi, _ := os.Stat(filepath.Join(fx.ws, "f.txt"))
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("mode changed to %v", fi.Mode().Perm())
			}
			assertNoTempFiles(t, fx.ws)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		fx := newFSFixture(t, true)
		wantErr(t, fx.run(t, "edit_file", map[string]any{"path": "no.txt", "old_text": "a", "new_text": "b"}), `"no.txt" does not exist`)
	})
	t.Run("too large", func(t *testing.T) {
		dir := t.TempDir()
		reg := registryOf(NewFS(FSOptions{Dir: dir, Restrict: true, MaxEditBytes: 10})...)
		must(t, os.WriteFile(filepath.Join(dir, "big"), []byte(strings.Repeat("x", 11)), 0o644))
		wantErr(t, reg.Execute(context.Background(), "edit_file", `{"path":"big","old_text":"x","new_text":"y"}`), "11 bytes, more than edit_file loads (10)")
	})
}

func TestAppendFile(t *testing.T) {
	fx := newFSFixture(t, true)
	res := fx.run(t, "append_file", map[string]any{"path": "logs/day.md", "content": "one\n"})
	wantOK(t, res)
	if res.ForLLM != "appended 4 bytes to logs/day.md (now 4 bytes)" {
		t.Errorf("result %q", res.ForLLM)
	}
	wantOK(t, fx.run(t, "append_file", map[string]any{"path": "logs/day.md", "content": "two\n"}))
	if got := fx.read(t, "logs/day.md"); got != "one\ntwo\n" {
		t.Errorf("file = %q", got)
	}
	wantOK(t, fx.run(t, "append_file", map[string]any{"path": "link-in", "content": "more\n"}))
	if got := fx.read(t, "inner.txt"); got != "inner\nmore\n" {
		t.Errorf("append through an inside link: %q", got)
	}
	wantErr(t, fx.run(t, "append_file", map[string]any{"path": "sub", "content": "x"}), "sub")
}

func TestListDir(t *testing.T) {
	fx := newFSFixture(t, true)
	must(t, os.WriteFile(filepath.Join(fx.ws, "big.bin"), make([]byte, 20<<10), 0o644))
	must(t, os.Symlink("nowhere", filepath.Join(fx.ws, "broken")))
	must(t, os.Mkdir(filepath.Join(fx.ws, "empty"), 0o755))
	// A pipe read as a file of 0 bytes sent the model to read it.
	must(t, syscall.Mkfifo(filepath.Join(fx.ws, "fifo"), 0o600))
	res := fx.run(t, "list_dir", map[string]any{"path": "."})
	wantOK(t, res)
	want := strings.Join([]string{
		"FILE big.bin (20.0 KiB)",
		"LINK broken (broken link)",
		"LINK dir-out (points outside the workspace; not usable)",
		"DIR empty",
		"OTHER fifo (named pipe, not readable as a file)",
		"FILE inner.txt (6 bytes)",
		"LINK link-abs (points outside the workspace; not usable)",
		"FILE link-in (6 bytes)",
		"LINK link-out (points outside the workspace; not usable)",
		"LINK loop1 (points outside the workspace; not usable)",
		"LINK loop2 (points outside the workspace; not usable)",
		"DIR sub",
	}, "\n")
	if res.ForLLM != want {
		t.Errorf("list_dir .:\n%s\nwant:\n%s", res.ForLLM, want)
	}
	if res := fx.run(t, "list_dir", map[string]any{"path": "sub"}); res.ForLLM != "FILE deep.txt (5 bytes)" {
		t.Errorf("list_dir sub = %q", res.ForLLM)
	}
	if res := fx.run(t, "list_dir", map[string]any{"path": "empty"}); res.ForLLM != "(empty is an empty directory)" {
		t.Errorf("list_dir empty = %q", res.ForLLM)
	}
	if res := fx.run(t, "list_dir", map[string]any{"path": ""}); !strings.Contains(res.ForLLM, "DIR sub") {
		t.Errorf("list_dir \"\" should list the workspace: %q", res.ForLLM)
	}
	wantErr(t, fx.run(t, "list_dir", map[string]any{"path": "inner.txt"}), "is a file, not a directory", "read_file")
	wantErr(t, fx.run(t, "list_dir", map[string]any{"path": "nope"}), `"nope" does not exist`)
}

func TestListDirCapsEntries(t *testing.T) {
	dir := t.TempDir()
	for i := range 30 {
		must(t, os.WriteFile(filepath.Join(dir, "f"+itoa(int64(100+i))), nil, 0o644))
	}
	reg := registryOf(NewFS(FSOptions{Dir: dir, Restrict: true, MaxListEntries: 10})...)
	res := reg.Execute(context.Background(), "list_dir", `{"path":"."}`)
	lines := strings.Split(res.ForLLM, "\n")
	if len(lines) != 11 || !strings.Contains(lines[10], "listing stopped after 10 entries") {
		t.Errorf("capped listing:\n%s", res.ForLLM)
	}
}

// TestMissingWorkspaceIsCreated: a fresh install writes its first file
// before anything made the workspace.
func TestMissingWorkspaceIsCreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	reg := registryOf(NewFS(FSOptions{Dir: dir, Restrict: true})...)
	wantOK(t, reg.Execute(context.Background(), "write_file", `{"path":"a.txt","content":"x"}`))
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "x" {
		t.Errorf("file = %q", b)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 bytes", 10239: "10239 bytes", 10240: "10.0 KiB", 5 << 20: "5120.0 KiB", 10 << 20: "10.0 MiB", 20 << 30: "20.0 GiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
