package tools

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"
)

// FSOptions configures the file tools.
type FSOptions struct {
	// Dir is the workspace; relative paths resolve against it. It is created
	// on first use when missing.
	Dir string
	// Restrict confines every access to Dir (config
	// agents.defaults.restrict_to_workspace, on by default): "..", absolute
	// paths elsewhere and symbolic links that lead out are refused.
	Restrict bool
	// MaxReadBytes caps what one read_file call returns (default 60 KiB, so
	// the text and its note fit in MaxResultBytes).
	MaxReadBytes int
	// MaxEditBytes caps the size of a file edit_file will load into memory
	// (default 8 MiB).
	MaxEditBytes int64
	// MaxListEntries caps the lines of one list_dir (default 1000).
	MaxListEntries int
}

// ErrOutsideWorkspace is wrapped by the errors of file tools that refuse a
// path leading out of a restricted workspace.
var ErrOutsideWorkspace = errors.New("outside the workspace")

// NewFS returns the file tools read_file, write_file, edit_file, append_file
// and list_dir over the workspace opts.Dir.
func NewFS(opts FSOptions) []Tool {
	if opts.MaxReadBytes <= 0 {
		opts.MaxReadBytes = 60 << 10
	}
	if opts.MaxEditBytes <= 0 {
		opts.MaxEditBytes = 8 << 20
	}
	if opts.MaxListEntries <= 0 {
		opts.MaxListEntries = 1000
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		dir = filepath.Clean(opts.Dir)
	}
	w := &workspace{dir: dir, opts: opts}
	scope := "Relative paths are taken from the workspace."
	if opts.Restrict {
		scope = "Paths are relative to the workspace; paths outside it are refused."
	}
	path := String("File path, relative to the workspace (e.g. notes/todo.md).")
	return []Tool{
		Func{
			ToolName: "read_file",
			ToolDescription: "Read a text file. " + scope + fmt.Sprintf(
				" At most %d KB come back per call; a longer file ends with a note giving the offset to continue from. Binary files are refused.",
				opts.MaxReadBytes>>10),
			Params: Object(map[string]*Property{
				"path":   path,
				"offset": Integer("Byte offset to start reading at, from a truncation note; default 0.", Bound(0), nil),
			}, "path"),
			Run:         w.readFile,
			PrivateCall: w.private,
		},
		Func{
			ToolName:        "write_file",
			Mutating:        true,
			ToolDescription: "Create or replace a file with the given content, creating missing directories. " + scope + " The file is replaced whole and atomically; use edit_file to change part of a file.",
			Params: Object(map[string]*Property{
				"path":    path,
				"content": String("The complete new content of the file."),
			}, "path", "content"),
			Run: w.writeFile,
		},
		Func{
			ToolName:        "edit_file",
			Mutating:        true,
			ToolDescription: "Replace one exact piece of text in a file. " + scope + " old_text must occur exactly once, including whitespace and line breaks; the call fails and says how often it occurs otherwise.",
			Params: Object(map[string]*Property{
				"path":     path,
				"old_text": String("The exact text to replace; include enough surrounding lines to make it unique."),
				"new_text": String("The text to put in its place (may be empty to delete)."),
			}, "path", "old_text", "new_text"),
			Run: w.editFile,
		},
		Func{
			ToolName:        "append_file",
			Mutating:        true,
			ToolDescription: "Append content to the end of a file, creating it (and missing directories) if needed. " + scope,
			Params: Object(map[string]*Property{
				"path":    path,
				"content": String("The text to append; add a trailing newline if the file is line-based."),
			}, "path", "content"),
			Run: w.appendFile,
		},
		Func{
			ToolName:        "list_dir",
			ToolDescription: "List a directory: one line per entry, \"DIR name\", \"FILE name (size)\", \"LINK name (why not usable)\" or \"OTHER name (kind)\". " + scope + " Use \".\" for the workspace itself.",
			Params: Object(map[string]*Property{
				"path": String("Directory path, relative to the workspace; \".\" is the workspace."),
			}, "path"),
			Run:         w.listDir,
			PrivateCall: w.private,
		},
	}
}

// publicDir is the one part of the workspace a sender nobody vouched for
// may read: the skills, which are instructions for the agent itself.
const publicDir = "skills"

// private reports whether a call's path lies outside publicDir: the rest
// of the workspace is the owner's (notes, memory, files earlier turns
// wrote).
func (w *workspace) private(_ context.Context, args Args) bool {
	p := filepath.FromSlash(args.String("path"))
	if filepath.IsAbs(p) {
		rel, err := filepath.Rel(w.dir, p)
		if err != nil {
			return true
		}
		p = rel
	}
	p = filepath.Clean(p)
	if p != publicDir && !strings.HasPrefix(p, publicDir+string(filepath.Separator)) {
		return true
	}
	// Inside skills/ by name; a link there (skills/notes.md ->
	// ../memory/MEMORY.md, which a command of the owner's can make) leads
	// to the owner's files, and so does a second name of one of them.
	root, err := filepath.EvalSymlinks(w.dir)
	if err != nil {
		return true
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, p))
	if errors.Is(err, fs.ErrNotExist) {
		return false // nothing there to read; the tool says so
	}
	if err != nil {
		return true
	}
	skills := filepath.Join(root, publicDir)
	if real != skills && !strings.HasPrefix(real, skills+string(filepath.Separator)) {
		return true
	}
	fi, err := os.Stat(real)
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return fi.Mode().IsRegular() && (!ok || st.Nlink > 1)
}

// workspace holds the file tools' shared state: only configuration. The
// os.Root is opened per call, so a workspace created, moved or replaced while
// the gateway runs is picked up, and no descriptor is held open for nothing.
type workspace struct {
	dir  string // absolute
	opts FSOptions
}

// files is the part of *os.Root the tools use. hostFiles implements it on the
// whole file system for an unrestricted workspace, so both modes share one
// code path.
type files interface {
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	MkdirAll(name string, perm fs.FileMode) error
	Rename(oldname, newname string) error
	Remove(name string) error
	Stat(name string) (fs.FileInfo, error)
	Lstat(name string) (fs.FileInfo, error)
	Lchown(name string, uid, gid int) error
	Close() error
}

type hostFiles struct{}

func (hostFiles) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
func (hostFiles) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (hostFiles) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (hostFiles) Remove(name string) error                     { return os.Remove(name) }
func (hostFiles) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }
func (hostFiles) Lstat(name string) (fs.FileInfo, error)       { return os.Lstat(name) }
func (hostFiles) Lchown(name string, uid, gid int) error       { return os.Lchown(name, uid, gid) }
func (hostFiles) Close() error                                 { return nil }

// open returns the file system the tools act on: an os.Root on the workspace
// when restricted, the host's otherwise.
func (w *workspace) open() (files, error) {
	if !w.opts.Restrict {
		return hostFiles{}, nil
	}
	root, err := os.OpenRoot(w.dir)
	if errors.Is(err, fs.ErrNotExist) {
		if mkErr := os.MkdirAll(w.dir, 0o755); mkErr != nil {
			return nil, fmt.Errorf("the workspace %s does not exist and cannot be created: %w", w.dir, mkErr)
		}
		root, err = os.OpenRoot(w.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open the workspace %s: %w", w.dir, err)
	}
	return root, nil
}

// resolve turns the model's path into a name for files: relative to the
// workspace root when restricted (os.Root then enforces symbolic links), an
// absolute host path otherwise. Lexical escapes are refused here, before any
// system call, so the error can say plainly what was wrong.
func (w *workspace) resolve(p string) (string, error) {
	if p == "" {
		return "", errors.New("path is empty; give a path relative to the workspace, or \".\" for the workspace itself")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	if !w.opts.Restrict {
		if filepath.IsAbs(p) {
			return filepath.Clean(p), nil
		}
		return filepath.Join(w.dir, p), nil
	}
	rel := p
	if filepath.IsAbs(p) {
		var ok bool
		if rel, ok = w.within(p); !ok {
			return "", w.outside(p, "")
		}
	}
	rel = filepath.Clean(rel)
	if !filepath.IsLocal(rel) {
		return "", w.outside(p, "")
	}
	return rel, nil
}

// within reports whether the absolute path p lies in the workspace, and
// where. The workspace's real path is tried too: a model that saw
// /var/lib/perch/workspace through a symlinked parent still means the same
// place.
func (w *workspace) within(p string) (string, bool) {
	p = filepath.Clean(p)
	bases := []string{w.dir}
	if real, err := filepath.EvalSymlinks(w.dir); err == nil && real != w.dir {
		bases = append(bases, real)
	}
	for _, base := range bases {
		if rel, err := filepath.Rel(base, p); err == nil && filepath.IsLocal(rel) {
			return rel, true
		}
	}
	return "", false
}

func (w *workspace) outside(p, how string) error {
	return fmt.Errorf("path %q is %w %s%s: file tools only reach files inside it (agents.defaults.restrict_to_workspace); use a path relative to the workspace",
		p, ErrOutsideWorkspace, w.dir, how)
}

// saying is an error that reads as msg and is err to errors.Is.
type saying struct {
	msg string
	err error
}

func (e saying) Error() string { return e.msg }
func (e saying) Unwrap() error { return e.err }

// explain turns a file system error into a message naming the path as the
// model gave it, the cause and what to do.
func (w *workspace) explain(p string, err error) error {
	switch {
	case escapes(err):
		// os.Root's refusal: ".." was already refused lexically, so a
		// symbolic link led out (or is absolute, which os.Root never follows).
		return w.outside(p, " through a symbolic link (links must be relative and stay inside the workspace)")
	case errors.Is(err, fs.ErrNotExist):
		// Still fs.ErrNotExist to errors.Is, without "file does not exist"
		// repeated after "does not exist".
		return saying{fmt.Sprintf("%q does not exist; use list_dir to see what is there", p), fs.ErrNotExist}
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%q: permission denied for the gateway's user: %w", p, err)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%q: too many levels of symbolic links (a link loop?)", p)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("path %q is too long", truncateRunes(p, 80))
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%q is a directory; give a file path", p)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%q: a part of the path is a file, not a directory", p)
	}
	return fmt.Errorf("%q: %w", p, err)
}

// escapes reports whether err is os.Root's refusal of a path that leads out.
// The package exports no sentinel for it, so the innermost error's text is
// compared; TestRestrictedWorkspaceRefusesEscapes fails if Go changes it.
func escapes(err error) bool {
	for err != nil {
		if errors.Unwrap(err) == nil {
			return err.Error() == "path escapes from parent"
		}
		err = errors.Unwrap(err)
	}
	return false
}

// mkdirAll creates the directories leading to name.
func (w *workspace) mkdirAll(fsys files, name, p string) error {
	made := missingDirs(fsys, name)
	err := fsys.MkdirAll(filepath.Dir(name), 0o755)
	if err == nil {
		err = adoptDirs(fsys, made)
	}
	if err != nil && !escapes(err) && (errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTDIR)) {
		return fmt.Errorf("%q: a part of the path is a file, not a directory", p)
	}
	if err != nil {
		return w.explain(p, err)
	}
	return nil
}

// begin resolves p and opens the file system; the caller closes fsys.
func (w *workspace) begin(ctx context.Context, p string) (files, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	name, err := w.resolve(p)
	if err != nil {
		return nil, "", err
	}
	fsys, err := w.open()
	if err != nil {
		return nil, "", err
	}
	return fsys, name, nil
}

// openRegular opens name read-only and refuses anything but a regular file.
// O_NONBLOCK keeps a FIFO from blocking the call until a writer appears; it
// has no effect on regular files.
func (w *workspace) openRegular(fsys files, name, p string) (*os.File, fs.FileInfo, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, w.explain(p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, w.explain(p, err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, fmt.Errorf("%q is a directory; use list_dir to see its entries", p)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%q is not a regular file (%s); only regular files can be read or edited", p, fi.Mode().Type())
	}
	return f, fi, nil
}

func (w *workspace) readFile(ctx context.Context, args Args) Result {
	p := args.String("path")
	offset := args.Int("offset", 0)
	fsys, name, err := w.begin(ctx, p)
	if err != nil {
		return Errorf("read_file: %w", err)
	}
	defer fsys.Close()
	f, fi, err := w.openRegular(fsys, name, p)
	if err != nil {
		return Errorf("read_file: %w", err)
	}
	defer f.Close()
	size := fi.Size()
	if size == 0 {
		return Text(fmt.Sprintf("(%s is empty)", p))
	}
	if offset >= size {
		return Errorf("read_file: offset %d is at or past the end of %q (%d bytes)", offset, p, size)
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return Errorf("read_file: %w", w.explain(p, err))
	}
	// Read one byte more than the cap to know whether more follows, and no
	// more: a 2 GB log costs 60 KB of memory.
	max := w.opts.MaxReadBytes
	buf, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return Errorf("read_file: %w", w.explain(p, err))
	}
	if bytes.IndexByte(buf[:min(len(buf), 8<<10)], 0) >= 0 {
		return Errorf("read_file: %q is a binary file (%s, %d bytes); read_file shows text only",
			p, http.DetectContentType(buf), size)
	}
	if len(buf) <= max {
		text := validText(buf, offset > 0)
		if offset > 0 {
			text += fmt.Sprintf("\n[end of file: bytes %d-%d of %d shown]", offset, offset+int64(len(buf)), size)
		}
		return Text(text)
	}
	cut := cutPoint(buf[:max])
	end := offset + int64(cut)
	return Text(validText(buf[:cut], offset > 0) +
		fmt.Sprintf("\n[truncated: bytes %d-%d of %d shown; call read_file with offset=%d to read on]", offset, end, size, end))
}

// validText is b as text, each byte that is not UTF-8 shown as U+FFFD,
// with a note when there were any: the file is in another encoding
// (Latin-1, Windows-1252), and written back from this text its
// characters would be lost. midRune says b may begin inside a character
// (a read at an offset), whose bytes are no sign of another encoding.
func validText(b []byte, midRune bool) string {
	if utf8.Valid(b) {
		return string(b)
	}
	rest := b
	for i := 0; midRune && i < utf8.UTFMax-1 && len(rest) > 0 && !utf8.RuneStart(rest[0]); i++ {
		rest = rest[1:]
	}
	// Runs, as the text shows each run of such bytes as one U+FFFD.
	runs, inRun := 0, false
	for len(rest) > 0 {
		r, n := utf8.DecodeRune(rest)
		bad := r == utf8.RuneError && n == 1
		if bad && !inRun {
			runs++
		}
		inRun = bad
		rest = rest[n:]
	}
	text := strings.ToValidUTF8(string(b), "\uFFFD")
	if runs == 0 {
		return text
	}
	count := "1 \uFFFD stands"
	if runs > 1 {
		count = fmt.Sprintf("%d \uFFFD stand", runs)
	}
	return text + fmt.Sprintf("\n[not UTF-8: %s for bytes in another encoding (Latin-1, Windows-1252?): do not write the file back from this text, which would lose those characters; convert it with exec, e.g. iconv -f latin1 -t utf-8]", count)
}

// cutPoint picks where to end a partial read: after the last full line when
// that keeps at least half the text, else on a rune boundary, so the next
// read (at the returned offset) starts cleanly.
func cutPoint(b []byte) int {
	if i := bytes.LastIndexByte(b, '\n'); i >= len(b)/2 {
		return i + 1
	}
	// Back up over a character the cap cut in half.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

func (w *workspace) writeFile(ctx context.Context, args Args) Result {
	p, content := args.String("path"), args.String("content")
	fsys, name, err := w.begin(ctx, p)
	if err != nil {
		return Errorf("write_file: %w", err)
	}
	defer fsys.Close()
	if err := w.atomicWrite(fsys, name, p, []byte(content)); err != nil {
		return Errorf("write_file: %w", err)
	}
	return Text(fmt.Sprintf("wrote %d bytes to %s", len(content), p))
}

// atomicWrite replaces name with data so that a crash leaves either the old
// file or the new one, never half of either: write a temporary file in the
// same directory, fsync it, rename it over name, fsync the directory. An
// existing file keeps its permissions. A symbolic link at name is replaced
// by the file, as rename does.
func (w *workspace) atomicWrite(fsys files, name, p string, data []byte) error {
	dir := filepath.Dir(name)
	if err := w.mkdirAll(fsys, name, p); err != nil {
		return err
	}
	perm := fs.FileMode(0o644)
	existing := false
	like, _ := fsys.Stat(dir) // whose the new file is (fs_owner.go)
	if fi, err := fsys.Stat(name); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%q is a directory; give a file path inside it", p)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%q is not a regular file (%s)", p, fi.Mode().Type())
		}
		perm, existing, like = fi.Mode().Perm(), true, fi
	} else if !errors.Is(err, fs.ErrNotExist) {
		return w.explain(p, err)
	}
	tmp := filepath.Join(dir, "."+filepath.Base(name)+".tmp-"+randomHex(6))
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return w.explain(p, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			fsys.Remove(tmp)
		}
	}()
	if err := adopt(f, like); err != nil {
		return w.explain(p, err)
	}
	if _, err := f.Write(data); err != nil {
		return w.explain(p, err)
	}
	if existing {
		// The umask trimmed perm at creation; the old file's mode is wanted.
		if err := f.Chmod(perm); err != nil {
			return w.explain(p, err)
		}
	}
	if err := f.Sync(); err != nil {
		return w.explain(p, err)
	}
	if err := f.Close(); err != nil {
		return w.explain(p, err)
	}
	if err := fsys.Rename(tmp, name); err != nil {
		return w.explain(p, err)
	}
	ok = true
	// Make the rename itself durable. Best effort: some file systems refuse
	// to sync a directory, and the data is already safe.
	if d, err := fsys.OpenFile(dir, os.O_RDONLY, 0); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func (w *workspace) editFile(ctx context.Context, args Args) Result {
	p, oldText, newText := args.String("path"), args.String("old_text"), args.String("new_text")
	if oldText == "" {
		return Errorf("edit_file: old_text is empty; give the exact text to replace (use append_file to add at the end)")
	}
	fsys, name, err := w.begin(ctx, p)
	if err != nil {
		return Errorf("edit_file: %w", err)
	}
	defer fsys.Close()
	f, fi, err := w.openRegular(fsys, name, p)
	if err != nil {
		return Errorf("edit_file: %w", err)
	}
	if fi.Size() > w.opts.MaxEditBytes {
		f.Close()
		return Errorf("edit_file: %q is %d bytes, more than edit_file loads (%d); use exec with sed for large files",
			p, fi.Size(), w.opts.MaxEditBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, w.opts.MaxEditBytes+1))
	f.Close()
	if err != nil {
		return Errorf("edit_file: %w", w.explain(p, err))
	}
	if int64(len(data)) > w.opts.MaxEditBytes {
		return Errorf("edit_file: %q grew past %d bytes while being read; try again", p, w.opts.MaxEditBytes)
	}
	content := string(data)
	switch n := strings.Count(content, oldText); {
	case n == 0:
		hint := "read the file and copy the exact text, including whitespace and line breaks"
		if strings.Contains(content, "\r\n") && !strings.Contains(oldText, "\r") && strings.Contains(oldText, "\n") {
			hint = "the file has Windows line endings (\\r\\n); " + hint
		}
		return Errorf("edit_file: old_text was not found in %s (0 matches); %s", p, hint)
	case n > 1:
		return Errorf("edit_file: old_text occurs %d times in %s; include more surrounding text so that it matches exactly once", n, p)
	}
	updated := strings.Replace(content, oldText, newText, 1)
	if err := w.atomicWrite(fsys, name, p, []byte(updated)); err != nil {
		return Errorf("edit_file: %w", err)
	}
	return Text(fmt.Sprintf("edited %s: replaced 1 occurrence (%d bytes before, %d after)", p, len(content), len(updated)))
}

func (w *workspace) appendFile(ctx context.Context, args Args) Result {
	p, content := args.String("path"), args.String("content")
	fsys, name, err := w.begin(ctx, p)
	if err != nil {
		return Errorf("append_file: %w", err)
	}
	defer fsys.Close()
	if err := w.mkdirAll(fsys, name, p); err != nil {
		return Errorf("append_file: %w", err)
	}
	_, statErr := fsys.Lstat(name)
	// O_APPEND writes land at the end whole; O_NONBLOCK keeps a FIFO from
	// blocking (it is then refused below).
	f, err := fsys.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return Errorf("append_file: %w", w.explain(p, err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Errorf("append_file: %w", w.explain(p, err))
	}
	if !fi.Mode().IsRegular() {
		return Errorf("append_file: %q is not a regular file (%s)", p, fi.Mode().Type())
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		if dir, err := fsys.Stat(filepath.Dir(name)); err == nil {
			if err := adopt(f, dir); err != nil {
				return Errorf("append_file: %w", w.explain(p, err))
			}
		}
	}
	if _, err := io.WriteString(f, content); err != nil {
		return Errorf("append_file: %w", w.explain(p, err))
	}
	if err := f.Sync(); err != nil {
		return Errorf("append_file: %w", w.explain(p, err))
	}
	return Text(fmt.Sprintf("appended %d bytes to %s (now %d bytes)", len(content), p, fi.Size()+int64(len(content))))
}

func (w *workspace) listDir(ctx context.Context, args Args) Result {
	p := args.String("path")
	if p == "" {
		p = "."
	}
	fsys, name, err := w.begin(ctx, p)
	if err != nil {
		return Errorf("list_dir: %w", err)
	}
	defer fsys.Close()
	d, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return Errorf("list_dir: %w", w.explain(p, err))
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil {
		return Errorf("list_dir: %w", w.explain(p, err))
	} else if !fi.IsDir() {
		return Errorf("list_dir: %q is a file, not a directory; use read_file to read it", p)
	}
	// Read in batches, so a directory of a million files costs one cap's
	// worth of memory.
	var entries []fs.DirEntry
	more := false
	for len(entries) <= w.opts.MaxListEntries {
		batch, err := d.ReadDir(256)
		entries = append(entries, batch...)
		if err == io.EOF || len(batch) == 0 {
			break
		}
		if err != nil {
			return Errorf("list_dir: %w", w.explain(p, err))
		}
	}
	if len(entries) > w.opts.MaxListEntries {
		entries, more = entries[:w.opts.MaxListEntries], true
	}
	if len(entries) == 0 {
		return Text(fmt.Sprintf("(%s is an empty directory)", p))
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	var sb strings.Builder
	for _, e := range entries {
		sb.WriteString(w.entryLine(fsys, filepath.Join(name, e.Name()), e))
		sb.WriteByte('\n')
	}
	if more {
		fmt.Fprintf(&sb, "[listing stopped after %d entries; list a subdirectory or use exec with find for the rest]\n", w.opts.MaxListEntries)
	}
	return Text(strings.TrimSuffix(sb.String(), "\n"))
}

// entryLine describes one directory entry. Sizes and link targets are looked
// up through fsys, not DirEntry.Info, which stats by host path and so would
// step outside os.Root's guard.
func (w *workspace) entryLine(fsys files, name string, e fs.DirEntry) string {
	fi, err := fsys.Lstat(name)
	if err != nil {
		return "FILE " + e.Name()
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := fsys.Stat(name)
		switch {
		case err != nil && w.opts.Restrict && !errors.Is(err, fs.ErrNotExist):
			return "LINK " + e.Name() + " (points outside the workspace; not usable)"
		case err != nil:
			return "LINK " + e.Name() + " (broken link)"
		}
		fi = target
	}
	if fi.IsDir() {
		return "DIR " + e.Name()
	}
	if !fi.Mode().IsRegular() {
		// A pipe, socket or device: read_file refuses it, so it is not
		// listed as a file of 0 bytes to read.
		return "OTHER " + e.Name() + " (" + specialKind(fi.Mode()) + ", not readable as a file)"
	}
	return fmt.Sprintf("FILE %s (%s)", e.Name(), formatSize(fi.Size()))
}

func specialKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// formatSize prints exact bytes for small files and one decimal above, which
// reads better for a model deciding whether to read the file whole.
func formatSize(n int64) string {
	switch {
	case n < 10<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 10<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 10<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
