package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// diagDir is -diag: where diagnose writes; empty leaves it off.
var diagDir string

// diagnose writes what a reading of the RSS is made of, for attribution:
// the process's smaps and status, and resident.txt, the address of every
// resident page of the binary's own mappings (from /proc/<pid>/pagemap's
// present bit) with its mapping's permissions and whether it belongs to a
// large folio, which `go tool nm -size -sort address` of an unstripped
// build of the same source maps to symbols. Errors go to stderr: a
// diagnostic must not fail the measure.
func diagnose(s *server, name string) {
	if diagDir == "" {
		return
	}
	dir := filepath.Join(diagDir, name)
	if err := writeDiag(s.cmd.Process.Pid, dir); err != nil {
		fmt.Fprintln(os.Stderr, "load: diag:", err)
	}
	// The gateway's own view: heap and goroutines. Read after the files
	// above: the request itself touches pages.
	req, _ := http.NewRequest("GET", s.url+"/admin/status", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		os.WriteFile(filepath.Join(dir, "admin-status.json"), b, 0o644)
	}
}

func writeDiag(pid int, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"smaps", "status"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return err
		}
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return err
	}
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return err
	}
	defer maps.Close()
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return err
	}
	defer pm.Close()
	// Without root, frames read as 0 and every page as small.
	kpf, _ := os.Open("/proc/kpageflags")
	if kpf != nil {
		defer kpf.Close()
	}
	out, err := os.Create(filepath.Join(dir, "resident.txt"))
	if err != nil {
		return err
	}
	defer out.Close()
	w := bufio.NewWriter(out)
	defer w.Flush()
	page := uint64(os.Getpagesize())
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[5] != exe {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		s, _ := strconv.ParseUint(lo, 16, 64)
		e, _ := strconv.ParseUint(hi, 16, 64)
		buf := make([]byte, (e-s)/page*8)
		if _, err := pm.ReadAt(buf, int64(s/page*8)); err != nil {
			return err
		}
		for i := uint64(0); i < (e-s)/page; i++ {
			// Bit 63: present in RAM; bits 0-54 its frame (root only).
			ent := binary.LittleEndian.Uint64(buf[i*8:])
			if ent&(1<<63) == 0 {
				continue
			}
			kind := "small"
			if large(kpf, ent&(1<<55-1)) {
				kind = "large"
			}
			fmt.Fprintf(w, "%x %s %s\n", s+i*page, f[1], kind)
		}
	}
	return sc.Err()
}

// large reports whether the page in frame pfn is part of a large folio
// (KPF_COMPOUND_HEAD or _TAIL). Recent kernels map a whole large folio of
// the page cache at a fault, so the folio sizes the binary was cached in
// change its file RSS; this tells the cases apart. (On this VM's 6.18 the
// binary read back from disk was cached in small folios; a copy written
// in 1 MiB chunks was not, and read 2 MB more warm.)
func large(kpf *os.File, pfn uint64) bool {
	if kpf == nil || pfn == 0 {
		return false
	}
	var b [8]byte
	if _, err := kpf.ReadAt(b[:], int64(pfn*8)); err != nil {
		return false
	}
	return binary.LittleEndian.Uint64(b[:])&(1<<15|1<<16) != 0
}

// diagQuit ends the gateway with SIGQUIT under -diag, so the Go runtime
// writes every goroutine's stack to the log file launch opened.
func diagQuit(s *server) {
	if diagDir == "" {
		return
	}
	s.signal(syscall.SIGQUIT)
}
