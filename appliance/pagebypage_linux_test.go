package appliance

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mappingRssKB is the Rss of the mapping that starts at addr.
func mappingRssKB(t *testing.T, addr uintptr) int {
	t.Helper()
	prefix := strconv.FormatUint(uint64(addr), 16) + "-"
	kb, seen, err := smapsRssKB(func(f []string) bool { return strings.HasPrefix(f[0], prefix) })
	if err != nil {
		t.Fatal(err)
	}
	if !seen {
		t.Fatalf("no mapping at %#x in /proc/self/smaps", addr)
	}
	return kb
}

// TestMapPageByPage: a read-only private mapping of a file, as the binary's
// are, maps one page per fault once registered, where the kernel maps the
// 64 KB around a fault otherwise; reads made by the kernel itself (a write
// from the mapping into a pipe, as serving the embedded web page does) are
// answered as before.
func TestMapPageByPage(t *testing.T) {
	ps := os.Getpagesize()
	const pages = 64
	want := bytes.Repeat([]byte("perch"), pages*ps/5+1)[:pages*ps]
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mapping := func() ([]byte, uintptr) {
		m, err := unix.Mmap(int(f.Fd()), 0, len(want), unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(m) })
		return m, uintptr(unsafe.Pointer(&m[0]))
	}
	plain, plainAt := mapping()
	byPage, byPageAt := mapping()
	if err := mapPageByPage(byPageAt, byPageAt+uintptr(len(byPage))); err != nil {
		if kernelAtLeast(t, 6, 7) {
			t.Fatalf("mapPageByPage on Linux 6.7 or later: %v", err)
		}
		if !strings.Contains(err.Error(), "userfaultfd") {
			t.Fatalf("the error does not name its cause: %v", err)
		}
		t.Logf("this kernel maps in chunks: %v", err)
		return
	}
	if !pageByPage() {
		t.Fatal("pageByPage() is false after a registration")
	}
	// One read in the middle of each.
	if plain[24*ps] != want[24*ps] || byPage[24*ps] != want[24*ps] {
		t.Fatal("the mappings read wrong bytes")
	}
	plainKB, byPageKB := mappingRssKB(t, plainAt), mappingRssKB(t, byPageAt)
	if byPageKB != ps>>10 {
		t.Fatalf("one read mapped %d kB of the registered mapping, want one page (%d kB); %d kB of the plain one", byPageKB, ps>>10, plainKB)
	}
	t.Logf("one read mapped %d kB plainly, %d kB page by page", plainKB, byPageKB)

	// The kernel reading the registered mapping on our behalf, from pages
	// not yet mapped.
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	chunk := byPage[40*ps : 42*ps]
	if n, err := unix.Write(p[1], chunk); err != nil || n != len(chunk) {
		t.Fatalf("write from the registered mapping: %d bytes, %v", n, err)
	}
	got := make([]byte, len(chunk))
	if n, err := unix.Read(p[0], got); err != nil || n != len(got) || !bytes.Equal(got, want[40*ps:42*ps]) {
		t.Fatalf("read back %d bytes, %v; equal: %v", n, err, bytes.Equal(got, want[40*ps:42*ps]))
	}
}
