package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Landlock access rights, grouped the way the ruleset grants them. They are
// the kernel's bits (include/uapi/linux/landlock.h); the child intersects
// them with what its kernel's ABI handles.
const (
	accExecute     = unix.LANDLOCK_ACCESS_FS_EXECUTE
	accWriteFile   = unix.LANDLOCK_ACCESS_FS_WRITE_FILE
	accReadFile    = unix.LANDLOCK_ACCESS_FS_READ_FILE
	accReadDir     = unix.LANDLOCK_ACCESS_FS_READ_DIR
	accRemoveDir   = unix.LANDLOCK_ACCESS_FS_REMOVE_DIR
	accRemoveFile  = unix.LANDLOCK_ACCESS_FS_REMOVE_FILE
	accMakeChar    = unix.LANDLOCK_ACCESS_FS_MAKE_CHAR
	accMakeDir     = unix.LANDLOCK_ACCESS_FS_MAKE_DIR
	accMakeReg     = unix.LANDLOCK_ACCESS_FS_MAKE_REG
	accMakeSock    = unix.LANDLOCK_ACCESS_FS_MAKE_SOCK
	accMakeFifo    = unix.LANDLOCK_ACCESS_FS_MAKE_FIFO
	accMakeBlock   = unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK
	accMakeSym     = unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	accRefer       = unix.LANDLOCK_ACCESS_FS_REFER
	accTruncate    = unix.LANDLOCK_ACCESS_FS_TRUNCATE
	accIoctlDev    = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	accResolveUnix = unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX

	// accRead lets a command list directories, read and execute files.
	accRead = accExecute | accReadFile | accReadDir
	// accReadWrite is what the workspace grants. It leaves out making
	// device nodes: a block device made inside the workspace would be a
	// door to the raw disk that the workspace rule would then open.
	accReadWrite = accRead | accWriteFile | accRemoveDir | accRemoveFile | accMakeDir |
		accMakeReg | accMakeSock | accMakeFifo | accMakeSym | accTruncate | accRefer
	// accFileOnly are the rights that apply to a file (the kernel refuses
	// directory rights on a rule for a file).
	accFileOnly = accExecute | accWriteFile | accReadFile | accTruncate | accIoctlDev
	// accDevRW is for /dev/null and friends: read, write and the truncate
	// that `> /dev/null` asks for, but no ioctl and no execute.
	accDevRW = accReadFile | accWriteFile | accTruncate
	accDevRO = accReadFile
)

// handledAccess is every filesystem right the given Landlock ABI knows. The
// ruleset handles (denies by default) all of them, so whatever no rule grants
// is forbidden: device nodes, ioctls on devices, connecting to outside UNIX
// sockets.
func handledAccess(abi int) uint64 {
	switch {
	case abi <= 0:
		return 0
	case abi == 1:
		return accMakeSym<<1 - 1 // V1: execute .. make_sym
	case abi == 2:
		return accRefer<<1 - 1
	case abi <= 4:
		return accTruncate<<1 - 1
	case abi <= 8:
		return accIoctlDev<<1 - 1
	default:
		return accResolveUnix<<1 - 1
	}
}

// handledScopes are the IPC scopes of the ABI: from V6 a command can neither
// signal processes outside its domain (the gateway, the supervisor) nor
// connect to abstract UNIX sockets they listen on.
func handledScopes(abi int) uint64 {
	if abi >= 6 {
		return unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	return 0
}

// pathRule grants Access beneath Path (a file or a directory).
type pathRule struct {
	Path   string `json:"p"`
	Access uint64 `json:"a"`
}

// readOnlyRoots are what a shell and the usual tools need to run. /proc is
// whole because ps, free, uptime and df read it, and Landlock's ptrace rule
// already keeps a command out of other processes' environ, mem, fd and root
// (the gateway's included). /sys is for temperatures, CPU frequency and
// GPIO state, which is what people ask a board about.
var readOnlyRoots = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys",
}

// devices are the device files a command may use.
var devices = []pathRule{
	{"/dev/null", accDevRW},
	{"/dev/zero", accDevRW},
	{"/dev/full", accDevRW},
	{"/dev/random", accDevRO},
	{"/dev/urandom", accDevRO},
}

// builtinSecrets never become readable even though they sit in allowed
// directories: Perch's own config (.deb layout), password hashes, sudo rules,
// host private keys, TLS private keys and Wi-Fi passwords. Patterns use
// filepath.Match syntax per path element.
var builtinSecrets = []string{
	"/etc/perch",
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/sudoers", "/etc/sudoers.d",
	"/etc/ssh/ssh_host_*_key",
	"/etc/ssl/private",
	"/etc/wpa_supplicant",
	"/etc/NetworkManager/system-connections",
	"/etc/credstore", "/etc/credstore.encrypted",
}

// secrets decides which paths the ruleset must not reach.
type secrets struct {
	patterns [][]string // split into elements; each element a filepath.Match pattern
}

// newSecrets protects the builtin patterns and the extra paths (taken
// literally, and also where their symlinks lead).
func newSecrets(builtin, extra []string) (secrets, error) {
	var s secrets
	add := func(p string, literal bool) {
		p = filepath.Clean(p)
		elems := splitPath(p)
		if literal {
			for i, e := range elems {
				elems[i] = escapeGlob(e)
			}
		}
		s.patterns = append(s.patterns, elems)
	}
	for _, p := range builtin {
		add(p, false)
	}
	for _, p := range extra {
		if p == "" {
			continue
		}
		if !filepath.IsAbs(p) {
			abs, err := filepath.Abs(p)
			if err != nil {
				return s, fmt.Errorf("sandbox: secret path %q: %w", p, err)
			}
			p = abs
		}
		add(p, true)
		// A secret reached through a symlink is the same file: hide both.
		if real, err := filepath.EvalSymlinks(p); err == nil && real != filepath.Clean(p) {
			add(real, true)
		}
	}
	return s, nil
}

func splitPath(p string) []string {
	p = strings.Trim(filepath.Clean(p), "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// matchPrefix reports whether the first len(elems) elements of pattern match
// elems.
func matchPrefix(pattern, elems []string) bool {
	if len(elems) > len(pattern) {
		return false
	}
	for i, e := range elems {
		if ok, _ := filepath.Match(pattern[i], e); !ok {
			return false
		}
	}
	return true
}

// is reports whether p is a secret, or lies inside one.
func (s secrets) is(p string) bool {
	elems := splitPath(p)
	for _, pat := range s.patterns {
		if len(pat) <= len(elems) && matchPrefix(pat, elems[:len(pat)]) {
			return true
		}
	}
	return false
}

// holds reports whether a secret lies strictly below p.
func (s secrets) holds(p string) bool {
	elems := splitPath(p)
	for _, pat := range s.patterns {
		if len(pat) > len(elems) && matchPrefix(pat, elems) {
			return true
		}
	}
	return false
}

// errWorkspaceHoldsSecret is returned by New when Perch's own files sit
// inside the workspace, where every command could read them.
var errWorkspaceHoldsSecret = errors.New("sandbox: the workspace holds a secret")

// checkWorkspace refuses workspaces that would defeat the ruleset.
func checkWorkspace(ws string, sec secrets) error {
	if ws == "/" {
		return fmt.Errorf("sandbox: the workspace is / (the whole filesystem); set agents.defaults.workspace to a directory of its own")
	}
	for _, sys := range append([]string{"/dev", "/var", "/home", "/root", "/run", "/tmp"}, readOnlyRoots...) {
		if ws == sys || strings.HasPrefix(sys+"/", ws+"/") {
			return fmt.Errorf("sandbox: the workspace %s is or contains the system directory %s; set agents.defaults.workspace to a directory of its own", ws, sys)
		}
	}
	if sec.is(ws) {
		return fmt.Errorf("sandbox: the workspace %s is a protected path (Perch's config, a password or key store); set agents.defaults.workspace elsewhere", ws)
	}
	if sec.holds(ws) {
		return fmt.Errorf("%w: Perch's config or database lies inside the workspace %s, where every command could read it; move the workspace (agents.defaults.workspace) or the file", errWorkspaceHoldsSecret, ws)
	}
	return nil
}

// buildRules lists what a command may touch: the workspace read-write, the
// read-only roots (split around secrets, since Landlock can only allow and
// never carve an exception out of an allowed directory), and the device
// files. ws must be a clean, symlink-free absolute path.
func buildRules(ws string, roots []string, devs []pathRule, sec secrets) []pathRule {
	rules := []pathRule{{Path: ws, Access: accReadWrite}}
	for _, root := range roots {
		rules = addTree(rules, root, accRead, sec, 0)
	}
	for _, d := range devs {
		if _, err := os.Stat(d.Path); err == nil {
			rules = append(rules, d)
		}
	}
	return rules
}

// maxSplitDepth bounds the walk below an allowed root: a secret deeper than
// this only hides its whole branch.
const maxSplitDepth = 6

// addTree grants access to the hierarchy at p, or, when a secret lies below
// p, to each entry of p but the secret ones.
func addTree(rules []pathRule, p string, access uint64, sec secrets, depth int) []pathRule {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return rules // missing (e.g. /lib32) or a dangling link
	}
	if sec.is(p) || sec.is(real) {
		return rules
	}
	fi, err := os.Stat(real)
	if err != nil {
		return rules
	}
	if !fi.IsDir() {
		return append(rules, pathRule{Path: real, Access: access & accFileOnly})
	}
	if !sec.holds(p) && !sec.holds(real) {
		return append(rules, pathRule{Path: real, Access: access})
	}
	if depth >= maxSplitDepth {
		return rules
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return rules
	}
	// Listing a split directory stays possible (ls /etc works). Landlock
	// rights reach the whole hierarchy, so this shows the names inside
	// the secret directories too, but never what the files hold.
	if access&accReadDir != 0 {
		rules = append(rules, pathRule{Path: real, Access: accReadDir})
	}
	for _, e := range entries {
		// Match secrets on the name the user knows (/etc/perch) and on
		// where it really is; addTree resolves the entry again.
		lexical := filepath.Join(p, e.Name())
		if sec.is(filepath.Join(real, e.Name())) {
			continue
		}
		rules = addTree(rules, lexical, access, sec, depth+1)
	}
	return rules
}

// rulePaths returns the paths of rules, for tests and logs.
func rulePaths(rules []pathRule) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, r.Path)
	}
	slices.Sort(out)
	return out
}
